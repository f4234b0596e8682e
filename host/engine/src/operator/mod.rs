//! The keyed operator: Flink's `KeyedProcessOperator`, driving one process function.
//!
//! For every element it scopes the host services to the element's key, calls the UDF,
//! routes what it emitted to the sinks, then moves the watermark; whenever the watermark
//! advances, every event-time timer at or before it fires in timestamp order (including
//! timers registered while firing). Processing-time timers fire from the wall clock,
//! between elements and while the input is idle. Elements and timers run one at a time,
//! so a key never sees two calls at once.
//!
//! The function can be [swapped](KeyedOperator::swap_function) for a new version between
//! two calls: state and timers are the host's, so the new version goes on from them. The
//! old version is kept for a probation of a number of calls; a failure in that time can
//! [roll back](KeyedOperator::rollback) to it.
//!
//! A function that [takes batches](ProcessFunction::takes_batches) gets a run of elements
//! and the event-time timers that fall due between them in one call, in exactly the
//! order above; the function stops early where a timer it registered falls due, and the
//! operator goes on from there. If a batch fails, its elements are run again one call at
//! a time, so the failure is reported for the exact record it happened on.

use crate::runtime::{
    BatchEntry, CallError, ElementRef, FiredTimer, HostServices, InitInfo, ProcessFunction,
};
use std::fmt;
use weir_core::output::{Sink, SinkState};
use weir_core::state::KeyId;
use weir_core::time::timers::{EventTimer, TimeDomain};
use weir_core::time::watermark::{BoundedOutOfOrderness, PipelineWatermark};
use weir_core::time::{Timestamp, END_OF_TIME};

/// What the operator was doing when a UDF call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    Init,
    Element,
    Timer {
        domain: TimeDomain,
        timestamp: Timestamp,
        key: Vec<u8>,
    },
}

#[derive(Debug)]
pub enum OperatorError {
    /// A UDF call failed.
    Udf {
        activity: Activity,
        error: CallError,
    },
    /// The UDF declared outputs that have no sink.
    Unrouted(Vec<String>),
    /// A sink failed.
    Sink {
        output: String,
        error: anyhow::Error,
    },
}

impl fmt::Display for OperatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OperatorError::Udf { error, .. } => write!(f, "{error}"),
            OperatorError::Unrouted(outputs) => {
                write!(
                    f,
                    "the UDF declares outputs with no sink in the pipeline file: {}",
                    outputs.join(", ")
                )
            }
            OperatorError::Sink { output, error } => write!(f, "output {output:?}: {error:#}"),
        }
    }
}

impl std::error::Error for OperatorError {}

/// Counters of one run.
#[derive(Debug, Clone, Default)]
pub struct OperatorCounters {
    pub elements: u64,
    pub late: u64,
    pub event_timers: u64,
    pub processing_timers: u64,
    pub emitted: Vec<u64>,
}

/// A new function version on trial: the one it replaced, kept until enough calls passed.
struct Probation {
    previous: Box<dyn ProcessFunction>,
    calls_left: u64,
}

/// The default number of entries in one batched call (`[udf] max_batch`).
pub const DEFAULT_MAX_BATCH: usize = 512;

pub struct KeyedOperator {
    probation: Option<Probation>,
    /// The watermark a batch stopped inside of, whose due timers have not all fired.
    unfinished_advance: Option<Timestamp>,
    /// The most entries in the next batch (`[udf] max_batch`, halved after a batch times
    /// out); 0 means one call per element and timer.
    batch_limit: usize,
    function: Box<dyn ProcessFunction>,
    host: HostServices,
    watermark: PipelineWatermark,
    sinks: Vec<Box<dyn Sink>>,
    counters: OperatorCounters,
}

