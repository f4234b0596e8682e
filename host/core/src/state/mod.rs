//! Host-owned keyed state.
//!
//! State never lives in the guest: a UDF instance can be recreated, upgraded or
//! checkpointed around it. Keys are interned into a [`KeyTable`] so that the timer
//! service and every state access after the first lookup use a small [`KeyId`]; a key
//! with neither state nor timers is released, so finished keys cost nothing.
//!
//! Each key holds one [`Slot`] per state it uses: a value, a list or a map of bytes,
//! as declared by name in the [`StateRegistry`]. The bytes are the guest's encoding.
//! The table also knows each key's pending timers, so a checkpoint can save a key whole.
//!
//! A state declared with a time-to-live keeps a stamp with each entry ([`ttl`]); the
//! table lists the keys whose entries can expire by the time the first one does, per
//! clock, so that the engine can remove them between calls.
//!
//! For incremental checkpoints the table [tracks changes](KeyTable::track_changes): every
//! key whose state or timers changed since the last checkpoint, and every key released
//! since, so a checkpoint writes only those.

mod dormant;
mod registry;
mod spill;
pub mod ttl;

pub use registry::{StampChange, StateId, StateKind, StateRegistry, StateTtl, TtlRefresh};
pub use spill::{Listed, SavedKey, SlotSnapshot, SlotStore, SpillFigures, Wake};

use crate::codec::{Reader, Writer};
use crate::key::tie_order;
pub use crate::key::{Key, KeyId};
use crate::time::timers::TimeDomain;
use crate::time::Timestamp;
use hashbrown::{DefaultHashBuilder, HashTable};
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

/// Map state contents: byte keys in byte order.
pub type ByteMap = BTreeMap<Vec<u8>, Vec<u8>>;

/// The contents of one state of one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    /// A value state's one value, as the guest encoded it.
    Value(Vec<u8>),
    /// A list state's items, in the order they were added.
    List(Vec<Vec<u8>>),
    /// A map state's entries, in byte order of their keys.
    Map(ByteMap),
}

/// A slot's kind on the wire ([`Slot::encode`]): a value.
const VALUE: u8 = 0;
/// A list.
const LIST: u8 = 1;
/// A map.
const MAP: u8 = 2;

impl Slot {
    /// Bytes held, for status figures.
    pub fn size_bytes(&self) -> usize {
        match self {
            Slot::Value(v) => v.len(),
            Slot::List(items) => items.iter().map(Vec::len).sum(),
            Slot::Map(map) => map.iter().map(|(k, v)| k.len() + v.len()).sum(),
        }
    }

    /// Writes the slot as checkpoints and the disk store keep it: its kind (a byte: 0
    /// value, 1 list, 2 map), then the value's bytes, or the list's count and items, or
    /// the map's count and entries (key, value), each length-prefixed.
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Slot::Value(v) => {
                w.u8(VALUE);
                w.bytes(v);
            }
            Slot::List(items) => {
                w.u8(LIST);
                w.u32(items.len() as u32);
                items.iter().for_each(|item| w.bytes(item));
            }
            Slot::Map(map) => {
                w.u8(MAP);
                w.u32(map.len() as u32);
                for (k, v) in map {
                    w.bytes(k);
                    w.bytes(v);
                }
            }
        }
    }

    /// Reads a slot [`encode`](Self::encode) wrote; fails on an unknown kind or bytes
    /// cut short.
    pub fn decode(r: &mut Reader<'_>) -> anyhow::Result<Slot> {
        Ok(match r.u8()? {
            VALUE => Slot::Value(r.bytes()?.to_vec()),
            LIST => {
                let n = r.u32()?;
                let mut items = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    items.push(r.bytes()?.to_vec());
                }
                Slot::List(items)
            }
            MAP => {
                let n = r.u32()?;
                let mut map = ByteMap::new();
                for _ in 0..n {
                    let k = r.bytes()?.to_vec();
                    map.insert(k, r.bytes()?.to_vec());
                }
                Slot::Map(map)
            }
            other => anyhow::bail!("unknown slot kind {other}"),
        })
    }
}

