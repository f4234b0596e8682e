//! State time-to-live: stamps on entries, which entries have expired, and when each
//! key's next entry expires.
//!
//! A state declared with a [`StateTtl`] keeps, with every entry (its value, each list
//! item, each map value), the *stamp* of the entry: the time of the call that last wrote
//! it (or read it). The stamp is stored in front of the guest's bytes in the key's
//! [`Slot`], 8 bytes little-endian, so every mechanism that moves slots around (the undo
//! journal of a failed call, checkpoints, restores) carries stamps without knowing of
//! them; only what crosses to the guest strips them ([`unstamped`]) or adds them
//! ([`stamped`]).
//!
//! The engine removes expired entries between calls: an [`ExpiryQueue`] per clock holds
//! each key with entries that can expire at the earliest time one of them does, and
//! [`purge`] drops what has expired from a slot and says when the next entry does.

use super::{KeyId, Slot};
use crate::state::{StampChange, StateTtl};
use crate::time::Timestamp;
use std::collections::{BTreeSet, HashMap};

/// Bytes of the stamp in front of each entry of a state with a time-to-live.
pub const STAMP_BYTES: usize = 8;

/// An entry's stored bytes: `stamp`, then the guest's `bytes`.
pub fn stamped(stamp: Timestamp, bytes: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(STAMP_BYTES + bytes.len());
    entry.extend_from_slice(&stamp.to_le_bytes());
    entry.extend_from_slice(bytes);
    entry
}

/// The stamp of a stored entry (the minimum for one too short to hold one, which only a
/// damaged checkpoint could give: such an entry has expired).
pub fn stamp_of(entry: &[u8]) -> Timestamp {
    match entry.first_chunk::<STAMP_BYTES>() {
        Some(bytes) => Timestamp::from_le_bytes(*bytes),
        None => Timestamp::MIN,
    }
}

/// The guest's bytes of a stored entry, without its stamp.
pub fn unstamped(entry: &[u8]) -> &[u8] {
    entry.get(STAMP_BYTES..).unwrap_or_default()
}

/// Replaces a stored entry's stamp.
pub fn restamp(entry: &mut [u8], stamp: Timestamp) {
    if let Some(bytes) = entry.first_chunk_mut::<STAMP_BYTES>() {
        *bytes = stamp.to_le_bytes();
    }
}

/// Applies `f` to every stored entry of `slot` (its value, its items, its map values).
pub fn for_each_entry(slot: &mut Slot, mut f: impl FnMut(&mut Vec<u8>)) {
    match slot {
        Slot::Value(v) => f(v),
        Slot::List(items) => items.iter_mut().for_each(f),
        Slot::Map(map) => map.values_mut().for_each(f),
    }
}

/// Restamps what a read refreshes: every entry of `slot`, or only the map entry
/// `map_key` if one is given (and present).
pub fn restamp_read(slot: &mut Slot, map_key: Option<&[u8]>, stamp: Timestamp) {
    match (slot, map_key) {
        (Slot::Map(map), Some(k)) => {
            if let Some(v) = map.get_mut(k) {
                restamp(v, stamp);
            }
        }
        (slot, _) => for_each_entry(slot, |e| restamp(e, stamp)),
    }
}

/// Gives every entry of `slot` the stamp `stamp` (a state that gained a time-to-live).
pub fn add_stamps(slot: &mut Slot, stamp: Timestamp) {
    for_each_entry(slot, |entry| *entry = stamped(stamp, entry));
}

/// Takes the stamps off every entry of `slot` (a state that lost its time-to-live).
pub fn drop_stamps(slot: &mut Slot) {
    for_each_entry(slot, |entry| {
        entry.drain(..STAMP_BYTES.min(entry.len()));
    });
}

/// Adds, drops or renews the stamps of `slot`'s entries as `change` says (a state that
/// gained, lost or moved its time-to-live); `now` stamps added or renewed ones.
pub fn change_stamps(slot: &mut Slot, change: StampChange, now: Timestamp) {
    match change {
        StampChange::Unchanged => {}
        StampChange::Added => add_stamps(slot, now),
        StampChange::Dropped => drop_stamps(slot),
        StampChange::Moved => for_each_entry(slot, |e| restamp(e, now)),
    }
}

/// When the first entry of `slot` expires.
pub fn next_expiry(slot: &Slot, ttl: &StateTtl) -> Option<Timestamp> {
    let stamp = match slot {
        Slot::Value(v) => Some(stamp_of(v)),
        Slot::List(items) => items.iter().map(|i| stamp_of(i)).min(),
        Slot::Map(map) => map.values().map(|v| stamp_of(v)).min(),
    };
    stamp.map(|s| ttl.expiry(s))
}

/// What [`purge`] did to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Whether any entry expired (the slot changed).
    pub dropped: bool,
    /// Whether nothing is left: the state is to be cleared.
    pub empty: bool,
    /// When the first entry left expires.
    pub next: Option<Timestamp>,
}

