//! The `disk` state backend in the host services: keys interned so that a dormant one
//! wakes with its timers, evictions that send keys to the store whole, and the dormant
//! keys of due timers woken before timers fire, those of expired entries before a purge (see
//! `weir_core::state::dormant`). With the memory backend each of these is what the key
//! table and the timer service do on their own.

use super::Services;
use weir_core::state::{KeyId, Wake};
use weir_core::time::timers::{FiringPlace, TimeDomain};
use weir_core::time::Timestamp;

/// Dormant keys woken at a time before the timers in memory fire: bounds the memory an
/// advance that makes many timers due takes before the next eviction.
const WAKE_AT_ONCE: usize = 4096;

impl Services {
    /// The id of `key`, interned if new; a key dormant in the `disk` backend's store
    /// wakes with its slots and timers. Fails only if that store cannot be read.
    pub fn intern(&mut self, key: &[u8]) -> anyhow::Result<KeyId> {
        self.keys.intern_awake(key, &mut self.timers)
    }

    /// With the `disk` backend, evicts what exceeds the memory budget: whole keys, their
    /// timers and expiry too. The operator calls this between calls and batches.
    pub fn evict(&mut self) -> anyhow::Result<()> {
        self.keys.evict(&mut self.timers)
    }

    /// Wakes dormant keys with timers of `domain` due by `up_to`, a bounded number at a
    /// time, in firing order; returns the place through which every due timer of
    /// `domain` is in the timer service (the end of `up_to` once all are). The operator
    /// calls this before it fires timers of that clock, fires through the place
    /// returned, evicts, and calls again until it gets the end of `up_to`.
    pub fn wake_due(
        &mut self,
        domain: TimeDomain,
        up_to: Timestamp,
    ) -> anyhow::Result<FiringPlace> {
        self.keys
            .wake_listed(Wake::Timer(domain), up_to, WAKE_AT_ONCE, &mut self.timers)
    }

    /// With the `disk` backend, wakes the dormant keys whose entries expire on `domain`'s
    /// clock by `now`, a bounded number at a time, purging each lot (so that memory holds
    /// at most one lot of them besides the keys left with entries after their purge, until
    /// the next eviction). A failure of the store is kept for the next eviction. Called
    /// before expired entries are purged by that clock.
    pub(super) fn purge_dormant(&mut self, domain: TimeDomain, now: Timestamp) {
        loop {
            let reached =
                self.keys
                    .wake_listed(Wake::Expiry(domain), now, WAKE_AT_ONCE, &mut self.timers);
            let reached = match reached {
                Ok(reached) => reached,
                Err(e) => {
                    self.keys.defer(e);
                    return;
                }
            };
            if reached == FiringPlace::end_of(now) {
                return;
            }
            while let Some(key) = self.keys.pop_expiring(domain, now) {
                self.purge_key(key, domain, now);
            }
        }
    }

    /// Pending timers of `domain`, in memory and saved with dormant keys.
    pub fn pending_timers(&self, domain: TimeDomain) -> usize {
        self.timers.pending(domain) + self.keys.dormant_timers(domain)
    }
}
