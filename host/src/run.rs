//! Running a pipeline: wiring sources, the keyed operator, the UDF and the sinks.
//!
//! Sources are merged by the timestamp of each one's next record (smallest first, ties
//! in pipeline-file order), so several files replay deterministically; a live source
//! with nothing ready does not hold the others back. Records that cannot be decoded go
//! to the dead-letter output. The run ends when every source has ended, after the final
//! watermark and the remaining processing-time timers have fired.

use crate::operator::{Activity, KeyedOperator, OperatorError};
use crate::pipeline::{PipelineSpec, SinkSpec, SinkTarget, SourceLocation};
use crate::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use crate::runtime::{ElementRef, InitInfo, ProcessFunction};
use crate::sink::{
    DeadLetter, DeadLetters, DiscardSink, JsonLinesSink, KafkaSink, PostgresSink, Sink, UpsertSink,
};
use crate::source::decode::RecordDecoder;
use crate::source::{FileSource, Polled, Source, SourceRecord, StdinSource};
use crate::time::{display, wall_clock_ms, Timestamp};
use anyhow::Context as _;
use std::collections::VecDeque;
use std::io::IsTerminal;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The figures of a finished (or failed) run.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub pipeline: String,
    pub udf: String,
    /// Per source: name, records read (including dead letters).
    pub sources: Vec<(String, u64)>,
    /// Per output: name, records emitted.
    pub outputs: Vec<(String, u64)>,
    pub processed: u64,
    pub dead_letters: u64,
    pub dead_letter_path: String,
    pub late: u64,
    pub event_timers: u64,
    pub processing_timers: u64,
    pub elapsed: Duration,
    /// The process's peak resident memory, where the OS tells it (Linux).
    pub peak_rss_bytes: Option<u64>,
    /// Stopped by a signal before the input ended.
    pub interrupted: bool,
}

impl RunReport {
    pub fn records_per_second(&self) -> f64 {
        self.processed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The summary printed on stderr at the end of a run.
    pub fn summary(&self) -> String {
        let mut s = format!("weir: pipeline {:?} (UDF {:?})\n", self.pipeline, self.udf);
        for (name, read) in &self.sources {
            s += &format!("  source {name}: {read} records read\n");
        }
        for (name, emitted) in &self.outputs {
            s += &format!("  output {name}: {emitted} records emitted\n");
        }
        s += &format!(
            "  dead letters: {} ({})\n",
            self.dead_letters, self.dead_letter_path
        );
        s += &format!("  late records: {}\n", self.late);
        s += &format!(
            "  timers fired: {} event-time, {} processing-time\n",
            self.event_timers, self.processing_timers
        );
        if self.interrupted {
            s += "  stopped before the input ended: pending timers were not fired\n";
        }
        if let Some(peak) = self.peak_rss_bytes {
            s += &format!("  peak memory (RSS): {:.1} MB\n", peak as f64 / 1e6);
        }
        s += &format!(
            "  processed {} records in {:.3} s ({:.0} records/s)",
            self.processed,
            self.elapsed.as_secs_f64(),
            self.records_per_second()
        );
        s
    }
}

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
    /// boundary, what was processed is written out, and the run ends successfully.
    pub stop: Option<Arc<AtomicBool>>,
}

/// Runs a pipeline with its wasm UDF.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunReport, RunFailure> {
    let fail = |error: anyhow::Error| RunFailure {
        error,
        report: None,
    };
    let component = LoadedComponent::from_file(&spec.udf.name, &spec.udf.path).map_err(fail)?;
    let limits = Limits {
        memory_bytes: spec.udf.memory_limit_bytes,
        call_timeout: spec.udf.call_timeout,
    };
    run_with(
        spec,
        Box::new(WasmFunction::new(component, limits)),
        options,
    )
}

