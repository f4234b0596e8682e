//! A pipeline, resolved: what a run is given (paths resolved, durations and sizes
//! parsed, the command line's [`Overrides`] applied).

use crate::file::UdfEntry;
use anyhow::{bail, Context as _};
use std::path::PathBuf;
use std::time::Duration;
use weir_checkpoint::CheckpointSpec;
use weir_core::time::format::TimestampFormat;
use weir_core::time::parse_duration_ms;
use weir_io::sink::upsert::UpsertSpec;
use weir_io::sink::SinkTarget;
use weir_io::source::SourceLocation;

/// Command-line changes to a pipeline, so one file runs on any inputs.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--input NAME=PATH`: read source NAME from PATH (`-` for stdin).
    pub inputs: Vec<(String, String)>,
    /// `--output NAME=PATH`: write output NAME to PATH (`-` for stdout).
    pub outputs: Vec<(String, String)>,
    /// `--config KEY=VALUE`: UDF config.
    pub config: Vec<(String, String)>,
    /// `--udf PATH`: another component.
    pub udf: Option<PathBuf>,
    /// `--dead-letter PATH`.
    pub dead_letter: Option<PathBuf>,
    /// `--state-dir DIR`.
    pub state_dir: Option<PathBuf>,
    /// `--checkpoint-interval DURATION`.
    pub checkpoint_interval: Option<String>,
    /// `--no-checkpoints`.
    pub no_checkpoints: bool,
    /// `--parallelism N`: the number of keyed shards, replacing the file's `parallelism`.
    pub parallelism: Option<usize>,
}

/// A source, resolved: where it reads, and how its records' key and event time are
/// found.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Its name in the pipeline file, unique among the sources.
    pub name: String,
    /// The UDF input it feeds (the source's name unless the file says otherwise).
    pub input: String,
    /// Where it reads: a file (path resolved), stdin, or Kafka topics (group filled in).
    pub location: SourceLocation,
    /// The key's field path, or `@key`; checked when the file was loaded.
    pub key: String,
    /// The event time's field path, or `@timestamp`; checked when the file was loaded.
    pub timestamp: String,
    /// How the event time is written.
    pub timestamp_format: TimestampFormat,
    /// How far the source's watermark trails the largest timestamp it has seen, in ms.
    pub out_of_orderness_ms: i64,
    /// How long an input may go without a record before it stops holding the watermark
    /// back; `None`: never (the default for files and stdin, and `idle_timeout = "0"`).
    pub idle_timeout: Option<Duration>,
    /// The longest record it hands on; a longer one goes to the dead letters.
    pub max_record_bytes: usize,
}

/// The UDF, resolved: its component and its limits.
#[derive(Debug, Clone)]
pub struct UdfSpec {
    /// Its name in messages: `[udf] name`, else the component file's stem with `_`
    /// turned into `-`; after `--udf`, the stem of the file it names.
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// Key/value config, pipeline file first, overrides applied.
    pub config: Vec<(String, String)>,
    /// The config keys `--config` set: a UDF that refuses its config was given a bad
    /// command line when one of these is among them.
    pub config_from_command_line: Vec<String>,
    /// The most linear memory an instance may have, in bytes.
    pub memory_limit_bytes: usize,
    /// The deadline of each call into the UDF; never zero.
    pub call_timeout: Duration,
    /// Most entries per batched call (0: one call per element and timer).
    pub max_batch: usize,
    /// Bytes of keyed state the instance may keep between batches (0: none).
    pub state_cache_bytes: usize,
    /// The most bytes one call may emit; a call that emits more fails.
    pub max_emit_bytes: usize,
    /// What the run does when a call on a record or timer fails.
    pub on_error: OnUdfError,
    /// `[udf.dev]`: how `weir dev` rebuilds the component, if the file says.
    pub dev: Option<DevSpec>,
}

/// `[udf] on_error`: what the run does when a UDF call on a record or a timer fails
/// (returns an error, traps, runs past its `call_timeout` or out of memory, emits past
/// `max_emit_bytes`). A failure of `init`, a new version's failure within its probation
/// (rolled back), a state the UDF cannot read (always a dead letter) and a record the
/// UDF rejects itself (always a dead letter) follow their own rules, whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUdfError {
    /// The run ends with the error, naming the record or timer (Flink's default: the
    /// job fails). A restarted run meets the same record again.
    #[default]
    Fail,
    /// The record (or timer) goes to the dead-letter output with the error as its
    /// reason, its call leaving nothing behind; the run goes on.
    DeadLetter,
    /// The call is made again, up to `retries` times, after a wait that starts at
    /// `backoff` and doubles (at most [`MAX_RETRY_BACKOFF`]); then `then`.
    Retry {
        /// How many more calls are made after the first failed one.
        retries: u32,
        /// The wait before the first retry.
        backoff: Duration,
        /// What happens once every retry has failed too: [`OnUdfError::Fail`] or
        /// [`OnUdfError::DeadLetter`].
        then: AfterRetries,
    },
}

/// What happens to a record or timer whose retries all failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRetries {
    /// The run ends with the error.
    Fail,
    /// It goes to the dead-letter output; the run goes on.
    DeadLetter,
}

/// The longest wait between two retries of a failed UDF call.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(30);

impl OnUdfError {
    /// The wait before retry number `attempt` (1 for the first retry).
    pub fn backoff(&self, attempt: u32) -> Duration {
        match self {
            OnUdfError::Retry { backoff, .. } => backoff
                .saturating_mul(1 << attempt.saturating_sub(1).min(20))
                .min(MAX_RETRY_BACKOFF),
            _ => Duration::ZERO,
        }
    }

