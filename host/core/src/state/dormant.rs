//! Keys beyond memory: with a [`SlotStore`], a key not used lately can leave memory
//! *whole* (go dormant): its slots and its pending timers go to the store in one row,
//! the key is listed there by time under its earliest timer of each clock, and its entry, its place in the index and its
//! timers in the [`TimerService`] are freed, so a dormant key costs no memory at all.
//!
//! A dormant key comes back (*wakes*) in two ways:
//! - **It is interned** ([`KeyTable::intern_awake`]): a record or a restore names it.
//!   Every new key is looked up in the store (a point read, which the store's filters
//!   answer at once for a key it never saw).
//! - **One of its timers falls due** ([`KeyTable::wake_listed`]): before timers of a clock
//!   fire up to a time, the engine wakes the keys listed under a time due by then (a
//!   key with a timer due has its earliest due), a bounded number at a time, and fires what is in memory up to the time through which
//!   every due timer is in memory. So timers fire in the same order as if every key had
//!   stayed, and memory stays bounded even when the end of input makes every timer due.
//!
//! - **Its state entries expire** ([`KeyTable::wake_listed`]): a key whose states
//!   have a time-to-live is also listed under the time its first entry expires on each
//!   clock; before the engine purges expired entries by a clock, it wakes the keys listed
//!   by then, a bounded number at a time, and purges them (a key left with nothing is
//!   released, and its row is gone). So expired entries leave the store through an
//!   expiry index, without a scan of the keys.
//!
//! Waking removes the key's row: the key is back in memory as it was, slots, timers and
//! expiry, and is written again when it leaves next. A walk by time leaves the listings
//! it passed to the store, which treats them as spent ([`SlotStore::spent_through`](super::SlotStore::spent_through)):
//! a key whose timer is due at a place a walk passed (set for a time its clock has fired
//! through, not fired yet) does not go dormant until it fires.
//!
//! Checkpoints: a key that changed since the last checkpoint and went dormant is
//! remembered by its bytes ([`KeyTable::take_dormant_changes`]); a full checkpoint
//! writes the keys in memory and takes the store's snapshot on the run's thread, and
//! walks the store's snapshot for the others on the checkpoint writer's thread.

use super::spill::{SavedKey, SlotSnapshot, Spill, Wake};
use super::{clock, Key, KeyId, KeyTable};
use crate::key::tie_order;
use crate::time::timers::{FiringPlace, TimeDomain, TimerService};
use crate::time::Timestamp;
use smallvec::SmallVec;

/// Writes a dormant key's row and listings, and counts its timers, expiry and listings
/// (the count of dormant keys is the caller's).
fn save_dormant(spill: &mut Spill, key: &[u8], saved: &SavedKey) -> anyhow::Result<()> {
    spill.store.save(key, saved)?;
    spill.saves += 1;
    let tie = tie_order(key);
    for (wake, at) in saved.listings() {
        let from = &mut spill.dormant_from[wake.index() as usize];
        *from = (*from).min(FiringPlace { at, tie });
    }
    for &(domain, _) in &saved.timers {
        spill.dormant_timers[clock(domain)] += 1;
    }
    for &(domain, _) in &saved.expiry {
        spill.dormant_expiring[clock(domain)] += 1;
    }
    Ok(())
}

impl KeyTable {
    /// The id of `key`, interning it if it is new; with a slot store a new key that is
    /// dormant there wakes: its slots come back into memory and its timers into `timers`.
    /// With a slot store, the engine interns keys only this way.
    pub fn intern_awake(&mut self, key: &[u8], timers: &mut TimerService) -> anyhow::Result<KeyId> {
        self.intern_listed(key, None, timers)
    }

    /// [`intern_awake`](Self::intern_awake) for a key listed by time, with what its
    /// listing carried of it, if anything ([`Listed::saved`](super::Listed::saved)):
    /// then the store is not read.
    fn intern_listed(
        &mut self,
        key: &[u8],
        carried: Option<SavedKey>,
        timers: &mut TimerService,
    ) -> anyhow::Result<KeyId> {
        let live = self.live;
        let id = self.intern(key);
        let is_new = self.live > live;
        match self.spill.as_mut() {
            Some(spill) if is_new => spill.lookups += 1,
            _ => return Ok(id),
        }
        self.wake(id, carried, timers)?;
        Ok(id)
    }

