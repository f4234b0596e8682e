//! A hierarchical timing wheel for processing-time timers.
//!
//! Why a wheel: a stream processor registers and deletes processing-time timers on nearly
//! every record (session gaps, heartbeat timeouts), so both must be O(1), and while its
//! input is idle it sleeps until the earliest timer, so that must be known exactly and
//! cheaply. An ordered set would pay O(log n) per registration; the wheel pays O(1).
//!
//! How it works (after Varghese & Lauck, as in the Linux kernel and tokio): time is a
//! `u64` count of milliseconds. Level `l` has 64 slots, each spanning `64^l` ms, and covers
//! the `64^(l+1)` ms block that contains the wheel's time; a timer sits on the level of
//! the highest 6-bit digit in which its time differs from the wheel's, in the slot named
//! by that digit. Level 0 therefore holds one timestamp per slot and is a plain bitmap.
//! Timers beyond the top level (`64^6` ms, about two years) wait in an ordered overflow
//! set. Advancing jumps straight to the earliest occupied slot (found with
//! `trailing_zeros` on per-level occupancy bitmaps), fires it on level 0 or cascades it one
//! level down otherwise, so the cost is proportional to the timers touched, never to the
//! milliseconds skipped. Keys are grouped per timestamp in a hash map, which gives O(1)
//! duplicate checks and lets a timer be unlinked eagerly from its slot (each timestamp
//! records its index there). The exact earliest timestamp is cached; when the earliest
//! occupied slot is coarser than 1 ms, its timestamps are fed once into a lazily pruned
//! min-heap, so repeatedly deleting the earliest timer (the heartbeat-timeout pattern)
//! costs O(log n) rather than a rescan of the slot.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::hash::Hash;
use std::mem;

/// Bits of time resolved by one level: 64 slots per level.
const BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << BITS;
/// Mask of a slot index within one level.
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Levels on the wheel, level 0 included; they span `64^LEVELS` ms (about 795 days).
const LEVELS: usize = 6;
/// Bits of time spanned by the whole wheel.
const WHEEL_BITS: u32 = BITS * LEVELS as u32;

/// Maps an `i64` timestamp onto `u64` ticks, preserving order.
fn encode(at: i64) -> u64 {
    (at as u64) ^ (1 << 63)
}

/// The inverse of [`encode`].
fn decode(tick: u64) -> i64 {
    (tick ^ (1 << 63)) as i64
}

/// The level at which `tick` (at or after `elapsed`) belongs: that of the highest 6-bit
/// digit in which the two differ. A result of `LEVELS` or more means the overflow set.
fn level_for(elapsed: u64, tick: u64) -> usize {
    let masked = (elapsed ^ tick) | SLOT_MASK;
    ((63 - masked.leading_zeros()) / BITS) as usize
}

/// The slot of `tick` on `level`.
fn slot_index(tick: u64, level: usize) -> usize {
    ((tick >> (BITS * level as u32)) & SLOT_MASK) as usize
}

/// A hierarchical timing wheel of timers, each a `(timestamp, key)` pair unique on the
/// wheel, with timestamps in milliseconds since the Unix epoch.
///
/// Memory: every timer stores its key once, inline in its timestamp's bucket when it is
/// the only key at that timestamp, else in a boxed `HashSet<K>` shared by that timestamp.
/// Every distinct pending timestamp adds one hash-map entry (`8 + size_of::<Bucket<K>>()`
/// bytes, 32 in all for `u32` or `u64` keys, plus hashbrown's control byte and load-factor
/// slack) and an 8-byte tick in its slot (just a bit on level 0), and, while its slot is
/// the earliest, 8 bytes in the min-heap. The wheel itself is a fixed ~8 KiB of empty slots.
#[derive(Debug, Clone)]
pub struct TimingWheel<K> {
    /// The wheel's current time: timers at or before it are due.
    now: i64,
    /// The first tick not yet processed; every timer on the levels is at or after it.
    /// Outside [`advance`](Self::advance) it is `encode(now) + 1` (saturating).
    elapsed: u64,
    /// Number of pending timers.
    len: usize,
    /// Every pending timestamp with its keys and position in its slot.
    buckets: HashMap<u64, Bucket<K>>,
    /// Timestamps inserted at or before `now`, due at the next advance; always in `heap`.
    overdue: Vec<u64>,
    /// Level 0: bit `i` set iff tick `(elapsed & !63) | i` is pending.
    level0: u64,
    /// Levels 1 to `LEVELS - 1`.
    levels: Vec<Level>,
    /// Timestamps beyond the top level.
    overflow: BTreeSet<u64>,
    /// Lazily pruned min-heap holding at least every tick of `overdue` and of every slot
    /// whose `heaped` bit is set; entries whose bucket is gone are stale.
    heap: BinaryHeap<Reverse<u64>>,
    /// The earliest pending tick, exact.
    next: Option<u64>,
}

