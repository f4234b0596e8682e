//! Slots beyond memory: with a [`SlotStore`] (the `disk` state backend), the
//! [`KeyTable`] keeps the slots of at most a budget of bytes in memory and *spills* the
//! rest to the store, key by key, the least recently used first (a clock: each key has a
//! reference bit the hand clears as it passes, and a key whose bit is clear is evicted).
//!
//! A spilled key keeps its entry (its bytes, its timers, its cache marks): only its slots
//! leave memory. The engine [loads](KeyTable::load) a key's slots back before a call or
//! batch reads them, and [evicts](KeyTable::evict) only between calls and batches, so no
//! slot a call holds leaves memory under it. A key's slots are written to the store when
//! they are evicted changed since they were loaded (write-back); a key released (no
//! state, no timers) has its copy removed from the store.
//!
//! The budget counts the bytes of the slots ([`Slot::size_bytes`]) of resident keys:
//! a key's size is counted when it is loaded, and again at the next eviction once it
//! changed.

use super::{Key, KeyId, KeyTable, Slot, StateId};
use smallvec::SmallVec;

/// Where a [`KeyTable`] keeps the slots it evicted: a store keyed by the record key's
/// bytes. Implemented by `weir-store`'s disk store.
pub trait SlotStore: Send {
    /// Every slot the store holds for `key` (none: an empty list). Called when a spilled
    /// key is loaded back.
    fn load(&self, key: &[u8]) -> anyhow::Result<Vec<(StateId, Slot)>>;
    /// Replaces what the store holds for `key` with `slots`. Called when a key whose
    /// slots changed is evicted.
    fn save(&self, key: &[u8], slots: &[(StateId, Slot)]) -> anyhow::Result<()>;
    /// Removes what the store holds for `key`. Called at an eviction after the key was
    /// released.
    fn remove(&self, key: &[u8]) -> anyhow::Result<()>;
    /// Bytes the store takes on disk, for status figures.
    fn disk_bytes(&self) -> u64;
}

/// A table's slot store and its budget.
pub(super) struct Spill {
    store: Box<dyn SlotStore>,
    /// Bytes of slots kept in memory at most (after an eviction).
    budget: usize,
    /// Bytes of slots of resident keys, as last counted.
    resident: usize,
    /// Keys whose slots changed since counted (each once, while `touched`).
    recount: Vec<KeyId>,
    /// Keys released while the store held a copy: removed at the next eviction.
    removed: Vec<Key>,
    /// Where the clock's hand is.
    hand: usize,
    /// Loads and saves so far, for status figures.
    loads: u64,
    saves: u64,
    /// A load that failed where it could not be reported (an `entry_mut`).
    failure: Option<anyhow::Error>,
}

/// What a table with a slot store holds, for status figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillFigures {
    /// Bytes of slots in memory, as last counted.
    pub resident_bytes: usize,
    /// The budget of those.
    pub budget_bytes: usize,
    /// Keys whose slots are in the store only.
    pub spilled_keys: usize,
    /// Keys loaded back from the store so far.
    pub loads: u64,
    /// Keys written to the store so far.
    pub saves: u64,
    /// Bytes the store takes on disk.
    pub disk_bytes: u64,
}

impl std::ops::Add for SpillFigures {
    type Output = SpillFigures;

    /// The figures of two shards' tables together.
    fn add(self, other: SpillFigures) -> SpillFigures {
        SpillFigures {
            resident_bytes: self.resident_bytes + other.resident_bytes,
            budget_bytes: self.budget_bytes + other.budget_bytes,
            spilled_keys: self.spilled_keys + other.spilled_keys,
            loads: self.loads + other.loads,
            saves: self.saves + other.saves,
            disk_bytes: self.disk_bytes + other.disk_bytes,
        }
    }
}

impl KeyTable {
    /// From now on keeps at most `budget` bytes of slots in memory, spilling the rest to
    /// `store` (see the [module docs](self)). Called once, before any key is interned.
    pub fn spill_to(&mut self, store: Box<dyn SlotStore>, budget: usize) {
        self.spill = Some(Box::new(Spill {
            store,
            budget,
            resident: 0,
            recount: Vec::new(),
            removed: Vec::new(),
            hand: 0,
            loads: 0,
            saves: 0,
            failure: None,
        }));
    }

