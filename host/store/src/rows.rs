//! A store's rows read back: a key's slots and timers from their rows, a saved key from
//! its `spilled` row or the listing that carries it, and the walk over every saved key.

use crate::layout::{self, SpilledRow, LIST_ITEM, MAP_ENTRY, VALUE};
use crate::spent::Horizons;
use anyhow::Context as _;
use std::path::Path;
use weir_core::key::Key;
use weir_core::state::{ByteMap, Listed, SavedKey, Slot, StateId};
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;

/// A map state's entries as the store returns them: map key, value.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

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
pub(crate) fn listed_of(path: &Path, row: &[u8], value: &[u8]) -> anyhow::Result<Listed> {
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
/// those whose listings in `timers_by_time` carry them, passing over listings `spent`
/// says are spent. Called by walks of the store and of its snapshots, which hand the
/// two keyspaces' rows.
pub(crate) fn walk_saved(
    path: &Path,
    spilled: impl Iterator<Item = anyhow::Result<Row>>,
    timers_by_time: impl Iterator<Item = anyhow::Result<Row>>,
    spent: Horizons,
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
        if !value.is_empty() && !spent.spent(&row) {
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

/// The timer of a `timers_by_key` row, from the part after the key prefix.
pub(crate) fn timer_of(rest: &[u8]) -> anyhow::Result<(TimeDomain, Timestamp)> {
    let domain = rest.first().copied().and_then(layout::domain_of);
    let at = rest.get(1..).and_then(layout::time_of);
    domain.zip(at).context("a damaged timer row")
}

/// The slots of one key from its `state` rows (the parts after its prefix), in order.
pub(crate) fn slots_of<'a>(
    rows: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> anyhow::Result<Vec<(StateId, Slot)>> {
    let mut slots: Vec<(StateId, Slot)> = Vec::new();
    for (rest, value) in rows {
        let (state, tag, after) = layout::split_state(rest).context("a damaged state row")?;
        if slots.last().is_none_or(|(last, _)| *last != state) {
            slots.push((
                state,
                match tag {
                    VALUE => Slot::Value(Vec::new()),
                    LIST_ITEM => Slot::List(Vec::new()),
                    MAP_ENTRY => Slot::Map(ByteMap::new()),
                    other => anyhow::bail!("a state row of unknown kind {other}"),
                },
            ));
        }
        match (&mut slots.last_mut().expect("pushed above").1, tag) {
            (Slot::Value(v), VALUE) => *v = value.to_vec(),
            (Slot::List(items), LIST_ITEM) => items.push(value.to_vec()),
            (Slot::Map(map), MAP_ENTRY) => {
                map.insert(after.to_vec(), value.to_vec());
            }
            _ => anyhow::bail!("state {state} has rows of two kinds"),
        }
    }
    Ok(slots)
}
