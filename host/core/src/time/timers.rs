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

    /// Pops the earliest event-time timer at or before `watermark`.
    pub fn pop_event_due(&mut self, watermark: Timestamp) -> Option<(Timestamp, KeyId)> {
        match self.event.first() {
            Some(&(at, _, _)) if at <= watermark => {
                self.event.pop_first().map(|(at, _, key)| (at, key))
            }
            _ => None,
        }
    }

    /// Event-time timers after `after` (exclusive) and at or before `upto`, in firing
    /// order, without removing them: a batch sends them ahead and removes them only once
    /// they have fired.
    pub fn event_due_between(
        &self,
        after: Option<EventTimer>,
        upto: Timestamp,
    ) -> impl Iterator<Item = EventTimer> + '_ {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let lower = after.map_or(Unbounded, Excluded);
        self.event
            .range((lower, Included((upto, u64::MAX, KeyId::MAX))))
            .copied()
    }

    /// Pops the earliest processing-time timer at or before `now`.
    pub fn pop_processing_due(&mut self, now: Timestamp) -> Option<(Timestamp, KeyId)> {
        if self.staged.is_empty() {
            let mut due = Vec::new();
            self.processing.advance(now, &mut due);
            self.staged
                .extend(due.into_iter().map(|(at, (tie, key))| (at, tie, key)));
        }
        self.staged.pop_front().map(|(at, _, key)| (at, key))
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