/// Drops the entries of `slot` that have expired once `ttl`'s clock reads `now`.
pub fn purge(slot: &mut Slot, ttl: &StateTtl, now: Timestamp) -> Purged {
    let live = |entry: &Vec<u8>| !ttl.is_expired(stamp_of(entry), now);
    let (dropped, empty) = match slot {
        Slot::Value(v) => {
            let expired = !live(v);
            (expired, expired)
        }
        Slot::List(items) => {
            let before = items.len();
            items.retain(live);
            (items.len() < before, items.is_empty())
        }
        Slot::Map(map) => {
            let before = map.len();
            map.retain(|_, v| live(v));
            (map.len() < before, map.is_empty())
        }
    };
    let next = if empty { None } else { next_expiry(slot, ttl) };
    Purged {
        dropped,
        empty,
        next,
    }
}

/// Keys by the earliest time one of their entries expires, on one clock. A key is
/// listed once, at the earliest time scheduled for it; when that time comes the engine
/// purges the key and schedules it again for its next expiry, if any. A key released
/// leaves the queue ([`take`](ExpiryQueue::take)); one listed earlier than its entries
/// expire (a refresh moved them on) only costs a purge that finds nothing.
#[derive(Debug, Default)]
pub struct ExpiryQueue {
    by_time: BTreeSet<(Timestamp, KeyId)>,
    due: HashMap<KeyId, Timestamp>,
}

impl ExpiryQueue {
    /// Lists `key` to be purged at `at`, unless it is listed for that time or earlier.
    pub fn schedule(&mut self, key: KeyId, at: Timestamp) {
        if let Some(&listed) = self.due.get(&key) {
            if listed <= at {
                return;
            }
            self.by_time.remove(&(listed, key));
        }
        self.by_time.insert((at, key));
        self.due.insert(key, at);
    }

    /// The next key due at or before `now`, taken off the queue.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<KeyId> {
        let &(at, key) = self.by_time.first()?;
        if at > now {
            return None;
        }
        self.by_time.pop_first();
        self.due.remove(&key);
        Some(key)
    }

    /// Takes `key` off the queue; when it was listed to be purged, if it was (a key
    /// that leaves memory whole takes its listing with it).
    pub fn take(&mut self, key: KeyId) -> Option<Timestamp> {
        if self.due.is_empty() {
            // Every key released takes this path: no hashing when nothing is listed.
            return None;
        }
        let at = self.due.remove(&key)?;
        self.by_time.remove(&(at, key));
        Some(at)
    }

    /// When `key` is listed to be purged, if it is.
    pub fn due_of(&self, key: KeyId) -> Option<Timestamp> {
        self.due.get(&key).copied()
    }

    /// When the first listed key is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.by_time.first().map(|&(at, _)| at)
    }

    /// How many keys are listed.
    pub fn len(&self) -> usize {
        self.by_time.len()
    }

    /// Whether no key is listed.
    pub fn is_empty(&self) -> bool {
        self.by_time.is_empty()
    }

    /// Forgets every key (a restore lists them again).
    pub fn clear(&mut self) {
        self.by_time.clear();
        self.due.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::TtlRefresh;
    use crate::time::timers::TimeDomain;

    const TTL: StateTtl = StateTtl {
        millis: 100,
        domain: TimeDomain::EventTime,
        refresh: TtlRefresh::OnWrite,
    };

    #[test]
    fn stamps_go_in_front_and_come_off() {
        let entry = stamped(-5, b"abc");
        assert_eq!(stamp_of(&entry), -5);
        assert_eq!(unstamped(&entry), b"abc");
        let mut slot = Slot::List(vec![b"x".to_vec(), b"".to_vec()]);
        add_stamps(&mut slot, 7);
        let mut again = slot.clone();
        drop_stamps(&mut again);
        assert_eq!(again, Slot::List(vec![b"x".to_vec(), b"".to_vec()]));
        if let Slot::List(items) = &mut slot {
            restamp(&mut items[1], 9);
            assert_eq!(
                items.iter().map(|i| stamp_of(i)).collect::<Vec<_>>(),
                [7, 9]
            );
        }
        assert_eq!(next_expiry(&slot, &TTL), Some(107));
        assert_eq!(stamp_of(b"short"), Timestamp::MIN);
    }

    #[test]
    fn purging_drops_exactly_what_has_expired() {
        let mut map = crate::state::ByteMap::new();
        map.insert(b"a".to_vec(), stamped(0, b"1"));
        map.insert(b"b".to_vec(), stamped(50, b"2"));
        let mut slot = Slot::Map(map);
        let kept = purge(&mut slot, &TTL, 99);
        assert_eq!(
            kept,
            Purged {
                dropped: false,
                empty: false,
                next: Some(100)
            }
        );
        let one = purge(&mut slot, &TTL, 100);
        assert_eq!((one.dropped, one.empty, one.next), (true, false, Some(150)));
        let all = purge(&mut slot, &TTL, 150);
        assert_eq!((all.dropped, all.empty, all.next), (true, true, None));
        let mut value = Slot::Value(stamped(10, b"v"));
        assert!(purge(&mut value, &TTL, 110).empty);
    }

    #[test]
    fn a_key_is_listed_once_at_its_earliest_time() {
        let mut queue = ExpiryQueue::default();
        queue.schedule(1, 50);
        queue.schedule(1, 80);
        queue.schedule(2, 60);
        queue.schedule(1, 40);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next_due(), Some(40));
        assert_eq!(queue.pop_due(39), None);
        assert_eq!(queue.pop_due(100), Some(1));
        assert_eq!(queue.pop_due(100), Some(2));
        assert_eq!(queue.pop_due(100), None);
        assert!(queue.is_empty());
    }
}