/// The keys of one timestamp and where that timestamp sits in its slot.
#[derive(Debug, Clone)]
struct Bucket<K> {
    keys: Keys<K>,
    /// Index of the tick in its slot's vector (the overdue list or a level-1+ slot).
    pos: usize,
}

/// One key inline, or a set of two or more.
#[derive(Debug, Clone)]
enum Keys<K> {
    One(K),
    #[allow(clippy::box_collection)] // Boxed so that a single key costs no more than itself.
    Many(Box<HashSet<K>>),
}

/// What removing a key from a bucket did.
enum Removal {
    Missing,
    Kept,
    Emptied,
}

impl<K: Eq + Hash> Keys<K> {
    fn contains(&self, key: &K) -> bool {
        match self {
            Keys::One(k) => k == key,
            Keys::Many(set) => set.contains(key),
        }
    }

    /// Adds `key`; false if it was already there.
    fn insert(&mut self, key: K) -> bool {
        match self {
            Keys::One(k) if *k == key => false,
            Keys::One(_) => {
                let mut set = Box::new(HashSet::with_capacity(2));
                set.insert(key);
                if let Keys::One(old) = mem::replace(self, Keys::Many(set)) {
                    if let Keys::Many(set) = self {
                        set.insert(old);
                    }
                }
                true
            }
            Keys::Many(set) => set.insert(key),
        }
    }

    fn remove(&mut self, key: &K) -> Removal {
        match self {
            Keys::One(k) if k == key => Removal::Emptied,
            Keys::One(_) => Removal::Missing,
            Keys::Many(set) => {
                if !set.remove(key) {
                    return Removal::Missing;
                }
                if set.len() == 1 {
                    let last = set.drain().next();
                    if let Some(last) = last {
                        *self = Keys::One(last);
                    }
                }
                Removal::Kept
            }
        }
    }
}

/// One level above level 0.
#[derive(Debug, Clone)]
struct Level {
    /// Bit `i` set iff slot `i` is non-empty.
    occupied: u64,
    /// Bit `i` set iff every tick of slot `i` is in the heap.
    heaped: u64,
    /// Each slot's distinct ticks, unordered.
    slots: [Vec<u64>; SLOTS],
}

impl Level {
    fn new() -> Self {
        Self {
            occupied: 0,
            heaped: 0,
            slots: std::array::from_fn(|_| Vec::new()),
        }
    }
}

/// The earliest occupied place on the wheel.
enum Front {
    /// A level-0 slot: exactly this tick.
    Tick(u64),
    /// A slot on level 1 or above, starting at `start`.
    Slot {
        level: usize,
        index: usize,
        start: u64,
    },
    /// The overflow set's earliest block of `64^LEVELS` ms, starting at this tick.
    Overflow(u64),
}

/// Removes the tick at `pos` from `ticks`, fixing the position of the one moved there.
fn unlink<K>(ticks: &mut Vec<u64>, pos: usize, buckets: &mut HashMap<u64, Bucket<K>>) {
    ticks.swap_remove(pos);
    if let Some(moved) = ticks.get(pos) {
        if let Some(bucket) = buckets.get_mut(moved) {
            bucket.pos = pos;
        }
    }
}

impl<K: Eq + Hash + Ord> TimingWheel<K> {
    /// An empty wheel whose current time is `now`.
    pub fn new(now: i64) -> Self {
        Self {
            now,
            elapsed: encode(now).saturating_add(1),
            len: 0,
            buckets: HashMap::new(),
            overdue: Vec::new(),
            level0: 0,
            levels: (1..LEVELS).map(|_| Level::new()).collect(),
            overflow: BTreeSet::new(),
            heap: BinaryHeap::new(),
            next: None,
        }
    }

    /// The wheel's current time.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the timer `(at, key)` is pending.
    pub fn contains(&self, at: i64, key: &K) -> bool {
        self.buckets
            .get(&encode(at))
            .is_some_and(|bucket| bucket.keys.contains(key))
    }

    /// The earliest pending timestamp, exactly; O(1).
    pub fn next_due(&self) -> Option<i64> {
        self.next.map(decode)
    }

