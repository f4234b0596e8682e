//! The disk store as the key table's [`SlotStore`]: whole keys in and out of memory.

use crate::disk::DiskStore;
use crate::layout::{self, key_prefix};
use crate::rows::{listed_of, saved_of, walk_saved};
use weir_core::state::{Listed, SavedKey, SlotSnapshot, SlotStore, Wake};
use weir_core::time::timers::FiringPlace;
use weir_core::time::Timestamp;

/// The disk store as the key table's slot store: each key's slots (and a dormant key's
/// timers and expiry) in one saved row (a key is loaded and saved whole: one write, one
/// read or two), a dormant key also in `timers_by_time` under its earliest timer and its
/// expiry on each clock, the first of those listings carrying the saved row (see
/// [`layout`]), until the engine reads and writes state entries row by row.
impl SlotStore for DiskStore {
    fn load(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>> {
        let prefix = key_prefix(key)?;
        let Some(value) = self.failed(self.tree().spilled.get(&prefix))? else {
            return Ok(None);
        };
        let timers_by_time = &self.tree().timers_by_time;
        saved_of(&self.path, &prefix, &value, |row| {
            self.failed(timers_by_time.get(row))
        })
        .map(Some)
    }

    fn save(&self, key: &[u8], saved: &SavedKey) -> anyhow::Result<()> {
        let prefix = key_prefix(key)?;
        let saved_row = layout::encode_saved(saved);
        let listings = saved.listings();
        let Some(&(first_wake, first_at)) = listings.first() else {
            let value = layout::spilled_here(&saved_row);
            return self.put(&self.tree().spilled, prefix, value);
        };
        for &(wake, at) in &listings[1..] {
            let row = layout::timer_by_time(&prefix, wake, at);
            self.put(&self.tree().timers_by_time, row, [])?;
        }
        let row = layout::timer_by_time(&prefix, first_wake, first_at);
        self.put(&self.tree().timers_by_time, row, saved_row)?;
        let value = layout::spilled_with_listing(first_wake, first_at);
        self.put(&self.tree().spilled, prefix, value)
    }

    fn remove(&self, key: &[u8], listed: &[(Wake, Timestamp)]) -> anyhow::Result<()> {
        let prefix = key_prefix(key)?;
        for &(wake, at) in listed {
            self.delete(
                &self.tree().timers_by_time,
                layout::timer_by_time(&prefix, wake, at),
            )?;
        }
        self.delete(&self.tree().spilled, prefix)
    }

    /// The carrying listing (the first) stays: it is spent once the walk that found it
    /// is (see the `spent` module). The `spilled` row goes, so a lookup by key finds
    /// nothing.
    fn remove_woken(&self, key: &[u8], listed: &[(Wake, Timestamp)]) -> anyhow::Result<()> {
        self.remove(key, listed.get(1..).unwrap_or_default())
    }

    fn spent_through(&self, wake: Wake, place: FiringPlace) {
        self.spent.advance(wake, place, &self.tree().timers_by_time);
    }

    fn due(
        &self,
        wake: Wake,
        from: FiringPlace,
        through: FiringPlace,
        limit: usize,
    ) -> anyhow::Result<Vec<Listed>> {
        let from = self.spent.horizons().start(wake, from);
        let Some(from) = from.filter(|&from| from <= through) else {
            return Ok(Vec::new());
        };
        let start = layout::place_bytes(wake, from).to_vec();
        let mut end = layout::place_bytes(wake, through).to_vec();
        end.push(0xff);
        let mut out = Vec::new();
        for guard in self.tree().timers_by_time.range(start..end).take(limit) {
            let (row, value) = self.failed(guard.into_inner())?;
            out.push(listed_of(&self.path, &row, &value)?);
        }
        Ok(out)
    }

    fn for_each(
        &self,
        each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let spilled = self.tree().spilled.iter();
        let listed = self.tree().timers_by_time.iter();
        walk_saved(
            &self.path,
            spilled.map(|guard| self.failed(guard.into_inner())),
            listed.map(|guard| self.failed(guard.into_inner())),
            self.spent.horizons(),
            each,
        )
    }

    fn snapshot(&self) -> Box<dyn SlotSnapshot> {
        Box::new(DiskStore::snapshot(self))
    }

    fn disk_bytes(&self) -> u64 {
        DiskStore::disk_bytes(self)
    }

    fn memory_bytes(&self) -> u64 {
        DiskStore::memory_bytes(self)
    }

    fn scratch_file(&self) -> Option<anyhow::Result<(std::fs::File, std::path::PathBuf)>> {
        Some(DiskStore::scratch_file(self))
    }
}
