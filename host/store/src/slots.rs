//! The disk store as the key table's [`SlotStore`]: whole keys in and out of memory.

use crate::{layout, DiskStore};
use anyhow::Context as _;
use layout::key_prefix;
use std::path::Path;
use weir_core::key::Key;
use weir_core::state::{SavedKey, SlotSnapshot, SlotStore, Wake};
use weir_core::time::timers::FiringPlace;
use weir_core::time::Timestamp;

/// The disk store as the key table's slot store: each key's slots (and a dormant key's
/// timers) in one row of the `spilled` keyspace (a key is loaded and saved whole: one
/// read, one write), a dormant key also in `timers_by_time` under its earliest timer and
/// its expiry on each clock, until the engine reads and writes state entries row by row.
impl SlotStore for DiskStore {
    fn load(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>> {
        let row = self.failed(self.tree().spilled.get(key_prefix(key)?))?;
        row.map(|bytes| decode_saved_in(&self.path, &bytes))
            .transpose()
    }

    fn save(&self, key: &[u8], saved: &SavedKey) -> anyhow::Result<()> {
        let prefix = key_prefix(key)?;
        for (wake, at) in saved.listings() {
            self.put(
                &self.tree().timers_by_time,
                layout::timer_by_time(&prefix, wake, at),
                [],
            )?;
        }
        let row = layout::encode_saved(saved);
        self.put(&self.tree().spilled, prefix, row)
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

    fn due(
        &self,
        wake: Wake,
        from: FiringPlace,
        through: FiringPlace,
        limit: usize,
    ) -> anyhow::Result<Vec<(FiringPlace, Key)>> {
        self.due_timers(wake, from, through, limit)
    }

    fn for_each(
        &self,
        each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        for guard in self.tree().spilled.iter() {
            let (row, value) = self.failed(guard.into_inner())?;
            let (key, _) = layout::split_prefix(&row).context("a spilled row")?;
            each(key, decode_saved_in(&self.path, &value)?)?;
        }
        Ok(())
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

/// A `spilled` row's contents, or an error naming the folder of the store it is in.
pub(crate) fn decode_saved_in(path: &Path, bytes: &[u8]) -> anyhow::Result<SavedKey> {
    layout::decode_saved(bytes)
        .with_context(|| format!("a damaged row in the state store in {}", path.display()))
}