    /// Brings a new key's row back from the store, if it has one (`carried`, when the
    /// caller read it already).
    fn wake(
        &mut self,
        id: KeyId,
        carried: Option<SavedKey>,
        timers: &mut TimerService,
    ) -> anyhow::Result<()> {
        let spill = self.spill.as_mut().expect("only with a store");
        let entry = &mut self.entries[id as usize];
        let saved = match carried {
            Some(saved) => {
                // Its listing stays behind the walk that found it (spent).
                spill.store.remove_woken(&entry.key, &saved.listings())?;
                saved
            }
            None => match spill.store.load(&entry.key)? {
                Some(saved) => {
                    spill.store.remove(&entry.key, &saved.listings())?;
                    saved
                }
                None => return Ok(()),
            },
        };
        spill.loads += 1;
        spill.dormant_keys -= 1;
        entry.slots = saved.slots.into_iter().collect();
        let tie = tie_order(&entry.key);
        for &(domain, at) in &saved.timers {
            spill.dormant_timers[clock(domain)] -= 1;
            timers.register_woken(domain, id, tie, at);
        }
        for &(domain, _) in &saved.expiry {
            spill.dormant_expiring[clock(domain)] -= 1;
        }
        for (domain, at) in saved.timers {
            self.add_timer_entry(id, domain, at);
        }
        for (domain, at) in saved.expiry {
            self.schedule_expiry(id, domain, at);
        }
        self.list_for_recount(id);
        Ok(())
    }

    /// Sends key `id` to the store whole (see the [module docs](self)): its slots, its
    /// timers and its listings for expiry. A key that would be listed behind the walks
    /// by time (`Spill::behind_walks`) stays in memory instead.
    pub(super) fn put_to_sleep(
        &mut self,
        id: KeyId,
        timers: &mut TimerService,
    ) -> anyhow::Result<()> {
        let pending: Vec<(TimeDomain, Timestamp)> = self.timers(id).collect();
        let expiry: Vec<(TimeDomain, Timestamp)> =
            [TimeDomain::EventTime, TimeDomain::ProcessingTime]
                .into_iter()
                .filter_map(|domain| Some((domain, self.expiry[clock(domain)].due_of(id)?)))
                .collect();
        let mut saved = SavedKey {
            slots: Vec::new(),
            timers: pending,
            expiry,
        };
        let spill = self.spill.as_ref().expect("only with a store");
        if spill.behind_walks(&self.entries[id as usize].key, &saved) {
            return Ok(());
        }
        for &(domain, _) in &saved.expiry {
            self.expiry[clock(domain)].take(id);
        }
        let spill = self.spill.as_mut().expect("only with a store");
        let entry = &mut self.entries[id as usize];
        saved.slots = entry.slots.drain(..).collect();
        save_dormant(spill, &entry.key, &saved)?;
        let tie = tie_order(&entry.key);
        for &(domain, at) in &saved.timers {
            timers.delete(domain, id, tie, at);
        }
        spill.dormant_keys += 1;
        spill.resident -= std::mem::take(&mut entry.counted) as usize;
        entry.hot = false;
        if entry.dirty {
            entry.dirty = false;
            spill.changed_dormant.push(entry.key.clone());
        }
        entry.slots = SmallVec::new();
        entry.timers = SmallVec::new();
        if std::mem::take(&mut entry.crowded) {
            self.crowded.remove(&id);
        }
        self.free_entry(id);
        Ok(())
    }

    /// Puts `key` straight into the store as a dormant key holding `saved` (its slots,
    /// timers and expiry): it never enters memory. For a restore's full checkpoint into
    /// an empty table, where each key comes once: the key must be neither in memory nor
    /// in the store. Returns `false`, doing nothing, without a store (the caller applies
    /// the key to memory).
    pub fn restore_dormant(&mut self, key: &[u8], saved: &SavedKey) -> anyhow::Result<bool> {
        debug_assert!(
            self.find(key).is_none(),
            "a key restored dormant is not in memory"
        );
        let Some(spill) = self.spill.as_mut() else {
            return Ok(false);
        };
        save_dormant(spill, key, saved)?;
        spill.dormant_keys += 1;
        Ok(true)
    }