/// Everything the host keeps for one key.
#[derive(Debug, Default)]
pub struct KeyEntry {
    key: Key,
    /// One slot per state in use, few per key, so a small vector beats a map.
    slots: SmallVec<[(StateId, Slot); 1]>,
    /// Pending timers of this key (both domains) while it has few; the key is kept
    /// while any are.
    timers: SmallVec<[(TimeDomain, Timestamp); 1]>,
    /// The key has too many timers for a list: they are in [`KeyTable::crowded`].
    crowded: bool,
    in_use: bool,
    /// Changed since the last checkpoint (and listed in [`KeyTable::changed`]).
    dirty: bool,
    /// The UDF instance cache epoch in which the guest last saw this key's state
    /// current (0: none); any change to the state here clears it.
    cached_in: u32,
    /// Whether the guest kept that copy (else it saw the key once and dropped it).
    kept: bool,
    /// Listed for the size of its slots to be counted again.
    recounted: bool,
    /// Used since the eviction hand last passed (the clock's reference bit).
    hot: bool,
    /// The bytes of its slots when last counted, in the table's resident bytes.
    counted: u32,
}

impl KeyEntry {
    /// The key's bytes, as the record's key was extracted.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The key's stable hash (FNV-1a): where its timers go among timers due at the same
    /// time, whatever id the key has in this run. Computed when asked (timer changes
    /// only), so it costs no memory per key.
    pub fn tie_order(&self) -> u64 {
        tie_order(&self.key)
    }

    /// The key's contents of `state`, or `None` if it holds none (never set, or cleared).
    pub fn slot(&self, state: StateId) -> Option<&Slot> {
        self.slots
            .iter()
            .find(|(id, _)| *id == state)
            .map(|(_, slot)| slot)
    }

    /// The key's contents of `state`, to change in place, or `None` if it holds none.
    pub fn slot_mut(&mut self, state: StateId) -> Option<&mut Slot> {
        self.cached_in = 0;
        self.slots
            .iter_mut()
            .find(|(id, _)| *id == state)
            .map(|(_, slot)| slot)
    }

    /// The slot of `state`, created by `init` if the key has none yet.
    pub fn slot_or_insert(&mut self, state: StateId, init: impl FnOnce() -> Slot) -> &mut Slot {
        self.cached_in = 0;
        let pos = match self.slots.iter().position(|(id, _)| *id == state) {
            Some(pos) => pos,
            None => {
                self.slots.push((state, init()));
                self.slots.len() - 1
            }
        };
        &mut self.slots[pos].1
    }

    /// Sets the key's contents of `state` to `slot`, replacing any it held.
    pub fn set_slot(&mut self, state: StateId, slot: Slot) {
        *self.slot_or_insert(state, || Slot::Value(Vec::new())) = slot;
    }

    /// Removes the key's contents of `state` and returns them, if it held any.
    pub fn take_slot(&mut self, state: StateId) -> Option<Slot> {
        let pos = self.slots.iter().position(|(id, _)| *id == state)?;
        self.cached_in = 0;
        Some(self.slots.remove(pos).1)
    }

    /// Removes the key's contents of every state and returns them. Its timers stay.
    pub fn take_all_slots(&mut self) -> Vec<(StateId, Slot)> {
        self.cached_in = 0;
        self.slots.drain(..).collect()
    }

    /// Drops the key's contents of `state`; nothing happens if it held none.
    pub fn clear(&mut self, state: StateId) {
        self.cached_in = 0;
        self.slots.retain(|(id, _)| *id != state);
    }

    /// Drops the key's contents of every state. Its timers stay.
    pub fn clear_all(&mut self) {
        self.cached_in = 0;
        self.slots.clear();
    }

    /// Every state the key holds, with its contents, in the order the key first used
    /// them.
    pub fn slots(&self) -> impl Iterator<Item = (StateId, &Slot)> {
        self.slots.iter().map(|(id, slot)| (*id, slot))
    }