    /// Registers the timer `(at, key)`; returns false, changing nothing, if it is already
    /// pending. A timer at or before the current time fires at the next [`advance`](Self::advance).
    pub fn insert(&mut self, at: i64, key: K) -> bool {
        let tick = encode(at);
        if let Some(bucket) = self.buckets.get_mut(&tick) {
            let added = bucket.keys.insert(key);
            self.len += usize::from(added);
            return added;
        }
        let pos = if at <= self.now {
            self.overdue.push(tick);
            self.heap.push(Reverse(tick));
            Some(self.overdue.len() - 1)
        } else {
            self.attach(tick, false)
        };
        self.buckets.insert(
            tick,
            Bucket {
                keys: Keys::One(key),
                pos: pos.unwrap_or(0),
            },
        );
        self.len += 1;
        if self.next.is_none_or(|next| tick < next) {
            self.next = Some(tick);
        }
        self.compact_heap();
        true
    }

    /// Deletes the timer `(at, key)`; returns false if it was not pending.
    pub fn remove(&mut self, at: i64, key: &K) -> bool {
        let tick = encode(at);
        let Some(bucket) = self.buckets.get_mut(&tick) else {
            return false;
        };
        match bucket.keys.remove(key) {
            Removal::Missing => return false,
            Removal::Kept => {}
            Removal::Emptied => {
                let pos = bucket.pos;
                self.buckets.remove(&tick);
                self.detach(at, tick, pos);
                if self.next == Some(tick) {
                    self.refresh_next();
                } else {
                    self.compact_heap();
                }
            }
        }
        self.len -= 1;
        true
    }

    /// Moves the current time to `now` (never backwards) and appends every timer at or
    /// before it to `out` in ascending `(at, key)` order, removing them from the wheel.
    /// Costs O(levels) per fired timestamp or cascaded slot, however far time jumps.
    pub fn advance(&mut self, now: i64, out: &mut Vec<(i64, K)>) {
        self.now = self.now.max(now);
        let target = encode(self.now);
        let mut changed = !self.overdue.is_empty();
        let mut overdue = mem::take(&mut self.overdue);
        overdue.sort_unstable();
        for &tick in &overdue {
            self.fire(tick, out);
        }
        while let Some(front) = self.front() {
            match front {
                Front::Tick(tick) => {
                    if tick > target {
                        break;
                    }
                    self.elapsed = tick;
                    self.level0 &= !(1 << (tick & SLOT_MASK));
                    self.fire(tick, out);
                }
                // A slot is cascaded once the wheel's time enters it (`start <= target + 1`).
                // Its start is above the old `elapsed`, hence at least 1.
                Front::Slot {
                    level,
                    index,
                    start,
                } => {
                    if start - 1 > target {
                        break;
                    }
                    self.elapsed = start;
                    self.cascade(level, index);
                }
                Front::Overflow(start) => {
                    if start - 1 > target {
                        break;
                    }
                    self.elapsed = start;
                    while let Some(&tick) = self.overflow.first() {
                        if tick >> WHEEL_BITS != start >> WHEEL_BITS {
                            break;
                        }
                        self.overflow.pop_first();
                        self.attach_moved(tick, false);
                    }
                }
            }
            changed = true;
        }
        self.elapsed = target.saturating_add(1);
        if changed {
            self.refresh_next();
        }
    }

    /// Appends every pending timer to `out` in ascending `(at, key)` order, leaving the
    /// wheel empty; its current time is unchanged.
    pub fn drain_all(&mut self, out: &mut Vec<(i64, K)>) {
        let mut ticks: Vec<u64> = self.buckets.keys().copied().collect();
        ticks.sort_unstable();
        for tick in ticks {
            self.fire(tick, out);
        }
        self.overdue.clear();
        self.level0 = 0;
        for level in &mut self.levels {
            level.occupied = 0;
            level.heaped = 0;
            level.slots.iter_mut().for_each(|slot| *slot = Vec::new());
        }
        self.overflow.clear();
        self.heap.clear();
        self.next = None;
        debug_assert_eq!(self.len, 0);
    }

    /// Removes the bucket of `tick` and appends its timers to `out`, keys in order.
    fn fire(&mut self, tick: u64, out: &mut Vec<(i64, K)>) {
        let Some(bucket) = self.buckets.remove(&tick) else {
            debug_assert!(false, "tick {tick} fired without a bucket");
            return;
        };
        let at = decode(tick);
        match bucket.keys {
            Keys::One(key) => {
                self.len -= 1;
                out.push((at, key));
            }
            Keys::Many(set) => {
                self.len -= set.len();
                let start = out.len();
                out.extend(set.into_iter().map(|key| (at, key)));
                out[start..].sort_unstable_by(|a, b| a.1.cmp(&b.1));
            }
        }
    }

