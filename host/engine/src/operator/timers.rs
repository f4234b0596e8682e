//! Timers through a keyed operator: event-time timers as the watermark advances,
//! processing-time timers as the clock is read, every pending one at the end of input,
//! and timers registered again after a failure. With the `disk` state backend the
//! dormant keys of due timers wake first, a bounded number at a time.

use super::{Activity, KeyedOperator, OperatorError};
use crate::runtime::FiredTimer;
use weir_core::state::KeyId;
use weir_core::time::timers::{FiringPlace, TimeDomain};
use weir_core::time::{wall_clock_ms, Timestamp, END_OF_TIME};

impl KeyedOperator {
    /// Fires the event-time timers due at the current watermark. The run calls this
    /// after it has dealt with a timer's failure (sent the timer to the dead letters, or
    /// rolled back and registered it again), so that the rest of the advance fires.
    pub fn resume_event_timers(&mut self) -> Result<(), OperatorError> {
        self.fire_event_timers(self.watermark.current())
    }

    /// Registers again a timer whose firing failed, so that a rolled-back version fires
    /// it (a failed timer is no longer pending). The run calls this after a
    /// [`rollback`](Self::rollback) for a timer that failed while watermarks or
    /// processing-time timers were firing, then goes on firing with
    /// [`resume_event_timers`](Self::resume_event_timers) or
    /// [`fire_processing_timers`](Self::fire_processing_timers).
    /// Fails only if the `disk` backend's store cannot be read.
    pub fn register_timer_again(
        &mut self,
        domain: TimeDomain,
        at: Timestamp,
        key: &[u8],
    ) -> anyhow::Result<()> {
        let id = self.host.intern(key)?;
        self.host.timer_for(id, domain, at, true);
        Ok(())
    }

    /// Registers again a timer whose firing failed (so that a rolled-back version fires
    /// it), then, for an event-time timer, fires what is due at the current watermark; a
    /// processing-time timer fires at the next reading of the clock. The run calls this
    /// after a [`rollback`](Self::rollback) for a timer that failed within
    /// [`process_elements`](Self::process_elements), then hands over the elements after
    /// the one the failure was reported on.
    pub fn retry_timer(
        &mut self,
        domain: TimeDomain,
        at: Timestamp,
        key: &[u8],
    ) -> Result<(), OperatorError> {
        self.register_timer_again(domain, at, key)
            .map_err(OperatorError::State)?;
        match domain {
            TimeDomain::EventTime => self.fire_event_timers(self.watermark.current()),
            TimeDomain::ProcessingTime => Ok(()),
        }
    }

    /// Fires processing-time timers due at `now`, in timestamp and key order. The run
    /// calls this with the wall clock after every run of records when such timers are
    /// pending, and whenever no record is ready; after recovering from a timer's failure
    /// it calls it again with the same `now`.
    pub fn fire_processing_timers(&mut self, now: Timestamp) -> Result<(), OperatorError> {
        self.expire_state(now);
        loop {
            let through = self.wake_due(TimeDomain::ProcessingTime, now)?;
            while let Some((at, key)) = self.host.timers.pop_processing_due(through) {
                self.fire(TimeDomain::ProcessingTime, at, key)?;
            }
            self.evict_state()?;
            if through == FiringPlace::end_of(now) {
                return Ok(());
            }
        }
    }

    /// With the `disk` backend, wakes the dormant keys of timers of `domain` due by
    /// `up_to`, a bounded number at a time; returns the place in firing order through
    /// which timers may fire now (the end of `up_to` once every due one is in memory).
    /// Called before timers fire.
    pub(crate) fn wake_due(
        &mut self,
        domain: TimeDomain,
        up_to: Timestamp,
    ) -> Result<FiringPlace, OperatorError> {
        self.host
            .wake_due(domain, up_to)
            .map_err(OperatorError::State)
    }