    /// Whether the key holds any state at all.
    pub fn has_state(&self) -> bool {
        !self.slots.is_empty()
    }

    /// The cache epoch in which a UDF instance last saw the key's state current, as last
    /// [marked](KeyTable::mark_cached_in), and whether it kept a copy; epoch 0 once the
    /// state changed here since.
    pub fn cached_in(&self) -> (u32, bool) {
        (self.cached_in, self.kept)
    }
}

/// Interned keys and their state.
#[derive(Default)]
pub struct KeyTable {
    entries: Vec<KeyEntry>,
    index: HashTable<KeyId>,
    hasher: DefaultHashBuilder,
    free: Vec<KeyId>,
    live: usize,
    /// Whether changes are tracked for incremental checkpoints.
    tracking: bool,
    /// Keys changed since the last checkpoint (each once, while its `dirty` flag is set).
    changed: Vec<KeyId>,
    /// Keys released since the last checkpoint.
    released: Vec<Key>,
    /// The timers of keys with more than [`FEW_TIMERS`], in a set each, so that adding
    /// or removing one of a hot key's thousands costs what it costs for a key with one.
    crowded: hashbrown::HashMap<KeyId, hashbrown::HashSet<(TimeDomain, Timestamp)>>,
    /// Keys with entries of states with a time-to-live, by when the first expires: on
    /// the watermark, and on processing time.
    expiry: [ttl::ExpiryQueue; 2],
    /// Where slots go beyond the memory budget (the `disk` state backend), if anywhere.
    spill: Option<Box<spill::Spill>>,
}

