//! Runs of records through a keyed operator: handed to a function that takes batches as
//! one call with the event-time timers that fall due between them (replayed one call at a
//! time when a batch fails), or one call each to one that does not.

use super::{KeyedOperator, OperatorError};
use crate::runtime::{BatchEntry, CallError, ElementRef, HostServices};
use weir_core::state::KeyId;
use weir_core::time::timers::{EventTimer, FiringPlace, TimeDomain};
use weir_core::time::{wall_clock_ms, Timestamp, END_OF_TIME};

impl KeyedOperator {
    /// Processes a run of elements (source index, element) in order: in batches when the
    /// function takes them, else one call each; the timers that fall due between them
    /// fire in between, and those due at the last one's watermark before it returns.
    ///
    /// The run calls this for every run of records its merge hands out (at most a
    /// read-ahead's worth, in timestamp order across the inputs). A failure gives the
    /// index in `elements` it was reported on, either the element whose call failed or
    /// the one after whose watermark advance a timer failed; what came before it is
    /// processed and its output written. The run then sends that element (or timer) to
    /// the dead letters, or rolls back, and calls this again with the elements after it
    /// (or, after a rolled-back element, from it).
    pub fn process_elements(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
    ) -> Result<(), (usize, OperatorError)> {
        if elements.is_empty() {
            return Ok(());
        }
        let mut next = 0;
        while next < elements.len() {
            next = if self.function.takes_batches() && self.batch_limit > 0 {
                self.process_batch(elements, next)?
            } else {
                let (source, element) = elements[next];
                self.process_element(source, element)
                    .map_err(|e| (next, e))?;
                next + 1
            };
        }
        // A batch that stopped inside an advance leaves timers of that advance to fire;
        // they must not wait for more input.
        let last = elements.len() - 1;
        if let Some(watermark) = self.unfinished_advance.take() {
            self.fire_event_timers(watermark).map_err(|e| (last, e))?;
        }
        self.evict_state().map_err(|e| (last, e))
    }

