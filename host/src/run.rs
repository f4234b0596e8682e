//! Running a pipeline: wiring sources, the keyed operator, the UDF and the sinks.
//!
//! Sources are merged by the timestamp of each one's next record (smallest first, ties
//! in pipeline-file order), so several files replay deterministically; a live source
//! with nothing ready does not hold the others back. Records that cannot be decoded go
//! to the dead-letter output. The run ends when every source has ended, after the final
//! watermark and the remaining processing-time timers have fired.

use crate::operator::{Activity, KeyedOperator, OperatorError};
use crate::pipeline::{PipelineSpec, SinkTarget, SourceLocation};
use crate::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use crate::runtime::{ElementRef, InitInfo, ProcessFunction};
use crate::sink::{DeadLetter, DeadLetters, DiscardSink, JsonLinesSink, Sink};
use crate::source::decode::RecordDecoder;
use crate::source::{FileSource, Polled, Source, SourceRecord, StdinSource};
use crate::time::{display, wall_clock_ms, Timestamp};
use anyhow::Context as _;
use std::io::IsTerminal;
use std::ops::Range;
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
    pub report: Option<RunReport>,
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

/// One source with its decoder and the record it has ready.
struct Input {
    name: String,
    input_index: u32,
    source: Box<dyn Source>,
    decoder: RecordDecoder,
    record: SourceRecord,
    ready: Option<Ready>,
    ended: bool,
    read: u64,
}

/// A decoded record waiting its turn.
struct Ready {
    key: KeyBytes,
    timestamp: Timestamp,
}

/// Where the key is: inside the record's line (no copy), or unescaped into its own buffer.
enum KeyBytes {
    InLine(Range<usize>),
    Owned(Vec<u8>),
}

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
    match result {
        Ok(()) => Ok(report),
        Err(error) => Err(RunFailure {
            error,
            report: Some(report),
        }),
    }
}

struct Runner {
    pipeline: String,
    inputs: Vec<Input>,
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
                record: SourceRecord::default(),
                ready: None,
                ended: false,
                read: 0,
            });
        }
        let delays: Vec<i64> = spec.sources.iter().map(|s| s.out_of_orderness_ms).collect();
        let mut operator = KeyedOperator::new(function, &delays, wall_clock_ms());
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
            sinks.push(match &spec_sink.target {
                SinkTarget::File(path) => Box::new(JsonLinesSink::create(path)?),
                SinkTarget::Stdout => Box::new(JsonLinesSink::stdout()),
                SinkTarget::Discard => Box::new(DiscardSink),
            });
        }
        operator.bind_sinks(sinks);
        let dead_letters = DeadLetters::create(&spec.dead_letter).context("dead-letter output")?;
        Ok(Self {
            pipeline: spec.name.clone(),
            inputs,
            operator,
            outputs,
            dead_letters,
        })
    }

    fn run(&mut self, options: &RunOptions) -> anyhow::Result<()> {
        let progress = (options.progress && std::io::stderr().is_terminal()).then(progress_bar);
        loop {
            self.fill()?;
            if self.inputs.iter().all(|i| i.ended) {
                break;
            }
            // The ready record with the smallest timestamp goes next; ties in file order.
            let next = (0..self.inputs.len())
                .filter(|&i| self.inputs[i].ready.is_some())
                .min_by_key(|&i| (self.inputs[i].ready.as_ref().map(|r| r.timestamp), i));
            match next {
                Some(i) => self.process(i)?,
                None => self
                    .operator
                    .fire_processing_timers(wall_clock_ms())
                    .map_err(|e| self.describe(e, None))?,
            }
            if self.operator.has_processing_timers() {
                self.operator
                    .fire_processing_timers(wall_clock_ms())
                    .map_err(|e| self.describe(e, None))?;
            }
            if let Some(bar) = &progress {
                let processed = self.operator.counters().elements;
                if processed % 65_536 == 0 {
                    bar.set_position(processed);
                    bar.set_message(format!("watermark {}", display(self.operator.watermark())));
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

    /// Makes sure every source that can has a decoded record ready.
    fn fill(&mut self) -> anyhow::Result<()> {
        let any_ready = self.inputs.iter().any(|i| i.ready.is_some());
        for index in 0..self.inputs.len() {
            while !self.inputs[index].ended && self.inputs[index].ready.is_none() {
                let wait = if any_ready {
                    Duration::ZERO
                } else {
                    self.idle_wait()
                };
                let input = &mut self.inputs[index];
                match input.source.poll(&mut input.record, wait)? {
                    Polled::Record => {
                        input.read += 1;
                        if let Err(reason) = decode(input) {
                            self.dead_letter(index, &reason)?;
                        }
                    }
                    Polled::Idle => break,
                    Polled::End => {
                        input.ended = true;
                        self.operator
                            .end_source(index)
                            .map_err(|e| self.describe(e, Some(index)))?;
                    }
                }
            }
        }
        Ok(())
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

    fn process(&mut self, index: usize) -> anyhow::Result<()> {
        let input = &mut self.inputs[index];
        let ready = input.ready.take().expect("chosen because ready");
        let key = match &ready.key {
            KeyBytes::InLine(range) => &input.record.data[range.clone()],
            KeyBytes::Owned(bytes) => bytes.as_slice(),
        };
        let element = ElementRef {
            input: input.input_index,
            key,
            value: &input.record.data,
            timestamp: ready.timestamp,
        };
        self.operator
            .process_element(index, element)
            .map_err(|e| self.describe(e, Some(index)))
    }

    fn dead_letter(&mut self, index: usize, reason: &str) -> anyhow::Result<()> {
        let input = &self.inputs[index];
        let raw = String::from_utf8_lossy(&input.record.data);
        let letter = DeadLetter {
            source: &input.name,
            line: input.record.line,
            offset: input.record.offset,
            reason,
            raw: &raw,
        };
        self.dead_letters.write(&letter)
    }

    /// Turns an operator error into a message naming the UDF and where the run was.
    fn describe(&self, error: OperatorError, index: Option<usize>) -> anyhow::Error {
        let udf = self.operator.function_name();
        let origin = |i: usize| {
            let input = &self.inputs[i];
            format!(
                "record {} of source {:?} (line {} of {})",
                input.read,
                input.name,
                input.record.line,
                input.source.location()
            )
        };
        match &error {
            OperatorError::Udf {
                activity: Activity::Element,
                ..
            } => {
                let at = index.map(origin).unwrap_or_default();
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
                let after = match index {
                    Some(i) => format!(" (after {})", origin(i)),
                    None => String::new(),
                };
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
        }
    }
}

/// Decodes the record just read into `input.ready`.
fn decode(input: &mut Input) -> Result<(), String> {
    let line =
        std::str::from_utf8(&input.record.data).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let decoded = input.decoder.decode(line)?;
    let key = match decoded.key {
        std::borrow::Cow::Borrowed(bytes) => {
            let start = bytes.as_ptr() as usize - line.as_ptr() as usize;
            KeyBytes::InLine(start..start + bytes.len())
        }
        std::borrow::Cow::Owned(bytes) => KeyBytes::Owned(bytes),
    };
    input.ready = Some(Ready {
        key,
        timestamp: decoded.timestamp,
    });
    Ok(())
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} records ({per_sec}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