    /// The earliest occupied place on the wheel; O(levels).
    fn front(&self) -> Option<Front> {
        if self.level0 != 0 {
            let index = u64::from(self.level0.trailing_zeros());
            return Some(Front::Tick((self.elapsed & !SLOT_MASK) | index));
        }
        // Every occupied slot of a level lies after the wheel's time within that level's
        // block, so the lowest set bit is the earliest slot: no wrap-around.
        if let Some(offset) = self.levels.iter().position(|level| level.occupied != 0) {
            let level = offset + 1;
            let index = self.levels[offset].occupied.trailing_zeros() as usize;
            let shift = BITS * level as u32;
            let block = self.elapsed & !((1 << (shift + BITS)) - 1);
            let start = block | ((index as u64) << shift);
            return Some(Front::Slot {
                level,
                index,
                start,
            });
        }
        let first = self.overflow.first()?;
        Some(Front::Overflow(first & !((1 << WHEEL_BITS) - 1)))
    }

    /// Puts `tick` (at or after `elapsed`) on its level; returns its index in its slot's
    /// vector where it has one. `in_heap` says whether the heap already holds it.
    fn attach(&mut self, tick: u64, in_heap: bool) -> Option<usize> {
        let level = level_for(self.elapsed, tick);
        if level == 0 {
            self.level0 |= 1 << (tick & SLOT_MASK);
            return None;
        }
        if level >= LEVELS {
            self.overflow.insert(tick);
            return None;
        }
        let index = slot_index(tick, level);
        let bit = 1 << index;
        let level = &mut self.levels[level - 1];
        let slot = &mut level.slots[index];
        if slot.is_empty() {
            level.occupied |= bit;
            level.heaped = (level.heaped & !bit) | if in_heap { bit } else { 0 };
        } else if level.heaped & bit != 0 && !in_heap {
            self.heap.push(Reverse(tick));
        }
        slot.push(tick);
        Some(slot.len() - 1)
    }

    /// [`attach`](Self::attach) for a tick that already has a bucket.
    fn attach_moved(&mut self, tick: u64, in_heap: bool) {
        if let Some(pos) = self.attach(tick, in_heap) {
            if let Some(bucket) = self.buckets.get_mut(&tick) {
                bucket.pos = pos;
            }
        }
    }

    /// Empties slot `index` of `level` (which `elapsed` has just entered) one level down.
    fn cascade(&mut self, level: usize, index: usize) {
        let level = &mut self.levels[level - 1];
        let bit = 1 << index;
        let in_heap = level.heaped & bit != 0;
        level.occupied &= !bit;
        level.heaped &= !bit;
        let ticks = mem::take(&mut level.slots[index]);
        for tick in ticks {
            self.attach_moved(tick, in_heap);
        }
    }

    /// Unlinks `tick`, whose bucket was just removed, from wherever it sits.
    fn detach(&mut self, at: i64, tick: u64, pos: usize) {
        if at <= self.now {
            debug_assert_eq!(self.overdue.get(pos), Some(&tick));
            unlink(&mut self.overdue, pos, &mut self.buckets);
            return;
        }
        let level = level_for(self.elapsed, tick);
        if level == 0 {
            self.level0 &= !(1 << (tick & SLOT_MASK));
        } else if level >= LEVELS {
            self.overflow.remove(&tick);
        } else {
            let index = slot_index(tick, level);
            let level = &mut self.levels[level - 1];
            let slot = &mut level.slots[index];
            debug_assert_eq!(slot.get(pos), Some(&tick));
            unlink(slot, pos, &mut self.buckets);
            if slot.is_empty() {
                level.occupied &= !(1 << index);
                level.heaped &= !(1 << index);
            }
        }
    }

    /// Recomputes `next` exactly: O(levels) plus amortised heap work.
    fn refresh_next(&mut self) {
        self.next = if !self.overdue.is_empty() {
            // Overdue ticks precede every tick on the levels and are all in the heap.
            self.heap_min()
        } else if self.level0 != 0 {
            Some((self.elapsed & !SLOT_MASK) | u64::from(self.level0.trailing_zeros()))
        } else if let Some(level) = self.levels.iter_mut().find(|level| level.occupied != 0) {
            // The earliest slot holds the earliest tick; once all of it is in the heap, so
            // is the minimum, and any other live entry there is later.
            let index = level.occupied.trailing_zeros() as usize;
            if level.heaped & (1 << index) == 0 {
                level.heaped |= 1 << index;
                self.heap
                    .extend(level.slots[index].iter().map(|&tick| Reverse(tick)));
            }
            self.heap_min()
        } else {
            self.overflow.first().copied()
        };
        self.compact_heap();
    }