/// One source with its decoder and the records it has read ahead.
struct Input {
    name: String,
    input_index: u32,
    source: Box<dyn Source>,
    decoder: RecordDecoder,
    queue: VecDeque<Pending>,
    /// The source said it has no more records (some may still be queued).
    exhausted: bool,
    /// The source is exhausted and its queue drained: it no longer holds the watermark.
    ended: bool,
    read: u64,
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
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let started = Instant::now();
    let mut runner = Runner::open(spec, function).map_err(|error| RunFailure {
        error,
        report: None,
    })?;
    let result = runner.run(options);
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
    /// The run was stopped before its input ended.
    interrupted: bool,
    inputs: Vec<Input>,
    /// Record buffers to reuse.
    spare: Vec<SourceRecord>,
    operator: KeyedOperator,
    outputs: Vec<String>,
    dead_letters: DeadLetters,
}

impl Runner {
    fn open(spec: &PipelineSpec, function: Box<dyn ProcessFunction>) -> anyhow::Result<Self> {
        let input_names = spec.input_names();
        let mut inputs = Vec::new();
        for s in &spec.sources {
            let source: Box<dyn Source> = match &s.location {
                SourceLocation::File(path) => Box::new(FileSource::open(path)?),
                SourceLocation::Stdin => Box::new(StdinSource::stdin()),
            };
            let decoder = RecordDecoder::new(&s.key, &s.timestamp, s.timestamp_format)
                .map_err(|e| anyhow::anyhow!("source {:?}: {e}", s.name))?;
            inputs.push(Input {
                name: s.name.clone(),
                input_index: input_names
                    .iter()
                    .position(|n| n == &s.input)
                    .expect("input named by a source") as u32,
                source,
                decoder,
                queue: VecDeque::new(),
                exhausted: false,
                ended: false,
                read: 0,
            });
        }
        let delays: Vec<i64> = spec.sources.iter().map(|s| s.out_of_orderness_ms).collect();
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
            sinks.push(open_sink(spec_sink)?);
        }
        operator.bind_sinks(sinks);
        let dead_letters = DeadLetters::create(&spec.dead_letter).context("dead-letter output")?;
        Ok(Self {
            pipeline: spec.name.clone(),
            interrupted: false,
            inputs,
            spare: Vec::new(),
            operator,
            outputs,
            dead_letters,
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
            if stopped() {
                // Like Flink's stop without drain: pending timers are not fired, and the
                // state they wait on is lost with the process (no checkpoints yet).
                self.interrupted = true;
                self.operator
                    .close_sinks()
                    .map_err(|e| self.describe(e, None))?;
                self.dead_letters.flush()?;
                if let Some(bar) = progress {
                    bar.finish_and_clear();
                }
                return Ok(());
            }
            self.fill()?;
            self.end_drained_sources()?;
            if self.inputs.iter().all(|i| i.ended) {
                break;
            }
            self.take_chunk(&mut chunk);
            if chunk.is_empty() {
                // Live input is idle: fire what is due and show what was written.
                self.operator
                    .fire_processing_timers(wall_clock_ms())
                    .map_err(|e| self.describe(e, None))?;
                self.operator.flush().map_err(|e| self.describe(e, None))?;
                continue;
            }
            let elements: Vec<(usize, ElementRef<'_>)> = chunk
                .iter()
                .map(|(source, p)| {
                    let input = self.inputs[*source].input_index;
                    let element = ElementRef {
                        input,
                        key: p.key(),
                        value: &p.record.data,
                        timestamp: p.timestamp,
                    };
                    (*source, element)
                })
                .collect();
            let result = self.operator.process_elements(&elements);
            drop(elements);
            if let Err((index, error)) = result {
                let (source, pending) = &chunk[index];
                let origin = Origin {
                    source: *source,
                    number: pending.number,
                    line: pending.record.line,
                };
                return Err(self.describe(error, Some(origin)));
            }
            self.spare.extend(chunk.drain(..).map(|(_, p)| p.record));
            if self.operator.has_processing_timers() {
                self.operator
                    .fire_processing_timers(wall_clock_ms())
                    .map_err(|e| self.describe(e, None))?;
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
        self.operator.finish().map_err(|e| self.describe(e, None))?;
        self.dead_letters.flush()?;
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// Reads ahead on every source that has room in its queue. Waits for input only when
    /// nothing at all is ready, and then no longer than until the next processing-time timer.
    fn fill(&mut self) -> anyhow::Result<()> {
        let mut any_ready = self.inputs.iter().any(|i| !i.queue.is_empty());
        for index in 0..self.inputs.len() {
            while !self.inputs[index].exhausted && self.inputs[index].queue.len() < READ_AHEAD {
                let wait = if any_ready {
                    Duration::ZERO
                } else {
                    self.idle_wait()
                };
                let mut record = self.spare.pop().unwrap_or_default();
                let input = &mut self.inputs[index];
                match input.source.poll(&mut record, wait)? {
                    Polled::Record => {
                        input.read += 1;
                        match decode(&input.decoder, &record) {
                            Ok((key, timestamp)) => {
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
                                self.dead_letter(index, &record, &reason)?;
                                self.spare.push(record);
                            }
                        }
                    }
                    Polled::Idle => {
                        self.spare.push(record);
                        break;
                    }
                    Polled::End => {
                        self.spare.push(record);
                        input.exhausted = true;
                    }
                }
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
                self.operator
                    .end_source(index)
                    .map_err(|e| self.describe(e, None))?;
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
        let cap = Duration::from_millis(100);
        match self.operator.next_processing_due() {
            Some(due) => Duration::from_millis((due - wall_clock_ms()).clamp(0, 100) as u64),
            None => cap,
        }
    }

    fn dead_letter(
        &mut self,
        index: usize,
        record: &SourceRecord,
        reason: &str,
    ) -> anyhow::Result<()> {
        let input = &self.inputs[index];
        let raw = String::from_utf8_lossy(&record.data);
        let letter = DeadLetter {
            source: &input.name,
            line: record.line,
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
            let input = &self.inputs[o.source];
            format!(
                "record {} of source {:?} (line {} of {})",
                o.number,
                input.name,
                o.line,
                input.source.location()
            )
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
                    "UDF {udf:?} failed on its {} timer at {} for key {key:?}{after}: {error}",
                    domain.label(),
                    display(*timestamp)
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
                .inputs
                .iter()
                .map(|i| (i.name.clone(), i.read))
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
        }
    }
}

/// Opens the sink an output is routed to.
fn open_sink(spec: &SinkSpec) -> anyhow::Result<Box<dyn Sink>> {
    let json_lines = |target: &SinkTarget| -> anyhow::Result<Option<JsonLinesSink>> {
        Ok(match target {
            SinkTarget::File(path) => Some(JsonLinesSink::create(path)?),
            SinkTarget::Stdout => Some(JsonLinesSink::stdout()),
            SinkTarget::Discard => None,
            SinkTarget::Postgres(_) | SinkTarget::Kafka(_) => None,
        })
    };
    match &spec.target {
        SinkTarget::Postgres(target) => return Ok(Box::new(PostgresSink::connect(target)?)),
        SinkTarget::Kafka(target) => return Ok(Box::new(KafkaSink::connect(target)?)),
        _ => {}
    }
    let Some(out) = json_lines(&spec.target)? else {
        return Ok(Box::new(DiscardSink));
    };
    Ok(match &spec.upsert {
        None => Box::new(out),
        Some(upsert) => {
            let changelog = match &upsert.changelog {
                Some(path) => Some(JsonLinesSink::create(path)?),
                None => None,
            };
            Box::new(UpsertSink::new(out, changelog, upsert.key_fields.clone())?)
        }
    })
}

/// Where a record came from, for messages.
struct Origin {
    source: usize,
    number: u64,
    line: u64,
}

/// Decodes a record's key and timestamp; the error is the dead letter's reason.
fn decode(decoder: &RecordDecoder, record: &SourceRecord) -> Result<(KeyBytes, Timestamp), String> {
    let line = std::str::from_utf8(&record.data).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let decoded = decoder.decode(line)?;
    let key = match decoded.key {
        std::borrow::Cow::Borrowed(bytes) => {
            let start = bytes.as_ptr() as usize - line.as_ptr() as usize;
            KeyBytes::InLine(start..start + bytes.len())
        }
        std::borrow::Cow::Owned(bytes) => KeyBytes::Owned(bytes),
    };
    Ok((key, decoded.timestamp))
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
