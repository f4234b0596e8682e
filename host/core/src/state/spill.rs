//! Keys beyond memory: with a [`SlotStore`] (the `disk` state backend), the
//! [`KeyTable`] keeps the entries of at most a budget of bytes in memory and sends the
//! rest to the store, key by key, the least recently used first (a clock: each key has a
//! reference bit the hand clears as it passes, and a key whose bit is clear is evicted).
//! An evicted key leaves memory whole: it goes *dormant* ([`dormant`](super::dormant)),
//! its slots, timers and expiry in the store, until a record, a restore or a due
//! listing wakes it. The engine [marks](KeyTable::mark_used) the keys a call or batch is
//! about before it runs, and [evicts](KeyTable::evict) only between calls and batches, so
//! no key a call holds leaves memory under it. A key in memory has nothing in the store
//! (waking removes its row), so a released key leaves nothing behind.
//!
//! The budget counts the bytes of resident entries ([`footprint`]: the entry, its key,
//! its slots ([`Slot::size_bytes`]) and its pending timers): a key's size is counted when
//! it wakes, and again at the next eviction once it changed; and the store's own memory
//! (its block cache and write buffers, [`SlotStore::memory_bytes`]), so that the `disk`
//! backend's `cache` bounds both.

use super::{Key, KeyEntry, KeyId, KeyTable, Slot, StateId};
use crate::time::timers::{FiringPlace, TimeDomain};
use crate::time::Timestamp;
use smallvec::SmallVec;

/// What a [`SlotStore`] keeps of one key: its slots and, for a key that left memory
/// whole (a *dormant* key, see [`dormant`](super::dormant)), its pending timers and when
/// its state entries next expire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedKey {
    /// The key's slots, one per state it holds.
    pub slots: Vec<(StateId, Slot)>,
    /// The key's pending timers (none for a key whose entry stayed in memory).
    pub timers: Vec<(TimeDomain, Timestamp)>,
    /// When the first of the key's entries of states with a time-to-live expires, on
    /// each clock it is listed for (none for a key whose entry stayed in memory).
    pub expiry: Vec<(TimeDomain, Timestamp)>,
}

/// Why a [`SlotStore`] lists a dormant key by time: its earliest timer of a clock falls
/// due then, or its first entry of a state with a time-to-live on a clock expires then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wake {
    /// A timer of the clock.
    Timer(TimeDomain),
    /// The expiry of state entries on the clock.
    Expiry(TimeDomain),
}

impl Wake {
    /// Its number among the four (timers of event time, of processing time, expiry on
    /// event time, on processing time): how stores tell the listings apart.
    pub fn index(self) -> u8 {
        match self {
            Wake::Timer(TimeDomain::EventTime) => 0,
            Wake::Timer(TimeDomain::ProcessingTime) => 1,
            Wake::Expiry(TimeDomain::EventTime) => 2,
            Wake::Expiry(TimeDomain::ProcessingTime) => 3,
        }
    }

    /// The wake of number `index` ([`Wake::index`]).
    pub fn from_index(index: u8) -> Option<Wake> {
        Some(match index {
            0 => Wake::Timer(TimeDomain::EventTime),
            1 => Wake::Timer(TimeDomain::ProcessingTime),
            2 => Wake::Expiry(TimeDomain::EventTime),
            3 => Wake::Expiry(TimeDomain::ProcessingTime),
            _ => return None,
        })
    }
}

impl SavedKey {
    /// What a store lists the key under by time: the earliest of its timers on each
    /// clock (the key wakes with all its timers when it falls due), and its expiry on
    /// each clock.
    pub fn listings(&self) -> SmallVec<[(Wake, Timestamp); 4]> {
        let mut first: SmallVec<[(Wake, Timestamp); 4]> = SmallVec::new();
        let timers = self.timers.iter().map(|&(d, at)| (Wake::Timer(d), at));
        let expiry = self.expiry.iter().map(|&(d, at)| (Wake::Expiry(d), at));
        for (wake, at) in timers.chain(expiry) {
            match first.iter_mut().find(|(w, _)| *w == wake) {
                Some((_, earliest)) => *earliest = (*earliest).min(at),
                None => first.push((wake, at)),
            }
        }
        first
    }
}

