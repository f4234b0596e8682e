//! The timer service: pending event-time and processing-time timers of every key.
//!
//! Timers are unique per (key, domain, timestamp), like Flink's.
//!
//! **One order, both domains.** Timers due at the same time fire in the order of their
//! keys' [`tie_order`](crate::key::tie_order) (the FNV-1a hash of the key's bytes), not
//! of key ids, so a run restored from a checkpoint (which interns keys in another order)
//! fires them in the same order as the run that wrote it. Two keys whose 64-bit hashes
//! collide fall back to key-id order. The test hosts of every SDK implement the same
//! order (`docs/pipeline.md`, "Timers").
//!
//! Event-time timers sit in an ordered set and are popped one at a time while the
//! watermark covers them, so a timer registered while timers fire still fires in the
//! same watermark advance. Processing-time timers sit on a hierarchical
//! [`TimingWheel`]; the ones due when the clock is read are staged in that order and
//! popped one at a time, so a timer deleted by an earlier firing never fires, and one
//! registered while they fire waits for the next reading of the clock.

use super::wheel::TimingWheel;
use super::Timestamp;
use crate::key::KeyId;
use std::collections::{BTreeSet, VecDeque};

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    /// The records' own time: fires when the watermark reaches the timer's time.
    EventTime,
    /// The wall clock (milliseconds since the Unix epoch): fires when the host reads
    /// the clock at or past the timer's time.
    ProcessingTime,
}

impl TimeDomain {
    /// The domain's name in messages and status figures: `event-time` or
    /// `processing-time`.
    pub fn label(self) -> &'static str {
        match self {
            TimeDomain::EventTime => "event-time",
            TimeDomain::ProcessingTime => "processing-time",
        }
    }
}

/// A place in firing order: a time and, among the keys with a timer due then, a key's
/// [`tie_order`](crate::key::tie_order). Places compare in firing order. The engine
/// fires timers *through* a place (every timer before it, and at it) when the `disk`
/// backend has woken the dormant keys of the timers due through it only, so that keys
/// due at one time wake a bounded number at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FiringPlace {
    /// The time.
    pub at: Timestamp,
    /// The key's tie order at that time.
    pub tie: u64,
}

impl FiringPlace {
    /// The place before every timer due at `at`.
    pub fn start_of(at: Timestamp) -> Self {
        Self { at, tie: 0 }
    }

    /// The place after every timer due at `at`.
    pub fn end_of(at: Timestamp) -> Self {
        Self { at, tie: u64::MAX }
    }

    /// Whether a timer at `at` of a key whose tie order is `tie` fires through here.
    pub fn covers(self, at: Timestamp, tie: u64) -> bool {
        (at, tie) <= (self.at, self.tie)
    }

    /// The next place, if any.
    pub fn next(self) -> Option<Self> {
        match self.tie.checked_add(1) {
            Some(tie) => Some(Self { at: self.at, tie }),
            None => Some(Self {
                at: self.at.checked_add(1)?,
                tie: 0,
            }),
        }
    }
}

impl From<Timestamp> for FiringPlace {
    /// The place after every timer due at the time.
    fn from(at: Timestamp) -> Self {
        Self::end_of(at)
    }
}

/// An event-time timer's place in firing order: time, then the key's stable hash
/// ([`crate::key::tie_order`]), then its id (only if two keys' hashes collide).
pub type EventTimer = (Timestamp, u64, KeyId);

/// The pending timers of every key, both domains, in firing order (see the module docs
/// for the order and for how timers registered or deleted while timers fire behave).
#[derive(Clone)]
pub struct TimerService {
    event: BTreeSet<EventTimer>,
    /// Processing-time timers by (the key's tie order, key id), so that the wheel hands
    /// out the timers of one timestamp in the same order as event time does.
    processing: TimingWheel<(u64, KeyId)>,
    /// Processing-time timers taken off the wheel as due, not fired yet, in order.
    staged: VecDeque<(Timestamp, u64, KeyId)>,
}

impl TimerService {
    /// A timer service whose processing-time wheel starts at `now`.
    pub fn new(now: Timestamp) -> Self {
        Self {
            event: BTreeSet::new(),
            processing: TimingWheel::new(now),
            staged: VecDeque::new(),
        }
    }

    /// Registers a timer of `key`, whose stable hash is `tie`; returns false if it
    /// already existed.
    pub fn register(&mut self, domain: TimeDomain, key: KeyId, tie: u64, at: Timestamp) -> bool {
        match domain {
            TimeDomain::EventTime => self.event.insert((at, tie, key)),
            TimeDomain::ProcessingTime => {
                !self.staged.contains(&(at, tie, key)) && self.processing.insert(at, (tie, key))
            }
        }
    }