    pub(crate) fn parse(entry: &UdfEntry) -> anyhow::Result<Self> {
        let retry_fields = entry.retries.is_some()
            || entry.retry_backoff.is_some()
            || entry.after_retries.is_some();
        let policy = match entry.on_error.as_deref().unwrap_or("fail") {
            "fail" => OnUdfError::Fail,
            "dead-letter" => OnUdfError::DeadLetter,
            "retry" => {
                let backoff = match &entry.retry_backoff {
                    Some(text) => Duration::from_millis(
                        parse_duration_ms(text).context("retry_backoff")?.max(0) as u64,
                    ),
                    None => DEFAULT_RETRY_BACKOFF,
                };
                let then = match entry.after_retries.as_deref().unwrap_or("fail") {
                    "fail" => AfterRetries::Fail,
                    "dead-letter" => AfterRetries::DeadLetter,
                    other => bail!(
                        "after_retries: {other:?} is not a policy: use \"fail\" or \"dead-letter\""
                    ),
                };
                return Ok(OnUdfError::Retry {
                    retries: entry.retries.unwrap_or(DEFAULT_RETRIES),
                    backoff,
                    then,
                });
            }
            other => bail!(
                "on_error: {other:?} is not a policy: use \"fail\", \"dead-letter\" or \"retry\""
            ),
        };
        anyhow::ensure!(
            !retry_fields,
            "retries, retry_backoff and after_retries apply only with on_error = \"retry\""
        );
        Ok(policy)
    }
}

/// How often a failed call is retried when `retries` is not given.
pub const DEFAULT_RETRIES: u32 = 3;
/// The first wait before a retry when `retry_backoff` is not given.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// How `weir dev` rebuilds a UDF that is not found as a Rust crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevSpec {
    /// The shell command that rebuilds the component.
    pub build: String,
    /// Where `build` runs: the pipeline file's folder.
    pub dir: PathBuf,
    /// The files or folders whose changes trigger a rebuild, resolved against the
    /// pipeline file's folder; at least one.
    pub watch: Vec<PathBuf>,
    /// The shell command that runs the UDF's unit tests (`weir test`), run in `dir`.
    pub test: Option<String>,
}

/// How `weir serve` restarts a failed pipeline: up to `attempts` times in the
/// deployment's life, each `delay` after the failure, from its last checkpoint (Flink's
/// fixed-delay restart strategy). `weir run` never restarts: it exits 1, for whatever
/// supervises it to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartSpec {
    /// How many restarts at most.
    pub attempts: u32,
    /// The wait before each.
    pub delay: Duration,
}

impl Default for RestartSpec {
    fn default() -> Self {
        Self {
            attempts: 3,
            delay: Duration::from_secs(10),
        }
    }
}

/// The sink of one output, resolved.
#[derive(Debug, Clone)]
pub struct SinkSpec {
    /// The UDF output it takes; no two sinks take the same.
    pub output: String,
    /// Where the records go (for an upsert sink: where its table is written).
    pub target: SinkTarget,
    /// `Some` for an upsert sink.
    pub upsert: Option<UpsertSpec>,
    /// In a pipeline of several stages: the exchanges of the stages that read this
    /// output too (the output's records go to `target` and to each of them).
    pub feeds: Vec<weir_io::source::exchange::Exchange>,
    /// Routed by `--output` rather than by the file: an output the UDF does not declare
    /// is then a mistake on the command line, and the run refuses it.
    pub from_command_line: bool,
}

/// A resolved pipeline, ready to run.
#[derive(Debug, Clone)]
pub struct PipelineSpec {
    /// The pipeline's name: in messages, the summary, checkpoints and Kafka record ids.
    pub name: String,
    /// The sources, in file order (at least one, names unique): ties between records
    /// of the same timestamp go to the source listed first.
    pub sources: Vec<SourceSpec>,
    /// The UDF.
    pub udf: UdfSpec,
    /// The sinks, in file order, then those `--output` adds.
    pub sinks: Vec<SinkSpec>,
    /// The dead-letter file.
    pub dead_letter: PathBuf,
    /// Whether, where and how often the run checkpoints.
    pub checkpoint: CheckpointSpec,
    /// How `weir serve` restarts the pipeline after a failure.
    pub restart: RestartSpec,
    /// Where keyed state is kept.
    pub state: StateBackend,
    /// How many keyed shards process the records (1 to [`KEY_GROUPS`]): a key goes to
    /// the shard of its key group, each shard has its own UDF instance, keyed state,
    /// timers and thread.
    pub parallelism: usize,
}

/// Where a pipeline keeps its keyed state (`[state]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateBackend {
    /// Every key's state in memory (the default).
    #[default]
    Memory,
    /// Key states beyond `cache_bytes` (over all shards) spilled to a store on disk
    /// under the state directory (`weir-store`).
    Disk {
        /// Bytes of state kept in memory at most, over all shards.
        cache_bytes: usize,
    },
}

/// The default `[state] cache` of the disk backend: 256 MiB.
pub const DEFAULT_STATE_CACHE: usize = 256 << 20;

pub use weir_core::key::KEY_GROUPS;
pub use weir_core::limits::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_BATCH, DEFAULT_MAX_EMIT_BYTES, DEFAULT_MEMORY_LIMIT,
};

/// A parallelism is a number of shards between 1 and the number of key groups (a shard
/// owns at least one key group).
pub(crate) fn check_parallelism(parallelism: usize) -> anyhow::Result<()> {
    if parallelism == 0 || parallelism > usize::from(KEY_GROUPS) {
        bail!("{parallelism} shards: give 1 to {KEY_GROUPS} (a shard owns at least one of the {KEY_GROUPS} key groups)");
    }
    Ok(())
}

/// The least `[udf] memory_limit` a pipeline file may give: 1 MiB.
pub const MIN_MEMORY_LIMIT: usize = 1 << 20;