    /// Whether slots may be spilled to a store.
    pub fn spills(&self) -> bool {
        self.spill.is_some()
    }

    /// Brings key `id`'s slots back from the store if they were spilled. The engine calls
    /// this for every key a call or batch is about, before it runs; a failure of the
    /// store fails the run.
    pub fn load(&mut self, id: KeyId) -> anyhow::Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let entry = &mut self.entries[id as usize];
        entry.hot = true;
        if !entry.spilled {
            return Ok(());
        }
        let slots = spill.store.load(&entry.key)?;
        spill.loads += 1;
        entry.slots = slots.into_iter().collect();
        entry.spilled = false;
        entry.touched = false;
        entry.counted = size_of(&entry.slots);
        spill.resident += entry.counted as usize;
        Ok(())
    }

    /// [`load`](Self::load), where a failure cannot be reported at once (a purge of
    /// expired entries, scheduling their expiry): it is kept for the next
    /// [`evict`](Self::evict), which fails with it, and the key stays spilled, so a call
    /// about it loads it again (and fails) before it runs.
    pub fn load_or_defer(&mut self, id: KeyId) {
        if let Err(e) = self.load(id) {
            let spill = self.spill.as_mut().expect("only a store fails");
            spill.failure.get_or_insert(e);
        }
    }

    /// Key `id`'s slots, from memory or (spilled) read from the store without loading
    /// them: what a checkpoint writes of the key.
    pub fn slots_of(&self, id: KeyId) -> anyhow::Result<Vec<(StateId, Slot)>> {
        let entry = &self.entries[id as usize];
        match (&self.spill, entry.spilled) {
            (Some(spill), true) => spill.store.load(&entry.key),
            _ => Ok(entry.slots.iter().cloned().collect()),
        }
    }

    /// The key's slots are about to change (an `entry_mut`): a spilled key is loaded
    /// first, and a resident one listed to be counted again.
    pub(super) fn touch(&mut self, id: KeyId) {
        self.load_or_defer(id);
        let (Some(spill), entry) = (self.spill.as_mut(), &mut self.entries[id as usize]) else {
            return;
        };
        entry.hot = true;
        entry.touched = true;
        if !entry.recounted {
            entry.recounted = true;
            spill.recount.push(id);
        }
    }

    /// Key `id` is released: its slots leave the count, and its copy in the store goes at
    /// the next eviction.
    pub(super) fn forget(&mut self, id: KeyId) {
        let (Some(spill), entry) = (self.spill.as_mut(), &mut self.entries[id as usize]) else {
            return;
        };
        spill.resident -= entry.counted as usize;
        if entry.stored {
            spill.removed.push(entry.key.clone());
        }
        entry.counted = 0;
        entry.stored = false;
        entry.touched = false;
        entry.spilled = false;
        entry.hot = false;
        // Its listing for a count, if any, is skipped (not in use) or counts the next key
        // that takes its id.
    }

    /// Spills the slots of keys not used lately until those in memory fit the budget:
    /// changed ones are written to the store first. The engine calls this between calls
    /// and batches (never while a call holds a key's slots). Fails with the store's
    /// failure, or one a load met since the last call.
    pub fn evict(&mut self) -> anyhow::Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        if let Some(e) = spill.failure.take() {
            return Err(e);
        }
        for key in spill.removed.drain(..) {
            spill.store.remove(&key)?;
        }
        for id in spill.recount.drain(..) {
            let entry = &mut self.entries[id as usize];
            entry.recounted = false;
            if !entry.in_use || entry.spilled {
                continue;
            }
            let size = size_of(&entry.slots);
            spill.resident = spill.resident - entry.counted as usize + size as usize;
            entry.counted = size;
        }
        // Two turns of the hand at most: the first clears reference bits.
        let mut steps = 2 * self.entries.len();
        while spill.resident > spill.budget && steps > 0 {
            steps -= 1;
            spill.hand = (spill.hand + 1) % self.entries.len().max(1);
            let entry = &mut self.entries[spill.hand];
            if !entry.in_use || entry.spilled || entry.slots.is_empty() {
                continue;
            }
            if std::mem::replace(&mut entry.hot, false) {
                continue;
            }
            if entry.touched || !entry.stored {
                let slots: Vec<(StateId, Slot)> = entry.slots.drain(..).collect();
                spill.store.save(&entry.key, &slots)?;
                spill.saves += 1;
                entry.stored = true;
            }
            entry.slots = SmallVec::new();
            entry.spilled = true;
            entry.touched = false;
            spill.resident -= entry.counted as usize;
            entry.counted = 0;
        }
        Ok(())
    }

    /// What the slot store holds and what is in memory (`None`: no store).
    pub fn spill_figures(&self) -> Option<SpillFigures> {
        let spill = self.spill.as_ref()?;
        Some(SpillFigures {
            resident_bytes: spill.resident,
            budget_bytes: spill.budget,
            spilled_keys: self
                .entries
                .iter()
                .filter(|e| e.in_use && e.spilled)
                .count(),
            loads: spill.loads,
            saves: spill.saves,
            disk_bytes: spill.store.disk_bytes(),
        })
    }
}

