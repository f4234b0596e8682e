//! The disk store as the key table's [`SlotStore`]: whole keys in and out of memory.

use crate::{layout, DiskStore};
use anyhow::Context as _;
use layout::{key_prefix, SpilledRow};
use std::path::Path;
use weir_core::key::Key;
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

    fn due(
        &self,
        wake: Wake,
        from: FiringPlace,
        through: FiringPlace,
        limit: usize,
    ) -> anyhow::Result<Vec<Listed>> {
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

/// A store row as fjall hands it: its key and value.
pub(crate) type Row = (fjall::Slice, fjall::Slice);

/// The saved key whose `spilled` row, of the key whose prefix is `prefix`, holds
/// `value`, reading its listing's row with `read_listing` when the row is there; an
/// error naming the store's folder `path` if either is damaged or the listing is gone.
pub(crate) fn saved_of(
    path: &Path,
    prefix: &[u8],
    value: &[u8],
    read_listing: impl FnOnce(Vec<u8>) -> anyhow::Result<Option<fjall::Slice>>,
) -> anyhow::Result<SavedKey> {
    match layout::read_spilled(value) {
        Some(SpilledRow::Here(saved_row)) => decode_saved_in(path, saved_row),
        Some(SpilledRow::WithListing(wake, at)) => {
            let row = read_listing(layout::timer_by_time(prefix, wake, at))?;
            let row = row.filter(|row| !row.is_empty());
            let row = row.ok_or_else(|| damaged(path))?;
            decode_saved_in(path, &row)
        }
        None => Err(damaged(path)),
    }
}

/// The listing a `timers_by_time` row (`row`, `value`) is, with the saved row it
/// carries, if any.
fn listed_of(path: &Path, row: &[u8], value: &[u8]) -> anyhow::Result<Listed> {
    let (place, key) = layout::split_timer_by_time(row).ok_or_else(|| damaged(path))?;
    let saved = match value.is_empty() {
        true => None,
        false => Some(decode_saved_in(path, value)?),
    };
    Ok(Listed {
        place,
        key: Key::from_slice(key),
        saved,
    })
}

/// Calls `each` with every saved key, once: those whose `spilled` rows hold them, then
/// those whose listings in `timers_by_time` carry them. Called by walks of the store and
/// of its snapshots, which hand the two keyspaces' rows.
pub(crate) fn walk_saved(
    path: &Path,
    spilled: impl Iterator<Item = anyhow::Result<Row>>,
    timers_by_time: impl Iterator<Item = anyhow::Result<Row>>,
    each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for row in spilled {
        let (row, value) = row?;
        let (key, _) = layout::split_prefix(&row).ok_or_else(|| damaged(path))?;
        if let Some(SpilledRow::Here(saved_row)) = layout::read_spilled(&value) {
            each(key, decode_saved_in(path, saved_row)?)?;
        }
    }
    for row in timers_by_time {
        let (row, value) = row?;
        if !value.is_empty() {
            let listed = listed_of(path, &row, &value)?;
            each(&listed.key, listed.saved.expect("a carried row"))?;
        }
    }
    Ok(())
}

/// A saved row's contents, or an error naming the folder of the store it is in.
pub(crate) fn decode_saved_in(path: &Path, bytes: &[u8]) -> anyhow::Result<SavedKey> {
    layout::decode_saved(bytes).with_context(|| damaged_row(path))
}

/// The message of a damaged row in the store in `path`.
fn damaged_row(path: &Path) -> String {
    format!("a damaged row in the state store in {}", path.display())
}

/// The error of a damaged row in the store in `path`.
fn damaged(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(damaged_row(path))
}