    /// Wakes the dormant keys listed under `wake` at or before `up_to` (due timers of a
    /// clock, or entries expiring on one), at most about `limit` of them, in firing order
    /// (time, then the key's tie order); returns the place through which every key so
    /// listed by `up_to` is in memory now (the end of `up_to` itself once all are), its
    /// timers in `timers` and its expiry scheduled. The engine calls this before it fires
    /// timers of a clock (or purges entries expired by it), fires (purges) what is in
    /// memory through the place returned, evicts, and calls again until it gets the end
    /// of `up_to`. Keys listed at one time wake `limit` at a time too (only keys whose
    /// tie orders collide wake together).
    pub fn wake_listed(
        &mut self,
        wake: Wake,
        up_to: Timestamp,
        limit: usize,
        timers: &mut TimerService,
    ) -> anyhow::Result<FiringPlace> {
        let listing = wake.index() as usize;
        let all_of_it = FiringPlace::end_of(up_to);
        let Some(spill) = self.spill.as_ref() else {
            return Ok(all_of_it);
        };
        let listed = match wake {
            Wake::Timer(domain) => spill.dormant_timers[clock(domain)],
            Wake::Expiry(domain) => spill.dormant_expiring[clock(domain)],
        };
        let from = spill.dormant_from[listing];
        if listed == 0 || up_to < from.at {
            return Ok(all_of_it);
        }
        let limit = limit.max(1);
        let due = spill.store.due(wake, from, all_of_it, limit)?;
        let all = due.len() < limit;
        let last = due.last().map(|listed| listed.place);
        for listed in due {
            self.intern_listed(&listed.key, listed.saved, timers)?;
        }
        let spill = self.spill.as_mut().expect("checked");
        let reached = match last {
            Some(last) if !all => {
                // Keys whose tie orders collide with the last one's wake with it, so that
                // every listing through `last` is awake.
                for listed in spill.store.due(wake, last, last, usize::MAX)? {
                    self.intern_listed(&listed.key, listed.saved, timers)?;
                }
                last
            }
            _ => all_of_it,
        };
        // Every listing through `reached` is awake: the store's are spent, and no key
        // goes dormant listed there again.
        let spill = self.spill.as_mut().expect("checked");
        let spent = spill.spent[listing].map_or(reached, |spent| spent.max(reached));
        spill.spent[listing] = Some(spent);
        spill.store.spent_through(wake, spent);
        // Where the next listing is (keys that go dormant later lower it again).
        let next = match reached.next() {
            Some(after) => spill
                .store
                .due(wake, after, FiringPlace::end_of(Timestamp::MAX), 1)?,
            None => Vec::new(),
        };
        spill.dormant_from[listing] = next
            .first()
            .map_or(FiringPlace::end_of(Timestamp::MAX), |listed| listed.place);
        Ok(reached)
    }

    /// Wakes every dormant key (a new version of the UDF changes the stamps of every
    /// entry of a state). Memory then holds every key until the next eviction.
    pub fn wake_all(&mut self, timers: &mut TimerService) -> anyhow::Result<()> {
        let Some(spill) = self.spill.as_ref() else {
            return Ok(());
        };
        if spill.dormant_keys == 0 {
            return Ok(());
        }
        let mut keys: Vec<Key> = Vec::new();
        spill.store.for_each(&mut |key, _| {
            keys.push(Key::from_slice(key));
            Ok(())
        })?;
        for key in keys {
            self.intern_awake(&key, timers)?;
        }
        Ok(())
    }

    /// Saved timers of `domain` of dormant keys.
    pub fn dormant_timers(&self, domain: TimeDomain) -> usize {
        self.spill
            .as_ref()
            .map_or(0, |spill| spill.dormant_timers[clock(domain)])
    }

    /// When the earliest saved timer of `domain` of a dormant key is due, if any is.
    pub fn next_dormant_timer(&self, domain: TimeDomain) -> anyhow::Result<Option<Timestamp>> {
        match &self.spill {
            Some(spill) if spill.dormant_timers[clock(domain)] > 0 => {
                let wake = Wake::Timer(domain);
                let from = spill.dormant_from[wake.index() as usize];
                let end = FiringPlace::end_of(Timestamp::MAX);
                let first = spill.store.due(wake, from, end, 1)?;
                Ok(first.first().map(|listed| listed.place.at))
            }
            _ => Ok(None),
        }
    }

    /// Keys in the store only.
    pub fn dormant_keys(&self) -> usize {
        self.spill.as_ref().map_or(0, |spill| spill.dormant_keys)
    }

    /// The keys that changed since the last call and went dormant since, and forgets
    /// them: a checkpoint writes them as the store holds them
    /// ([`store_snapshot`](Self::store_snapshot)); one woken again since is in memory,
    /// and may be listed by [`take_changes`](Self::take_changes) too.
    pub fn take_dormant_changes(&mut self) -> Vec<Key> {
        self.spill
            .as_mut()
            .map_or_else(Vec::new, |spill| std::mem::take(&mut spill.changed_dormant))
    }