/// The bytes counted for a key's slots.
fn size_of(slots: &[(StateId, Slot)]) -> u32 {
    let bytes: usize = slots.iter().map(|(_, slot)| slot.size_bytes() + 16).sum();
    bytes.min(u32::MAX as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ByteMap;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// A slot store in memory, shared with the test to look into.
    #[derive(Clone, Default)]
    struct Shelf(Arc<Mutex<Shelved>>);

    /// What the shelf holds: each key's slots.
    type Shelved = HashMap<Vec<u8>, Vec<(StateId, Slot)>>;

    impl SlotStore for Shelf {
        fn load(&self, key: &[u8]) -> anyhow::Result<Vec<(StateId, Slot)>> {
            Ok(self.0.lock().unwrap().get(key).cloned().unwrap_or_default())
        }
        fn save(&self, key: &[u8], slots: &[(StateId, Slot)]) -> anyhow::Result<()> {
            self.0.lock().unwrap().insert(key.to_vec(), slots.to_vec());
            Ok(())
        }
        fn remove(&self, key: &[u8]) -> anyhow::Result<()> {
            self.0.lock().unwrap().remove(key);
            Ok(())
        }
        fn disk_bytes(&self) -> u64 {
            0
        }
    }

    /// The same changes on a table that spills (with a budget of ~10 keys) and on one
    /// that keeps everything: after each, the key reads the same, and at the end every
    /// key does, loaded or read from the store.
    #[test]
    fn a_spilling_table_reads_as_one_that_keeps_everything() {
        let shelf = Shelf::default();
        let mut spilling = KeyTable::new();
        spilling.spill_to(Box::new(shelf.clone()), 10 * (16 + 40));
        let mut keeping = KeyTable::new();
        let mut seed: u64 = 7;
        let mut roll = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for step in 0..5_000u64 {
            let key = format!("key-{}", roll(200));
            let (a, b) = (
                spilling.intern(key.as_bytes()),
                keeping.intern(key.as_bytes()),
            );
            spilling.load(a).unwrap();
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
            if let Some(a) = spilling.find(key.as_bytes()) {
                spilling.load(a).unwrap();
                let b = keeping.find(key.as_bytes()).expect("kept alike");
                let mut got = spilling.slots_of(a).unwrap();
                let mut want = keeping.slots_of(b).unwrap();
                got.sort_by_key(|(s, _)| *s);
                want.sort_by_key(|(s, _)| *s);
                assert_eq!(got, want, "step {step}");
            } else {
                assert!(keeping.find(key.as_bytes()).is_none(), "released alike");
            }
            spilling.evict().unwrap();
            let figures = spilling.spill_figures().unwrap();
            assert!(
                figures.resident_bytes <= figures.budget_bytes,
                "{figures:?}"
            );
        }
        let figures = spilling.spill_figures().unwrap();
        assert!(
            figures.spilled_keys > 50 && figures.saves > 0 && figures.loads > 0,
            "{figures:?}"
        );
        assert_eq!(spilling.len(), keeping.len());
        for (b, entry) in keeping.iter() {
            let a = spilling.find(entry.key()).unwrap();
            let mut got = spilling.slots_of(a).unwrap();
            let mut want = keeping.slots_of(b).unwrap();
            got.sort_by_key(|(s, _)| *s);
            want.sort_by_key(|(s, _)| *s);
            assert_eq!(got, want);
        }
        let stored = shelf.0.lock().unwrap().len();
        assert!(
            stored <= spilling.len(),
            "released keys' copies are removed: {stored}"
        );
    }
}
