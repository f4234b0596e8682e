//! Listings a walk by time has passed ([`SlotStore::spent_through`]): the store leaves
//! them where they are, passes over them, and drops them a whole table at a time on a
//! thread of its own. Deleting each woken key's listing instead cost a delete on the
//! run's thread, and compaction carried every tombstone down to the level holding its
//! row (most of the other core at the end of input, when millions of keys wake).
//!
//! [`SlotStore::spent_through`]: weir_core::state::SlotStore::spent_through

use crate::layout;
use fjall::{AbstractTree, Keyspace};
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_core::state::Wake;
use weir_core::time::timers::FiringPlace;

/// The least time between two drops of spent tables.
const DROP_EVERY: Duration = Duration::from_secs(1);

/// Per listing ([`Wake::index`]), the place through which listings are spent, if any is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Horizons([Option<FiringPlace>; 4]);

impl Horizons {
    /// Whether the `timers_by_time` row `row` is a spent listing.
    pub(crate) fn spent(&self, row: &[u8]) -> bool {
        let Some(horizon) = row
            .first()
            .and_then(|&index| *self.0.get(usize::from(index))?)
        else {
            return false;
        };
        layout::split_timer_by_time(row).is_some_and(|(place, _)| place <= horizon)
    }

    /// Where a walk under `wake` asked to start at `from` starts: past the spent
    /// listings (`None`: nothing can come after them).
    pub(crate) fn start(&self, wake: Wake, from: FiringPlace) -> Option<FiringPlace> {
        match self.0[usize::from(wake.index())] {
            Some(horizon) if from <= horizon => horizon.next(),
            _ => Some(from),
        }
    }
}

/// A store's spent listings: how far they go, and the dropping of their tables.
#[derive(Default)]
pub(crate) struct Spent {
    horizons: Cell<Horizons>,
    /// Held by each snapshot of the store. A snapshot reads the tables there are when
    /// it walks, so while one is alive no table is dropped: listings it holds live may
    /// be spent by then.
    snapshots: Arc<()>,
    /// The thread dropping spent tables, if one was started, and when.
    dropping: RefCell<Option<(JoinHandle<()>, Instant)>>,
}

impl Spent {
    /// How far listings are spent now.
    pub(crate) fn horizons(&self) -> Horizons {
        self.horizons.get()
    }

    /// A pin for a snapshot taken now (see [`Spent::snapshots`]).
    pub(crate) fn pin(&self) -> Arc<()> {
        Arc::clone(&self.snapshots)
    }

    /// Records that listings under `wake` are spent through `place`, and now and then
    /// (at most every [`DROP_EVERY`], one drop at a time, never while a snapshot is
    /// alive) drops the tables of `timers_by_time` that hold spent listings only.
    pub(crate) fn advance(&self, wake: Wake, place: FiringPlace, timers_by_time: &Keyspace) {
        let mut horizons = self.horizons.get();
        let slot = &mut horizons.0[usize::from(wake.index())];
        *slot = Some(slot.map_or(place, |spent| spent.max(place)));
        self.horizons.set(horizons);
        let mut dropping = self.dropping.borrow_mut();
        let busy = dropping
            .as_ref()
            .is_some_and(|(thread, at)| !thread.is_finished() || at.elapsed() < DROP_EVERY);
        if busy || Arc::strong_count(&self.snapshots) > 1 {
            return;
        }
        if let Some((thread, _)) = dropping.take() {
            let _ = thread.join();
        }
        let keyspace = timers_by_time.clone();
        let thread = std::thread::Builder::new()
            .name("weir-store-drop".into())
            .spawn(move || drop_spent(&keyspace, horizons));
        // Without a thread the listings stay a while longer: passed over, not lost.
        if let Ok(thread) = thread {
            *dropping = Some((thread, Instant::now()));
        }
    }

    /// Drops the tables of spent listings now, on this thread, unless a snapshot is
    /// alive (tests).
    #[cfg(test)]
    pub(crate) fn drop_now(&self, timers_by_time: &Keyspace) {
        self.finish();
        if Arc::strong_count(&self.snapshots) == 1 {
            drop_spent(timers_by_time, self.horizons.get());
        }
    }

    /// Waits for a drop under way. Called before the store's directory goes.
    pub(crate) fn finish(&self) {
        if let Some((thread, _)) = self.dropping.borrow_mut().take() {
            let _ = thread.join();
        }
    }
}

/// Drops every table of `timers_by_time` that holds only listings spent by `horizons`
/// (before each listing's horizon). A failure leaves them to the next drop.
fn drop_spent(timers_by_time: &Keyspace, horizons: Horizons) {
    for (index, horizon) in horizons.0.iter().enumerate() {
        let (Some(horizon), Some(wake)) = (horizon, Wake::from_index(index as u8)) else {
            continue;
        };
        let start = vec![wake.index()];
        let end = layout::place_bytes(wake, *horizon).to_vec();
        // A failed drop is no failure of the run: the listings are passed over until
        // the next one.
        let _ = timers_by_time.tree.drop_range(start..end);
    }
}
