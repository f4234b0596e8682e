//! Running a pipeline: wiring sources, the keyed operator, the UDF and the sinks.
//!
//! Every source partition (a file, stdin, one Kafka partition) is an input with its own
//! read-ahead queue and watermark. Inputs are merged by the timestamp of each one's next
//! record (smallest first, ties in pipeline-file order), so several files replay
//! deterministically; a live input with nothing ready does not hold the others back, and
//! one quiet for its `idle_timeout` stops holding the watermark back. Records that cannot
//! be decoded go to the dead-letter output. The run ends when every source has ended,
//! after the final watermark and the remaining processing-time timers have fired.
//!
//! Checkpoints ([`checkpointing`]) are taken between records once the read-ahead queues
//! are drained, every `interval` and when the run is stopped; a run resumes from the
//! newest one, and a run that completes removes them.

mod checkpointing;
pub mod control;
mod report;

pub use control::{
    LiveStatus, RateTracker, RunControl, RunState, SwapDone, SwapRequest, SWAP_WAIT,
};
pub use report::RunReport;

use anyhow::Context as _;
use std::collections::VecDeque;
use std::io::IsTerminal;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_checkpoint::Checkpointer;
use weir_core::identity::UdfIdentity;
use weir_core::time::{display, wall_clock_ms, Timestamp};
use weir_engine::operator::{Activity, KeyedOperator, OperatorError};
use weir_engine::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use weir_engine::runtime::{CallError, ElementRef, InitInfo, ProcessFunction};
use weir_io::sink::{
    DeadLetter, DeadLetters, DiscardSink, JsonLinesSink, KafkaSink, PostgresSink, Sink, SinkState,
    UpsertSink,
};
use weir_io::source::decode::{MessageMeta, RecordDecoder};
use weir_io::source::{Polled, Source, SourceRecord};
use weir_pipeline::{PipelineSpec, SinkSpec, SinkTarget, SourceLocation};

/// A failed run: what went wrong, and the figures up to then.
#[derive(Debug)]
pub struct RunFailure {
    pub error: anyhow::Error,
    pub report: Option<Box<RunReport>>,
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

/// Options of a run that are not part of the pipeline.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Show a progress line on stderr (only when stderr is a terminal).
    pub progress: bool,
    /// Set (by a signal handler, say) to stop the run: reading stops at the next record
    /// boundary, what was read is processed, a checkpoint is taken, and the run ends
    /// successfully.
    pub stop: Option<Arc<AtomicBool>>,
    /// Deletes the checkpoints in the state directory before starting.
    pub fresh: bool,
    /// Lets `weir serve` / `weir dev` swap the UDF and read the status while it runs.
    pub control: Option<Arc<RunControl>>,
}

/// Runs a pipeline with its wasm UDF.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunReport, RunFailure> {
    let fail = |error: anyhow::Error| RunFailure {
        error,
        report: None,
    };
    // Read once: the bytes are hashed once, for the compile cache and the checkpoints'
    // identity.
    let path = &spec.udf.path;
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read UDF component {}", path.display()))
        .map_err(fail)?;
    let component = LoadedComponent::from_bytes(&spec.udf.name, &bytes)
        .with_context(|| format!("UDF component {}", path.display()))
        .map_err(fail)?;
    let limits = Limits {
        memory_bytes: spec.udf.memory_limit_bytes,
        call_timeout: spec.udf.call_timeout,
    };
    let identity = UdfIdentity {
        name: spec.udf.name.clone(),
        sha256: component.sha256.clone(),
    };
    run_with(
        spec,
        Box::new(WasmFunction::new(component, limits)),
        identity,
        options,
    )
}

/// One source: where its records come from and how they are decoded.
struct SourceSlot {
    name: String,
    source: Box<dyn Source>,
    decoder: RecordDecoder,
    /// Its partitions' inputs.
    inputs: Range<usize>,
    exhausted: bool,
}

/// One partition of a source, with the records it has read ahead.
struct Input {
    /// The source's name, or `source:topic[partition]` for a Kafka partition.
    name: String,
    /// Its source (an index into `Runner::sources`).
    source: usize,
    /// The UDF input it feeds.
    input_index: u32,
    queue: VecDeque<Pending>,
    /// The source said it has no more records (some may still be queued).
    exhausted: bool,
    /// The source is exhausted and its queue drained: it no longer holds the watermark.
    ended: bool,
    read: u64,
    idle_timeout: Option<Duration>,
    last_record: Instant,
    idle: bool,
    /// The latest watermark marker's event time, applied once the records read before
    /// it have been processed.
    progress: Option<Timestamp>,
}