impl KeyedOperator {
    /// An operator over `function` whose sources hold back the watermark by their
    /// out-of-orderness (one entry per source).
    pub fn new(
        function: Box<dyn ProcessFunction>,
        out_of_orderness_ms: &[i64],
        now: Timestamp,
    ) -> Self {
        let sources = out_of_orderness_ms
            .iter()
            .map(|&ms| BoundedOutOfOrderness::new(ms))
            .collect();
        Self {
            function,
            host: HostServices::new(now),
            watermark: PipelineWatermark::new(sources),
            sinks: Vec::new(),
            counters: OperatorCounters::default(),
            unfinished_advance: None,
            batch_limit: DEFAULT_MAX_BATCH,
            probation: None,
        }
    }

    /// Replaces the function with a new version, between two calls. The new version's
    /// `init` runs against the live host (its states are matched by name); if it fails,
    /// or declares an output the pipeline has no sink for, nothing changes. The old
    /// version is kept for `probation_calls` calls, for [`rollback`](Self::rollback).
    pub fn swap_function(
        &mut self,
        mut function: Box<dyn ProcessFunction>,
        info: &InitInfo,
        probation_calls: u64,
    ) -> Result<(), OperatorError> {
        let outputs = self.host.outputs.len();
        self.host.declaring = true;
        let result = function.init(&mut self.host, info);
        self.host.declaring = false;
        let added: Vec<String> = self.host.outputs.drain(outputs..).collect();
        result.map_err(|error| OperatorError::Udf {
            activity: Activity::Init,
            error,
        })?;
        if !added.is_empty() {
            return Err(OperatorError::Unrouted(added));
        }
        let previous = std::mem::replace(&mut self.function, function);
        self.probation = (probation_calls > 0).then_some(Probation {
            previous,
            calls_left: probation_calls,
        });
        // The old version may have been slow; the new one starts from the configured size.
        self.batch_limit = self.batch_limit.max(1);
        Ok(())
    }

    /// Whether a swapped-in version is still on probation.
    pub fn in_probation(&self) -> bool {
        self.probation.is_some()
    }

    /// Goes back to the version a swap replaced, if it is still kept; the failed version
    /// is returned (to be dropped).
    pub fn rollback(&mut self) -> Option<Box<dyn ProcessFunction>> {
        let probation = self.probation.take()?;
        Some(std::mem::replace(&mut self.function, probation.previous))
    }

    /// Counts calls against the probation; once it is over the old version is dropped.
    fn passed_calls(&mut self, calls: u64) {
        if let Some(probation) = &mut self.probation {
            probation.calls_left = probation.calls_left.saturating_sub(calls);
            if probation.calls_left == 0 {
                self.probation = None;
            }
        }
    }

    /// Fires what is due at the current watermark (after a timer's failure was handled).
    pub fn resume_event_timers(&mut self) -> Result<(), OperatorError> {
        self.fire_event_timers(self.watermark.current())
    }

    /// Registers again a timer whose firing failed, so that a rolled-back version fires it.
    pub fn register_timer_again(&mut self, domain: TimeDomain, at: Timestamp, key: &[u8]) {
        let id = self.host.keys.intern(key);
        self.host.timer_for(id, domain, at, true);
    }

    /// Registers again a timer whose firing failed (so that a rolled-back version fires
    /// it), then fires what is due at the current watermark.
    pub fn retry_timer(
        &mut self,
        domain: TimeDomain,
        at: Timestamp,
        key: &[u8],
    ) -> Result<(), OperatorError> {
        self.register_timer_again(domain, at, key);
        match domain {
            TimeDomain::EventTime => self.fire_event_timers(self.watermark.current()),
            TimeDomain::ProcessingTime => Ok(()),
        }
    }

    /// Caps the entries of a batched call: large enough that the cost of a call is spread
    /// thin, small enough that the batch stays in cache. 0 turns batching off.
    pub fn set_max_batch(&mut self, entries: usize) {
        self.batch_limit = entries;
    }

    pub fn function_name(&self) -> &str {
        self.function.name()
    }

    /// Initialises the UDF; returns the outputs it declared, in id order.
    pub fn init(&mut self, info: &InitInfo) -> Result<Vec<String>, OperatorError> {
        self.host.declaring = true;
        let result = self.function.init(&mut self.host, info);
        self.host.declaring = false;
        result.map_err(|error| OperatorError::Udf {
            activity: Activity::Init,
            error,
        })?;
        Ok(self.host.outputs.clone())
    }