/// A dormant key listed by time ([`SlotStore::due`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Where the listing is in firing order.
    pub place: FiringPlace,
    /// The record key.
    pub key: Key,
    /// What the store holds of the key, when the listing carries it (a store may keep a
    /// dormant key's row with one of its listings, so that keys woken in firing order
    /// are read in one walk); `None`: [`load`](SlotStore::load) it.
    pub saved: Option<SavedKey>,
}

/// Where a [`KeyTable`] keeps what it evicted: a store keyed by the record key's bytes,
/// one [`SavedKey`] per key, each dormant key also listed by time under the earliest of
/// its timers and its expiry on each clock ([`SavedKey::listings`]).
/// Implemented by `weir-store`'s disk store.
pub trait SlotStore: Send {
    /// What the store holds for `key`, if anything. Called when a key is interned (it
    /// may be dormant).
    fn load(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>>;
    /// Replaces what the store holds for `key` with `saved`, and lists the key by time
    /// under its [`listings`](SavedKey::listings). Called when a key leaves memory whole
    /// (an eviction, or a restore that writes it there). The store holds nothing of the
    /// key when this is called.
    fn save(&self, key: &[u8], saved: &SavedKey) -> anyhow::Result<()>;
    /// Removes what the store holds for `key`, and its listings by time `listed` (those
    /// of what it was saved with). Called when a dormant key wakes.
    fn remove(&self, key: &[u8], listed: &[(Wake, Timestamp)]) -> anyhow::Result<()>;
    /// [`remove`](Self::remove) for a key a walk by time ([`due`](Self::due)) found
    /// through the listing that carried its row (the first of `listed`): the store may
    /// leave that listing where it is, since the engine says next that the walk's
    /// listings are spent ([`spent_through`](Self::spent_through)). Called when a dormant
    /// key wakes with what its listing carried.
    fn remove_woken(&self, key: &[u8], listed: &[(Wake, Timestamp)]) -> anyhow::Result<()> {
        self.remove(key, listed)
    }
    /// Every listing under `wake` at a place through `place` is spent: its key woke, and
    /// no key is listed there again (a key that would be stays in memory). The store's
    /// walks and [`due`](Self::due) pass over such listings from now on, and it may drop
    /// them when it likes (whole tables at a time rather than one delete each). Called
    /// after a walk by time woke every key listed through `place`; places only grow.
    fn spent_through(&self, wake: Wake, place: FiringPlace) {
        let _ = (wake, place);
    }
    /// Up to `limit` keys listed under `wake` at a place in firing order from `from`
    /// through `through` (both included), in firing order (time, then the key's
    /// [`tie_order`](crate::key::tie_order), then the key's bytes), with that place.
    /// Called before timers of a clock fire and before expired entries are purged, to
    /// wake their keys (`from` is where none can be earlier).
    fn due(
        &self,
        wake: Wake,
        from: FiringPlace,
        through: FiringPlace,
        limit: usize,
    ) -> anyhow::Result<Vec<Listed>>;
    /// Calls `each` with every key the store holds and what it holds of it, in the
    /// store's order. Called for a full checkpoint, and to wake every dormant key.
    fn for_each(
        &self,
        each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
    ) -> anyhow::Result<()>;
    /// The store as it is now, to be read later on any thread while the run writes on
    /// (a full checkpoint's dormant keys). Called on the run's thread; cheap (no walk).
    fn snapshot(&self) -> Box<dyn SlotSnapshot>;
    /// Bytes the store takes on disk, for status figures.
    fn disk_bytes(&self) -> u64;

    /// A new file beside the store, already unlinked (gone when closed, or with the
    /// process), with the name it had for messages: where a checkpoint sets aside the
    /// keys it encoded on the run's thread beyond a few MiB, so that a full checkpoint
    /// does not hold a second copy of the cache in memory. Called on the run's thread
    /// when a checkpoint is taken. `None` (the default) keeps them in memory.
    fn scratch_file(&self) -> Option<anyhow::Result<(std::fs::File, std::path::PathBuf)>> {
        None
    }

    /// Bytes the store itself keeps in memory (its block cache, write buffers and
    /// whatever else it holds), for status figures and the budget: called every few
    /// dozen evictions.
    fn memory_bytes(&self) -> u64;
}

/// A [`SlotStore`] at one moment ([`SlotStore::snapshot`]).
pub trait SlotSnapshot: Send {
    /// What the store held for `key` at that moment, if anything. Called on the
    /// checkpoint writer's thread for an increment's keys that went dormant.
    fn get(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>>;
    /// Calls `each` with every key the store held at that moment and what it held of
    /// it, in the store's order. Called on the checkpoint writer's thread for a full
    /// checkpoint.
    fn for_each(
        &self,
        each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
    ) -> anyhow::Result<()>;
}

/// Evictions between two questions to the store about its memory.
const ASK_STORE_EVERY: u32 = 64;

/// A table's slot store and its budget.
pub(super) struct Spill {
    pub(super) store: Box<dyn SlotStore>,
    /// Bytes kept in memory at most (after an eviction): the key entries' and the
    /// store's own ([`SlotStore::memory_bytes`]).
    budget: usize,
    /// The store's own bytes in memory, as last asked (every [`ASK_STORE_EVERY`]
    /// evictions).
    store_memory: usize,
    /// Calls to evict so far.
    evictions: u32,
    /// Bytes of the entries in memory, as last counted ([`footprint`]).
    pub(super) resident: usize,
    /// Keys whose footprint changed since counted (each once, while `recounted`).
    recount: Vec<KeyId>,
    /// Where the clock's hand is.
    hand: usize,
    /// Keys loaded back (or woken) and written to the store so far, for status figures.
    pub(super) loads: u64,
    pub(super) saves: u64,
    /// Keys named (interned) that were in memory, and keys named that were not and were
    /// looked up in the store: the cache's hits and misses.
    pub(super) hits: u64,
    pub(super) lookups: u64,
    /// A store failure met where it could not be reported (a purge of expired
    /// entries), for the next eviction.
    pub(super) failure: Option<anyhow::Error>,
    /// Keys that left memory whole (in the store only), their timers per clock, and
    /// those of them listed for an expiry per clock.
    pub(super) dormant_keys: usize,
    pub(super) dormant_timers: [usize; 2],
    pub(super) dormant_expiring: [usize; 2],
    /// Per listing ([`Wake::index`]), a place no dormant key's listing is earlier than
    /// (exact after a wake by time): a clock short of it wakes nothing without reading
    /// the store.
    pub(super) dormant_from: [FiringPlace; 4],
    /// Keys that changed since the last checkpoint and left memory whole since: a
    /// checkpoint reads them from the store.
    pub(super) changed_dormant: Vec<Key>,
    /// Per listing ([`Wake::index`]), the place through which a walk by time woke every
    /// key listed (`None`: no walk yet): the store's listings there are spent
    /// ([`SlotStore::spent_through`]), so no key may go dormant listed there.
    pub(super) spent: [Option<FiringPlace>; 4],
}

impl Spill {
    /// Whether `saved` (what `key` would go dormant with) would be listed at a place a
    /// walk by time has passed: a timer set for a time its clock fired through, not
    /// fired yet. Such a key stays in memory until the next walk fires it.
    pub(super) fn behind_walks(&self, key: &[u8], saved: &SavedKey) -> bool {
        if self.spent.iter().all(Option::is_none) {
            return false;
        }
        let tie = crate::key::tie_order(key);
        saved.listings().iter().any(|&(wake, at)| {
            self.spent[wake.index() as usize].is_some_and(|spent| spent.covers(at, tie))
        })
    }
}

/// What a table with a slot store holds, for status figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpillFigures {
    /// Bytes of key entries in memory (their slots, timers and bookkeeping), as last
    /// counted.
    pub resident_bytes: usize,
    /// The budget of those.
    pub budget_bytes: usize,
    /// Keys that left memory whole: slots and timers in the store only.
    pub dormant_keys: usize,
    /// Keys loaded back or woken from the store so far.
    pub loads: u64,
    /// Keys written to the store so far.
    pub saves: u64,
    /// Bytes the store takes on disk.
    pub disk_bytes: u64,
    /// Bytes the store itself keeps in memory (block cache, write buffers).
    pub store_memory_bytes: u64,
    /// Keys named by a record or a restore that were in memory (cache hits).
    pub hits: u64,
    /// Keys named that were not in memory, and were looked up in the store (misses).
    pub lookups: u64,
}

impl SpillFigures {
    /// The share of keys named that were in memory (1 when none was named).
    pub fn hit_ratio(&self) -> f64 {
        match self.hits + self.lookups {
            0 => 1.0,
            named => self.hits as f64 / named as f64,
        }
    }