/// A decoded record waiting its turn.
struct Pending {
    record: SourceRecord,
    key: KeyBytes,
    timestamp: Timestamp,
    /// The record's number in its source (1-based, dead letters included).
    number: u64,
}

impl Pending {
    fn key(&self) -> &[u8] {
        match &self.key {
            KeyBytes::InLine(range) => &self.record.data[range.clone()],
            KeyBytes::Owned(bytes) => bytes,
        }
    }
}

/// Where the key is: inside the record's line (no copy), or unescaped into its own buffer.
enum KeyBytes {
    InLine(Range<usize>),
    Owned(Vec<u8>),
}

/// How many records a source reads ahead, and the most records handed to the operator
/// at once (which it may send to the UDF as one batch).
const READ_AHEAD: usize = 512;

/// Runs a pipeline with any process function (the wasm one, or a native one in benchmarks).
pub fn run_with(
    spec: &PipelineSpec,
    function: Box<dyn ProcessFunction>,
    identity: UdfIdentity,
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let started = Instant::now();
    let mut runner =
        Runner::open(spec, function, identity, options).map_err(|error| RunFailure {
            error,
            report: None,
        })?;
    let result = runner.run(options);
    if let Some(control) = &options.control {
        let state = match (&result, runner.interrupted) {
            (Err(e), _) => {
                control.update(|s| s.last_error = Some(format!("{e:#}")));
                RunState::Failed
            }
            (Ok(()), true) => RunState::Stopped,
            (Ok(()), false) => RunState::Finished,
        };
        runner.publish_status(control, state);
    }
    let mut report = runner.report();
    report.elapsed = started.elapsed();
    report.peak_rss_bytes = peak_rss_bytes();
    match result {
        Ok(()) => Ok(report),
        Err(error) => Err(RunFailure {
            error,
            report: Some(Box::new(report)),
        }),
    }
}

struct Runner {
    pipeline: String,
    udf: UdfIdentity,
    /// The run was stopped before its input ended.
    interrupted: bool,
    sources: Vec<SourceSlot>,
    inputs: Vec<Input>,
    /// Record buffers to reuse.
    spare: Vec<SourceRecord>,
    operator: KeyedOperator,
    outputs: Vec<String>,
    dead_letters: DeadLetters,
    checkpointer: Option<Checkpointer>,
    /// Positions of the last checkpoint written, per source, to commit once it is durable.
    uncommitted: Option<Vec<Vec<weir_core::position::Position>>>,
    resumed_from: Option<u64>,
    checkpoints: u64,
    longest_checkpoint_pause: Duration,
    /// What the UDF's `init` is given (again, when a new version is swapped in).
    init_info: InitInfo,
    /// Set when run under a `RunControl` (`weir serve`, `weir dev`).
    control: Option<Arc<RunControl>>,
    /// The version a swap replaced, while it may still be rolled back to.
    previous_udf: Option<UdfIdentity>,
    udf_errors: u64,
    last_status: Instant,
    last_state_bytes: (Instant, u64),
    rate: control::RateTracker,
}