    /// At end of input: fires every remaining processing-time timer in timestamp order
    /// (and any event-time timer those register), so no aggregate waiting on one is lost;
    /// then completes every sink ([`close_sinks`](Self::close_sinks)).
    ///
    /// The run calls this once every input has ended (the watermark is at the end of
    /// time, so every event-time timer has fired); after a timer's failure it recovers
    /// from, it calls this again. Not called when the run is stopped: pending timers
    /// then stay in the checkpoint.
    pub fn finish(&mut self) -> Result<(), OperatorError> {
        debug_assert_eq!(self.watermark.current(), END_OF_TIME);
        // A processing-time timer may register an event-time timer, which is due at once
        // (the watermark is at the end of time): keep going until both are drained.
        loop {
            let mut fired = false;
            for domain in [TimeDomain::ProcessingTime, TimeDomain::EventTime] {
                // Dormant keys' timers come in a bounded number at a time, with an
                // eviction between.
                loop {
                    let through = self.wake_due(domain, END_OF_TIME)?;
                    let all_awake = through == FiringPlace::end_of(END_OF_TIME);
                    loop {
                        if self.stopping_at(END_OF_TIME) {
                            return Err(OperatorError::Stopped);
                        }
                        let next = match domain {
                            TimeDomain::ProcessingTime if all_awake => {
                                self.host.timers.pop_any_processing()
                            }
                            TimeDomain::ProcessingTime => {
                                self.host.timers.pop_processing_due(through)
                            }
                            TimeDomain::EventTime => self.host.timers.pop_event_due(through),
                        };
                        let Some((at, key)) = next else {
                            break;
                        };
                        self.fire(domain, at, key)?;
                        fired = true;
                    }
                    if all_awake {
                        break;
                    }
                    self.evict_state()?;
                }
            }
            if !fired {
                break;
            }
        }
        self.evict_state()?;
        self.close_sinks()
    }

    /// When the next processing-time timer is due, if any. The run asks when it waits
    /// for input, so as to wait no longer than that.
    pub fn next_processing_due(&self) -> Option<Timestamp> {
        let in_memory = self.host.timers.next_processing_due();
        if self.host.keys.dormant_timers(TimeDomain::ProcessingTime) == 0 {
            return in_memory;
        }
        // A store that cannot be read says "now": firing then reports its failure.
        let dormant = (self.host.keys)
            .next_dormant_timer(TimeDomain::ProcessingTime)
            .unwrap_or(Some(Timestamp::MIN));
        in_memory.into_iter().chain(dormant).min()
    }

    /// Whether any processing-time timer is pending. The run asks after every run of
    /// records, to read the clock and fire them only if so.
    pub fn has_processing_timers(&self) -> bool {
        self.host.pending_timers(TimeDomain::ProcessingTime) > 0
    }

    /// Fires the event-time timers due at `watermark`, in timestamp order (then key
    /// order): in batches when the function takes them, else one call each.
    pub(super) fn fire_event_timers(&mut self, watermark: Timestamp) -> Result<(), OperatorError> {
        self.host.watermark = watermark;
        loop {
            let through = self.wake_due(TimeDomain::EventTime, watermark)?;
            self.fire_event_timers_through(through, watermark)?;
            if through == FiringPlace::end_of(watermark) {
                return Ok(());
            }
            self.evict_state()?;
        }
    }

    /// Fires the event-time timers due through `through` in an advance to `watermark`.
    fn fire_event_timers_through(
        &mut self,
        through: FiringPlace,
        watermark: Timestamp,
    ) -> Result<(), OperatorError> {
        if self.fire_event_timers_in_batches(through, watermark)? {
            return Ok(());
        }
        loop {
            if self.stopping_at(watermark) {
                return Err(OperatorError::Stopped);
            }
            let Some((at, key)) = self.host.timers.pop_event_due(through) else {
                return Ok(());
            };
            self.fire(TimeDomain::EventTime, at, key)?;
        }
    }

    pub(super) fn fire(
        &mut self,
        domain: TimeDomain,
        at: Timestamp,
        key: KeyId,
    ) -> Result<(), OperatorError> {
        // While the timer is still listed on its key, which keeps the key. An event-time
        // timer sees what expires after its own time, whatever the watermark is now.
        if self.host.states.any_ttl() {
            let event_time = match domain {
                TimeDomain::EventTime => at,
                TimeDomain::ProcessingTime => self.host.watermark,
            };
            self.expire_state_at(event_time, wall_clock_ms());
        }
        self.host.keys.timer_removed(key, domain, at);
        match domain {
            TimeDomain::EventTime => self.counters.event_timers += 1,
            TimeDomain::ProcessingTime => self.counters.processing_timers += 1,
        }
        self.mark_used([key]);
        self.host.enter(key, at);
        // The key's bytes are needed by the UDF while the table may change; copy them.
        let key_bytes = weir_core::state::Key::from_slice(self.host.keys.entry(key).key());
        let timer = FiredTimer {
            domain,
            timestamp: at,
            key: &key_bytes,
        };
        let result = self.function.on_timer(&mut self.host, timer);
        if result.is_err() {
            self.host.undo_call();
        }
        self.host.leave();
        self.flush_emitted(result.map_err(|error| OperatorError::Udf {
            activity: Activity::Timer {
                domain,
                timestamp: at,
                key: key_bytes.to_vec(),
            },
            error,
        }))?;
        self.passed_calls(1);
        Ok(())
    }
}