    /// Keys whose state is in the store only (the dormant keys).
    pub fn keys_on_disk(&self) -> usize {
        self.dormant_keys
    }
}

impl std::ops::Add for SpillFigures {
    type Output = SpillFigures;

    /// The figures of two shards' tables together.
    fn add(self, other: SpillFigures) -> SpillFigures {
        SpillFigures {
            resident_bytes: self.resident_bytes + other.resident_bytes,
            budget_bytes: self.budget_bytes + other.budget_bytes,
            dormant_keys: self.dormant_keys + other.dormant_keys,
            loads: self.loads + other.loads,
            saves: self.saves + other.saves,
            disk_bytes: self.disk_bytes + other.disk_bytes,
            store_memory_bytes: self.store_memory_bytes + other.store_memory_bytes,
            hits: self.hits + other.hits,
            lookups: self.lookups + other.lookups,
        }
    }
}

/// Memory an entry takes beyond its slots: the entry, its place in the index and the
/// free list, and its key's bytes when they do not fit inline.
const ENTRY_BYTES: usize = std::mem::size_of::<KeyEntry>() + 16;
/// Memory one pending timer takes: its place in the timer service and on its key.
const TIMER_BYTES: usize = 48;
/// Memory a slot takes beyond its bytes.
const SLOT_BYTES: usize = 16;

impl KeyTable {
    /// From now on keeps at most `budget` bytes in memory (key entries and the store's
    /// own), spilling the rest to `store` (see the [module docs](self)). Called once,
    /// before any key is interned.
    pub fn spill_to(&mut self, store: Box<dyn SlotStore>, budget: usize) {
        self.spill = Some(Box::new(Spill {
            store,
            budget,
            store_memory: 0,
            evictions: 0,
            resident: 0,
            recount: Vec::new(),
            hand: 0,
            loads: 0,
            saves: 0,
            hits: 0,
            lookups: 0,
            failure: None,
            dormant_keys: 0,
            dormant_timers: [0; 2],
            dormant_expiring: [0; 2],
            dormant_from: [FiringPlace::end_of(Timestamp::MAX); 4],
            spent: [None; 4],
            changed_dormant: Vec::new(),
        }));
    }