    /// A scratch file beside the store ([`SlotStore::scratch_file`](super::spill::SlotStore::scratch_file)); `None` without a
    /// store, or when the store has no place for one.
    pub fn scratch_file(&self) -> Option<anyhow::Result<(std::fs::File, std::path::PathBuf)>> {
        self.spill.as_ref()?.store.scratch_file()
    }

    /// The dormant keys as they are now, read later on any thread while the run goes on
    /// (a full checkpoint walks them all, an increment reads those it lists; with the
    /// keys in memory then, of which the store holds nothing, they are every key of the
    /// table); `None` without a store. Called on the run's thread; takes no time in the
    /// keys of either memory or the store.
    pub fn store_snapshot(&self) -> Option<Box<dyn SlotSnapshot>> {
        Some(self.spill.as_ref()?.store.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::spill::tests::{slots_of, Shelf};
    use crate::state::Slot;
    use std::collections::{BTreeMap, BTreeSet};

    /// A key's slots and timers, sorted, wherever the table keeps them.
    fn contents(table: &KeyTable, key: &[u8]) -> Option<SavedKey> {
        let mut saved = match table.find(key) {
            Some(id) => SavedKey {
                slots: slots_of(table, id),
                timers: table.timers(id).collect(),
                ..SavedKey::default()
            },
            None => table.spill.as_ref()?.store.load(key).unwrap()?,
        };
        saved.slots.sort();
        saved.timers.sort();
        Some(saved)
    }

    /// Fires what is due on `domain`'s clock at `now`, as the engine does: the table that
    /// sleeps wakes due keys a few at a time and evicts between.
    fn fire(
        table: &mut KeyTable,
        timers: &mut TimerService,
        domain: TimeDomain,
        now: Timestamp,
    ) -> Vec<(Timestamp, Key)> {
        fire_counting(table, timers, domain, now).0
    }

    /// [`fire`], and the most keys the table held in memory after a wake.
    fn fire_counting(
        table: &mut KeyTable,
        timers: &mut TimerService,
        domain: TimeDomain,
        now: Timestamp,
    ) -> (Vec<(Timestamp, Key)>, usize) {
        let mut fired = Vec::new();
        let mut peak = 0;
        loop {
            let upto = table
                .wake_listed(Wake::Timer(domain), now, 7, timers)
                .unwrap();
            peak = peak.max(table.live);
            loop {
                let next = match domain {
                    TimeDomain::EventTime => timers.pop_event_due(upto),
                    TimeDomain::ProcessingTime => timers.pop_processing_due(upto),
                };
                let Some((at, id)) = next else { break };
                table.timer_removed(id, domain, at);
                fired.push((at, Key::from_slice(table.entry(id).key())));
                table.release_if_unused(id);
            }
            if upto == FiringPlace::end_of(now) {
                return (fired, peak);
            }
            table.evict(timers).unwrap();
        }
    }

    /// The same changes, timers and firings on a table that sends keys to the store whole
    /// (with room for ~5 keys) and on one that keeps everything: the same timers fire in
    /// the same order, the same keys are listed as changed for each checkpoint, and every
    /// key holds the same at the end.
    #[test]
    fn a_table_whose_keys_sleep_fires_and_reads_as_one_that_keeps_them() {
        let mut sleeping = KeyTable::new();
        sleeping.spill_to(Box::new(Shelf::default()), 5 * 200);
        sleeping.track_changes();
        let mut keeping = KeyTable::new();
        keeping.track_changes();
        let (mut sleeping_timers, mut keeping_timers) =
            (TimerService::new(0), TimerService::new(0));
        let mut seed: u64 = 11;
        let mut roll = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let (mut event_now, mut processing_now) = (0, 0);
        let mut fired = 0;
        for step in 0..6_000u64 {
            let key = format!("key-{}", roll(300));
            let op = roll(10);
            let (domain, at) = match roll(2) {
                0 => (TimeDomain::EventTime, event_now + 1 + roll(200) as i64),
                _ => (
                    TimeDomain::ProcessingTime,
                    processing_now + 1 + roll(200) as i64,
                ),
            };
            if op == 8 {
                event_now += roll(40) as i64;
                let a = fire(
                    &mut sleeping,
                    &mut sleeping_timers,
                    TimeDomain::EventTime,
                    event_now,
                );
                let b = fire(
                    &mut keeping,
                    &mut keeping_timers,
                    TimeDomain::EventTime,
                    event_now,
                );
                assert_eq!(a, b, "step {step}");
                fired += a.len();
            } else if op == 9 {
                processing_now += roll(40) as i64;
                let (d, now) = (TimeDomain::ProcessingTime, processing_now);
                let a = fire(&mut sleeping, &mut sleeping_timers, d, now);
                let b = fire(&mut keeping, &mut keeping_timers, d, now);
                assert_eq!(a, b, "step {step}");
                fired += a.len();
            }
            for (table, timers) in [
                (&mut sleeping, &mut sleeping_timers),
                (&mut keeping, &mut keeping_timers),
            ] {
                let id = table.intern_awake(key.as_bytes(), timers).unwrap();
                table.mark_used(id);
                let tie = tie_order(key.as_bytes());
                match op {
                    0 | 1 => table
                        .entry_mut(id)
                        .set_slot(0, Slot::Value(step.to_le_bytes().to_vec())),
                    2 => {
                        if let Slot::List(items) =
                            table.entry_mut(id).slot_or_insert(1, || Slot::List(vec![]))
                        {
                            items.push(vec![step as u8; 5]);
                        }
                    }
                    3 => table.entry_mut(id).clear_all(),
                    4..=6 if timers.register(domain, id, tie, at) => {
                        table.timer_added(id, domain, at);
                    }
                    7 => {
                        let first = table.timers(id).min();
                        if let Some((domain, at)) = first {
                            assert!(timers.delete(domain, id, tie, at));
                            table.timer_removed(id, domain, at);
                        }
                    }
                    _ => {}
                }
                table.release_if_unused(id);
            }
            sleeping.evict(&mut sleeping_timers).unwrap();
            assert_eq!(
                contents(&sleeping, key.as_bytes()),
                contents(&keeping, key.as_bytes()),
                "step {step}"
            );
            if step % 500 == 499 {
                let (released, changed) = keeping.take_changes();
                let want: BTreeSet<Key> = changed
                    .iter()
                    .map(|&id| Key::from_slice(keeping.entry(id).key()))
                    .collect();
                let (got_released, got_changed) = sleeping.take_changes();
                let mut got: BTreeSet<Key> = got_changed
                    .iter()
                    .map(|&id| Key::from_slice(sleeping.entry(id).key()))
                    .collect();
                got.extend(
                    sleeping
                        .take_dormant_changes()
                        .into_iter()
                        .filter(|key| contents(&sleeping, key).is_some()),
                );
                assert_eq!(got, want, "changed keys at step {step}");
                let released: BTreeSet<Key> = released.into_iter().collect();
                assert_eq!(got_released.into_iter().collect::<BTreeSet<_>>(), released);
            }
        }
        let figures = sleeping.spill_figures().unwrap();
        assert!(
            figures.dormant_keys > 100 && fired > 1_000,
            "{figures:?}, {fired} fired"
        );
        assert!(
            figures.resident_bytes <= figures.budget_bytes,
            "{figures:?}"
        );
        assert_eq!(sleeping.len(), keeping.len());
        let mut dormant = 0;
        sleeping
            .store_snapshot()
            .unwrap()
            .for_each(&mut |key, _| {
                dormant += 1;
                assert!(keeping.find(key).is_some());
                Ok(())
            })
            .unwrap();
        assert_eq!(dormant, figures.dormant_keys);
        for (_, entry) in keeping.iter() {
            assert_eq!(
                contents(&sleeping, entry.key()),
                contents(&keeping, entry.key())
            );
        }
    }

    /// A key given a timer for a time its clock has fired through (due at the next
    /// advance) does not go dormant: a walk passed that place, and the store treats what
    /// is listed there as spent. It fires at the next advance, and may sleep after.
    #[test]
    fn a_key_with_a_timer_behind_the_walks_stays_in_memory_until_it_fires() {
        let ev = TimeDomain::EventTime;
        let mut table = KeyTable::new();
        table.spill_to(Box::new(Shelf::default()), 0);
        let mut timers = TimerService::new(0);
        let key: &[u8] = b"late";
        let late = Key::from_slice(key);
        let id = table.intern_awake(key, &mut timers).unwrap();
        table.entry_mut(id).set_slot(0, Slot::Value(vec![1]));
        assert!(timers.register(ev, id, tie_order(key), 100));
        table.timer_added(id, ev, 100);
        table.evict(&mut timers).unwrap();
        assert_eq!(
            table.dormant_keys(),
            1,
            "nothing stops it going dormant yet"
        );
        assert_eq!(
            fire(&mut table, &mut timers, ev, 100),
            [(100, late.clone())]
        );

        let id = table.intern_awake(key, &mut timers).unwrap();
        assert!(timers.register(ev, id, tie_order(key), 50));
        table.timer_added(id, ev, 50);
        table.evict(&mut timers).unwrap();
        assert!(
            table.find(key).is_some(),
            "a timer behind the walk keeps it"
        );
        assert_eq!(table.dormant_keys(), 0);
        assert_eq!(fire(&mut table, &mut timers, ev, 120), [(50, late)]);
        table.evict(&mut timers).unwrap();
        assert_eq!(table.dormant_keys(), 1, "fired, it may sleep again");
        assert_eq!(
            contents(&table, key).unwrap().slots,
            [(0, Slot::Value(vec![1]))]
        );
    }

    /// Keys whose timers all fall on one time (a window's end) wake a few at a time, in
    /// firing order (the keys' tie order), among the keys of that time that stayed in
    /// memory: memory holds the budget's keys and one wake's, not all of them.
    #[test]
    fn keys_due_at_one_time_wake_a_few_at_a_time_in_firing_order() {
        for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            let mut sleeping = KeyTable::new();
            sleeping.spill_to(Box::new(Shelf::default()), 20 * 200);
            let mut keeping = KeyTable::new();
            let (mut sleeping_timers, mut keeping_timers) =
                (TimerService::new(0), TimerService::new(0));
            for i in 0..400 {
                let key = format!("order-{i}");
                for (table, timers) in [
                    (&mut sleeping, &mut sleeping_timers),
                    (&mut keeping, &mut keeping_timers),
                ] {
                    let id = table.intern_awake(key.as_bytes(), timers).unwrap();
                    table.entry_mut(id).set_slot(0, Slot::Value(vec![7; 20]));
                    assert!(timers.register(domain, id, tie_order(key.as_bytes()), 50));
                    table.timer_added(id, domain, 50);
                }
                sleeping.evict(&mut sleeping_timers).unwrap();
            }
            let dormant = sleeping.dormant_keys();
            assert!(dormant > 300 && sleeping.live > 5, "{dormant} dormant");
            let (got, peak) = fire_counting(&mut sleeping, &mut sleeping_timers, domain, 60);
            let want = fire(&mut keeping, &mut keeping_timers, domain, 60);
            assert_eq!(got.len(), 400);
            assert_eq!(got, want, "{domain:?}");
            // The budget's ~20 keys and a wake's 7, not the 400 due.
            assert!(peak <= 40, "{peak} keys in memory at once");
        }
    }

    /// What a full checkpoint writes of a table: the keys whose slots are in memory,
    /// then the snapshot's keys; sorted by key.
    fn full_base(table: &KeyTable, snapshot: &dyn SlotSnapshot) -> BTreeMap<Key, SavedKey> {
        let mut keys = BTreeMap::new();
        for (id, entry) in table.iter() {
            let saved = SavedKey {
                slots: entry.slots().map(|(s, slot)| (s, slot.clone())).collect(),
                timers: table.timers(id).collect(),
                ..SavedKey::default()
            };
            keys.insert(Key::from_slice(entry.key()), saved);
        }
        snapshot
            .for_each(&mut |key, saved| {
                assert!(keys.insert(Key::from_slice(key), saved).is_none(), "twice");
                Ok(())
            })
            .unwrap();
        for saved in keys.values_mut() {
            saved.slots.sort();
            saved.timers.sort();
        }
        keys
    }

    /// A snapshot for a full checkpoint, taken while keys are dormant, and woken again
    /// and changed (their rows gone from the store): with the keys in memory it is every
    /// key once, as the table holds it.
    #[test]
    fn a_full_base_is_every_key_once_as_the_table_held_it() {
        let mut table = KeyTable::new();
        table.spill_to(Box::new(Shelf::default()), 0);
        let mut timers = TimerService::new(0);
        let add = |table: &mut KeyTable, timers: &mut TimerService, key: &str, n: u8| {
            let id = table.intern_awake(key.as_bytes(), timers).unwrap();
            table.mark_used(id);
            table.entry_mut(id).set_slot(0, Slot::Value(vec![n; 3]));
            if timers.register(TimeDomain::EventTime, id, tie_order(key.as_bytes()), 9) {
                table.timer_added(id, TimeDomain::EventTime, 9);
            }
        };
        for i in 0..30 {
            add(&mut table, &mut timers, &format!("dormant-{i}"), 1);
        }
        table.evict(&mut timers).unwrap();
        // Woken and changed: the store no longer holds them.
        for i in 0..10 {
            add(&mut table, &mut timers, &format!("dormant-{i}"), 3);
        }
        for i in 0..5 {
            add(&mut table, &mut timers, &format!("new-{i}"), 2);
        }
        let all: Vec<Key> = (0..30)
            .map(|i| format!("dormant-{i}"))
            .chain((0..5).map(|i| format!("new-{i}")))
            .map(|key| Key::from_slice(key.as_bytes()))
            .collect();
        let want: BTreeMap<Key, SavedKey> = all
            .iter()
            .map(|key| (key.clone(), contents(&table, key).unwrap()))
            .collect();
        let figures = table.spill_figures().unwrap();
        assert!(
            figures.dormant_keys == 20 && table.live == 15,
            "{figures:?}"
        );
        let snapshot = table.store_snapshot().unwrap();
        assert_eq!(full_base(&table, snapshot.as_ref()), want);
        // One key at a time (an increment's): the dormant keys as the table holds them,
        // none for a key in memory, or that the table does not have.
        for key in &all {
            let mut got = snapshot.get(key).unwrap();
            if let Some(saved) = got.as_mut() {
                saved.slots.sort();
                saved.timers.sort();
            }
            let expected = table.find(key).is_none().then(|| want[key].clone());
            assert_eq!(got, expected, "{key:?}");
        }
        assert_eq!(snapshot.get(b"unknown").unwrap(), None);
        assert_eq!(
            want[&Key::from_slice(b"dormant-3")].slots[0].1,
            Slot::Value(vec![3; 3])
        );
    }

    /// Keys with entries listed for expiry leave memory whole with their listings, and
    /// wake when a clock reaches one, a bounded number at a time, in the order of their
    /// expiry, with their listings on both clocks back in memory.
    #[test]
    fn keys_listed_for_expiry_sleep_with_it_and_wake_when_it_is_due() {
        use TimeDomain::{EventTime, ProcessingTime};
        let mut table = KeyTable::new();
        table.spill_to(Box::new(Shelf::default()), 0);
        let mut timers = TimerService::new(0);
        for i in 0..100 {
            let id = table
                .intern_awake(format!("k-{i}").as_bytes(), &mut timers)
                .unwrap();
            table.entry_mut(id).set_slot(0, Slot::Value(vec![1; 4]));
            table.schedule_expiry(id, EventTime, 1_000 + i);
            if i % 10 == 0 {
                table.schedule_expiry(id, ProcessingTime, 50);
            }
        }
        table.evict(&mut timers).unwrap();
        assert_eq!((table.dormant_keys(), table.live), (100, 0));
        let end = FiringPlace::end_of;
        assert_eq!(
            table
                .wake_listed(Wake::Expiry(EventTime), 999, 16, &mut timers)
                .unwrap(),
            end(999)
        );
        assert_eq!(table.dormant_keys(), 100, "none due before 1,000");
        let mut woken = Vec::new();
        loop {
            let reached = table
                .wake_listed(Wake::Expiry(EventTime), 1_049, 16, &mut timers)
                .unwrap();
            assert!(table.live <= 16, "{} in memory", table.live);
            while let Some(id) = table.pop_expiring(EventTime, 1_049) {
                let key = String::from_utf8(table.entry(id).key().to_vec()).unwrap();
                woken.push(key);
                // Its processing-time listing came back with it.
                let i: i64 = woken.last().unwrap()[2..].parse().unwrap();
                let expected = (i % 10 == 0).then_some(50);
                assert_eq!(table.expiry_of(id, ProcessingTime), expected);
                table.entry_mut(id).clear_all();
                table.release_if_unused(id);
            }
            if reached == end(1_049) {
                break;
            }
        }
        let expected: Vec<String> = (0..50).map(|i| format!("k-{i}")).collect();
        assert_eq!(woken, expected, "in the order they expire");
        assert_eq!(table.dormant_keys(), 50);
        // On the other clock, only the dormant keys listed on it wake.
        table
            .wake_listed(Wake::Expiry(ProcessingTime), 60, 16, &mut timers)
            .unwrap();
        let mut due = Vec::new();
        while let Some(id) = table.pop_expiring(ProcessingTime, 60) {
            due.push(String::from_utf8(table.entry(id).key().to_vec()).unwrap());
        }
        due.sort();
        assert_eq!(due, ["k-50", "k-60", "k-70", "k-80", "k-90"]);
        assert_eq!(table.dormant_keys(), 45);
    }

    /// Keys restored straight into the store are dormant keys like those an eviction
    /// sent there: they wake when named, and when their timers and expiry fall due.
    #[test]
    fn keys_restored_dormant_wake_as_evicted_ones_do() {
        use TimeDomain::EventTime;
        let mut table = KeyTable::new();
        table.spill_to(Box::new(Shelf::default()), 1 << 20);
        let mut timers = TimerService::new(0);
        for i in 0..20 {
            let saved = SavedKey {
                slots: vec![(0, Slot::Value(vec![i as u8]))],
                timers: vec![(EventTime, 100 + i), (EventTime, 500)],
                expiry: vec![(EventTime, 1_000 + i)],
            };
            assert!(table
                .restore_dormant(format!("k-{i}").as_bytes(), &saved)
                .unwrap());
        }
        assert_eq!((table.live, table.dormant_keys(), table.len()), (0, 20, 20));
        assert_eq!(table.dormant_timers(EventTime), 40);
        assert_eq!(table.next_dormant_timer(EventTime).unwrap(), Some(100));
        // Named: back with its slots, timers and expiry.
        let id = table.intern_awake(b"k-7", &mut timers).unwrap();
        assert_eq!(slots_of(&table, id), [(0, Slot::Value(vec![7]))]);
        let mut own: Vec<_> = table.timers(id).collect();
        own.sort();
        assert_eq!(own, [(EventTime, 107), (EventTime, 500)]);
        assert_eq!(table.expiry_of(id, EventTime), Some(1_007));
        // Due by time: the keys of timers through 104, in order.
        let reached = table
            .wake_listed(Wake::Timer(EventTime), 104, 100, &mut timers)
            .unwrap();
        assert_eq!(reached, FiringPlace::end_of(104));
        assert_eq!(table.live, 6);
        let mut fired = Vec::new();
        while let Some((at, id)) = timers.pop_event_due(104) {
            fired.push((at, table.entry(id).key().to_vec()));
        }
        let expected: Vec<_> = (0..5)
            .map(|i| (100 + i, format!("k-{i}").into_bytes()))
            .collect();
        assert_eq!(fired, expected);
        let woken = table
            .wake_listed(Wake::Expiry(EventTime), 2_000, 100, &mut timers)
            .unwrap();
        assert_eq!(woken, FiringPlace::end_of(2_000));
        assert_eq!((table.live, table.dormant_keys()), (20, 0));
    }

    /// A key that went dormant, woke, was released (its state cleared) and is interned
    /// again: it comes back empty, not with its old row.
    #[test]
    fn a_released_key_interned_again_does_not_wake_with_its_old_copy() {
        let mut table = KeyTable::new();
        table.spill_to(Box::new(Shelf::default()), 0);
        let mut timers = TimerService::new(0);
        let id = table.intern_awake(b"k", &mut timers).unwrap();
        table
            .entry_mut(id)
            .set_slot(0, Slot::Value(b"old".to_vec()));
        table.timer_added(id, TimeDomain::EventTime, 5);
        timers.register(TimeDomain::EventTime, id, tie_order(b"k"), 5);
        table.evict(&mut timers).unwrap();
        assert_eq!((table.find(b"k"), table.dormant_keys()), (None, 1));
        let id = table.intern_awake(b"k", &mut timers).unwrap();
        assert_eq!(
            slots_of(&table, id),
            [(0, Slot::Value(b"old".to_vec()))],
            "woken"
        );
        table.entry_mut(id).clear_all();
        assert!(timers.delete(TimeDomain::EventTime, id, tie_order(b"k"), 5));
        table.timer_removed(id, TimeDomain::EventTime, 5);
        table.release_if_unused(id);
        assert_eq!(table.find(b"k"), None);
        let again = table.intern_awake(b"k", &mut timers).unwrap();
        assert_eq!(table.entry(again).slots().count(), 0);
        assert_eq!(table.timers(again).count(), 0);
        assert_eq!(table.dormant_keys(), 0);
    }
}