    /// Registers a timer of a key woken from the `disk` backend's store. Like
    /// [`register`](Self::register), except that a processing-time timer that sorts
    /// before timers already staged as due joins them in order: the keys of one time
    /// wake a bounded number at a time while that time's timers fire.
    pub fn register_woken(&mut self, domain: TimeDomain, key: KeyId, tie: u64, at: Timestamp) {
        let timer = (at, tie, key);
        match (domain, self.staged.back()) {
            (TimeDomain::ProcessingTime, Some(&last)) if timer < last => {
                if let Err(pos) = self.staged.binary_search(&timer) {
                    self.staged.insert(pos, timer);
                }
            }
            _ => {
                self.register(domain, key, tie, at);
            }
        }
    }

    /// Deletes a timer; returns false if there was none.
    pub fn delete(&mut self, domain: TimeDomain, key: KeyId, tie: u64, at: Timestamp) -> bool {
        match domain {
            TimeDomain::EventTime => self.event.remove(&(at, tie, key)),
            TimeDomain::ProcessingTime => {
                if let Some(pos) = self.staged.iter().position(|&t| t == (at, tie, key)) {
                    self.staged.remove(pos);
                    true
                } else {
                    self.processing.remove(at, &(tie, key))
                }
            }
        }
    }

    /// Pops the earliest event-time timer through `through` (a watermark: every timer
    /// at or before it).
    pub fn pop_event_due(&mut self, through: impl Into<FiringPlace>) -> Option<(Timestamp, KeyId)> {
        let through = through.into();
        match self.event.first() {
            Some(&(at, tie, _)) if through.covers(at, tie) => {
                self.event.pop_first().map(|(at, _, key)| (at, key))
            }
            _ => None,
        }
    }