fn clock(domain: TimeDomain) -> usize {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// Up to this many timers a key keeps them in a list of its own.
const FEW_TIMERS: usize = 16;

impl KeyTable {
    /// An empty table that does not track changes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `key`, interning it if it is new.
    pub fn intern(&mut self, key: &[u8]) -> KeyId {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        if let Some(&id) = self
            .index
            .find(hash, |&id| entries[id as usize].key.as_slice() == key)
        {
            if let Some(spill) = &mut self.spill {
                spill.hits += 1;
                self.entries[id as usize].hot = true;
            }
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.entries.push(KeyEntry::default());
                KeyId::try_from(self.entries.len() - 1).expect("more than 2^32 live keys")
            }
        };
        let entry = &mut self.entries[id as usize];
        entry.key = Key::from_slice(key);
        entry.in_use = true;
        entry.cached_in = 0;
        self.live += 1;
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(hash, id, |&other| {
            hasher.hash_one(entries[other as usize].key.as_slice())
        });
        self.list_for_recount(id);
        id
    }

    /// Looks a key up without interning it.
    pub fn find(&self, key: &[u8]) -> Option<KeyId> {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&id| self.entries[id as usize].key.as_slice() == key)
            .copied()
    }

    /// The entry of `id`, to read (a read is not a change).
    ///
    /// # Panics
    ///
    /// If `id` was never handed out by [`intern`](Self::intern).
    pub fn entry(&self, id: KeyId) -> &KeyEntry {
        &self.entries[id as usize]
    }

    /// The entry of `id`, to change: the key counts as changed for the next checkpoint
    /// (and, with a slot store, its size is counted again at the next eviction).
    pub fn entry_mut(&mut self, id: KeyId) -> &mut KeyEntry {
        self.mark_changed(id);
        self.list_for_recount(id);
        &mut self.entries[id as usize]
    }

    /// Records on key `id` that a timer of `domain` at `at` is now pending, so the key
    /// is kept (and checkpointed with it). The timer service itself is separate: the
    /// engine calls this when it has registered a timer there that was not pending yet.
    pub fn timer_added(&mut self, id: KeyId, domain: TimeDomain, at: Timestamp) {
        self.mark_changed(id);
        self.add_timer_entry(id, domain, at);
        self.list_for_recount(id);
    }

    /// Lists a timer on key `id`'s entry (not a change of the key).
    fn add_timer_entry(&mut self, id: KeyId, domain: TimeDomain, at: Timestamp) {
        let entry = &mut self.entries[id as usize];
        if entry.crowded {
            self.crowded.entry(id).or_default().insert((domain, at));
        } else if entry.timers.len() < FEW_TIMERS {
            entry.timers.push((domain, at));
        } else {
            let mut set: hashbrown::HashSet<_> = entry.timers.drain(..).collect();
            set.insert((domain, at));
            entry.timers = SmallVec::new();
            entry.crowded = true;
            self.crowded.insert(id, set);
        }
    }

    /// Records on key `id` that its timer of `domain` at `at` is no longer pending (it
    /// fired or was deleted). The key is not released here: call
    /// [`release_if_unused`](Self::release_if_unused) for that.
    ///
    /// # Panics
    ///
    /// If the key had no such timer recorded by [`timer_added`](Self::timer_added).
    pub fn timer_removed(&mut self, id: KeyId, domain: TimeDomain, at: Timestamp) {
        self.mark_changed(id);
        self.list_for_recount(id);
        let entry = &mut self.entries[id as usize];
        let removed = if entry.crowded {
            let set = self.crowded.get_mut(&id).expect("a crowded key has a set");
            let removed = set.remove(&(domain, at));
            if set.is_empty() {
                self.crowded.remove(&id);
                entry.crowded = false;
            }
            removed
        } else {
            match entry.timers.iter().position(|&t| t == (domain, at)) {
                Some(pos) => {
                    entry.timers.swap_remove(pos);
                    true
                }
                None => false,
            }
        };
        assert!(removed, "a removed timer was pending");
    }

    /// The pending timers of key `id` (both domains), in no particular order.
    pub fn timers(&self, id: KeyId) -> impl Iterator<Item = (TimeDomain, Timestamp)> + '_ {
        let entry = &self.entries[id as usize];
        let crowded = entry.crowded.then(|| &self.crowded[&id]);
        entry
            .timers
            .iter()
            .copied()
            .chain(crowded.into_iter().flatten().copied())
    }

    /// How many timers of key `id` (both domains) are pending.
    pub fn pending_timers(&self, id: KeyId) -> usize {
        let entry = &self.entries[id as usize];
        match entry.crowded {
            true => self.crowded[&id].len(),
            false => entry.timers.len(),
        }
    }

    /// Records that the UDF instance of cache epoch `epoch` saw key `id`'s state as it
    /// is now, and whether it `kept` a copy (not a change of the key). The engine calls
    /// this after it has applied a cached batch's writes; any later change to the state
    /// clears the mark.
    pub fn mark_cached_in(&mut self, id: KeyId, epoch: u32, kept: bool) {
        let entry = &mut self.entries[id as usize];
        entry.cached_in = epoch;
        entry.kept = kept;
    }

    /// Lists key `id` to have its expired entries removed once `domain`'s clock reaches
    /// `at` (the time its first entry of a state with a time-to-live on that clock
    /// expires). The engine calls this whenever it stamps an entry.
    pub fn schedule_expiry(&mut self, id: KeyId, domain: TimeDomain, at: Timestamp) {
        self.expiry[clock(domain)].schedule(id, at);
    }

    /// The next key listed to have expired entries removed by the time `domain`'s clock
    /// reads `now`, taken off the list.
    pub fn pop_expiring(&mut self, domain: TimeDomain, now: Timestamp) -> Option<KeyId> {
        self.expiry[clock(domain)].pop_due(now)
    }

    /// When key `id` is listed to have entries on `domain`'s clock expire, if it is.
    pub fn expiry_of(&self, id: KeyId, domain: TimeDomain) -> Option<Timestamp> {
        self.expiry[clock(domain)].due_of(id)
    }

    /// When the first listed key's entries on `domain`'s clock expire.
    pub fn next_expiry(&self, domain: TimeDomain) -> Option<Timestamp> {
        self.expiry[clock(domain)].next_due()
    }

    /// From now on, remembers which keys change, for [`take_changes`](Self::take_changes).
    pub fn track_changes(&mut self) {
        self.tracking = true;
    }

    /// Whether changes are being remembered for the next incremental checkpoint.
    pub fn is_tracking(&self) -> bool {
        self.tracking
    }

    /// Stops remembering changes (no checkpoint will follow) and forgets those remembered.
    pub fn stop_tracking(&mut self) {
        self.tracking = false;
        for id in std::mem::take(&mut self.changed) {
            self.entries[id as usize].dirty = false;
        }
        self.released = Vec::new();
        self.take_dormant_changes();
    }

    fn mark_changed(&mut self, id: KeyId) {
        let entry = &mut self.entries[id as usize];
        if self.tracking && !entry.dirty {
            entry.dirty = true;
            self.changed.push(id);
        }
    }

    /// The keys released and the keys changed since the last call, and forgets them.
    /// A key may be in both (released, then used again): apply the releases first.
    pub fn take_changes(&mut self) -> (Vec<Key>, Vec<KeyId>) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.retain(|&id| {
            let entry = &mut self.entries[id as usize];
            std::mem::replace(&mut entry.dirty, false) && entry.in_use
        });
        (std::mem::take(&mut self.released), changed)
    }

    /// Releases the key if it holds neither state nor timers, so its id can be reused.
    pub fn release_if_unused(&mut self, id: KeyId) {
        let entry = &self.entries[id as usize];
        if !entry.in_use || entry.has_state() || !entry.timers.is_empty() || entry.crowded {
            return;
        }
        if self.spill.is_some() {
            self.forget(id);
        }
        let key = self.free_entry(id);
        if self.tracking {
            self.released.push(key);
        }
    }

    /// Takes key `id` out of the index and the expiry lists and frees its entry for
    /// another key; returns the key's bytes.
    fn free_entry(&mut self, id: KeyId) -> Key {
        for queue in &mut self.expiry {
            queue.take(id);
        }
        let entry = &self.entries[id as usize];
        let hash = self.hasher.hash_one(entry.key.as_slice());
        if let Ok(found) = self.index.find_entry(hash, |&other| other == id) {
            found.remove();
        }
        let entry = &mut self.entries[id as usize];
        let key = std::mem::take(&mut entry.key);
        entry.in_use = false;
        entry.dirty = false;
        self.free.push(id);
        self.live -= 1;
        key
    }

    /// Number of live keys: those in memory and, with a slot store, the dormant ones.
    pub fn len(&self) -> usize {
        self.live + self.dormant_keys()
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live keys in memory with their entries, in id order (dormant keys:
    /// [`store_snapshot`](Self::store_snapshot)).
    pub fn iter(&self) -> impl Iterator<Item = (KeyId, &KeyEntry)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.in_use)
            .map(|(id, e)| (id as KeyId, e))
    }

    /// Bytes of state held over all keys.
    pub fn state_bytes(&self) -> usize {
        self.iter()
            .flat_map(|(_, e)| e.slots())
            .map(|(_, slot)| slot.size_bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_ids_are_reused_after_release() {
        let mut table = KeyTable::new();
        let a = table.intern(b"ad-1");
        let b = table.intern(b"a key longer than twenty-four bytes, kept on the heap");
        assert_ne!(a, b);
        assert_eq!(table.intern(b"ad-1"), a);
        assert_eq!(
            table.find(b"a key longer than twenty-four bytes, kept on the heap"),
            Some(b)
        );
        assert_eq!(table.len(), 2);

        table.entry_mut(a).set_slot(0, Slot::Value(b"x".to_vec()));
        table.release_if_unused(a);
        assert_eq!(table.find(b"ad-1"), Some(a), "a key with state is kept");

        table.entry_mut(a).clear_all();
        table.timer_added(a, TimeDomain::EventTime, 10);
        table.release_if_unused(a);
        assert_eq!(
            table.find(b"ad-1"),
            Some(a),
            "a key with a pending timer is kept"
        );

        table.timer_removed(a, TimeDomain::EventTime, 10);
        table.release_if_unused(a);
        assert_eq!(table.find(b"ad-1"), None);
        assert_eq!(table.len(), 1);
        let c = table.intern(b"ad-2");
        assert_eq!(c, a, "the released id is reused");
        assert_eq!(table.entry(c).key(), b"ad-2");
        assert!(!table.entry(c).has_state());
    }

    #[test]
    fn many_keys_survive_growth() {
        let mut table = KeyTable::new();
        let ids: Vec<_> = (0..10_000)
            .map(|i| table.intern(format!("k{i}").as_bytes()))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(table.find(format!("k{i}").as_bytes()), Some(*id));
        }
        for id in ids.iter().step_by(2) {
            table.release_if_unused(*id);
        }
        assert_eq!(table.len(), 5_000);
        assert_eq!(table.find(b"k1"), Some(ids[1]));
        assert_eq!(table.find(b"k0"), None);
    }

    #[test]
    fn changes_are_tracked_once_per_key_and_releases_remembered() {
        let mut table = KeyTable::new();
        let early = table.intern(b"before tracking");
        table.entry_mut(early).set_slot(0, Slot::Value(vec![0]));
        table.track_changes();
        let a = table.intern(b"a");
        let b = table.intern(b"b");
        table.entry_mut(a).set_slot(0, Slot::Value(vec![1]));
        table.entry_mut(a).set_slot(0, Slot::Value(vec![2]));
        table.timer_added(b, TimeDomain::ProcessingTime, 5);
        table.timer_removed(b, TimeDomain::ProcessingTime, 5);
        table.release_if_unused(b);
        let (released, changed) = table.take_changes();
        assert_eq!(changed, vec![a], "b was released, so it is not a change");
        assert_eq!(released, vec![Key::from_slice(b"b")]);
        assert_eq!(
            table.take_changes(),
            (vec![], vec![]),
            "forgotten once taken"
        );
        table.timer_added(early, TimeDomain::EventTime, 7);
        assert_eq!(
            table.timers(early).collect::<Vec<_>>(),
            [(TimeDomain::EventTime, 7)]
        );
        assert_eq!(table.take_changes().1, vec![early]);
    }

    #[test]
    fn a_key_with_many_timers_keeps_each_once() {
        let mut table = KeyTable::new();
        let hot = table.intern(b"hot");
        for at in 0..1_000 {
            table.timer_added(hot, TimeDomain::EventTime, at);
        }
        table.timer_added(hot, TimeDomain::ProcessingTime, 5);
        assert_eq!(table.pending_timers(hot), 1_001);
        for at in (0..1_000).step_by(2) {
            table.timer_removed(hot, TimeDomain::EventTime, at);
        }
        let mut left: Vec<_> = table.timers(hot).collect();
        left.sort();
        let mut expected: Vec<_> = (1..1_000)
            .step_by(2)
            .map(|at| (TimeDomain::EventTime, at))
            .collect();
        expected.push((TimeDomain::ProcessingTime, 5));
        assert_eq!(left, expected);
        for at in (1..1_000).step_by(2) {
            table.timer_removed(hot, TimeDomain::EventTime, at);
        }
        table.timer_removed(hot, TimeDomain::ProcessingTime, 5);
        table.release_if_unused(hot);
        assert_eq!(
            table.find(b"hot"),
            None,
            "no timer left, no state: released"
        );
    }

    #[test]
    fn slots_per_state() {
        let mut entry = KeyEntry::default();
        entry.set_slot(3, Slot::Value(vec![1]));
        match entry.slot_or_insert(5, || Slot::List(Vec::new())) {
            Slot::List(items) => items.push(vec![2]),
            other => panic!("{other:?}"),
        }
        assert_eq!(entry.slot(3), Some(&Slot::Value(vec![1])));
        assert_eq!(entry.slot(5), Some(&Slot::List(vec![vec![2]])));
        entry.clear(3);
        assert_eq!(entry.slot(3), None);
        assert!(entry.has_state());
    }
}