    /// Whether keys may leave memory for a store.
    pub fn spills(&self) -> bool {
        self.spill.is_some()
    }

    /// Marks key `id` used (the clock's reference bit), so that the next eviction keeps
    /// it. The engine calls this for every key a call or batch is about, before it runs.
    pub fn mark_used(&mut self, id: KeyId) {
        if self.spill.is_some() {
            self.entries[id as usize].hot = true;
        }
    }

    /// Keeps a store failure for the next [`evict`](Self::evict), which fails with it
    /// (the engine's purges of expired entries, which cannot report one at once).
    pub fn defer(&mut self, e: anyhow::Error) {
        let spill = self.spill.as_mut().expect("only a store fails");
        spill.failure.get_or_insert(e);
    }

    /// Key `id`'s footprint may have changed (it is new, its slots or timers changed):
    /// it is counted again at the next eviction, and used since the hand last passed.
    pub(super) fn list_for_recount(&mut self, id: KeyId) {
        let (Some(spill), entry) = (self.spill.as_mut(), &mut self.entries[id as usize]) else {
            return;
        };
        entry.hot = true;
        if !entry.recounted {
            entry.recounted = true;
            spill.recount.push(id);
        }
    }

    /// Counts key `id`'s footprint again now.
    pub(super) fn recount_now(&mut self, id: KeyId) {
        let size = footprint(&self.entries[id as usize], self.pending_timers(id));
        let (Some(spill), entry) = (self.spill.as_mut(), &mut self.entries[id as usize]) else {
            return;
        };
        spill.resident = spill.resident - entry.counted as usize + size as usize;
        entry.counted = size;
    }