impl Runner {
    fn open(
        spec: &PipelineSpec,
        function: Box<dyn ProcessFunction>,
        udf: UdfIdentity,
        options: &RunOptions,
    ) -> anyhow::Result<Self> {
        let (checkpointer, chain) = if spec.checkpoint.enabled {
            let (checkpointer, chain) = Checkpointer::open(&spec.checkpoint, options.fresh)?;
            (Some(checkpointer), chain)
        } else {
            (None, None)
        };
        let restored = checkpointing::Restored::check(chain, spec, &udf)?;

        let input_names = spec.input_names();
        let mut sources = Vec::new();
        let mut inputs = Vec::new();
        let mut delays = Vec::new();
        for s in &spec.sources {
            let source = restored.open_source(s)?;
            let decoder = RecordDecoder::new(&s.key, &s.timestamp, s.timestamp_format)
                .map_err(|e| anyhow::anyhow!("source {:?}: {e}", s.name))?;
            let first = inputs.len();
            let partitions = source.partitions();
            let input_index = input_names
                .iter()
                .position(|n| n == &s.input)
                .expect("input named by a source") as u32;
            for partition in &partitions {
                let name = match s.location {
                    SourceLocation::Kafka(_) => format!("{}:{partition}", s.name),
                    _ => s.name.clone(),
                };
                inputs.push(Input {
                    read: restored.input(&name).map_or(0, |i| i.read),
                    name,
                    source: sources.len(),
                    input_index,
                    queue: VecDeque::new(),
                    exhausted: false,
                    ended: false,
                    idle_timeout: s.idle_timeout,
                    last_record: Instant::now(),
                    idle: false,
                    progress: None,
                });
                delays.push(s.out_of_orderness_ms);
            }
            sources.push(SourceSlot {
                name: s.name.clone(),
                source,
                decoder,
                inputs: first..inputs.len(),
                exhausted: false,
            });
        }
        let mut operator = KeyedOperator::new(function, &delays, wall_clock_ms());
        operator.set_max_batch(spec.udf.max_batch);
        let info = InitInfo {
            config: spec.udf.config.clone(),
            inputs: input_names,
        };
        let outputs = operator.init(&info).map_err(|e| {
            anyhow::anyhow!(
                "UDF {:?} failed to initialise: {e}",
                operator.function_name()
            )
        })?;

        let unrouted: Vec<String> = outputs
            .iter()
            .filter(|o| !spec.sinks.iter().any(|s| &s.output == *o))
            .cloned()
            .collect();
        if !unrouted.is_empty() {
            anyhow::bail!(
                "{}; add a [[sink]] with output = {:?} (or --output {}=PATH)",
                OperatorError::Unrouted(unrouted.clone()),
                unrouted[0],
                unrouted[0]
            );
        }
        for sink in &spec.sinks {
            if !outputs.contains(&sink.output) {
                tracing::warn!(
                    "the pipeline routes output {:?}, which the UDF does not declare (it declares {:?})",
                    sink.output,
                    outputs
                );
            }
        }
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        for output in &outputs {
            let spec_sink = spec
                .sinks
                .iter()
                .find(|s| &s.output == output)
                .expect("checked above");
            sinks.push(open_sink(spec_sink, &spec.name, restored.sink(output))?);
        }
        operator.bind_sinks(sinks);
        let input_names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        restored
            .restore_operator(&mut operator, &input_names, &outputs)
            .context("cannot restore the checkpoint")?;
        if checkpointer.is_some() {
            operator.host_mut().keys.track_changes();
        }
        let mut dead_letter_resume = restored.dead_letters();
        if spec.checkpoint.kafka.is_some() {
            // A task of a consumer group may have moved here from another machine, whose
            // dead-letter file this one is not: append to what is here instead.
            let here = std::fs::metadata(&spec.dead_letter).map_or(0, |m| m.len());
            dead_letter_resume =
                dead_letter_resume.map(|(length, count)| (length.min(here), count));
        }
        let dead_letters = DeadLetters::open(&spec.dead_letter, dead_letter_resume)
            .context("dead-letter output")?;
        Ok(Self {
            pipeline: spec.name.clone(),
            udf,
            interrupted: false,
            sources,
            inputs,
            spare: Vec::new(),
            operator,
            outputs,
            dead_letters,
            resumed_from: restored.epoch(),
            checkpointer,
            uncommitted: None,
            checkpoints: 0,
            longest_checkpoint_pause: Duration::ZERO,
            init_info: info,
            control: options.control.clone(),
            previous_udf: None,
            udf_errors: 0,
            last_status: Instant::now() - Duration::from_secs(1),
            last_state_bytes: (Instant::now() - Duration::from_secs(2), 0),
            rate: control::RateTracker::new(),
        })
    }