    /// Routes each declared output to its sink (`sinks[i]` takes output id `i`).
    pub fn bind_sinks(&mut self, sinks: Vec<Box<dyn Sink>>) {
        self.counters.emitted = vec![0; sinks.len()];
        self.sinks = sinks;
    }

    pub fn watermark(&self) -> Timestamp {
        self.watermark.current()
    }

    pub fn counters(&self) -> &OperatorCounters {
        &self.counters
    }

    pub fn host(&self) -> &HostServices {
        &self.host
    }

    /// Processes one element of source `source`, then advances the watermark and fires
    /// the timers that became due.
    pub fn process_element(
        &mut self,
        source: usize,
        element: ElementRef<'_>,
    ) -> Result<(), OperatorError> {
        if element.timestamp <= self.watermark.current() {
            self.counters.late += 1;
        }
        let key = self.host.keys.intern(element.key);
        self.host.enter(key, element.timestamp);
        let result = self.function.process_element(&mut self.host, element);
        self.host.leave();
        self.flush_emitted(result.map_err(|error| OperatorError::Udf {
            activity: Activity::Element,
            error,
        }))?;
        self.counters.elements += 1;
        self.passed_calls(1);
        if let Some(watermark) = self.watermark.observe(source, element.timestamp) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// Processes a run of elements (source index, element) in order: in batches when the
    /// function takes them, else one call each. A failure says which element it was on.
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
        match self.unfinished_advance.take() {
            Some(watermark) => self
                .fire_event_timers(watermark)
                .map_err(|e| (elements.len() - 1, e)),
            None => Ok(()),
        }
    }

