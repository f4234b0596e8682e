//! # Weir run
//!
//! Running a pipeline: its plan (`weir-pipeline`) wired into sources, the keyed operator
//! with its UDF, and sinks, until every source ends or the run is asked to stop.
//!
//! One run is one thread that reads, merges and steers, and `parallelism` keyed shards
//! (a `KeyedStage` of `weir-engine`) on threads of their own that process the runs of records it hands
//! them, all at once, while it reads ahead. Its loop, in `runner.rs`:
//!
//! 1. **Steer** (`steering.rs`): apply a UDF version someone asked to swap in, publish
//!    the live status a few times a second.
//! 2. **Read ahead** (`inputs.rs`): every source partition is an input with its own
//!    queue; records are decoded (key, event time) as they are read, and those that
//!    cannot be go to the dead-letter output.
//! 3. **Merge**: records are handed to the operator in timestamp order across inputs
//!    (ties in pipeline-file order), in runs of up to 512; a live input with nothing
//!    queued does not hold the others back, and one quiet for its `idle_timeout` stops
//!    holding the watermark back.
//! 4. **Recover** (`recovery.rs`): a record or timer whose key's state the UDF cannot
//!    read goes to the dead letters; a new version failing within its probation is
//!    rolled back; anything else ends the run with a message naming the record.
//! 5. **Checkpoint** (`checkpointing.rs`): between records, once the read-ahead queues
//!    are drained, every `interval` and when the run is stopped; a run resumes from the
//!    newest one, and a run that completes removes them.
//!
//! A pipeline of several stages (`graph.rs`) runs each stage this way, on a thread of its
//! own, the stages joined by in-process exchanges.
//!
//! The run ends when every input has ended, after the final watermark and the remaining
//! processing-time timers have fired; [`RunReport`] says what it did.

#![warn(missing_docs)]

mod checkpointing;
pub mod control;
mod failures;
mod graph;
mod inputs;
mod open;
mod recovery;
mod report;
mod runner;
mod steering;

pub use control::{
    CheckpointRecord, ExceptionRecord, LiveStatus, RateTracker, RunControl, RunState, ShardStatus,
    SwapDone, SwapRequest, TaskStatus, KEPT_IN_STATUS, SWAP_WAIT,
};
pub use graph::{run_graph, run_graph_with, GraphFailure, GraphReport};
pub use report::{DeadLetterCauses, RunReport};

use anyhow::Context as _;
use runner::Runner;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use weir_core::identity::UdfIdentity;
use weir_engine::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use weir_engine::runtime::ProcessFunction;
use weir_pipeline::PipelineSpec;

/// A failed run: what went wrong, and the figures up to then.
#[derive(Debug)]
pub struct RunFailure {
    /// What went wrong, naming the record, timer or connector where it happened.
    pub error: anyhow::Error,
    /// The figures up to the failure (none if the run failed to start).
    pub report: Option<Box<RunReport>>,
    /// The failure is a mistake on the command line found only once the UDF said what
    /// it declares (a [`CommandLineMistake`]); `weir run` exits 2 for it, as for any
    /// bad command line.
    pub command_line: bool,
}

/// A mistake on the command line that only the UDF's `init` reveals: `--output NAME=...`
/// for an output the UDF does not declare, or a `--config KEY=VALUE` the UDF refuses.
#[derive(Debug)]
pub struct CommandLineMistake(pub String);

impl std::fmt::Display for CommandLineMistake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandLineMistake {}

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

/// Loads the wasm component of `spec`'s UDF, once: its bytes are hashed for the
/// compile cache and the checkpoints' identity. Returns the function, ready for its
/// `init`, and its identity.
pub fn load_udf(spec: &PipelineSpec) -> anyhow::Result<(WasmFunction, UdfIdentity)> {
    let path = &spec.udf.path;
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read UDF component {}", path.display()))?;
    udf_from_bytes(spec, &bytes).with_context(|| format!("UDF component {}", path.display()))
}

/// The UDF of `spec` from its component's `bytes` (compiled, or found in the compile
/// cache), with its identity; not initialised yet.
pub fn udf_from_bytes(
    spec: &PipelineSpec,
    bytes: &[u8],
) -> anyhow::Result<(WasmFunction, UdfIdentity)> {
    let component = LoadedComponent::from_bytes(&spec.udf.name, bytes)?;
    // The bytes were hashed once, to look them up in the compile cache.
    let identity = UdfIdentity {
        name: spec.udf.name.clone(),
        sha256: component.sha256.clone(),
    };
    Ok((WasmFunction::new(component, udf_limits(spec)), identity))
}

/// The sandbox limits `spec` gives its UDF.
pub fn udf_limits(spec: &PipelineSpec) -> Limits {
    Limits {
        memory_bytes: spec.udf.memory_limit_bytes,
        call_timeout: spec.udf.call_timeout,
        state_cache_bytes: spec.udf.state_cache_bytes,
    }
}

/// Runs a pipeline with its wasm UDF.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunReport, RunFailure> {
    let (function, identity) = load_udf(spec).map_err(|error| RunFailure {
        error,
        report: None,
        command_line: false,
    })?;
    run_with(spec, Box::new(function), identity, options)
}

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
            command_line: error.downcast_ref::<CommandLineMistake>().is_some(),
            error,
            report: None,
        })?;
    let result = runner.run(options);
    if result.is_err() {
        // What was emitted before the failure is written out, and a sink that cannot
        // take it any more takes it off the counts: the report counts what the sinks hold.
        runner.flush_after_failure();
        let _ = runner.dead_letters.flush();
    }
    if let Some(control) = &options.control {
        let state = match (&result, runner.interrupted) {
            (Err(e), _) => {
                control.update(|s| s.record_error(format!("{e:#}")));
                RunState::Failed
            }
            (Ok(()), true) => RunState::Stopped,
            (Ok(()), false) => RunState::Finished,
        };
        runner.publish_status(control, state);
    }
    let mut report = runner.report();
    report.elapsed = started.elapsed();
    report.peak_rss_bytes = report::peak_rss_bytes();
    match result {
        Ok(()) => Ok(report),
        Err(error) => Err(RunFailure {
            error,
            report: Some(Box::new(report)),
            command_line: false,
        }),
    }
}

/// The first 12 hex digits of a hash, for messages.
pub fn short_hash(sha256: &str) -> &str {
    &sha256[..sha256.len().min(12)]
}
