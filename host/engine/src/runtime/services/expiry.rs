//! State time-to-live in the host services: the stamps entries get when written (or
//! read, refreshed on read), the keys listed for expiry, and their purge between calls.

use super::Services;
use weir_core::state::ttl::{self, stamped};
use weir_core::state::{KeyId, Slot, StateId, StateTtl};
use weir_core::time::timers::TimeDomain;
use weir_core::time::{wall_clock_ms, Timestamp};

impl Services {
    /// What `domain`'s clock reads for state time-to-live now: the watermark, or the wall
    /// clock.
    pub(crate) fn clock(&self, domain: TimeDomain) -> Timestamp {
        match domain {
            TimeDomain::EventTime => self.watermark,
            TimeDomain::ProcessingTime => wall_clock_ms(),
        }
    }

    /// The stamp an entry of a state with time-to-live `ttl` gets when the current call
    /// writes (or, refreshed on read, reads) it: the call's element or timer timestamp or
    /// the watermark, whichever is later, or the processing time.
    pub(super) fn stamp(&self, ttl: &StateTtl) -> Timestamp {
        match ttl.domain {
            TimeDomain::EventTime => {
                let at = self.scope.map_or(self.watermark, |s| s.timestamp);
                at.max(self.watermark)
            }
            TimeDomain::ProcessingTime => wall_clock_ms(),
        }
    }

    /// Lists `key` for removal of its expired entries at the time the first of its
    /// entries of states with a time-to-live expires, on each clock. The engine calls
    /// this after it has stamped entries of the key (a write, a batch, a restore).
    pub fn schedule_expiry(&mut self, key: KeyId) {
        let first = self.first_expiry(self.keys.entry(key).slots());
        for (domain, at) in first.into_iter().flatten() {
            self.keys.schedule_expiry(key, domain, at);
        }
    }

    /// When the first of `slots`' entries of states with a time-to-live expires, on
    /// event time and on processing time (`None` for a clock without one).
    pub(crate) fn first_expiry<'a>(
        &self,
        slots: impl Iterator<Item = (StateId, &'a Slot)>,
    ) -> [Option<(TimeDomain, Timestamp)>; 2] {
        let mut next = [None::<Timestamp>; 2];
        for (state, slot) in slots {
            if let Some(ttl) = self.states.ttl(state) {
                let at = ttl::next_expiry(slot, &ttl);
                let clock = &mut next[usize::from(ttl.domain == TimeDomain::ProcessingTime)];
                *clock = match (*clock, at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        let [event, processing] = next;
        [
            event.map(|at| (TimeDomain::EventTime, at)),
            processing.map(|at| (TimeDomain::ProcessingTime, at)),
        ]
    }

    /// Removes every entry that has expired by the watermark (event-time time-to-live)
    /// or by `processing_time`, without calling the UDF, dormant keys' (woken for it)
    /// included; a key left with nothing is released. Returns how many keys lost entries. The operator calls this before
    /// every call or batch (so that no call sees an expired entry), when processing time
    /// is checked, and before a checkpoint is taken (so that none keeps one).
    pub fn expire_state(&mut self, processing_time: Timestamp) -> usize {
        self.expire_state_at(self.watermark, processing_time)
    }

    /// [`expire_state`](Self::expire_state) with event-time entries expiring by
    /// `event_time` instead of the watermark: the time of an event-time timer about to
    /// fire, which sees every entry that expires after it, however far the watermark
    /// jumped (expiry and timers interleave by time).
    pub fn expire_state_at(&mut self, event_time: Timestamp, processing_time: Timestamp) -> usize {
        let mut changed = 0;
        for (domain, now) in [
            (TimeDomain::EventTime, event_time),
            (TimeDomain::ProcessingTime, processing_time),
        ] {
            self.purge_dormant(domain, now);
            while let Some(key) = self.keys.pop_expiring(domain, now) {
                changed += usize::from(self.purge_key(key, domain, now));
            }
        }
        changed
    }

    /// Drops the expired entries of `key`'s states on `domain`'s clock, which reads
    /// `now`, lists the key again for its next expiry, and releases it if it is left
    /// with nothing; whether anything expired.
    pub(super) fn purge_key(&mut self, key: KeyId, domain: TimeDomain, now: Timestamp) -> bool {
        if !self.keys.entry(key).has_state() {
            return false;
        }
        let states: Vec<(StateId, StateTtl)> = self
            .keys
            .entry(key)
            .slots()
            .filter_map(|(state, _)| self.states.ttl(state).map(|ttl| (state, ttl)))
            .filter(|(_, ttl)| ttl.domain == domain)
            .collect();
        let mut dropped = false;
        for (state, ttl) in states {
            let expired = self
                .keys
                .entry(key)
                .slot(state)
                .is_some_and(|slot| ttl::next_expiry(slot, &ttl).is_some_and(|at| at <= now));
            if !expired {
                continue;
            }
            let entry = self.keys.entry_mut(key);
            let Some(slot) = entry.slot_mut(state) else {
                continue;
            };
            let purged = ttl::purge(slot, &ttl, now);
            dropped |= purged.dropped;
            if purged.empty {
                entry.clear(state);
            }
        }
        self.schedule_expiry(key);
        self.keys.release_if_unused(key);
        dropped
    }

    /// The time-to-live of `state` if reads refresh it, for the read imports.
    pub(super) fn refreshed_on_read(&self, state: StateId) -> Option<StateTtl> {
        self.states.ttl(state).filter(StateTtl::refreshed_on_read)
    }

    /// Restamps every entry of the current key's `state` (a read that refreshes its
    /// time-to-live), or only the map entry `map_key`; journaled like a write.
    pub(super) fn refresh(&mut self, state: StateId, ttl: StateTtl, map_key: Option<&[u8]>) {
        let stamp = self.stamp(&ttl);
        let Some(scope) = self.scope else { return };
        let previous = self.keys.entry(scope.key).slot(state).cloned();
        let entry = self.keys.entry_mut(scope.key);
        let Some(slot) = entry.slot_mut(state) else {
            return;
        };
        ttl::restamp_read(slot, map_key, stamp);
        self.replaced(state, previous);
        self.keys
            .schedule_expiry(scope.key, ttl.domain, ttl.expiry(stamp));
    }

    /// The bytes to store for `bytes` written to `state` by the current call: stamped if
    /// the state has a time-to-live (and the key listed for its expiry).
    pub(super) fn stored(&mut self, state: StateId, bytes: Vec<u8>) -> Vec<u8> {
        match self.states.ttl(state) {
            None => bytes,
            Some(ttl) => {
                let stamp = self.stamp(&ttl);
                if let Some(scope) = self.scope {
                    self.keys
                        .schedule_expiry(scope.key, ttl.domain, ttl.expiry(stamp));
                }
                stamped(stamp, &bytes)
            }
        }
    }
}
