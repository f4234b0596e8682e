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

use crate::runtime::{CallError, ElementRef, HostServices, InitInfo, ProcessFunction};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use weir_core::output::{Sink, SinkState};
use weir_core::state::KeyId;
use weir_core::time::timers::TimeDomain;
use weir_core::time::watermark::{BoundedOutOfOrderness, PipelineWatermark};
use weir_core::time::{wall_clock_ms, Timestamp, END_OF_TIME};

mod batch;
mod swap;
mod timers;

pub use swap::PreparedSwap;
use swap::Probation;

/// What the operator was doing when a UDF call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    /// The UDF's `init`: at the start of a run, or of a new version being swapped in.
    Init,
    /// An element's call (or a batch's, replayed one element at a time to find the
    /// element it failed on); which element, the error's index says.
    Element,
    /// A timer's call.
    Timer {
        /// The clock the timer followed.
        domain: TimeDomain,
        /// The time it was registered for.
        timestamp: Timestamp,
        /// The bytes of its key.
        key: Vec<u8>,
    },
}

/// Why an operator call failed. Its `Display` is the message a run ends with (the run
/// adds the UDF's name and the record or timer).
#[derive(Debug)]
pub enum OperatorError {
    /// A UDF call failed.
    Udf {
        /// What the operator was calling the UDF for.
        activity: Activity,
        /// How the call failed.
        error: CallError,
    },
    /// The UDF declared outputs that have no sink: their names, in declaration order.
    Unrouted(Vec<String>),
    /// A sink failed.
    Sink {
        /// The name of the output the sink is routed from.
        output: String,
        /// What the sink reported.
        error: anyhow::Error,
    },
    /// The run was asked to stop (see [`KeyedOperator::stop_on`]) while the timers of
    /// the end of input were firing; those not fired yet are still pending.
    Stopped,
    /// The `disk` state backend's store failed (a full disk, a damaged file): the run
    /// cannot go on without the state it holds.
    State(anyhow::Error),
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
            OperatorError::Stopped => write!(f, "stopped while the end of input's timers fired"),
            OperatorError::State(error) => write!(f, "keyed state: {error:#}"),
        }
    }
}

impl std::error::Error for OperatorError {}

/// Counters of one run.
#[derive(Debug, Clone, Default)]
pub struct OperatorCounters {
    /// Elements processed (late ones included).
    pub elements: u64,
    /// Elements whose timestamp was at or below the watermark when they were processed.
    pub late: u64,
    /// Event-time timers fired.
    pub event_timers: u64,
    /// Processing-time timers fired.
    pub processing_timers: u64,
    /// Records written, per output id; the next record of output `i` gets sequence
    /// number `emitted[i]`.
    pub emitted: Vec<u64>,
}

pub use weir_core::limits::DEFAULT_MAX_BATCH;

/// The keyed operator of one run: one process function, the [`HostServices`] it calls
/// into (keyed state, timers, outputs), the pipeline watermark over the run's inputs and
/// the sinks its outputs are routed to.
///
/// The run (`weir-run`'s runner) drives it from its one thread, in this order: [`new`],
/// [`set_max_batch`], [`init`], [`bind_sinks`], then, when it resumes from a checkpoint,
/// the keyed state and timers through [`host_mut`] and [`restore`]. Then, until the
/// inputs end or the run is stopped, it hands over runs of records
/// ([`process_elements`]), tells of inputs going idle, active, forward or ended, fires
/// processing-time timers, and between two runs of records takes checkpoints and swaps
/// in new UDF versions. It ends with [`finish`] once every input has ended, or with
/// [`close_sinks`] when stopped.
///
/// The `source` argument of the methods is an input's index in the run (every partition
/// of every source is an input), as ordered in [`new`]'s `out_of_orderness_ms`.
///
/// [`new`]: Self::new
/// [`set_max_batch`]: Self::set_max_batch
/// [`init`]: Self::init
/// [`bind_sinks`]: Self::bind_sinks
/// [`host_mut`]: Self::host_mut
/// [`restore`]: Self::restore
/// [`process_elements`]: Self::process_elements
/// [`finish`]: Self::finish
/// [`close_sinks`]: Self::close_sinks
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
    /// The run's stop request, looked at between the timers of the end of input.
    stop: Option<Arc<AtomicBool>>,
    /// Which shard this operator is, of how many (see [`set_shard`](Self::set_shard));
    /// `None` for a pipeline of parallelism 1, which owns every key.
    shard: Option<(usize, usize)>,
    /// In a shard: records emitted so far per output and key group, which number them
    /// ([`Sequence::Grouped`](weir_core::output::Sequence::Grouped)).
    by_group: Vec<Vec<u64>>,
}