    /// Event-time timers after `after` (exclusive) and through `through`, in firing
    /// order, without removing them: a batch sends them ahead and removes them only once
    /// they have fired.
    pub fn event_due_between(
        &self,
        after: Option<EventTimer>,
        through: impl Into<FiringPlace>,
    ) -> impl Iterator<Item = EventTimer> + '_ {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let through = through.into();
        let lower = after.map_or(Unbounded, Excluded);
        let upper = (through.at, through.tie, KeyId::MAX);
        // An `after` past the upper end is an empty range (a BTreeSet range would panic).
        let lower = match lower {
            Excluded(after) if after >= upper => Included(upper),
            lower => lower,
        };
        let empty = matches!(lower, Included(_));
        self.event
            .range((lower, Included(upper)))
            .filter(move |_| !empty)
            .copied()
    }

    /// Pops the earliest processing-time timer through `through` (the clock's reading:
    /// every timer at or before it).
    pub fn pop_processing_due(
        &mut self,
        through: impl Into<FiringPlace>,
    ) -> Option<(Timestamp, KeyId)> {
        let through = through.into();
        if self.staged.is_empty() {
            let mut due = Vec::new();
            self.processing.advance(through.at, &mut due);
            self.staged
                .extend(due.into_iter().map(|(at, (tie, key))| (at, tie, key)));
        }
        match self.staged.front() {
            Some(&(at, tie, _)) if through.covers(at, tie) => {
                self.staged.pop_front().map(|(at, _, key)| (at, key))
            }
            _ => None,
        }
    }

    /// Pops the earliest processing-time timer whatever its time (end of input).
    pub fn pop_any_processing(&mut self) -> Option<(Timestamp, KeyId)> {
        if self.staged.is_empty() {
            let mut all = Vec::new();
            self.processing.drain_all(&mut all);
            self.staged
                .extend(all.into_iter().map(|(at, (tie, key))| (at, tie, key)));
        }
        self.staged.pop_front().map(|(at, _, key)| (at, key))
    }

    /// When the next processing-time timer is due, to sleep until then while idle.
    pub fn next_processing_due(&self) -> Option<Timestamp> {
        match (self.staged.front(), self.processing.next_due()) {
            (Some(&(at, _, _)), _) => Some(at),
            (None, next) => next,
        }
    }

    /// How many timers of `domain` are pending (for processing time, those staged as
    /// due but not popped yet included).
    pub fn pending(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.len(),
            TimeDomain::ProcessingTime => self.processing.len() + self.staged.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimeDomain::*;

    #[test]
    fn event_timers_pop_in_order_and_dedup() {
        let mut timers = TimerService::new(0);
        assert!(timers.register(EventTime, 2, 2, 300));
        assert!(timers.register(EventTime, 1, 1, 300));
        assert!(timers.register(EventTime, 1, 1, 100));
        assert!(
            !timers.register(EventTime, 1, 1, 100),
            "same key, domain and time: one timer"
        );
        assert!(
            timers.register(ProcessingTime, 1, 1, 100),
            "other domain: another timer"
        );
        assert_eq!(timers.pending(EventTime), 3);
        assert_eq!(timers.pop_event_due(99), None);
        assert_eq!(timers.pop_event_due(300), Some((100, 1)));
        assert_eq!(timers.pop_event_due(300), Some((300, 1)));
        assert_eq!(timers.pop_event_due(300), Some((300, 2)));
        assert_eq!(timers.pop_event_due(300), None);
    }

    #[test]
    fn same_time_timers_fire_in_key_hash_order_not_id_order() {
        let mut timers = TimerService::new(0);
        timers.register(EventTime, 1, 900, 50);
        timers.register(EventTime, 2, 100, 50);
        assert_eq!(timers.pop_event_due(50), Some((50, 2)));
        assert_eq!(timers.pop_event_due(50), Some((50, 1)));
    }

    #[test]
    fn same_time_processing_timers_fire_in_key_hash_order_too() {
        let mut timers = TimerService::new(0);
        timers.register(ProcessingTime, 1, 900, 50);
        timers.register(ProcessingTime, 2, 100, 50);
        timers.register(ProcessingTime, 3, 500, 50);
        timers.register(ProcessingTime, 4, 1, 60);
        assert_eq!(timers.pop_processing_due(100), Some((50, 2)));
        assert_eq!(timers.pop_processing_due(100), Some((50, 3)));
        assert_eq!(timers.pop_processing_due(100), Some((50, 1)));
        assert_eq!(timers.pop_processing_due(100), Some((60, 4)));
        assert!(!timers.delete(ProcessingTime, 1, 900, 70));
    }

    /// Timers fire through a place inside a time; keys woken after, whose timers sort
    /// among those already staged, fire in their place, on both clocks.
    #[test]
    fn timers_fire_through_a_place_and_woken_ones_join_in_order() {
        let mut timers = TimerService::new(0);
        for domain in [EventTime, ProcessingTime] {
            timers.register(domain, 1, 100, 50);
            timers.register(domain, 2, 900, 50);
            let through = FiringPlace { at: 50, tie: 100 };
            let pop = |timers: &mut TimerService, through: FiringPlace| match domain {
                EventTime => timers.pop_event_due(through),
                ProcessingTime => timers.pop_processing_due(through),
            };
            assert_eq!(pop(&mut timers, through), Some((50, 1)));
            assert_eq!(pop(&mut timers, through), None, "key 2 is past the place");
            timers.register_woken(domain, 3, 500, 50);
            timers.register_woken(domain, 4, 50, 70);
            let end = FiringPlace::end_of(100);
            assert_eq!(pop(&mut timers, end), Some((50, 3)));
            assert_eq!(pop(&mut timers, end), Some((50, 2)));
            assert_eq!(pop(&mut timers, end), Some((70, 4)));
            assert_eq!(pop(&mut timers, end), None);
        }
    }

    #[test]
    fn a_firing_place_steps_to_the_next_time_after_the_last_tie() {
        let last = FiringPlace::end_of(5);
        assert_eq!(last.next(), Some(FiringPlace::start_of(6)));
        assert_eq!(FiringPlace::end_of(i64::MAX).next(), None);
        assert!(FiringPlace::start_of(6) > last && last.covers(5, u64::MAX));
    }

    #[test]
    fn deleting_a_missing_timer_is_a_no_op() {
        let mut timers = TimerService::new(0);
        assert!(!timers.delete(EventTime, 7, 7, 5));
        assert!(!timers.delete(ProcessingTime, 7, 7, 5));
        timers.register(EventTime, 7, 7, 5);
        assert!(timers.delete(EventTime, 7, 7, 5));
        assert_eq!(timers.pop_event_due(i64::MAX), None);
    }

    #[test]
    fn staged_processing_timers_can_still_be_deleted() {
        let mut timers = TimerService::new(1_000);
        timers.register(ProcessingTime, 1, 1, 1_010);
        timers.register(ProcessingTime, 1, 1, 1_020);
        timers.register(ProcessingTime, 2, 2, 5_000);
        assert_eq!(timers.next_processing_due(), Some(1_010));
        assert_eq!(timers.pop_processing_due(1_500), Some((1_010, 1)));
        // Firing the first timer deletes the second, which is already staged as due.
        assert!(timers.delete(ProcessingTime, 1, 1, 1_020));
        assert!(!timers.register(ProcessingTime, 2, 2, 5_000));
        assert_eq!(timers.pop_processing_due(1_500), None);
        assert_eq!(timers.pop_any_processing(), Some((5_000, 2)));
        assert_eq!(timers.pending(ProcessingTime), 0);
    }
}