    /// Key `id` is released: it leaves the count (the store holds nothing of a key in
    /// memory, so nothing of it is left there).
    pub(super) fn forget(&mut self, id: KeyId) {
        let (Some(spill), entry) = (self.spill.as_mut(), &mut self.entries[id as usize]) else {
            return;
        };
        spill.resident -= entry.counted as usize;
        entry.counted = 0;
        entry.hot = false;
        // Its listing for a count, if any, is skipped (not in use) or counts the next key
        // that takes its id.
    }

    /// Evicts keys not used lately until the entries in memory fit the budget: each
    /// leaves memory whole (it goes *dormant*: its slots, timers and expiry to the
    /// store, its timers out of `timers`). The engine calls this between calls and
    /// batches (never while a call holds a key's slots or a timer of it is firing).
    /// Fails with the store's failure, or one kept since the last call
    /// ([`defer`](Self::defer)).
    pub fn evict(&mut self, timers: &mut crate::time::timers::TimerService) -> anyhow::Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        if let Some(e) = spill.failure.take() {
            return Err(e);
        }
        if spill.evictions.is_multiple_of(ASK_STORE_EVERY) {
            spill.store_memory = spill.store.memory_bytes() as usize;
        }
        spill.evictions = spill.evictions.wrapping_add(1);
        // The store's memory (its block cache, write buffers) comes out of the budget.
        let budget = spill.budget.saturating_sub(spill.store_memory);
        for id in std::mem::take(&mut spill.recount) {
            let entry = &mut self.entries[id as usize];
            entry.recounted = false;
            if entry.in_use {
                self.recount_now(id);
            }
        }
        // Two turns of the hand at most: the first clears reference bits.
        let mut steps = 2 * self.entries.len();
        while steps > 0 {
            let spill = self.spill.as_mut().expect("spilling");
            if spill.resident <= budget {
                break;
            }
            steps -= 1;
            spill.hand = (spill.hand + 1) % self.entries.len().max(1);
            let id = spill.hand as KeyId;
            let entry = &mut self.entries[id as usize];
            if !entry.in_use || std::mem::replace(&mut entry.hot, false) {
                continue;
            }
            // A key listed behind the walks by time stays (see `Spill::behind_walks`).
            self.put_to_sleep(id, timers)?;
        }
        Ok(())
    }

