//! The store at one moment, for a full checkpoint: a walk over its keys, each with its
//! slots and timers, that reads a snapshot while the run writes on.

use crate::disk::DiskStore;
use crate::layout;
use crate::rows::{saved_of, slots_of, timer_of, walk_saved, Entries};
use crate::spent::Horizons;
use anyhow::Context as _;
use fjall::{Keyspace, Readable};
use std::path::PathBuf;
use std::sync::Arc;
use weir_core::key::Key;
use weir_core::state::{SavedKey, Slot, SlotSnapshot, StateId};
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;

/// One key as a snapshot holds it: what a full checkpoint writes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// The record key.
    pub key: Key,
    /// Its contents of every state it holds, in state id order.
    pub slots: Vec<(StateId, Slot)>,
    /// Its pending timers, by domain then time.
    pub timers: Vec<(TimeDomain, Timestamp)>,
}

/// The store at one moment ([`DiskStore::snapshot`]): read while the run writes on, on
/// any thread. Keep it only while it is read: the store keeps what it sees until then.
pub struct StoreSnapshot {
    snapshot: fjall::Snapshot,
    state: Keyspace,
    timers_by_key: Keyspace,
    timers_by_time: Keyspace,
    spilled: Keyspace,
    path: PathBuf,
    /// The listings spent when it was taken, and the pin that keeps the store from
    /// dropping the tables of later ones while it lives.
    spent: Horizons,
    _pin: Arc<()>,
}

impl StoreSnapshot {
    /// Every key with state or timers, each once, with its slots and timers, in the
    /// store's key order (key group first).
    pub fn keys(&self) -> KeyWalk<'_> {
        KeyWalk {
            state: self.rows(&self.state),
            timers: self.rows(&self.timers_by_key),
        }
    }

    /// Every row of `keyspace` as the snapshot sees it, in order.
    fn rows(&self, keyspace: &Keyspace) -> Rows<'_> {
        let path = &self.path;
        let walk = self
            .snapshot
            .iter(keyspace)
            .map(move |guard: fjall::Guard| {
                guard
                    .into_inner()
                    .with_context(|| format!("the state store in {}", path.display()))
            });
        let walk: Box<dyn Iterator<Item = _> + '_> = Box::new(walk);
        walk.peekable()
    }
}

/// The rows of one keyspace in a snapshot, in order.
type Rows<'a> = std::iter::Peekable<
    Box<dyn Iterator<Item = anyhow::Result<(fjall::Slice, fjall::Slice)>> + 'a>,
>;

/// A walk over a snapshot's keys ([`StoreSnapshot::keys`]).
pub struct KeyWalk<'a> {
    state: Rows<'a>,
    timers: Rows<'a>,
}

/// The key prefix of the next row of `rows`, if any (an error is taken off the walk).
fn next_prefix(rows: &mut Rows<'_>) -> anyhow::Result<Option<Vec<u8>>> {
    match rows.peek() {
        None => Ok(None),
        Some(Ok((row, _))) => {
            let len = layout::prefix_len(row).context("a damaged row in the state store")?;
            Ok(Some(row[..len].to_vec()))
        }
        Some(Err(_)) => match rows.next() {
            Some(Err(e)) => Err(e),
            _ => unreachable!("peeked an error"),
        },
    }
}

/// Takes the rows that start with `prefix` off `rows`, with the part after it.
fn take_rows(rows: &mut Rows<'_>, prefix: &[u8]) -> anyhow::Result<Entries> {
    let mut out = Vec::new();
    while let Some(Ok((row, _))) = rows.peek() {
        if !row.starts_with(prefix) {
            break;
        }
        let (row, value) = rows.next().expect("peeked")?;
        out.push((row[prefix.len()..].to_vec(), value.to_vec()));
    }
    Ok(out)
}

impl KeyWalk<'_> {
    fn next_key(&mut self) -> anyhow::Result<Option<StoredKey>> {
        // The smaller of the two next prefixes is the next key (see `layout`).
        let prefix = match (
            next_prefix(&mut self.state)?,
            next_prefix(&mut self.timers)?,
        ) {
            (None, None) => return Ok(None),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        let state_rows = take_rows(&mut self.state, &prefix)?;
        let timer_rows = take_rows(&mut self.timers, &prefix)?;
        let (key, _) = layout::split_prefix(&prefix).context("a damaged row")?;
        Ok(Some(StoredKey {
            key: Key::from_slice(key),
            slots: slots_of(state_rows.iter().map(|(r, v)| (r.as_slice(), v.as_slice())))?,
            timers: timer_rows
                .iter()
                .map(|(rest, _)| timer_of(rest))
                .collect::<anyhow::Result<_>>()?,
        }))
    }
}

impl Iterator for KeyWalk<'_> {
    type Item = anyhow::Result<StoredKey>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_key().transpose()
    }
}

impl DiskStore {
    /// The store as it is now, for a full checkpoint read while the run writes on.
    pub fn snapshot(&self) -> StoreSnapshot {
        StoreSnapshot {
            snapshot: self.tree().db.snapshot(),
            state: self.tree().state.clone(),
            timers_by_key: self.tree().timers_by_key.clone(),
            timers_by_time: self.tree().timers_by_time.clone(),
            spilled: self.tree().spilled.clone(),
            path: self.path.clone(),
            spent: self.spent.horizons(),
            _pin: self.spent.pin(),
        }
    }
}

/// The snapshot's whole keys (the key table's saved rows, in `spilled` or carried by a
/// listing in `timers_by_time`), walked on the checkpoint writer's thread for a full
/// checkpoint.
impl SlotSnapshot for StoreSnapshot {
    fn get(&self, key: &[u8]) -> anyhow::Result<Option<SavedKey>> {
        let in_store = || format!("the state store in {}", self.path.display());
        let prefix = layout::key_prefix(key)?;
        let Some(value) = self
            .snapshot
            .get(&self.spilled, &prefix)
            .with_context(in_store)?
        else {
            return Ok(None);
        };
        saved_of(&self.path, &prefix, &value, |row| {
            self.snapshot
                .get(&self.timers_by_time, row)
                .with_context(in_store)
        })
        .map(Some)
    }

    fn for_each(
        &self,
        each: &mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        walk_saved(
            &self.path,
            self.rows(&self.spilled),
            self.rows(&self.timers_by_time),
            self.spent,
            each,
        )
    }
}