    /// Sends `elements[start..]` (as much as fits) with the timers due between them as one
    /// batch; returns where the next batch starts.
    fn process_batch(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
        start: usize,
    ) -> Result<usize, (usize, OperatorError)> {
        let limit = self.batch_limit;
        // Expired state goes before the batch's keys are interned (it may release some).
        // A batch that starts with the timers of an unfinished advance removes what
        // expired by the first one's time, not by the watermark's.
        if let Some(advance) = self.unfinished_advance {
            // The first timer due may be a dormant key's (the `disk` backend).
            self.wake_due(TimeDomain::EventTime, advance)
                .map_err(|e| (start, e))?;
        }
        let event_clock = self
            .unfinished_advance
            .and_then(|advance| self.host.timers.event_due_between(None, advance).next())
            .map_or(self.host.watermark, |(at, _, _)| {
                at.min(self.host.watermark)
            });
        self.expire_state_at(event_clock, wall_clock_ms());
        // No entry of the batch may see an entry that expires on the way. The batch ends
        // before an element whose key has an entry expiring by the element's watermark,
        // and before the timers of an advance if one of their keys has (the next batch
        // starts by removing them); and at the element whose watermark advance reaches
        // the shortest event-time time-to-live past the watermark now, for what the
        // batch writes itself. Keys the batch does not touch expire before the next one.
        let ttl = self.host.states.shortest_ttl(TimeDomain::EventTime);
        let ttl_limit = ttl.map_or(END_OF_TIME, |ttl| self.host.watermark.saturating_add(ttl));
        let expires_by = |host: &HostServices, key: KeyId, at: Timestamp| {
            ttl.is_some()
                && host
                    .keys
                    .expiry_of(key, TimeDomain::EventTime)
                    .is_some_and(|due| due <= at)
        };
        let mut entries = Vec::with_capacity(limit.min(2 * (elements.len() - start) + 8));
        // For each entry, the last element (counted from `start`) it stands for: its own
        // index for an element, and the other shards' elements folded into it after it;
        // for a timer, the element whose advance made it due (`None`: one before `start`).
        let mut entry_ends: Vec<Option<usize>> = Vec::with_capacity(entries.capacity());
        let mut watermark = self.watermark.clone();
        let mut last_timer = None;
        // An advance that an earlier batch stopped inside finishes first.
        let unfinished = self.unfinished_advance.take();
        let mut full = false;
        if let Some(advance) = unfinished {
            full = !self
                .push_due_timers(&mut entries, &mut last_timer, advance)
                .map_err(|e| (start, e))?;
            entry_ends.resize(entries.len(), None);
        }
        let mut taken = 0;
        for &(source, element) in &elements[start..] {
            if full || entries.len() >= limit {
                break;
            }
            if !self.owns(element.group) {
                // Another shard's element: its advance is folded into the element before
                // it (whose call then sees the watermark the next element starts from,
                // as the one-call path would have it), or fires its timers here.
                let before = watermark.current();
                let after = watermark
                    .observe(source, element.timestamp)
                    .unwrap_or(before);
                let index = taken;
                taken += 1;
                if after > before {
                    if let Some(BatchEntry::Element {
                        watermark_after, ..
                    }) = entries.last_mut()
                    {
                        *watermark_after = after;
                        *entry_ends.last_mut().expect("one per entry") = Some(index);
                    }
                    let pushed = self
                        .push_advance(&mut entries, &mut last_timer, after, ttl_limit)
                        .map_err(|e| (start + index, e))?;
                    entry_ends.resize(entries.len(), Some(index));
                    if !pushed {
                        break;
                    }
                }
                continue;
            }
            let key = (self.host.intern(element.key))
                .map_err(|e| (start + taken, OperatorError::State(e)))?;
            let before = watermark.current();
            // (Never the first entry: what expired by the batch's start is gone.)
            if !entries.is_empty() && expires_by(&self.host, key, before) {
                break;
            }
            let after = watermark
                .observe(source, element.timestamp)
                .unwrap_or(before);
            entries.push(BatchEntry::Element {
                element,
                key,
                watermark: before,
                watermark_after: after,
            });
            entry_ends.push(Some(taken));
            taken += 1;
            if after > before {
                let pushed = self
                    .push_advance(&mut entries, &mut last_timer, after, ttl_limit)
                    .map_err(|e| (start + taken - 1, e))?;
                entry_ends.resize(entries.len(), Some(taken - 1));
                if !pushed {
                    break;
                }
            }
        }
        if entries.is_empty() {
            // Only other shards' elements, and no timer due: nothing to call.
            for &(source, element) in &elements[start..start + taken] {
                self.watermark.observe(source, element.timestamp);
            }
            self.host.watermark = self.watermark.current();
            return Ok(start + taken);
        }
        self.mark_used(entries.iter().map(BatchEntry::key));
        let result = self.function.process_batch(&mut self.host, &entries);
        let batch = match result {
            Ok(batch) => batch,
            Err(error) => {
                self.batch_failed(&error);
                return self.replay(elements, start, taken, unfinished);
            }
        };

        for entry in &entries[..batch.consumed] {
            match *entry {
                BatchEntry::Element {
                    element, watermark, ..
                } => {
                    if element.timestamp <= watermark {
                        self.counters.late += 1;
                    }
                    self.counters.elements += 1;
                }
                BatchEntry::Timer { domain, .. } => match domain {
                    TimeDomain::EventTime => self.counters.event_timers += 1,
                    TimeDomain::ProcessingTime => self.counters.processing_timers += 1,
                },
            }
        }
        // The elements done: all taken if every entry was, else up to the last one the
        // consumed entries stand for (the next batch reads the rest again).
        let consumed_elements = if batch.consumed == entries.len() {
            taken
        } else {
            entry_ends[batch.consumed - 1].map_or(0, |end| end + 1)
        };
        for &(source, element) in &elements[start..start + consumed_elements] {
            self.watermark.observe(source, element.timestamp);
        }
        self.counters.event_timers -= batch.skipped as u64;
        self.passed_calls(batch.consumed as u64);
        self.host.watermark = self.watermark.current();
        // Where the function stopped decides whether an advance is still firing: after an
        // element that advanced the watermark, or after a timer, the timers due at that
        // watermark (including ones just registered) fire before anything else. After an
        // element that did not advance it, a timer it registered at or before the
        // watermark waits for the next advance.
        let (unfinished, reached) = match entries[batch.consumed - 1] {
            BatchEntry::Element {
                watermark,
                watermark_after,
                ..
            } if watermark_after > watermark => (Some(watermark_after), watermark_after),
            BatchEntry::Timer { watermark, .. } => (Some(watermark), watermark),
            BatchEntry::Element { watermark, .. } => (None, watermark),
        };
        // Other shards' elements after the last entry may have moved the watermark on:
        // the timers of that advance (ones just registered included) are still to fire.
        let now = self.watermark.current();
        self.unfinished_advance = if now > reached { Some(now) } else { unfinished };
        self.flush_emitted(Ok(()))
            .map_err(|e| (start + consumed_elements.saturating_sub(1), e))?;
        Ok(start + consumed_elements)
    }