    /// What the slot store holds and what is in memory (`None`: no store).
    pub fn spill_figures(&self) -> Option<SpillFigures> {
        let spill = self.spill.as_ref()?;
        Some(SpillFigures {
            resident_bytes: spill.resident,
            budget_bytes: spill.budget,
            dormant_keys: spill.dormant_keys,
            loads: spill.loads,
            saves: spill.saves,
            disk_bytes: spill.store.disk_bytes(),
            store_memory_bytes: spill.store.memory_bytes(),
            hits: spill.hits,
            lookups: spill.lookups,
        })
    }
}

/// The bytes counted for an entry in memory with `timers` pending timers.
fn footprint(entry: &KeyEntry, timers: usize) -> u32 {
    let slots: usize = entry
        .slots
        .iter()
        .map(|(_, slot)| slot.size_bytes() + SLOT_BYTES)
        .sum();
    let key = if entry.key.spilled() {
        entry.key.len()
    } else {
        0
    };
    let bytes = ENTRY_BYTES + key + slots + timers * TIMER_BYTES;
    bytes.min(u32::MAX as usize) as u32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::key::tie_order;
    use crate::state::ByteMap;
    use crate::time::timers::TimerService;
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::sync::{Arc, Mutex};

    /// A slot store in memory, shared with the test to look into.
    #[derive(Clone, Default)]
    pub(crate) struct Shelf(pub(crate) Arc<Mutex<Shelved>>);

    /// What the shelf holds: each key's saved slots and timers, and the timers by time.
    #[derive(Default)]
    pub(crate) struct Shelved {
        pub(crate) keys: HashMap<Vec<u8>, SavedKey>,
        pub(crate) by_time: BTreeSet<(u8, FiringPlace, Vec<u8>)>,
    }

    impl SlotStore for Shelf {
        fn load(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>> {
            Ok(self.0.lock().unwrap().keys.get(key).cloned())
        }
        fn save(&self, key: &[u8], saved: &SavedKey) -> anyhow::Result<()> {
            let mut shelf = self.0.lock().unwrap();
            for (wake, at) in saved.listings() {
                let place = FiringPlace {
                    at,
                    tie: tie_order(key),
                };
                shelf.by_time.insert((wake.index(), place, key.to_vec()));
            }
            shelf.keys.insert(key.to_vec(), saved.clone());
            Ok(())
        }
        fn remove(&self, key: &[u8], listed: &[(Wake, Timestamp)]) -> anyhow::Result<()> {
            let mut shelf = self.0.lock().unwrap();
            for &(wake, at) in listed {
                let place = FiringPlace {
                    at,
                    tie: tie_order(key),
                };
                shelf.by_time.remove(&(wake.index(), place, key.to_vec()));
            }
            shelf.keys.remove(key);
            Ok(())
        }
        fn due(
            &self,
            wake: Wake,
            from: FiringPlace,
            through: FiringPlace,
            limit: usize,
        ) -> anyhow::Result<Vec<Listed>> {
            let shelf = self.0.lock().unwrap();
            let d = wake.index();
            // As the disk store does, the key's first listing carries what it holds.
            let carried = |key: &[u8]| {
                let saved = shelf.keys.get(key)?;
                (saved.listings().first()?.0 == wake).then(|| saved.clone())
            };
            Ok(shelf
                .by_time
                .iter()
                .filter(|(dd, place, _)| *dd == d && *place >= from && *place <= through)
                .take(limit)
                .map(|(_, place, key)| Listed {
                    place: *place,
                    key: Key::from_slice(key),
                    saved: carried(key),
                })
                .collect())
        }
        fn for_each(
            &self,
            each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
        ) -> anyhow::Result<()> {
            let keys: Vec<_> = self.0.lock().unwrap().keys.clone().into_iter().collect();
            for (key, saved) in keys {
                each(&key, saved)?;
            }
            Ok(())
        }
        fn snapshot(&self) -> Box<dyn SlotSnapshot> {
            let keys = self.0.lock().unwrap().keys.clone();
            Box::new(ShelfSnapshot(keys.into_iter().collect()))
        }
        fn memory_bytes(&self) -> u64 {
            0
        }

        fn disk_bytes(&self) -> u64 {
            0
        }
    }

    /// Key `id`'s slots, copied, in state id order.
    pub(crate) fn slots_of(table: &KeyTable, id: KeyId) -> Vec<(StateId, Slot)> {
        let mut slots: Vec<_> = table
            .entry(id)
            .slots()
            .map(|(s, v)| (s, v.clone()))
            .collect();
        slots.sort_by_key(|(s, _)| *s);
        slots
    }

    /// A shelf's keys at one moment.
    pub(crate) struct ShelfSnapshot(BTreeMap<Vec<u8>, SavedKey>);

    impl SlotSnapshot for ShelfSnapshot {
        fn get(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>> {
            Ok(self.0.get(key).cloned())
        }
        fn for_each(
            &self,
            each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
        ) -> anyhow::Result<()> {
            for (key, saved) in &self.0 {
                each(key, saved.clone())?;
            }
            Ok(())
        }
    }

    /// The same changes on a table that sends keys to the store (with a budget of ~10
    /// keys) and on one that keeps everything: after each, the key reads the same, and
    /// at the end every key does, woken from the store; the store holds only the keys
    /// not in memory.
    #[test]
    fn a_spilling_table_reads_as_one_that_keeps_everything() {
        let shelf = Shelf::default();
        let mut spilling = KeyTable::new();
        spilling.spill_to(Box::new(shelf.clone()), 10 * (ENTRY_BYTES + 40));
        let mut keeping = KeyTable::new();
        let mut timers = TimerService::new(0);
        let mut seed: u64 = 7;
        let mut roll = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for step in 0..5_000u64 {
            let key = format!("key-{}", roll(200));
            let (a, b) = (
                spilling.intern_awake(key.as_bytes(), &mut timers).unwrap(),
                keeping.intern(key.as_bytes()),
            );
            spilling.mark_used(a);
            let op = roll(5);
            for (table, id) in [(&mut spilling, a), (&mut keeping, b)] {
                let entry = table.entry_mut(id);
                match op {
                    0 => entry.set_slot(0, Slot::Value(step.to_le_bytes().repeat(5))),
                    1 => {
                        if let Slot::List(items) = entry.slot_or_insert(1, || Slot::List(vec![])) {
                            items.push(vec![step as u8; 3]);
                        }
                    }
                    2 => {
                        if let Slot::Map(map) =
                            entry.slot_or_insert(2, || Slot::Map(ByteMap::new()))
                        {
                            map.insert(vec![(step % 7) as u8], vec![1; 8]);
                        }
                    }
                    3 => entry.clear(1),
                    _ => entry.clear_all(),
                }
                table.release_if_unused(id);
            }
            match (spilling.find(key.as_bytes()), keeping.find(key.as_bytes())) {
                (Some(a), Some(b)) => {
                    assert_eq!(slots_of(&spilling, a), slots_of(&keeping, b), "step {step}")
                }
                (None, None) => {}
                other => panic!("step {step}: released alike? {other:?}"),
            }
            spilling.evict(&mut timers).unwrap();
            let figures = spilling.spill_figures().unwrap();
            assert!(
                figures.resident_bytes <= figures.budget_bytes,
                "{figures:?}"
            );
            let stored = shelf.0.lock().unwrap().keys.len();
            assert_eq!(
                stored, figures.dormant_keys,
                "the store holds the dormant keys only"
            );
        }
        let figures = spilling.spill_figures().unwrap();
        assert!(
            figures.dormant_keys > 50 && figures.saves > 0 && figures.loads > 0,
            "{figures:?}"
        );
        assert_eq!(spilling.len(), keeping.len());
        for (b, entry) in keeping.iter() {
            let a = spilling.intern_awake(entry.key(), &mut timers).unwrap();
            assert_eq!(slots_of(&spilling, a), slots_of(&keeping, b));
        }
    }
}