    /// The least live tick in the heap, popping stale entries above it.
    fn heap_min(&mut self) -> Option<u64> {
        while let Some(&Reverse(tick)) = self.heap.peek() {
            if self.buckets.contains_key(&tick) {
                return Some(tick);
            }
            self.heap.pop();
        }
        None
    }

    /// Rebuilds the heap without stale or duplicate entries once they dominate it.
    fn compact_heap(&mut self) {
        if self.heap.len() <= 2 * self.buckets.len() + 64 {
            return;
        }
        let mut entries = mem::take(&mut self.heap).into_vec();
        entries.retain(|Reverse(tick)| self.buckets.contains_key(tick));
        entries.sort_unstable();
        entries.dedup();
        self.heap = BinaryHeap::from(entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every internal invariant against the buckets.
    fn check<K: Eq + Hash + Ord>(wheel: &TimingWheel<K>) {
        let timers: usize = wheel
            .buckets
            .values()
            .map(|bucket| match &bucket.keys {
                Keys::One(_) => 1,
                Keys::Many(set) => {
                    assert!(set.len() >= 2, "a set holds two or more keys");
                    set.len()
                }
            })
            .sum();
        assert_eq!(timers, wheel.len, "len");
        let heap: HashSet<u64> = wheel.heap.iter().map(|&Reverse(tick)| tick).collect();
        // Timestamps found in the overdue list, on level 0, on levels 1+, in overflow.
        let mut counts = [0; 4];
        for (&tick, bucket) in &wheel.buckets {
            if decode(tick) <= wheel.now {
                assert_eq!(wheel.overdue[bucket.pos], tick, "overdue position");
                assert!(heap.contains(&tick), "overdue tick in heap");
                counts[0] += 1;
                continue;
            }
            assert!(tick >= wheel.elapsed);
            let level = level_for(wheel.elapsed, tick);
            if level == 0 {
                assert!(wheel.level0 & (1 << (tick & SLOT_MASK)) != 0, "level-0 bit");
                counts[1] += 1;
            } else if level >= LEVELS {
                assert!(wheel.overflow.contains(&tick), "overflow");
                counts[3] += 1;
            } else {
                let index = slot_index(tick, level);
                let lvl = &wheel.levels[level - 1];
                assert_eq!(lvl.slots[index][bucket.pos], tick, "slot position");
                if lvl.heaped & (1 << index) != 0 {
                    assert!(heap.contains(&tick), "heaped slot tick in heap");
                }
                counts[2] += 1;
            }
        }
        let mut in_slots = 0;
        for lvl in &wheel.levels {
            assert_eq!(
                lvl.heaped & !lvl.occupied,
                0,
                "only occupied slots are heaped"
            );
            for (index, slot) in lvl.slots.iter().enumerate() {
                assert_eq!(lvl.occupied & (1 << index) != 0, !slot.is_empty());
                in_slots += slot.len();
            }
        }
        let found = [
            wheel.overdue.len(),
            wheel.level0.count_ones() as usize,
            in_slots,
            wheel.overflow.len(),
        ];
        assert_eq!(counts, found, "no stray timestamps");
        assert_eq!(wheel.next, wheel.buckets.keys().min().copied(), "next");
        let bound = 2 * wheel.buckets.len() + 64;
        assert!(wheel.heap.len() <= bound, "heap bounded");
    }

    fn fired(wheel: &mut TimingWheel<u32>, now: i64) -> Vec<(i64, u32)> {
        let mut out = Vec::new();
        wheel.advance(now, &mut out);
        check(wheel);
        out
    }

    #[test]
    fn fires_in_timestamp_then_key_order() {
        let mut wheel = TimingWheel::new(1_000);
        for (at, key) in [
            (1_500, 3),
            (1_001, 9),
            (1_500, 1),
            (70_000, 2),
            (1_064, 5),
            (1_500, 2),
        ] {
            assert!(wheel.insert(at, key));
        }
        check(&wheel);
        assert_eq!(wheel.len(), 6);
        assert_eq!(fired(&mut wheel, 1_000), vec![]);
        assert_eq!(fired(&mut wheel, 1_064), vec![(1_001, 9), (1_064, 5)]);
        assert_eq!(
            fired(&mut wheel, 2_000),
            vec![(1_500, 1), (1_500, 2), (1_500, 3)]
        );
        assert_eq!(fired(&mut wheel, 69_999), vec![]);
        assert_eq!(fired(&mut wheel, 70_000), vec![(70_000, 2)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_due(), None);
    }

    #[test]
    fn duplicates_are_rejected_and_fire_once() {
        let mut wheel = TimingWheel::new(0);
        assert!(wheel.insert(10, 1));
        assert!(!wheel.insert(10, 1));
        assert!(wheel.insert(10, 2));
        assert!(!wheel.insert(10, 2));
        assert!(wheel.insert(5_000, 1));
        assert!(!wheel.insert(5_000, 1));
        assert_eq!(wheel.len(), 3);
        assert_eq!(
            fired(&mut wheel, 10_000),
            vec![(10, 1), (10, 2), (5_000, 1)]
        );
    }

    #[test]
    fn removed_timers_never_fire() {
        let mut wheel = TimingWheel::new(0);
        assert!(!wheel.remove(10, &1), "missing timer");
        for at in [10, 100, 5_000, 1 << 40] {
            wheel.insert(at, 1);
            wheel.insert(at, 2);
        }
        assert!(wheel.remove(100, &1));
        assert!(!wheel.remove(100, &1));
        assert!(!wheel.remove(100, &3));
        assert!(wheel.remove(5_000, &1));
        assert!(wheel.remove(5_000, &2));
        assert!(wheel.remove(1 << 40, &2));
        assert!(!wheel.contains(5_000, &2));
        assert!(wheel.contains(10, &2));
        check(&wheel);
        assert_eq!(wheel.len(), 4);
        assert_eq!(
            fired(&mut wheel, i64::MAX - 1),
            vec![(10, 1), (10, 2), (100, 2), (1 << 40, 1)]
        );
    }

    #[test]
    fn remove_then_reinsert_fires_exactly_once() {
        let mut wheel = TimingWheel::new(0);
        for at in [3, 300, 300_000, 1 << 38] {
            assert!(wheel.insert(at, 7));
            assert!(wheel.remove(at, &7));
            assert!(wheel.insert(at, 7));
            assert!(wheel.remove(at, &7));
            assert!(wheel.insert(at, 7));
            assert!(!wheel.insert(at, 7));
        }
        check(&wheel);
        assert_eq!(
            fired(&mut wheel, 1 << 39),
            vec![(3, 7), (300, 7), (300_000, 7), (1 << 38, 7)]
        );
        assert_eq!(wheel.next_due(), None);
    }

    #[test]
    fn overdue_timers_fire_at_the_next_advance_even_backwards() {
        let mut wheel = TimingWheel::new(1_000);
        assert!(wheel.insert(1_002, 1));
        assert!(wheel.insert(1_000, 2));
        assert!(wheel.insert(-5, 3));
        assert!(!wheel.insert(1_000, 2));
        assert_eq!(wheel.next_due(), Some(-5));
        assert!(wheel.remove(-5, &3));
        assert_eq!(wheel.next_due(), Some(1_000));
        assert!(wheel.insert(999, 4));
        check(&wheel);
        // Time never moves back, but what was already due fires.
        assert_eq!(fired(&mut wheel, 500), vec![(999, 4), (1_000, 2)]);
        assert_eq!(wheel.now(), 1_000);
        assert_eq!(fired(&mut wheel, 1_002), vec![(1_002, 1)]);
    }

    #[test]
    fn huge_jumps_touch_only_occupied_slots() {
        let mut wheel = TimingWheel::new(0);
        let ats = [
            1,
            63,
            64,
            4_095,
            4_096,
            262_143,
            1 << 24,
            (1 << 36) - 1,
            1 << 36,
            1 << 37,
            1_000_000_000_000,
        ];
        for (key, &at) in ats.iter().enumerate() {
            wheel.insert(at, key as u32);
        }
        check(&wheel);
        assert_eq!(fired(&mut wheel, 999_999_999_999).len(), ats.len() - 1);
        assert_eq!(wheel.next_due(), Some(1_000_000_000_000));
        assert_eq!(
            fired(&mut wheel, 1_000_000_000_000),
            vec![(1_000_000_000_000, 10)]
        );

        // A million single-millisecond steps' worth of jumps across a wide spread.
        let mut wheel = TimingWheel::new(0);
        let mut model = BTreeSet::new();
        let mut rng = XorShift(42);
        for key in 0..10_000u32 {
            let at = rng.below(1 << 50) as i64;
            wheel.insert(at, key);
            model.insert((at, key));
        }
        let mut now = 0;
        while !model.is_empty() {
            now += 1 << 44;
            let due: Vec<_> = model
                .iter()
                .copied()
                .take_while(|&(at, _)| at <= now)
                .collect();
            due.iter().for_each(|timer| {
                model.remove(timer);
            });
            assert_eq!(fired(&mut wheel, now), due);
        }
    }

    #[test]
    fn next_due_is_exact_on_every_level() {
        let mut wheel = TimingWheel::new(100);
        assert_eq!(wheel.next_due(), None);
        for at in [1 << 41, 9_000_017, 400_003, 5_001, 171] {
            wheel.insert(at, 0);
            assert_eq!(wheel.next_due(), Some(at));
        }
        wheel.insert(9_000_013, 1);
        for at in [171, 5_001, 400_003, 9_000_013, 9_000_017] {
            assert_eq!(wheel.next_due(), Some(at));
            assert!(wheel.remove(at, &0) || wheel.remove(at, &1));
            check(&wheel);
        }
        assert_eq!(wheel.next_due(), Some(1 << 41));
        // Firing part of a coarse slot leaves its exact next timestamp.
        wheel.insert(70_001, 0);
        wheel.insert(70_002, 0);
        wheel.insert(70_900, 0);
        assert_eq!(fired(&mut wheel, 70_001), vec![(70_001, 0)]);
        assert_eq!(wheel.next_due(), Some(70_002));
        assert_eq!(fired(&mut wheel, 70_500), vec![(70_002, 0)]);
        assert_eq!(wheel.next_due(), Some(70_900));
    }

    #[test]
    fn deleting_the_earliest_of_a_coarse_slot_repeatedly() {
        // Heartbeat timeouts: each beat deletes the earliest timer and registers a later one.
        let gap = 300_000;
        let mut wheel = TimingWheel::new(0);
        let mut model = BTreeSet::new();
        let mut current = Vec::new();
        for key in 0..20_000u32 {
            wheel.insert(gap + i64::from(key), key);
            model.insert((gap + i64::from(key), key));
            current.push(gap + i64::from(key));
        }
        let mut now = 0;
        for beat in 0..100_000u32 {
            let key = beat % 20_000;
            let old = current[key as usize];
            if beat % 64 == 0 {
                now += 1;
                let mut out = Vec::new();
                wheel.advance(now, &mut out);
                assert!(out.is_empty());
            }
            assert!(wheel.remove(old, &key));
            model.remove(&(old, key));
            let at = now + gap + i64::from(beat);
            assert!(wheel.insert(at, key));
            model.insert((at, key));
            current[key as usize] = at;
            assert_eq!(wheel.next_due(), model.first().map(|&(at, _)| at));
        }
        check(&wheel);
        let mut all = Vec::new();
        wheel.drain_all(&mut all);
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn churn_behind_the_earliest_timer_keeps_the_heap_small() {
        let mut wheel = TimingWheel::new(0);
        wheel.insert(100_000, 0);
        wheel.insert(99_999, 0);
        // Deleting the earliest timer feeds its coarse slot to the heap.
        wheel.remove(99_999, &0);
        assert_eq!(wheel.next_due(), Some(100_000));
        assert_eq!(wheel.heap.len(), 1);
        for round in 0..10_000u32 {
            let at = 100_001 + i64::from(round % 7);
            assert!(wheel.insert(at, round));
            assert!(wheel.remove(at, &round));
            if round % 1_000 == 0 {
                check(&wheel);
            }
        }
        assert!(wheel.heap.len() <= 66, "stale heap entries are dropped");
        check(&wheel);
        assert_eq!(fired(&mut wheel, 100_000), vec![(100_000, 0)]);
    }

    #[test]
    fn drain_all_empties_the_wheel_in_order() {
        let mut wheel = TimingWheel::new(50);
        for (at, key) in [
            (1 << 45, 1),
            (40, 2),
            (51, 3),
            (51, 1),
            (4_000, 9),
            (1 << 20, 0),
        ] {
            wheel.insert(at, key);
        }
        let mut out = vec![(0, 0)];
        wheel.drain_all(&mut out);
        assert_eq!(
            out,
            vec![
                (0, 0),
                (40, 2),
                (51, 1),
                (51, 3),
                (4_000, 9),
                (1 << 20, 0),
                (1 << 45, 1)
            ]
        );
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_due(), None);
        check(&wheel);
        // The wheel stays usable.
        wheel.insert(60, 1);
        assert_eq!(fired(&mut wheel, 60), vec![(60, 1)]);
    }

    #[test]
    fn extreme_timestamps() {
        let mut wheel = TimingWheel::new(i64::MIN);
        for at in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX] {
            assert!(wheel.insert(at, 1));
        }
        check(&wheel);
        assert_eq!(wheel.next_due(), Some(i64::MIN));
        assert_eq!(
            fired(&mut wheel, -1),
            vec![(i64::MIN, 1), (i64::MIN + 1, 1), (-1, 1)]
        );
        assert_eq!(
            fired(&mut wheel, i64::MAX - 1),
            vec![(0, 1), (i64::MAX - 1, 1)]
        );
        assert_eq!(wheel.next_due(), Some(i64::MAX));
        assert_eq!(fired(&mut wheel, i64::MAX), vec![(i64::MAX, 1)]);
        assert!(
            wheel.insert(i64::MAX, 2),
            "at the end of time everything is overdue"
        );
        assert!(wheel.insert(5, 2));
        check(&wheel);
        assert_eq!(fired(&mut wheel, 0), vec![(5, 2), (i64::MAX, 2)]);
    }

    /// Marsaglia's xorshift64*.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random inserts, removes and advances over short and very long horizons, checked
    /// step by step against an ordered set.
    #[test]
    fn matches_an_ordered_set_model() {
        for seed in 1..=24u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let start = match seed % 4 {
                0 => 1_700_000_000_000,
                1 => 0,
                2 => -(1 << 40) - 17,
                _ => rng.next() as i64 >> 2,
            };
            let mut wheel = TimingWheel::new(start);
            let mut model: BTreeSet<(i64, u32)> = BTreeSet::new();
            let mut now = start;
            for step in 0..6_000 {
                let key = rng.below(12) as u32;
                match rng.below(10) {
                    0..=3 => {
                        let at = random_time(&mut rng, now, &model);
                        assert_eq!(wheel.insert(at, key), model.insert((at, key)), "insert");
                    }
                    4..=5 => {
                        let at = random_time(&mut rng, now, &model);
                        assert_eq!(wheel.remove(at, &key), model.remove(&(at, key)), "remove");
                    }
                    6 => {
                        let at = random_time(&mut rng, now, &model);
                        assert_eq!(wheel.contains(at, &key), model.contains(&(at, key)));
                    }
                    _ => {
                        let to = match rng.below(6) {
                            0 => now.saturating_sub(rng.below(100) as i64),
                            1 => now.saturating_add(rng.below(8) as i64),
                            2 => now.saturating_add(rng.below(400) as i64),
                            3 => now.saturating_add(rng.below(300_000) as i64),
                            4 => now.saturating_add(rng.below(1 << 38) as i64),
                            _ => model.first().map_or(now, |&(at, _)| at.max(now)),
                        };
                        now = now.max(to);
                        let due: Vec<_> = model
                            .iter()
                            .copied()
                            .take_while(|&(at, _)| at <= now)
                            .collect();
                        due.iter().for_each(|timer| {
                            model.remove(timer);
                        });
                        let mut out = Vec::new();
                        wheel.advance(to, &mut out);
                        assert_eq!(out, due, "seed {seed} step {step}: advance to {to}");
                        assert_eq!(wheel.now(), now);
                    }
                }
                assert_eq!(wheel.len(), model.len());
                assert_eq!(
                    wheel.next_due(),
                    model.first().map(|&(at, _)| at),
                    "next_due"
                );
                if step % 97 == 0 {
                    check(&wheel);
                }
            }
            check(&wheel);
            let mut out = Vec::new();
            wheel.drain_all(&mut out);
            assert_eq!(out, model.into_iter().collect::<Vec<_>>(), "drain_all");
        }
    }

    /// A timestamp near `now` on one of several horizons, or an existing timer's.
    fn random_time(rng: &mut XorShift, now: i64, model: &BTreeSet<(i64, u32)>) -> i64 {
        let offset = match rng.below(9) {
            0 => rng.below(40) as i64 - 20,
            1 => rng.below(64) as i64,
            2 => rng.below(5_000) as i64,
            3 => rng.below(300_000) as i64,
            4 => rng.below(1 << 30) as i64,
            5 => rng.below(1 << 40) as i64,
            6 => rng.below(1 << 62) as i64,
            _ => {
                if let Some(&(at, _)) = model.iter().nth(rng.below(model.len() as u64 + 1) as usize)
                {
                    return at;
                }
                0
            }
        };
        now.saturating_add(offset)
    }
}
