//! The [`DiskStore`]: one shard's store opened, written and read row by row, bounded
//! in memory, and removed when dropped.

use crate::layout::{self, key_prefix, LIST_ITEM, MAP_ENTRY, VALUE};
use crate::rows::{slots_of, timer_of, Entries};
use crate::spent::Spent;
use anyhow::Context as _;
use fjall::config::PinningPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use std::path::{Path, PathBuf};
use weir_core::key::Key;
use weir_core::state::{Slot, StateId, Wake};
use weir_core::time::timers::{FiringPlace, TimeDomain};
use weir_core::time::Timestamp;

/// One shard's keyed state and timers on disk (see the [crate docs](crate)).
pub struct DiskStore {
    /// The database and its keyspaces (taken when the store is dropped).
    pub(crate) tree: Option<Tree>,
    pub(crate) path: PathBuf,
    /// Writes so far (counted to check the memtables' size every so often).
    pub(crate) writes: std::cell::Cell<u32>,
    /// The listings walks by time have passed.
    pub(crate) spent: Spent,
}

/// The database and its four keyspaces ([`layout`]).
pub(crate) struct Tree {
    pub(crate) db: Database,
    pub(crate) state: Keyspace,
    pub(crate) timers_by_key: Keyspace,
    pub(crate) timers_by_time: Keyspace,
    pub(crate) spilled: Keyspace,
}

/// The journals' size at most (fjall's least): memtables are flushed beyond it.
const JOURNAL_BYTES: u64 = 64 << 20;

/// The largest memtable of a keyspace (written out to a table on disk beyond it).
const MEMTABLE_BYTES: u64 = 4 << 20;

/// Level-0 tables merged into level 1 at once (see [`DiskStore::open`]).
const L0_TABLES_PER_MERGE: u8 = 8;

/// The size of a table on disk the store aims at.
const TABLE_BYTES: u64 = 16 << 20;

/// Writes between two checks of the memtables' size.
const CHECK_EVERY: u32 = 256;