    /// Sends `elements[start..]` (as much as fits) with the timers due between them as one
    /// batch; returns where the next batch starts.
    fn process_batch(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
        start: usize,
    ) -> Result<usize, (usize, OperatorError)> {
        let limit = self.batch_limit;
        let mut entries = Vec::with_capacity(limit.min(2 * (elements.len() - start) + 8));
        let mut watermark = self.watermark.clone();
        let mut last_timer = None;
        // An advance that an earlier batch stopped inside finishes first.
        let unfinished = self.unfinished_advance.take();
        if let Some(advance) = unfinished {
            self.push_due_timers(&mut entries, &mut last_timer, advance);
        }
        let mut taken = 0;
        for &(source, element) in &elements[start..] {
            if entries.len() >= limit {
                break;
            }
            let key = self.host.keys.intern(element.key);
            let before = watermark.current();
            let after = watermark
                .observe(source, element.timestamp)
                .unwrap_or(before);
            entries.push(BatchEntry::Element {
                element,
                key,
                watermark: before,
                watermark_after: after,
            });
            taken += 1;
            if after > before {
                self.push_due_timers(&mut entries, &mut last_timer, after);
            }
        }
        let result = self.function.process_batch(&mut self.host, &entries);
        let batch = match result {
            Ok(batch) => batch,
            Err(error) => {
                if let CallError::Timeout(_) = error {
                    // The deadline is per call: a batch of slow but finite calls can miss
                    // it. Smaller batches from now on; the replay below runs each entry
                    // with its own deadline.
                    self.batch_limit = (self.batch_limit / 2).max(1);
                    tracing::warn!(
                        "UDF {:?}: a batch ran past the call timeout; batches now hold at most {} entries",
                        self.function.name(),
                        self.batch_limit
                    );
                }
                return self.replay(elements, start, taken, unfinished);
            }
        };

        let mut consumed_elements = 0;
        for entry in &entries[..batch.consumed] {
            match *entry {
                BatchEntry::Element {
                    element, watermark, ..
                } => {
                    if element.timestamp <= watermark {
                        self.counters.late += 1;
                    }
                    self.counters.elements += 1;
                    let (source, _) = elements[start + consumed_elements];
                    self.watermark.observe(source, element.timestamp);
                    consumed_elements += 1;
                }
                BatchEntry::Timer { domain, .. } => match domain {
                    TimeDomain::EventTime => self.counters.event_timers += 1,
                    TimeDomain::ProcessingTime => self.counters.processing_timers += 1,
                },
            }
        }
        self.counters.event_timers -= batch.skipped as u64;
        self.passed_calls(batch.consumed as u64);
        self.host.watermark = self.watermark.current();
        // Where the function stopped decides whether an advance is still firing: after an
        // element that advanced the watermark, or after a timer, the timers due at that
        // watermark (including ones just registered) fire before anything else. After an
        // element that did not advance it, a timer it registered at or before the
        // watermark waits for the next advance.
        self.unfinished_advance = match entries[batch.consumed - 1] {
            BatchEntry::Element {
                watermark,
                watermark_after,
                ..
            } if watermark_after > watermark => Some(watermark_after),
            BatchEntry::Timer { watermark, .. } => Some(watermark),
            BatchEntry::Element { .. } => None,
        };
        self.flush_emitted(Ok(()))
            .map_err(|e| (start + consumed_elements.saturating_sub(1), e))?;
        Ok(start + consumed_elements)
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
            self.fire_event_timers(advance).map_err(|e| (start, e))?;
        }
        for (i, &(source, element)) in elements[start..start + taken].iter().enumerate() {
            self.process_element(source, element)
                .map_err(|e| (start + i, e))?;
        }
        Ok(start + taken)
    }

    /// Appends the event-time timers due at `watermark` that are not in the batch yet.
    fn push_due_timers(
        &mut self,
        entries: &mut Vec<BatchEntry<'_>>,
        last: &mut Option<EventTimer>,
        watermark: Timestamp,
    ) {
        for timer @ (at, _, key) in self.host.timers.event_due_between(*last, watermark) {
            entries.push(BatchEntry::Timer {
                domain: TimeDomain::EventTime,
                timestamp: at,
                key,
                watermark,
            });
            *last = Some(timer);
        }
    }

    /// Marks a source as ended; the watermark may advance (to the end of time once all end).
    pub fn end_source(&mut self, source: usize) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.end(source) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// Source `source` has seen event time up to `timestamp` without a record here (a
    /// repartition topic's watermark marker); the watermark may advance.
    pub fn observe_progress(&mut self, source: usize, timestamp: i64) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.observe(source, timestamp) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// Marks a source idle or active again; the watermark may advance.
    pub fn set_idle(&mut self, source: usize, idle: bool) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.set_idle(source, idle) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// The watermark of one source's own timestamps (for checkpoints).
    pub fn source_watermark(&self, source: usize) -> Timestamp {
        self.watermark.source(source).seen()
    }

    /// Makes every sink's output so far durable; returns where each stands, by output id.
    pub fn checkpoint_sinks(&mut self) -> Result<Vec<SinkState>, OperatorError> {
        let mut states = Vec::with_capacity(self.sinks.len());
        for (sink, name) in self.sinks.iter_mut().zip(&self.host.outputs) {
            states.push(sink.checkpoint().map_err(|error| OperatorError::Sink {
                output: name.clone(),
                error,
            })?);
        }
        Ok(states)
    }

    /// The host services, to save or restore keyed state and timers.
    pub fn host_mut(&mut self) -> &mut HostServices {
        &mut self.host
    }

    /// Puts back checkpointed watermarks (per source, `None` where the checkpoint has
    /// none) and counters.
    pub fn restore(
        &mut self,
        sources: &[Option<Timestamp>],
        watermark: Timestamp,
        counters: OperatorCounters,
    ) {
        self.watermark.restore(sources, watermark);
        self.host.watermark = watermark;
        let emitted = counters.emitted.clone();
        self.counters = OperatorCounters {
            emitted: if emitted.len() == self.counters.emitted.len() {
                emitted
            } else {
                self.counters.emitted.clone()
            },
            ..counters
        };
    }

    /// Fires processing-time timers due at `now`.
    pub fn fire_processing_timers(&mut self, now: Timestamp) -> Result<(), OperatorError> {
        while let Some((at, key)) = self.host.timers.pop_processing_due(now) {
            self.fire(TimeDomain::ProcessingTime, at, key)?;
        }
        Ok(())
    }

    /// At end of input: fires every remaining processing-time timer in timestamp order
    /// (and any event-time timer those register), so no aggregate waiting on one is lost.
    pub fn finish(&mut self) -> Result<(), OperatorError> {
        debug_assert_eq!(self.watermark.current(), END_OF_TIME);
        // A processing-time timer may register an event-time timer, which is due at once
        // (the watermark is at the end of time): keep going until both are drained.
        loop {
            let mut fired = false;
            while let Some((at, key)) = self.host.timers.pop_any_processing() {
                self.fire(TimeDomain::ProcessingTime, at, key)?;
                fired = true;
            }
            while let Some((at, key)) = self.host.timers.pop_event_due(END_OF_TIME) {
                self.fire(TimeDomain::EventTime, at, key)?;
                fired = true;
            }
            if !fired {
                break;
            }
        }
        self.close_sinks()
    }

    /// Completes every sink (an upsert sink writes its table). After [`finish`], or on
    /// its own when the run is stopped before its input ends.
    ///
    /// [`finish`]: Self::finish
    pub fn close_sinks(&mut self) -> Result<(), OperatorError> {
        for (sink, name) in self.sinks.iter_mut().zip(&self.host.outputs) {
            sink.finish().map_err(|error| OperatorError::Sink {
                output: name.clone(),
                error,
            })?;
        }
        Ok(())
    }

    /// Writes out what the sinks hold, so live outputs appear while the input is idle.
    pub fn flush(&mut self) -> Result<(), OperatorError> {
        for (sink, name) in self.sinks.iter_mut().zip(&self.host.outputs) {
            sink.flush().map_err(|error| OperatorError::Sink {
                output: name.clone(),
                error,
            })?;
        }
        Ok(())
    }

    /// When the next processing-time timer is due, if any.
    pub fn next_processing_due(&self) -> Option<Timestamp> {
        self.host.timers.next_processing_due()
    }

    pub fn has_processing_timers(&self) -> bool {
        self.host.timers.pending(TimeDomain::ProcessingTime) > 0
    }

    fn fire_event_timers(&mut self, watermark: Timestamp) -> Result<(), OperatorError> {
        self.host.watermark = watermark;
        while let Some((at, key)) = self.host.timers.pop_event_due(watermark) {
            self.fire(TimeDomain::EventTime, at, key)?;
        }
        Ok(())
    }

    fn fire(&mut self, domain: TimeDomain, at: Timestamp, key: KeyId) -> Result<(), OperatorError> {
        self.host.keys.timer_removed(key, domain, at);
        match domain {
            TimeDomain::EventTime => self.counters.event_timers += 1,
            TimeDomain::ProcessingTime => self.counters.processing_timers += 1,
        }
        self.host.enter(key, at);
        // The key's bytes are needed by the UDF while the table may change; copy them.
        let key_bytes = weir_core::state::Key::from_slice(self.host.keys.entry(key).key());
        let timer = FiredTimer {
            domain,
            timestamp: at,
            key: &key_bytes,
        };
        let result = self.function.on_timer(&mut self.host, timer);
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

    /// Sends what the last call emitted to the sinks, unless the call failed: a failed
    /// call's records are dropped with it, so nothing of it is reported as processed.
    fn flush_emitted(&mut self, result: Result<(), OperatorError>) -> Result<(), OperatorError> {
        if let Err(error) = result {
            self.host.emitted.clear();
            return Err(error);
        }
        for (output, mut record) in self.host.emitted.iter() {
            let output = output as usize;
            record.sequence = self.counters.emitted[output];
            self.sinks[output]
                .write(&record)
                .map_err(|error| OperatorError::Sink {
                    output: self.host.outputs[output].clone(),
                    error,
                })?;
            self.counters.emitted[output] += 1;
        }
        self.host.emitted.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