impl KeyedOperator {
    /// An operator over `function` whose inputs hold back the watermark by their
    /// out-of-orderness (one entry per input, in the run's input order), its
    /// processing-time timers counted from `now`. The run creates it once, when it
    /// opens, before anything else; the function is not initialised yet, no sink is
    /// bound, and batches hold at most [`DEFAULT_MAX_BATCH`] entries.
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
            stop: None,
            shard: None,
            by_group: Vec::new(),
        }
    }

    /// Makes this operator shard `index` of `parallelism`: it calls the UDF only for the
    /// elements whose key group ([`ElementRef::group`]) is one of its own
    /// ([`shard_of_group`](weir_core::key::shard_of_group)), and only reads the timestamps of the
    /// others, so that its watermark, and the timers it fires, are the whole pipeline's
    /// at every element (every shard is handed every element). The run calls this once,
    /// when it opens, before [`init`](Self::init), on each shard of a pipeline whose
    /// parallelism is above 1.
    pub fn set_shard(&mut self, index: usize, parallelism: usize) {
        self.shard = (parallelism > 1).then_some((index, parallelism));
    }

    /// Whether this operator's shard owns the keys of key group `group`.
    fn owns(&self, group: u16) -> bool {
        self.shard.is_none_or(|(index, parallelism)| {
            weir_core::key::shard_of_group(group, parallelism) == index
        })
    }

    /// Lets `stop` end the firing of the end of input's timers between two timers, as
    /// it ends reading between two records: once every input has ended, [`end_source`],
    /// [`resume_event_timers`] and [`finish`] look at it before each timer and, once it
    /// is set, return [`OperatorError::Stopped`] with the timers not fired yet still
    /// pending (a checkpoint then keeps them). Before the end of input, a watermark
    /// advance fires all its timers first. The run calls this once, when it opens, with
    /// the flag a signal or `weir serve` sets.
    ///
    /// [`end_source`]: Self::end_source
    /// [`resume_event_timers`]: Self::resume_event_timers
    /// [`finish`]: Self::finish
    pub fn stop_on(&mut self, stop: Arc<AtomicBool>) {
        self.stop = Some(stop);
    }

    /// Whether the run asked to stop and the timers now firing are the end of input's.
    fn stopping_at(&self, watermark: Timestamp) -> bool {
        watermark == END_OF_TIME
            && self
                .stop
                .as_ref()
                .is_some_and(|stop| stop.load(Ordering::Relaxed))
    }

    /// Caps the bytes one call may emit (`[udf] max_emit_bytes`): a call that emits
    /// more fails with [`CallError::EmitLimit`]; a batch that does is run again one call
    /// at a time. The run calls this once, when it opens, before [`init`](Self::init).
    pub fn set_max_emit_bytes(&mut self, bytes: usize) {
        self.host.emitted.set_limit(bytes);
    }

    /// Caps the entries of a batched call: large enough that the cost of a call is spread
    /// thin, small enough that the batch stays in cache. 0 turns batching off. The run
    /// calls this once, when it opens, with `[udf] max_batch`. The operator halves the
    /// cap itself whenever a batch runs past the call timeout.
    pub fn set_max_batch(&mut self, entries: usize) {
        self.batch_limit = entries;
    }

    /// The running UDF version's name, for messages and the run report.
    pub fn function_name(&self) -> &str {
        self.function.name()
    }

    /// Initialises the UDF (its `init`, with outputs declarable and no key in scope);
    /// returns the outputs it declared, in id order. The run calls this once, when it
    /// opens, after [`new`](Self::new) and before [`bind_sinks`](Self::bind_sinks) and
    /// any restore (the checkpoint's states are matched to the ones `init` declares);
    /// it fails the run if an output has no sink.
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

    /// Routes each declared output to its sink (`sinks[i]` takes output id `i`), and
    /// zeroes the counts of records emitted. The run calls this once, when it opens,
    /// right after [`init`](Self::init), with one sink per output `init` returned; it
    /// must be called before any element or timer, since emitted records go to
    /// `sinks[output]`.
    pub fn bind_sinks(&mut self, sinks: Vec<Box<dyn Sink>>) {
        self.counters.emitted = vec![0; sinks.len()];
        if self.shard.is_some() {
            self.by_group =
                vec![vec![0; usize::from(weir_core::key::NUMBERING_SLOTS)]; sinks.len()];
        }
        self.sinks = sinks;
    }

    /// The pipeline's watermark now. The run reads it for checkpoints, the live status
    /// and the progress line.
    pub fn watermark(&self) -> Timestamp {
        self.watermark.current()
    }

    /// The counters of the run so far (restored ones included). The run reads them for
    /// checkpoints, the live status and the run report.
    pub fn counters(&self) -> &OperatorCounters {
        &self.counters
    }

    /// The host services, to read: the run's live status counts keys, state bytes and
    /// pending timers from them.
    pub fn host(&self) -> &HostServices {
        &self.host
    }

    /// Processes one element of source `source` in one call, then advances the
    /// watermark and fires the timers that became due. A failed call leaves nothing
    /// behind: its emitted records are dropped, its state writes and timer changes taken
    /// back, and the element is not counted as processed. The run does not call
    /// this itself: [`process_elements`](Self::process_elements) does, for every element
    /// a function that takes no batches gets, and to replay a failed batch.
    pub fn process_element(
        &mut self,
        source: usize,
        element: ElementRef<'_>,
    ) -> Result<(), OperatorError> {
        if !self.owns(element.group) {
            // Another shard's: only its timestamp counts here.
            if let Some(watermark) = self.watermark.observe(source, element.timestamp) {
                self.fire_event_timers(watermark)?;
            }
            return Ok(());
        }
        if element.timestamp <= self.watermark.current() {
            self.counters.late += 1;
        }
        if self.host.states.any_ttl() {
            self.expire_state(wall_clock_ms());
        }
        let key = self
            .host
            .intern(element.key)
            .map_err(OperatorError::State)?;
        self.mark_used([key]);
        self.host.enter(key, element.timestamp);
        let result = self.function.process_element(&mut self.host, element);
        if result.is_err() {
            // Nothing of a failed call survives: not its emits (dropped below), not its
            // state writes or timer changes.
            self.host.undo_call();
        }
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

    /// Marks a source as ended; the watermark may advance (to the end of time once all
    /// end), and the event-time timers it makes due fire. The run calls this when the
    /// input's source is exhausted and every record it read has been processed.
    pub fn end_source(&mut self, source: usize) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.end(source) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// Source `source` has seen event time up to `timestamp` without a record here (a
    /// repartition topic's watermark marker); the watermark may advance, and the timers
    /// it makes due fire. The run calls this once every record the input read before
    /// the marker has been processed.
    pub fn observe_progress(&mut self, source: usize, timestamp: i64) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.progress(source, timestamp) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// Makes input `source` follow its upstream stage's watermark, as its markers say,
    /// instead of deriving one from its records' timestamps. The run calls this when it
    /// opens, for every input that is another stage's output, before any record.
    pub fn follow_upstream(&mut self, source: usize) {
        self.watermark.follow_upstream(source);
    }

    /// Hands the run's watermark to every sink ([`Sink::watermark`]). The run calls this
    /// between two runs of records, after the timers they made due fired, whenever the
    /// watermark moved.
    pub fn watermark_to_sinks(&mut self, watermark: Timestamp) -> Result<(), OperatorError> {
        self.each_sink(|sink| sink.watermark(watermark)).map(drop)
    }

    /// Marks a source idle or active again; the watermark may advance, and the timers it
    /// makes due fire. The run calls this with `true` when the input has had no record
    /// for its `idle_timeout` and has nothing queued, and with `false` when it delivers
    /// again.
    pub fn set_idle(&mut self, source: usize, idle: bool) -> Result<(), OperatorError> {
        if let Some(watermark) = self.watermark.set_idle(source, idle) {
            self.fire_event_timers(watermark)?;
        }
        Ok(())
    }

    /// The watermark of one source's own timestamps, ended or not. The run reads it
    /// for every input when it takes a checkpoint.
    pub fn source_watermark(&self, source: usize) -> Timestamp {
        self.watermark.source(source).seen()
    }

    /// Makes every sink's output so far durable; returns where each stands, by output
    /// id. The run calls this when it takes a checkpoint, between two runs of records
    /// (every read-ahead queue empty), before it encodes the keyed state.
    pub fn checkpoint_sinks(&mut self) -> Result<Vec<SinkState>, OperatorError> {
        self.each_sink(|sink| sink.checkpoint())
    }

    /// The host services, to save or restore keyed state and timers. The run uses them
    /// when it opens (to restore a checkpoint's keyed state and timers, and to start
    /// tracking changes for incremental checkpoints), when it takes a checkpoint, and
    /// when the last input ends (to stop tracking).
    pub fn host_mut(&mut self) -> &mut HostServices {
        &mut self.host
    }

    /// Puts back checkpointed watermarks (per source, `None` where the checkpoint has
    /// none; and the pipeline's) and counters. The emitted counts are taken only if they
    /// have one entry per bound output; otherwise they stay as they are. The run calls
    /// this once, when it resumes from a checkpoint: after [`init`](Self::init) and
    /// [`bind_sinks`](Self::bind_sinks), once the keyed state is restored, before any
    /// element.
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

    /// In a shard, the records emitted so far per output and numbering slot (the key
    /// groups, then one slot per shard: [`weir_core::key::NUMBERING_SLOTS`]). Only the
    /// owner of a slot counts in it; the others keep what
    /// [`restore_by_group`](Self::restore_by_group) gave. The run reads them when it
    /// takes a checkpoint; empty at parallelism 1.
    pub fn emitted_by_group(&self) -> &[Vec<u64>] {
        &self.by_group
    }

    /// Puts back the checkpointed counts of records emitted per output and key group
    /// (an output the checkpoint has none for starts from 0). The run calls this once,
    /// when a shard resumes from a checkpoint, after [`bind_sinks`](Self::bind_sinks).
    pub fn restore_by_group(&mut self, by_group: &[Vec<u64>]) {
        for (counts, restored) in self.by_group.iter_mut().zip(by_group) {
            for (count, &restored) in counts.iter_mut().zip(restored) {
                *count = restored;
            }
        }
    }

    /// Marks `keys` used, so that the `disk` backend's next eviction keeps them: called
    /// before a call or batch about them runs.
    pub(crate) fn mark_used(&mut self, keys: impl IntoIterator<Item = KeyId>) {
        if !self.host.keys.spills() {
            return;
        }
        for key in keys {
            self.host.keys.mark_used(key);
        }
    }

    /// With the `disk` state backend, spills what exceeds its memory budget to its store.
    /// Called between calls and batches: after a run of records, after timers fired, and
    /// after a restore.
    pub fn evict_state(&mut self) -> Result<(), OperatorError> {
        self.host.evict().map_err(OperatorError::State)
    }

    /// Completes every sink (an upsert sink writes its table). After [`finish`], or on
    /// its own when the run is stopped before its input ends: the run calls it then,
    /// after its last checkpoint, without firing pending timers.
    ///
    /// [`finish`]: Self::finish
    pub fn close_sinks(&mut self) -> Result<(), OperatorError> {
        self.each_sink(|sink| sink.finish()).map(drop)
    }

    /// Writes out what the sinks hold, so live outputs appear while the input is idle.
    /// The run calls this whenever no record is ready, after firing processing-time
    /// timers.
    pub fn flush(&mut self) -> Result<(), OperatorError> {
        self.each_sink(|sink| sink.flush()).map(drop)
    }

    /// Removes the state entries that have expired by the watermark or by `now`, the
    /// processing time the next call or batch runs at (see
    /// [`HostServices::expire_state`](crate::runtime::services::Services::expire_state)).
    /// Called before every call and batch, so that none sees an expired entry.
    pub fn expire_state(&mut self, now: Timestamp) {
        self.expire_state_at(self.host.watermark, now);
    }

    /// [`expire_state`](Self::expire_state) with event-time entries expiring by
    /// `event_time` (an event-time timer's time, at or before the watermark) instead of
    /// the watermark. Called before an event-time timer fires, alone or first in a batch.
    fn expire_state_at(&mut self, event_time: Timestamp, now: Timestamp) {
        self.host.processing_time = now;
        if self.host.states.any_ttl() {
            self.host.expire_state_at(event_time, now);
        }
    }

    /// Runs `f` on every sink in output order; the first failure is
    /// [`sink_failed`](Self::sink_failed).
    fn each_sink<T>(
        &mut self,
        mut f: impl FnMut(&mut dyn Sink) -> anyhow::Result<T>,
    ) -> Result<Vec<T>, OperatorError> {
        let mut results = Vec::with_capacity(self.sinks.len());
        for output in 0..self.sinks.len() {
            match f(self.sinks[output].as_mut()) {
                Ok(result) => results.push(result),
                Err(error) => return Err(self.sink_failed(output, error)),
            }
        }
        Ok(results)
    }

    /// The error of the sink of `output`, after it failed with `error`: the records it
    /// took but could not keep ([`Sink::lost`]) are no longer counted as emitted, so the
    /// summary, the status and the metrics count what the sink holds.
    fn sink_failed(&mut self, output: usize, error: anyhow::Error) -> OperatorError {
        let lost = self.sinks[output].lost();
        let emitted = &mut self.counters.emitted[output];
        *emitted = emitted.saturating_sub(lost);
        OperatorError::Sink {
            output: self.host.outputs[output].clone(),
            error,
        }
    }

    /// Sends what the last call emitted to the sinks, unless the call failed: a failed
    /// call's records are dropped with it, so nothing of it is reported as processed.
    fn flush_emitted(&mut self, result: Result<(), OperatorError>) -> Result<(), OperatorError> {
        if let Err(error) = result {
            self.host.emitted.clear();
            return Err(error);
        }
        let mut failed = None;
        for (output, mut record) in self.host.emitted.iter() {
            let output = output as usize;
            // In a shard, records are numbered per key group: that of the record's key
            // when this shard owns it, so a key's records are numbered alike at any
            // parallelism; a record without a key, or keyed by another shard's key, in
            // the shard's own slot after the groups, which no other shard numbers.
            let group = self.shard.map(|(index, parallelism)| {
                record
                    .key
                    .map(weir_core::key::key_group)
                    .filter(|&group| weir_core::key::shard_of_group(group, parallelism) == index)
                    .unwrap_or(weir_core::key::KEY_GROUPS + index as u16)
            });
            record.sequence = match group {
                None => self.counters.emitted[output],
                Some(group) => weir_core::output::Sequence::grouped(
                    group,
                    self.by_group[output][usize::from(group)],
                ),
            };
            if let Err(error) = self.sinks[output].write(&record) {
                failed = Some((output, error));
                break;
            }
            self.counters.emitted[output] += 1;
            if let Some(group) = group {
                self.by_group[output][usize::from(group)] += 1;
            }
        }
        self.host.emitted.clear();
        match failed {
            Some((output, error)) => Err(self.sink_failed(output, error)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