    /// Fires the event-time timers due at `watermark` in batches, as many as a batch
    /// holds each, when the function takes batches: a watermark marker of an upstream
    /// stage, an idle source or the end of input can make thousands due at once. Says
    /// whether all fired; `false` leaves the rest to one call each: always for a function
    /// that takes no batches or a pipeline with a time-to-live (state then expires
    /// between two timers), and after a failed batch, whose timers the one-call path runs
    /// again and so reports a failure on its exact timer.
    pub(super) fn fire_event_timers_in_batches(
        &mut self,
        through: FiringPlace,
        watermark: Timestamp,
    ) -> Result<bool, OperatorError> {
        // A function that stops a batch early (a timer it registered is due already) gets
        // batches of as many as it took, twice as many again each time it takes one whole;
        // one that took a single timer of several gets one call each from there (the
        // SDKs before 2026-12-06 stopped after every timer at the end of input).
        let mut limit = self.batch_limit;
        while self.function.takes_batches() && self.batch_limit > 0 && !self.host.states.any_ttl() {
            if self.stopping_at(watermark) {
                return Err(OperatorError::Stopped);
            }
            let entries: Vec<BatchEntry<'_>> = (self.host.timers)
                .event_due_between(None, through)
                .take(limit.min(self.batch_limit))
                .map(|(at, _, key)| BatchEntry::Timer {
                    domain: TimeDomain::EventTime,
                    timestamp: at,
                    key,
                    watermark,
                })
                .collect();
            if entries.is_empty() {
                return Ok(true);
            }
            self.mark_used(entries.iter().map(BatchEntry::key));
            match self.function.process_batch(&mut self.host, &entries) {
                Ok(batch) if batch.consumed > 0 => {
                    let stopped_early = batch.consumed < entries.len();
                    limit = match stopped_early {
                        true => batch.consumed,
                        false => limit.saturating_mul(2),
                    };
                    self.counters.event_timers += (batch.consumed - batch.skipped) as u64;
                    self.passed_calls(batch.consumed as u64);
                    self.flush_emitted(Ok(()))?;
                    if stopped_early && batch.consumed == 1 {
                        return Ok(false);
                    }
                }
                Ok(_) => return Ok(false),
                Err(error) => {
                    self.host.emitted.clear();
                    self.batch_failed(&error);
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }

    /// After a failed batch: a batch that ran past the call timeout makes the batches
    /// smaller from now on (the deadline is per call, and a batch of slow but finite
    /// calls can miss it; the replay runs each entry with its own deadline).
    fn batch_failed(&mut self, error: &CallError) {
        if let CallError::Timeout(_) = error {
            self.batch_limit = (self.batch_limit / 2).max(1);
            tracing::warn!(
                "UDF {:?}: a batch ran past the call timeout; batches now hold at most {} entries",
                self.function.name(),
                self.batch_limit
            );
        }
    }

    /// Runs the elements of a failed batch again one call at a time (nothing of the batch
    /// was applied), which either reports the failure on its exact record or goes through.
    fn replay(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
        start: usize,
        taken: usize,
        unfinished: Option<Timestamp>,
    ) -> Result<usize, (usize, OperatorError)> {
        self.host.emitted.clear();
        if let Some(advance) = unfinished {
            // These timers fall due after the element before `start` (the one an earlier
            // batch stopped after): a failure is reported on it, so that the run goes on
            // with `elements[start]`, which has not been processed yet.
            debug_assert!(start > 0, "an unfinished advance follows an element");
            self.fire_event_timers(advance)
                .map_err(|e| (start.saturating_sub(1), e))?;
        }
        for (i, &(source, element)) in elements[start..start + taken].iter().enumerate() {
            self.process_element(source, element)
                .map_err(|e| (start + i, e))?;
        }
        Ok(start + taken)
    }

    /// In a batch being built, the watermark advanced to `after`: appends the timers now
    /// due and says `true`, or says `false` if the batch must end before them, because
    /// the advance reaches `ttl_limit` (the shortest event-time time-to-live past the
    /// batch's start) or one of their keys has a state entry expiring by then.
    fn push_advance(
        &mut self,
        entries: &mut Vec<BatchEntry<'_>>,
        last_timer: &mut Option<EventTimer>,
        after: Timestamp,
        ttl_limit: Timestamp,
    ) -> Result<bool, OperatorError> {
        if after >= ttl_limit {
            return Ok(false);
        }
        self.push_due_timers(entries, last_timer, after)
    }

    /// Appends the event-time timers due at `watermark` that are not in the batch yet, in
    /// firing order; returns whether all are in. It stops before a timer (unless it
    /// would be the batch's first entry) whose key holds an entry that expires by the
    /// timer's time: the next batch removes it first, so that the timer does not see it
    /// while the ones before it did. With the `disk` backend it wakes the dormant keys
    /// of due timers first, and stops after as many as it woke at once.
    fn push_due_timers(
        &mut self,
        entries: &mut Vec<BatchEntry<'_>>,
        last: &mut Option<EventTimer>,
        watermark: Timestamp,
    ) -> Result<bool, OperatorError> {
        let through = self.wake_due(TimeDomain::EventTime, watermark)?;
        let ttl = self
            .host
            .states
            .shortest_ttl(TimeDomain::EventTime)
            .is_some();
        for timer @ (at, _, key) in self.host.timers.event_due_between(*last, through) {
            let expires = ttl
                && self
                    .host
                    .keys
                    .expiry_of(key, TimeDomain::EventTime)
                    .is_some_and(|due| due <= at);
            if expires && !entries.is_empty() {
                return Ok(false);
            }
            entries.push(BatchEntry::Timer {
                domain: TimeDomain::EventTime,
                timestamp: at,
                key,
                watermark,
            });
            *last = Some(timer);
        }
        Ok(through == FiringPlace::end_of(watermark))
    }
}