impl DiskStore {
    /// Opens an empty store in `dir` (deleting what a run before left there), keeping up
    /// to `cache_bytes` of its blocks in memory. The directory is deleted again when the
    /// store is dropped.
    pub fn open(dir: &Path, cache_bytes: u64) -> anyhow::Result<Self> {
        let describe = || format!("cannot open the state store in {}", dir.display());
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(describe)?;
        }
        std::fs::create_dir_all(dir).with_context(describe)?;
        // A working copy needs no durability: the journal is written in big buffers
        // (never flushed per write), and kept short.
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .max_journaling_size(JOURNAL_BYTES)
            .worker_threads(1)
            .cache_size(cache_bytes)
            .open()
            .with_context(describe)?;
        // Small memtables: what the store holds in memory beside the block cache stays
        // a few MiB per keyspace, not fjall's default 64 MiB each. Every table's filter
        // and index stay in memory (~1.3 bytes per row for the filter, ~1% of the data
        // for the index): a record with a new key looks it up in the store, and when
        // the filters of the deeper levels went through the block cache, the cache,
        // full of data blocks, read and checksummed a filter of up to a MiB from the file
        // for each lookup (60% of the run's time at 2,000,000 open orders).
        // Level 0 merged into level 1 eight tables at a time, and tables of 16 MiB: with
        // rows in hash order every level-0 table overlaps all of level 1, which each
        // merge rewrites, so fewer, larger merges write less (5,000,000 open orders under
        // a 32 MiB cache: 5.6 GB written instead of 9.1 GB; fjall's defaults are four
        // tables and 64 MiB). fjall holds writes back at 20 tables in level 0.
        let strategy = fjall::compaction::Leveled::default()
            .with_l0_threshold(L0_TABLES_PER_MERGE)
            .with_table_target_size(TABLE_BYTES);
        let keyspace = |name: &str| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default()
                    .compaction_strategy(std::sync::Arc::new(strategy.clone()))
                    .max_memtable_size(MEMTABLE_BYTES)
                    .filter_block_pinning_policy(PinningPolicy::all(true))
                    .index_block_pinning_policy(PinningPolicy::all(true))
                    .manual_journal_persist(true)
            })
            .with_context(describe)
        };
        let tree = Tree {
            state: keyspace("state")?,
            timers_by_key: keyspace("timers_by_key")?,
            timers_by_time: keyspace("timers_by_time")?,
            spilled: keyspace("spilled")?,
            db,
        };
        Ok(Self {
            tree: Some(tree),
            path: dir.to_path_buf(),
            writes: std::cell::Cell::new(0),
            spent: Spent::default(),
        })
    }

    pub(crate) fn tree(&self) -> &Tree {
        self.tree.as_ref().expect("open until dropped")
    }

    /// Opens shard `shard`'s store of this process under `root` (`<state dir>/store`):
    /// `root/<pid>/shard-<shard>`, so that runs sharing a state directory without
    /// checkpoints (which lock it) never share a store; stores left by processes that
    /// are gone (killed) are deleted first.
    pub fn open_for_shard(root: &Path, shard: usize, cache_bytes: u64) -> anyhow::Result<Self> {
        if shard == 0 {
            remove_abandoned(root);
        }
        let dir = root
            .join(std::process::id().to_string())
            .join(format!("shard-{shard}"));
        Self::open(&dir, cache_bytes)
    }

    /// Where the store is, for messages and status.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` under `row` in `keyspace`, then [bounds](Self::bound_memtables)
    /// what the store keeps in memory.
    pub(crate) fn put(
        &self,
        keyspace: &Keyspace,
        row: impl Into<fjall::UserKey>,
        value: impl Into<fjall::UserValue>,
    ) -> anyhow::Result<()> {
        self.failed(keyspace.insert(row, value))?;
        self.bound_memtables()
    }

    /// Removes `row` from `keyspace`, then [bounds](Self::bound_memtables) what the
    /// store keeps in memory.
    pub(crate) fn delete(
        &self,
        keyspace: &Keyspace,
        row: impl Into<fjall::UserKey>,
    ) -> anyhow::Result<()> {
        self.failed(keyspace.remove(row))?;
        self.bound_memtables()
    }

    /// Every [`CHECK_EVERY`] writes, seals each keyspace's memtable that has grown past
    /// [`MEMTABLE_BYTES`] (to be flushed to a table on disk). fjall's workers seal
    /// memtables on their own only when free: while one compacts, a run writing at full
    /// speed grew a memtable by hundreds of MiB (2,000,000 open orders under a 64 MiB
    /// cache peaked at 940 MB of RSS, the memory backend at 500 MB). Sealed memtables waiting for their flush
    /// are bounded by fjall (it holds writes back beyond four per keyspace).
    pub(crate) fn bound_memtables(&self) -> anyhow::Result<()> {
        use fjall::AbstractTree as _;
        let writes = self.writes.get().wrapping_add(1);
        self.writes.set(writes);
        if !writes.is_multiple_of(CHECK_EVERY) {
            return Ok(());
        }
        let tree = self.tree();
        for keyspace in [
            &tree.state,
            &tree.timers_by_key,
            &tree.timers_by_time,
            &tree.spilled,
        ] {
            if keyspace.tree.active_memtable().size() > MEMTABLE_BYTES {
                self.failed(keyspace.rotate_memtable())?;
            }
        }
        Ok(())
    }

    /// Adds the store's path to an error of the store.
    pub(crate) fn failed<T>(&self, result: fjall::Result<T>) -> anyhow::Result<T> {
        result.with_context(|| format!("the state store in {}", self.path.display()))
    }

    /// The rows of `keyspace` that start with `prefix`, with the part after it.
    pub(crate) fn rows(&self, keyspace: &Keyspace, prefix: &[u8]) -> anyhow::Result<Entries> {
        let mut out = Vec::new();
        for guard in keyspace.prefix(prefix) {
            let (row, value) = self.failed(guard.into_inner())?;
            out.push((row[prefix.len()..].to_vec(), value.to_vec()));
        }
        Ok(out)
    }

    /// Removes every row of `keyspace` that starts with `prefix`.
    pub(crate) fn remove_rows(&self, keyspace: &Keyspace, prefix: &[u8]) -> anyhow::Result<()> {
        for guard in keyspace.prefix(prefix) {
            let row = self.failed(guard.key())?;
            self.delete(keyspace, row)?;
        }
        Ok(())
    }

    // ---- state entries ---------------------------------------------------------------

    /// `key`'s value of value state `state`, if set.
    pub fn value_get(&self, key: &[u8], state: StateId) -> anyhow::Result<Option<Vec<u8>>> {
        let row = layout::state_prefix(&key_prefix(key)?, state, VALUE);
        Ok(self.failed(self.tree().state.get(row))?.map(|v| v.to_vec()))
    }

    /// Sets `key`'s value of value state `state`.
    pub fn value_set(&self, key: &[u8], state: StateId, value: &[u8]) -> anyhow::Result<()> {
        let row = layout::state_prefix(&key_prefix(key)?, state, VALUE);
        self.put(&self.tree().state, row, value)
    }

    /// `key`'s items of list state `state`, in the order they were added.
    pub fn list_get(&self, key: &[u8], state: StateId) -> anyhow::Result<Vec<Vec<u8>>> {
        let prefix = layout::state_prefix(&key_prefix(key)?, state, LIST_ITEM);
        let rows = self.rows(&self.tree().state, &prefix)?;
        Ok(rows.into_iter().map(|(_, item)| item).collect())
    }

    /// Adds `item` at the end of `key`'s list state `state`: one row, whatever the
    /// list's length.
    pub fn list_append(&self, key: &[u8], state: StateId, item: &[u8]) -> anyhow::Result<()> {
        let prefix = layout::state_prefix(&key_prefix(key)?, state, LIST_ITEM);
        let next = match self.tree().state.prefix(&prefix).next_back() {
            Some(last) => {
                let row = self.failed(last.key())?;
                let position = u64::from_be_bytes(row[prefix.len()..].try_into()?);
                position + 1
            }
            None => 0,
        };
        let mut row = prefix;
        row.extend_from_slice(&next.to_be_bytes());
        self.put(&self.tree().state, row, item)
    }

    /// Replaces `key`'s list state `state` with `items` (none: clears it).
    pub fn list_set(&self, key: &[u8], state: StateId, items: &[Vec<u8>]) -> anyhow::Result<()> {
        let prefix = layout::state_prefix(&key_prefix(key)?, state, LIST_ITEM);
        self.remove_rows(&self.tree().state, &prefix)?;
        for (position, item) in items.iter().enumerate() {
            let mut row = prefix.clone();
            row.extend_from_slice(&(position as u64).to_be_bytes());
            self.put(&self.tree().state, row, item.as_slice())?;
        }
        Ok(())
    }

    pub(crate) fn map_row(key: &[u8], state: StateId, map_key: &[u8]) -> anyhow::Result<Vec<u8>> {
        anyhow::ensure!(
            map_key.len() <= layout::MAX_MAP_KEY_BYTES,
            "a map state key of {} bytes is over the disk state backend's limit of {}",
            map_key.len(),
            layout::MAX_MAP_KEY_BYTES
        );
        let mut row = layout::state_prefix(&key_prefix(key)?, state, MAP_ENTRY);
        row.extend_from_slice(map_key);
        Ok(row)
    }

    /// `key`'s value under `map_key` in map state `state`: one row read.
    pub fn map_get(
        &self,
        key: &[u8],
        state: StateId,
        map_key: &[u8],
    ) -> anyhow::Result<Option<Vec<u8>>> {
        let row = Self::map_row(key, state, map_key)?;
        Ok(self.failed(self.tree().state.get(row))?.map(|v| v.to_vec()))
    }

    /// Puts `value` under `map_key` in `key`'s map state `state`: one row written.
    pub fn map_put(
        &self,
        key: &[u8],
        state: StateId,
        map_key: &[u8],
        value: &[u8],
    ) -> anyhow::Result<()> {
        let row = Self::map_row(key, state, map_key)?;
        self.put(&self.tree().state, row, value)
    }

    /// Removes `map_key` from `key`'s map state `state`.
    pub fn map_remove(&self, key: &[u8], state: StateId, map_key: &[u8]) -> anyhow::Result<()> {
        let row = Self::map_row(key, state, map_key)?;
        self.delete(&self.tree().state, row)
    }

    /// `key`'s entries of map state `state`, in byte order of their keys.
    pub fn map_entries(&self, key: &[u8], state: StateId) -> anyhow::Result<Entries> {
        let prefix = layout::state_prefix(&key_prefix(key)?, state, MAP_ENTRY);
        self.rows(&self.tree().state, &prefix)
    }

    /// Removes `key`'s contents of `state`, of whatever kind.
    pub fn clear(&self, key: &[u8], state: StateId) -> anyhow::Result<()> {
        let mut prefix = key_prefix(key)?;
        prefix.extend_from_slice(&state.to_be_bytes());
        self.remove_rows(&self.tree().state, &prefix)
    }

    /// Removes `key`'s contents of every state. Its timers stay.
    pub fn clear_all(&self, key: &[u8]) -> anyhow::Result<()> {
        self.remove_rows(&self.tree().state, &key_prefix(key)?)
    }

    /// `key`'s contents of every state it holds, in state id order: what a checkpoint
    /// writes of a key.
    pub fn slots(&self, key: &[u8]) -> anyhow::Result<Vec<(StateId, Slot)>> {
        let prefix = key_prefix(key)?;
        let rows = self.rows(&self.tree().state, &prefix)?;
        slots_of(
            rows.iter()
                .map(|(rest, value)| (rest.as_slice(), value.as_slice())),
        )
    }

    /// Replaces `key`'s contents of `state` with `slot` (a restore, or a key moved in).
    pub fn set_slot(&self, key: &[u8], state: StateId, slot: &Slot) -> anyhow::Result<()> {
        self.clear(key, state)?;
        match slot {
            Slot::Value(value) => self.value_set(key, state, value),
            Slot::List(items) => self.list_set(key, state, items),
            Slot::Map(map) => map
                .iter()
                .try_for_each(|(k, v)| self.map_put(key, state, k, v)),
        }
    }

    // ---- timers ----------------------------------------------------------------------

    /// Records that `key` has a timer of `domain` at `at` pending (once, however often).
    pub fn add_timer(&self, key: &[u8], domain: TimeDomain, at: Timestamp) -> anyhow::Result<()> {
        let prefix = key_prefix(key)?;
        self.put(
            &self.tree().timers_by_key,
            layout::timer_by_key(&prefix, domain, at),
            [],
        )?;
        self.put(
            &self.tree().timers_by_time,
            layout::timer_by_time(&prefix, Wake::Timer(domain), at),
            [],
        )
    }

    /// Removes `key`'s timer of `domain` at `at` (fired or deleted); none is no error.
    pub fn remove_timer(
        &self,
        key: &[u8],
        domain: TimeDomain,
        at: Timestamp,
    ) -> anyhow::Result<()> {
        let prefix = key_prefix(key)?;
        self.delete(
            &self.tree().timers_by_key,
            layout::timer_by_key(&prefix, domain, at),
        )?;
        self.delete(
            &self.tree().timers_by_time,
            layout::timer_by_time(&prefix, Wake::Timer(domain), at),
        )
    }

    /// `key`'s pending timers, by domain then time.
    pub fn timers(&self, key: &[u8]) -> anyhow::Result<Vec<(TimeDomain, Timestamp)>> {
        let prefix = key_prefix(key)?;
        let rows = self.rows(&self.tree().timers_by_key, &prefix)?;
        rows.iter().map(|(rest, _)| timer_of(rest)).collect()
    }

    /// Up to `limit` keys listed under `wake` (pending timers of a clock, or expiry on
    /// one) at places in firing order from `from` through `through` (both included), in
    /// firing order (time, then the key's tie order, then its bytes). They stay listed
    /// until removed. A `from` past the listings already removed spares the walk over
    /// their tombstones.
    pub fn due_timers(
        &self,
        wake: Wake,
        from: FiringPlace,
        through: FiringPlace,
        limit: usize,
    ) -> anyhow::Result<Vec<(FiringPlace, Key)>> {
        let start = layout::place_bytes(wake, from).to_vec();
        let mut end = layout::place_bytes(wake, through).to_vec();
        end.push(0xff);
        let mut out = Vec::new();
        for guard in self.tree().timers_by_time.range(start..end).take(limit) {
            let row = self.failed(guard.key())?;
            let (place, key) = layout::split_timer_by_time(&row).context("a timer row")?;
            out.push((place, Key::from_slice(key)));
        }
        Ok(out)
    }

    /// When the earliest pending timer of `domain` is due, if any is pending.
    pub fn next_timer(&self, domain: TimeDomain) -> anyhow::Result<Option<Timestamp>> {
        let d = Wake::Timer(domain).index();
        match self.tree().timers_by_time.prefix([d]).next() {
            None => Ok(None),
            Some(guard) => {
                let row = self.failed(guard.key())?;
                Ok(layout::time_of(&row[1..]))
            }
        }
    }

    /// A new file in the store's parent folder (the process's, deleted with its last
    /// store, or by the next run if the process is killed), unlinked at once, with the
    /// name it had: see `SlotStore::scratch_file`.
    pub fn scratch_file(&self) -> anyhow::Result<(std::fs::File, PathBuf)> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let folder = self.path.parent().unwrap_or(&self.path);
        let shard = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("store");
        let path = folder.join(format!("{shard}-scratch-{n}"));
        let describe = || format!("cannot create a scratch file {}", path.display());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(describe)?;
        std::fs::remove_file(&path).with_context(describe)?;
        Ok((file, path))
    }

    // ---- figures ---------------------------------------------------------------------

    /// Bytes the store takes on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.tree().db.disk_space().unwrap_or(0)
    }

    /// Bytes the store keeps in memory: the blocks in its cache and its memtables (not
    /// counted: the tables' filters and indexes, ~1.3 bytes per row and ~1% of the data).
    pub fn memory_bytes(&self) -> u64 {
        let db = &self.tree().db;
        db.cache_size() + db.write_buffer_size()
    }
}

/// Deletes the stores under `root` of processes that no longer run (where `/proc` says;
/// elsewhere nothing is deleted).
fn remove_abandoned(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let proc = Path::new("/proc");
    if !proc.is_dir() {
        return;
    }
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for DiskStore {
    /// The store is a working copy: its directory goes with it, once the database (and
    /// so its background workers) are gone.
    fn drop(&mut self) {
        self.spent.finish();
        drop(self.tree.take());
        let _ = std::fs::remove_dir_all(&self.path);
        // The process's folder, once its last shard's store is gone.
        if let Some(parent) = self.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