    fn run(&mut self, options: &RunOptions) -> anyhow::Result<()> {
        let progress = (options.progress && std::io::stderr().is_terminal()).then(progress_bar);
        let mut chunk: Vec<(usize, Pending)> = Vec::with_capacity(READ_AHEAD);
        let mut reported = 0;
        let stopped = || {
            options
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
        };
        loop {
            self.steer(options);
            self.apply_progress()?;
            // A stop or a checkpoint waits for what was read ahead to be processed, so
            // that the sources' positions are exactly what the state has seen.
            let stopping = stopped();
            let checkpoint_due = self.checkpointer.as_ref().is_some_and(|c| c.is_due());
            let draining = stopping || checkpoint_due;
            if draining && self.inputs.iter().all(|i| i.queue.is_empty()) {
                if checkpoint_due || stopping {
                    self.checkpoint()?;
                }
                if stopping {
                    // Like Flink's stop-with-savepoint: pending timers are not fired; they
                    // are in the checkpoint, and fire when the run resumes.
                    self.interrupted = true;
                    self.finish_checkpoints()?;
                    self.operator
                        .close_sinks()
                        .map_err(|e| self.describe(e, None))?;
                    self.dead_letters.flush()?;
                    if let Some(bar) = progress {
                        bar.finish_and_clear();
                    }
                    return Ok(());
                }
            }
            if !draining {
                self.fill()?;
                self.update_idleness()?;
            }
            self.end_drained_sources()?;
            if self.inputs.iter().all(|i| i.ended) {
                break;
            }
            self.take_chunk(&mut chunk);
            if chunk.is_empty() {
                // Live input is idle: fire what is due and show what was written.
                self.fire_processing_timers()?;
                self.operator.flush().map_err(|e| self.describe(e, None))?;
                self.dead_letters.flush()?;
                continue;
            }
            let elements: Vec<(usize, ElementRef<'_>)> = chunk
                .iter()
                .map(|(input, p)| {
                    let element = ElementRef {
                        input: self.inputs[*input].input_index,
                        key: p.key(),
                        value: &p.record.data,
                        timestamp: p.timestamp,
                    };
                    (*input, element)
                })
                .collect();
            let mut start = 0;
            let result = loop {
                match self.process_with_rollback(&elements[start..]) {
                    Ok(()) => break Ok(()),
                    Err((index, error)) => {
                        let at = start + index;
                        // A state the UDF cannot read (written by another version, as
                        // another type) sends the record to the dead letters, not the run
                        // to its end.
                        let OperatorError::Udf {
                            error: CallError::StateDecode(message),
                            activity,
                        } = &error
                        else {
                            break Err((at, error));
                        };
                        match activity {
                            Activity::Element => {
                                let (input, pending) = &chunk[at];
                                let reason = self.state_reason(pending.key(), message);
                                self.dead_letter(*input, &pending.record, &reason)?;
                            }
                            Activity::Timer { .. } => {
                                self.fire_through(Err(error), KeyedOperator::resume_event_timers)?
                            }
                            Activity::Init => break Err((at, error)),
                        }
                        start = at + 1;
                        if start >= elements.len() {
                            break Ok(());
                        }
                    }
                }
            };
            drop(elements);
            if let Err((index, error)) = result {
                let (input, pending) = &chunk[index];
                let origin = Origin {
                    input: *input,
                    number: pending.number,
                    line: pending.record.line,
                    offset: pending.record.offset,
                };
                return Err(self.describe(error, Some(origin)));
            }
            self.spare.extend(chunk.drain(..).map(|(_, p)| p.record));
            if self.operator.has_processing_timers() {
                self.fire_processing_timers()?;
            }
            if let Some(bar) = &progress {
                let processed = self.operator.counters().elements;
                if processed - reported >= 65_536 {
                    reported = processed;
                    bar.set_position(processed);
                    let rate = processed as f64 / bar.elapsed().as_secs_f64().max(1e-3);
                    bar.set_message(format!(
                        "{rate:.0} records/s, watermark {}",
                        display(self.operator.watermark())
                    ));
                }
            }
        }
        let finished = self.operator.finish();
        self.fire_through(finished, KeyedOperator::finish)?;
        self.dead_letters.flush()?;
        // Everything read is in the sinks: sources with a position store of their own
        // (Kafka groups) record the end, so a later `startup = "committed"` goes on from it.
        for slot in &mut self.sources {
            let positions = slot.source.positions();
            slot.source.commit(&positions)?;
        }
        if let Some(checkpointer) = &mut self.checkpointer {
            // The run is complete: nothing to resume, and a new run starts from scratch.
            checkpointer.store.clear()?;
        }
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// Processes a run of elements; if a UDF version on probation fails, rolls back to
    /// the previous version and goes on from the failed call with it.
    fn process_with_rollback(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
    ) -> Result<(), (usize, OperatorError)> {
        let mut start = 0;
        loop {
            match self.operator.process_elements(&elements[start..]) {
                Ok(()) => return Ok(()),
                Err((index, error)) => {
                    let index = start + index;
                    let activity = match &error {
                        OperatorError::Udf { activity, error }
                            if self.operator.in_probation()
                                && !matches!(error, CallError::StateDecode(_)) =>
                        {
                            activity.clone()
                        }
                        _ => return Err((index, error)),
                    };
                    self.roll_back(&error);
                    start = match activity {
                        Activity::Timer {
                            domain,
                            timestamp,
                            key,
                        } => {
                            self.operator
                                .retry_timer(domain, timestamp, &key)
                                .map_err(|e| (index, e))?;
                            index + 1
                        }
                        _ => index,
                    };
                    if start >= elements.len() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Fires due processing-time timers.
    fn fire_processing_timers(&mut self) -> anyhow::Result<()> {
        let now = wall_clock_ms();
        let fired = self.operator.fire_processing_timers(now);
        self.fire_through(fired, |operator| operator.fire_processing_timers(now))
    }

    /// Completes an operator call that fires timers (`first` is its result): while a
    /// timer fails in a way the run survives ([`Self::recover_timer`]), recovers and
    /// fires what is still due with `next`.
    fn fire_through(
        &mut self,
        first: Result<(), OperatorError>,
        mut next: impl FnMut(&mut KeyedOperator) -> Result<(), OperatorError>,
    ) -> anyhow::Result<()> {
        let mut result = first;
        while let Err(error) = result {
            self.recover_timer(error)?;
            result = next(&mut self.operator);
        }
        Ok(())
    }

    /// A timer's failure that need not end the run: a state the UDF cannot read sends the
    /// timer to the dead letters; a new version failing within its probation is rolled
    /// back, and the timer registered again for the old one. Anything else ends the run.
    fn recover_timer(&mut self, error: OperatorError) -> anyhow::Result<()> {
        let OperatorError::Udf {
            activity:
                Activity::Timer {
                    domain,
                    timestamp,
                    key,
                },
            error: call,
        } = &error
        else {
            return Err(self.describe(error, None));
        };
        let (domain, timestamp, key) = (*domain, *timestamp, key.clone());
        if let CallError::StateDecode(message) = call {
            let reason = self.state_reason(&key, message);
            return self.timer_dead_letter(domain, timestamp, &key, &reason);
        }
        if !self.operator.in_probation() {
            return Err(self.describe(error, None));
        }
        self.roll_back(&error);
        self.operator.register_timer_again(domain, timestamp, &key);
        Ok(())
    }

    /// Goes back to the UDF version before the last swap, and says why.
    fn roll_back(&mut self, error: &OperatorError) {
        let failed = self.udf.clone();
        self.operator.rollback();
        if let Some(previous) = self.previous_udf.take() {
            self.udf = previous;
        }
        let message = format!(
            "UDF version {} failed within its probation and was rolled back to {}: {error}",
            short_hash(&failed.sha256),
            short_hash(&self.udf.sha256)
        );
        tracing::warn!("{message}");
        self.udf_errors += 1;
        if let Some(control) = &self.control {
            control.update(|s| {
                s.udf_errors = self.udf_errors;
                s.last_error = Some(message);
                s.udf_sha256 = self.udf.sha256.clone();
            });
        }
    }

    /// Between two runs of records: applies a pending UDF swap, and publishes the status
    /// a few times a second.
    fn steer(&mut self, options: &RunOptions) {
        let Some(control) = &options.control else {
            return;
        };
        if let Some(request) = control.take_swap() {
            let started = Instant::now();
            let result = self.operator.swap_function(
                request.function,
                &self.init_info,
                request.probation_calls,
            );
            let reply = match result {
                Ok(()) => {
                    let pause = started.elapsed();
                    tracing::info!(
                        "UDF {:?} version {} swapped in ({:.2} ms)",
                        request.identity.name,
                        short_hash(&request.identity.sha256),
                        pause.as_secs_f64() * 1e3
                    );
                    let previous = std::mem::replace(&mut self.udf, request.identity);
                    self.previous_udf = Some(previous);
                    // The status shows the new version, and the records processed before
                    // it, before the swap is reported done.
                    self.last_status = Instant::now();
                    self.publish_status(control, RunState::Running);
                    Ok(SwapDone { pause })
                }
                Err(e) => Err(format!("the new version was not swapped in: {e}")),
            };
            let _ = request.done.send(reply);
        }
        if self.last_status.elapsed() >= Duration::from_millis(200) {
            self.last_status = Instant::now();
            self.publish_status(control, RunState::Running);
        }
    }

    /// Writes the live figures into `control`.
    fn publish_status(&mut self, control: &RunControl, state: RunState) {
        let report = self.report();
        let host = self.operator.host();
        let watermark = self.operator.watermark();
        let set =
            watermark > weir_core::time::MIN_WATERMARK && watermark < weir_core::time::END_OF_TIME;
        let keys = host.keys.len() as u64;
        // Summing state bytes walks every key: do it at most once a second.
        let state_bytes = if self.last_state_bytes.0.elapsed() >= Duration::from_secs(1) {
            let bytes = host.keys.state_bytes() as u64;
            self.last_state_bytes = (Instant::now(), bytes);
            bytes
        } else {
            self.last_state_bytes.1
        };
        let event_timers =
            host.timers
                .pending(weir_core::time::timers::TimeDomain::EventTime) as u64;
        let processing_timers =
            host.timers
                .pending(weir_core::time::timers::TimeDomain::ProcessingTime) as u64;
        let now = wall_clock_ms();
        let rate = &mut self.rate;
        control.update(|s| {
            s.state = state;
            s.udf = self.udf.name.clone();
            s.udf_sha256 = self.udf.sha256.clone();
            s.sources = report.sources;
            s.outputs = report.outputs;
            s.processed = report.processed;
            s.dead_letters = report.dead_letters;
            s.late = report.late;
            s.watermark = set.then_some(watermark);
            s.watermark_lag_ms = set.then(|| now - watermark);
            s.keys = keys;
            s.state_bytes = state_bytes;
            s.event_timers = event_timers;
            s.processing_timers = processing_timers;
            s.udf_errors = self.udf_errors;
            s.checkpoints = self.checkpoints;
            rate.observe(s, now);
        });
    }

    /// Reads ahead on every source whose inputs have room in their queues. Waits for
    /// input only when nothing at all is ready, and then no longer than until the next
    /// processing-time timer.
    fn fill(&mut self) -> anyhow::Result<()> {
        let mut any_ready = self.inputs.iter().any(|i| !i.queue.is_empty());
        for index in 0..self.sources.len() {
            loop {
                let slot = &self.sources[index];
                let full = slot
                    .inputs
                    .clone()
                    .any(|i| self.inputs[i].queue.len() >= READ_AHEAD);
                if slot.exhausted || full {
                    break;
                }
                let wait = if any_ready {
                    Duration::ZERO
                } else {
                    self.idle_wait()
                };
                let mut record = self.spare.pop().unwrap_or_default();
                let slot = &mut self.sources[index];
                match slot.source.poll(&mut record, wait)? {
                    Polled::Record => {
                        let input_at = slot.inputs.start + record.partition;
                        let decoded = decode(&slot.decoder, &record);
                        let input = &mut self.inputs[input_at];
                        input.read += 1;
                        input.last_record = Instant::now();
                        if input.idle {
                            input.idle = false;
                            let fired = self.operator.set_idle(input_at, false);
                            self.fire_through(fired, KeyedOperator::resume_event_timers)?;
                        }
                        match decoded {
                            Ok((key, timestamp)) => {
                                let input = &mut self.inputs[input_at];
                                let number = input.read;
                                input.queue.push_back(Pending {
                                    record,
                                    key,
                                    timestamp,
                                    number,
                                });
                                any_ready = true;
                            }
                            Err(reason) => {
                                self.dead_letter(input_at, &record, &reason)?;
                                self.spare.push(record);
                            }
                        }
                    }
                    Polled::Progress { input, timestamp } => {
                        self.spare.push(record);
                        let input_at = slot.inputs.start + input;
                        let input = &mut self.inputs[input_at];
                        input.progress =
                            Some(input.progress.map_or(timestamp, |p| p.max(timestamp)));
                        input.last_record = Instant::now();
                        if input.idle {
                            input.idle = false;
                            let fired = self.operator.set_idle(input_at, false);
                            self.fire_through(fired, KeyedOperator::resume_event_timers)?;
                        }
                    }
                    Polled::Idle => {
                        self.spare.push(record);
                        break;
                    }
                    Polled::End => {
                        self.spare.push(record);
                        slot.exhausted = true;
                        for i in slot.inputs.clone() {
                            self.inputs[i].exhausted = true;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies the watermark markers of inputs whose records read before the marker have
    /// all been processed (their queues are empty: the last chunk is done).
    fn apply_progress(&mut self) -> anyhow::Result<()> {
        for index in 0..self.inputs.len() {
            let input = &mut self.inputs[index];
            if !input.queue.is_empty() {
                continue;
            }
            if let Some(timestamp) = input.progress.take() {
                let fired = self.operator.observe_progress(index, timestamp);
                self.fire_through(fired, KeyedOperator::resume_event_timers)?;
            }
        }
        Ok(())
    }

    /// Marks inputs idle that have had no record for their `idle_timeout`: they stop
    /// holding the watermark back until they deliver again.
    fn update_idleness(&mut self) -> anyhow::Result<()> {
        for index in 0..self.inputs.len() {
            let input = &mut self.inputs[index];
            let Some(timeout) = input.idle_timeout else {
                continue;
            };
            if !input.idle
                && !input.ended
                && input.queue.is_empty()
                && input.last_record.elapsed() >= timeout
            {
                input.idle = true;
                tracing::info!(
                    "input {:?} has had no record for {} ms: it no longer holds the watermark back",
                    input.name,
                    timeout.as_millis()
                );
                let fired = self.operator.set_idle(index, true);
                self.fire_through(fired, KeyedOperator::resume_event_timers)?;
            }
        }
        Ok(())
    }

    /// Ends the sources that are exhausted and have nothing queued; the watermark may advance.
    fn end_drained_sources(&mut self) -> anyhow::Result<()> {
        for index in 0..self.inputs.len() {
            let input = &mut self.inputs[index];
            if input.exhausted && !input.ended && input.queue.is_empty() {
                input.ended = true;
                if self.inputs.iter().all(|i| i.ended) {
                    // The last input ended: the final watermark fires every event-time
                    // timer now, and no checkpoint follows (a completed run removes
                    // them), so the keys those timers release need not be remembered.
                    self.operator.host_mut().keys.stop_tracking();
                }
                let fired = self.operator.end_source(index);
                self.fire_through(fired, KeyedOperator::resume_event_timers)?;
            }
        }
        Ok(())
    }

    /// Takes ready records in timestamp order (ties in pipeline-file order). Stops when a
    /// source runs dry: if it may still deliver, its next record could come first; if it
    /// has ended, the watermark must stop waiting for it before the next record.
    fn take_chunk(&mut self, chunk: &mut Vec<(usize, Pending)>) {
        while chunk.len() < READ_AHEAD {
            let next = (0..self.inputs.len())
                .filter(|&i| !self.inputs[i].queue.is_empty())
                .min_by_key(|&i| (self.inputs[i].queue.front().map(|p| p.timestamp), i));
            let Some(index) = next else { break };
            let input = &mut self.inputs[index];
            chunk.push((index, input.queue.pop_front().expect("non-empty")));
            // A source that ran dry may still deliver an earlier record, or has ended and
            // must stop holding the watermark before the next record: either way, stop.
            if input.queue.is_empty() {
                break;
            }
        }
    }

    /// How long to wait for input when nothing is ready: until the next processing-time
    /// timer, at most 100 ms.
    fn idle_wait(&self) -> Duration {
        // A steered run looks for swaps between waits: keep them short.
        let cap = if self.control.is_some() { 10 } else { 100 };
        match self.operator.next_processing_due() {
            Some(due) => Duration::from_millis((due - wall_clock_ms()).clamp(0, cap) as u64),
            None => Duration::from_millis(cap as u64),
        }
    }

    /// Why a record or timer went to the dead letters because its key's state could not
    /// be read.
    fn state_reason(&self, key: &[u8], message: &str) -> String {
        format!(
            "UDF {:?} version {} cannot read the state of key {:?}: {message}",
            self.udf.name,
            short_hash(&self.udf.sha256),
            String::from_utf8_lossy(key)
        )
    }

    /// A timer that could not fire because its key's state could not be read.
    fn timer_dead_letter(
        &mut self,
        domain: weir_core::time::timers::TimeDomain,
        timestamp: Timestamp,
        key: &[u8],
        reason: &str,
    ) -> anyhow::Result<()> {
        let raw = serde_json::json!({
            "timer": timestamp,
            "domain": domain.label(),
            "key": String::from_utf8_lossy(key),
        })
        .to_string();
        tracing::warn!("{reason}");
        self.dead_letters.write(&DeadLetter {
            source: "timer",
            line: None,
            partition: None,
            offset: 0,
            reason,
            raw: &raw,
        })
    }

    fn dead_letter(
        &mut self,
        input: usize,
        record: &SourceRecord,
        reason: &str,
    ) -> anyhow::Result<()> {
        let input = &self.inputs[input];
        let kafka = record.line == 0;
        let partition = input.name.split_once(':').map(|(_, p)| p);
        let raw = String::from_utf8_lossy(&record.data);
        let letter = DeadLetter {
            source: &self.sources[input.source].name,
            line: (!kafka).then_some(record.line),
            partition: if kafka { partition } else { None },
            offset: record.offset,
            reason,
            raw: &raw,
        };
        self.dead_letters.write(&letter)
    }

    /// Turns an operator error into a message naming the UDF and where the run was.
    fn describe(&self, error: OperatorError, origin: Option<Origin>) -> anyhow::Error {
        let udf = self.operator.function_name();
        let at = |o: &Origin| {
            let input = &self.inputs[o.input];
            let source = &self.sources[input.source];
            let place = if o.line > 0 {
                format!("line {} of {}", o.line, source.source.location())
            } else {
                format!("offset {} of {}", o.offset, input.name)
            };
            format!("record {} of source {:?} ({place})", o.number, source.name)
        };
        match &error {
            OperatorError::Udf {
                activity: Activity::Element,
                ..
            } => {
                let at = origin.as_ref().map(at).unwrap_or_default();
                anyhow::anyhow!("UDF {udf:?} failed on {at}: {error}")
            }
            OperatorError::Udf {
                activity:
                    Activity::Timer {
                        domain,
                        timestamp,
                        key,
                    },
                ..
            } => {
                let after = origin
                    .as_ref()
                    .map(|o| format!(" (after {})", at(o)))
                    .unwrap_or_default();
                anyhow::anyhow!(
                    "UDF {udf:?} failed on its {} timer at {} for key {:?}{after}: {error}",
                    domain.label(),
                    display(*timestamp),
                    String::from_utf8_lossy(key)
                )
            }
            _ => anyhow::anyhow!("{error}"),
        }
    }

    fn report(&self) -> RunReport {
        let counters = self.operator.counters();
        RunReport {
            pipeline: self.pipeline.clone(),
            udf: self.operator.function_name().to_string(),
            sources: self
                .sources
                .iter()
                .map(|s| {
                    let read = s.inputs.clone().map(|i| self.inputs[i].read).sum();
                    (s.name.clone(), read)
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .cloned()
                .zip(counters.emitted.iter().copied())
                .collect(),
            processed: counters.elements,
            dead_letters: self.dead_letters.count(),
            dead_letter_path: self.dead_letters.location().to_string(),
            late: counters.late,
            event_timers: counters.event_timers,
            processing_timers: counters.processing_timers,
            elapsed: Duration::ZERO,
            peak_rss_bytes: None,
            interrupted: self.interrupted,
            resumed_from: self.resumed_from,
            checkpoints: self.checkpoints,
            longest_checkpoint_pause: self.longest_checkpoint_pause,
        }
    }
}

/// Opens the sink an output is routed to.
fn open_sink(
    spec: &SinkSpec,
    pipeline: &str,
    resume: Option<&SinkState>,
) -> anyhow::Result<Box<dyn Sink>> {
    let length = resume.and_then(|r| r.length);
    let json_lines = |target: &SinkTarget| -> anyhow::Result<Option<JsonLinesSink>> {
        Ok(match target {
            SinkTarget::File(path) if spec.upsert.is_some() => Some(JsonLinesSink::create(path)?),
            SinkTarget::File(path) => Some(JsonLinesSink::open(path, length)?),
            SinkTarget::Stdout => Some(JsonLinesSink::stdout()),
            SinkTarget::Discard => None,
            SinkTarget::Postgres(_) | SinkTarget::Kafka(_) => None,
        })
    };
    match &spec.target {
        SinkTarget::Postgres(target) => return Ok(Box::new(PostgresSink::connect(target)?)),
        SinkTarget::Kafka(target) => {
            return Ok(Box::new(KafkaSink::connect(
                target,
                pipeline,
                &spec.output,
            )?))
        }
        _ => {}
    }
    let Some(out) = json_lines(&spec.target)? else {
        return Ok(Box::new(DiscardSink));
    };
    Ok(match &spec.upsert {
        None => Box::new(out),
        Some(upsert) => {
            let changelog = match &upsert.changelog {
                Some(path) => Some(JsonLinesSink::open(path, length)?),
                None => None,
            };
            let mut sink = UpsertSink::new(out, changelog, upsert.key_fields.clone())?;
            if let Some(resume) = resume {
                sink.restore_table(&resume.data)
                    .context("the checkpoint's upsert table")?;
            }
            Box::new(sink)
        }
    })
}

/// Where a record came from, for messages.
struct Origin {
    input: usize,
    number: u64,
    line: u64,
    offset: u64,
}

/// Decodes a record's key and timestamp; the error is the dead letter's reason.
fn decode(decoder: &RecordDecoder, record: &SourceRecord) -> Result<(KeyBytes, Timestamp), String> {
    let line = std::str::from_utf8(&record.data).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let message = MessageMeta {
        key: record.message_key.as_deref(),
        timestamp: record.message_timestamp,
    };
    let decoded = decoder.decode_message(line, message)?;
    let data = line.as_bytes().as_ptr_range();
    let key = match decoded.key {
        std::borrow::Cow::Borrowed(bytes) if data.contains(&bytes.as_ptr()) => {
            let start = bytes.as_ptr() as usize - line.as_ptr() as usize;
            KeyBytes::InLine(start..start + bytes.len())
        }
        key => KeyBytes::Owned(key.into_owned()),
    };
    Ok((key, decoded.timestamp))
}

/// The first 12 hex digits of a hash, for messages.
pub fn short_hash(sha256: &str) -> &str {
    &sha256[..sha256.len().min(12)]
}

/// The peak resident set size of this process (`VmHWM`), on Linux.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {human_pos} records, {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
