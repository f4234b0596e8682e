//! Pipeline files: what to read, which UDF runs, where outputs go.
//!
//! A pipeline is a TOML file (documented in `docs/pipeline.md`). [`PipelineFile`] is its
//! literal shape, checked by serde so that a misspelt field is an error naming it;
//! [`PipelineSpec::load`] resolves paths relative to the file, parses durations and
//! sizes, and applies the command line's [`Overrides`].

#![warn(missing_docs)]

use anyhow::{bail, Context as _};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_checkpoint::CheckpointSpec;
use weir_core::time::format::TimestampFormat;
use weir_core::time::parse_duration_ms;
use weir_io::sink::kafka::KafkaTarget;
use weir_io::sink::postgres::PostgresTarget;
use weir_io::sink::upsert::UpsertSpec;
pub use weir_io::sink::SinkTarget;
use weir_io::source::kafka::{KafkaSourceSpec, Startup};
pub use weir_io::source::SourceLocation;

pub mod name;

/// The TOML file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// The pipeline's name (default: the file's stem, or for `pipeline.toml` its
    /// folder's name, made valid by [`name::derive`]); checked by [`name::check`].
    pub name: Option<String>,
    /// `[[source]]`: the inputs, at least one.
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceEntry>,
    /// `[udf]`: the component that processes the records.
    pub udf: UdfEntry,
    /// `[[sink]]`: where each output of the UDF goes, at most one per output.
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkEntry>,
    /// `[dead_letter]`: where refused records go (default: next to the pipeline file,
    /// `<stem>.dead-letter.jsonl`).
    pub dead_letter: Option<DeadLetterEntry>,
    /// `[checkpoint]`: checkpoints (default: on, every 10 s, in
    /// `.weir-state/<pipeline name>` next to the file).
    pub checkpoint: Option<CheckpointEntry>,
    /// `[restart]`: how `weir serve` restarts the pipeline after it failed (default: 3
    /// times, 10 s apart).
    pub restart: Option<RestartEntry>,
    /// `parallelism = N`: how many keyed shards process the records, each on its own
    /// thread with its own UDF instance (default 1; at most [`KEY_GROUPS`]).
    pub parallelism: Option<usize>,
}

/// `[restart]`: Flink's fixed-delay restart strategy, for pipelines `weir serve` runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartEntry {
    /// How many times a failed run is started again (default 3; 0: never).
    pub attempts: Option<u32>,
    /// A duration: the wait before each restart (default 10s).
    pub delay: Option<String>,
}

/// `[checkpoint]`: where and how often the run saves what it needs to resume.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointEntry {
    /// Off: a restarted run starts from scratch.
    pub enabled: Option<bool>,
    /// The state directory (default: `.weir-state/<pipeline name>` next to the file).
    pub dir: Option<String>,
    /// Time between checkpoints (default 10s).
    pub interval: Option<String>,
}

/// One `[[source]]`: where records are read from, and how their key and event time are
/// found.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    /// Unique among the sources; `--input NAME=...`, dead letters and messages use it.
    pub name: String,
    /// `type`: a file, stdin, or Kafka topics.
    #[serde(rename = "type")]
    pub kind: SourceKind,
    /// File sources only (and required there): the file, relative to the pipeline file.
    pub path: Option<String>,
    /// The UDF input this source feeds; defaults to the source's name.
    pub input: Option<String>,
    /// The field path (a name or JSON pointer) of the record's key, or `@key`.
    pub key: String,
    /// The field path of the record's event time, or `@timestamp`.
    pub timestamp: String,
    /// How the event time is written.
    pub timestamp_format: TimestampFormat,
    /// A duration: how far the source's watermark trails the largest timestamp it has
    /// seen (default 0).
    pub out_of_orderness: Option<String>,
    /// A partition (or stdin) with no record for this long stops holding the watermark back.
    pub idle_timeout: Option<String>,
    /// A size: the longest record (a line, a message's payload) the source hands on
    /// (default 16 MiB); a longer one goes to the dead letters, and a line is never held
    /// whole.
    pub max_record_bytes: Option<String>,
    /// Kafka: bootstrap brokers.
    pub brokers: Option<String>,
    /// Kafka: the topic, or `topics` for several.
    pub topic: Option<String>,
    /// Kafka: several topics (added after `topic`, if both are given).
    pub topics: Option<Vec<String>>,
    /// Kafka: the consumer group offsets are committed to (default `weir-<pipeline>`).
    pub group: Option<String>,
    /// Kafka: where to start without a checkpoint.
    pub startup: Option<Startup>,
    /// Kafka: stop at the end offsets seen at start.
    pub bounded: Option<bool>,
    /// Kafka: how long to keep trying to reach the brokers at start.
    pub connect_timeout: Option<String>,
    /// Kafka: librdkafka consumer properties.
    pub properties: Option<BTreeMap<String, toml::Value>>,
    /// Kafka, with `--group`: the topic is not partitioned by `key`, so the group re-keys
    /// it through a repartition topic before the keyed operator.
    pub repartition: Option<bool>,
}

/// A source's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// `file`: a JSON-lines file (or a named pipe, read as a stream).
    File,
    /// `stdin`: standard input, as JSON lines.
    Stdin,
    /// `kafka`: JSON messages of Kafka topics.
    Kafka,
}

/// `[udf]`: the component that processes the records, and its limits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdfEntry {
    /// The component file (`.wasm`), relative to the pipeline file.
    pub path: String,
    /// The UDF's name in messages (default: `path`'s stem, `_` turned into `-`).
    pub name: Option<String>,
    /// A size: the most linear memory an instance may have (default 64 MiB).
    pub memory_limit: Option<String>,
    /// A duration: the deadline of each call into the UDF (default 1 s; more than zero).
    pub call_timeout: Option<String>,
    /// Most elements and timers per batched call; 0 calls once per element and timer.
    pub max_batch: Option<usize>,
    /// A size: how much keyed state the instance may keep between batches (default an
    /// eighth of `memory_limit`; 0 keeps none).
    pub state_cache: Option<String>,
    /// A size: the most bytes (keys and values) one call may emit (default 64 MiB).
    pub max_emit_bytes: Option<String>,
    /// What the run does when a call on a record or timer fails: `"fail"` (the
    /// default), `"dead-letter"` or `"retry"`.
    pub on_error: Option<String>,
    /// With `on_error = "retry"`: how many times a failed call is made again (default 3).
    pub retries: Option<u32>,
    /// With `on_error = "retry"`: a duration, the wait before the first retry, doubled
    /// before each next one up to 30 s (default 100ms).
    pub retry_backoff: Option<String>,
    /// With `on_error = "retry"`: what happens once the retries failed too, `"fail"`
    /// (the default) or `"dead-letter"`.
    pub after_retries: Option<String>,
    /// `[udf.config]`: key/value configuration handed to the UDF's `init`, as text.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    /// How `weir dev` rebuilds the component (for UDFs that are not Rust crates).
    pub dev: Option<DevEntry>,
}

/// `[udf.dev]`: how `weir dev` rebuilds a UDF that is not a Rust crate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevEntry {
    /// Shell command, run in the pipeline file's folder.
    pub build: String,
    /// Files or folders whose changes trigger a rebuild, relative to the pipeline file.
    pub watch: Vec<String>,
    /// Shell command that runs the UDF's unit tests (`weir test`), in the pipeline
    /// file's folder.
    pub test: Option<String>,
}

/// One `[[sink]]`: where one output of the UDF goes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkEntry {
    /// The UDF output it takes: `main`, or a side output's name.
    pub output: String,
    /// `type`: a file, stdout, nowhere, a PostgreSQL table or a Kafka topic.
    #[serde(rename = "type")]
    pub kind: SinkKind,
    /// File sinks only (and required there): the file, relative to the pipeline file.
    pub path: Option<String>,
    /// `append` (default): every record; `upsert`: the final table, one row per key.
    pub mode: Option<SinkMode>,
    /// Upsert only: fields of the record's value that form the key (default: its key).
    pub key: Option<Vec<String>>,
    /// Upsert only: also write every record, as it arrives, to this file.
    pub changelog: Option<String>,
    /// PostgreSQL: connection string, e.g. `postgres://user@127.0.0.1:5432/db`.
    pub url: Option<String>,
    /// PostgreSQL: the table to upsert into.
    pub table: Option<String>,
    /// PostgreSQL: the table's primary-key columns (the upsert key).
    pub primary_key: Option<Vec<String>>,
    /// PostgreSQL: the columns and the record fields they come from.
    pub columns: Option<Vec<ColumnEntry>>,
    /// PostgreSQL: create the table if it does not exist.
    pub create_table: Option<bool>,
    /// Kafka: bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: Option<String>,
    /// Kafka: the topic records are produced to.
    pub topic: Option<String>,
    /// Kafka: librdkafka producer properties, e.g. `{ "linger.ms" = "5" }`.
    pub properties: Option<BTreeMap<String, toml::Value>>,
    /// Kafka: commit each checkpoint's records in a Kafka transaction.
    pub transactional: Option<bool>,
}

/// One column of a PostgreSQL sink.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ColumnEntry {
    /// The column's name in the table.
    pub name: String,
    /// The record field (name or JSON pointer); defaults to the column's name.
    pub field: Option<String>,
    /// The SQL type; needed to create the table, else read from the table.
    #[serde(rename = "type")]
    pub sql_type: Option<String>,
}

/// A sink's `mode`: what it writes of the records it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SinkMode {
    /// `append` (the default): every record, as it arrives.
    #[default]
    Append,
    /// `upsert`: the last record per key, written as a table when the run completes.
    Upsert,
}

/// A sink's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// `file`: a JSON-lines file.
    File,
    /// `stdout`: standard output, as JSON lines.
    Stdout,
    /// `discard`: the records are dropped (for benchmarks).
    Discard,
    /// `postgres`: upserts into a PostgreSQL table.
    Postgres,
    /// `kafka`: every record produced to a Kafka topic.
    Kafka,
}

/// `[dead_letter]`: where refused records go (lines that cannot be decoded, records
/// whose state the UDF cannot read).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterEntry {
    /// The JSON-lines file, relative to the pipeline file.
    pub path: String,
}

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

    fn parse(entry: &UdfEntry) -> anyhow::Result<Self> {
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
    /// How many keyed shards process the records (1 to [`KEY_GROUPS`]): a key goes to
    /// the shard of its key group, each shard has its own UDF instance, keyed state,
    /// timers and thread.
    pub parallelism: usize,
}

pub use weir_core::key::KEY_GROUPS;
pub use weir_engine::operator::DEFAULT_MAX_BATCH;
pub use weir_engine::runtime::services::DEFAULT_MAX_EMIT_BYTES;
pub use weir_engine::runtime::wasm::{DEFAULT_CALL_TIMEOUT, DEFAULT_MEMORY_LIMIT};

/// A parallelism is a number of shards between 1 and the number of key groups (a shard
/// owns at least one key group).
fn check_parallelism(parallelism: usize) -> anyhow::Result<()> {
    if parallelism == 0 || parallelism > usize::from(KEY_GROUPS) {
        bail!("{parallelism} shards: give 1 to {KEY_GROUPS} (a shard owns at least one of the {KEY_GROUPS} key groups)");
    }
    Ok(())
}

/// The least `[udf] memory_limit` a pipeline file may give: 1 MiB.
pub const MIN_MEMORY_LIMIT: usize = 1 << 20;

impl PipelineSpec {
    /// Reads, checks and resolves a pipeline file.
    pub fn load(path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read pipeline file {}", path.display()))?;
        Self::parse(&text, path, overrides)
            .with_context(|| format!("pipeline file {}", path.display()))
    }

    /// Checks and resolves pipeline text; relative paths are relative to `path`'s folder.
    pub fn parse(text: &str, path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        let file: PipelineFile =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &str| base.join(p);

        let mut sources = Vec::new();
        for (i, entry) in file.sources.into_iter().enumerate() {
            let context = || format!("[[source]] #{} ({:?})", i + 1, entry.name);
            sources.push(resolve_source(&entry, &resolve).with_context(context)?);
        }
        if sources.is_empty() {
            bail!("no [[source]]: a pipeline needs at least one");
        }
        for (i, s) in sources.iter().enumerate() {
            if sources[..i].iter().any(|t| t.name == s.name) {
                bail!("two sources are named {:?}", s.name);
            }
        }

        let udf = resolve_udf(&file.udf, &resolve, path).context("[udf]")?;

        let mut sinks = Vec::new();
        for (i, entry) in file.sinks.into_iter().enumerate() {
            let context = || format!("[[sink]] #{} (output {:?})", i + 1, entry.output);
            let target = sink_target(&entry, &resolve).with_context(context)?;
            let upsert = upsert_spec(&entry, &resolve).with_context(context)?;
            if sinks.iter().any(|s: &SinkSpec| s.output == entry.output) {
                bail!("two sinks for output {:?}", entry.output);
            }
            sinks.push(SinkSpec {
                output: entry.output,
                target,
                upsert,
                from_command_line: false,
            });
        }

        let dead_letter = match file.dead_letter {
            Some(entry) => resolve(&entry.path),
            None => path.with_extension("dead-letter.jsonl"),
        };
        let name = match file.name {
            Some(name) => {
                name::check(&name).context("name")?;
                name
            }
            None => name::derive(&default_name(path)),
        };
        for source in &mut sources {
            if let SourceLocation::Kafka(kafka) = &mut source.location {
                if kafka.group.is_empty() {
                    kafka.group = format!("weir-{name}");
                }
            }
        }
        let checkpoint =
            checkpoint_spec(file.checkpoint.as_ref(), &name, &resolve).context("[checkpoint]")?;
        let restart = restart_spec(file.restart.as_ref()).context("[restart]")?;
        let parallelism = file.parallelism.unwrap_or(1);
        check_parallelism(parallelism).context("parallelism")?;
        let mut spec = PipelineSpec {
            name,
            sources,
            udf,
            sinks,
            dead_letter,
            checkpoint,
            restart,
            parallelism,
        };
        spec.apply(overrides)?;
        Ok(spec)
    }

    /// Applies command-line overrides; paths in them are relative to the working directory.
    pub fn apply(&mut self, overrides: &Overrides) -> anyhow::Result<()> {
        if let Some(parallelism) = overrides.parallelism {
            check_parallelism(parallelism).context("--parallelism")?;
            self.parallelism = parallelism;
        }
        for (name, path) in &overrides.inputs {
            let Some(source) = self.sources.iter_mut().find(|s| &s.name == name) else {
                let known: Vec<_> = self.sources.iter().map(|s| s.name.as_str()).collect();
                bail!("--input {name}=...: the pipeline has no source {name:?} (its sources: {known:?})");
            };
            source.location = match path.as_str() {
                "-" => SourceLocation::Stdin,
                path => SourceLocation::File(PathBuf::from(path)),
            };
        }
        for (output, path) in &overrides.outputs {
            let target = match path.as_str() {
                "-" => SinkTarget::Stdout,
                path => SinkTarget::File(PathBuf::from(path)),
            };
            match self.sinks.iter_mut().find(|s| &s.output == output) {
                Some(sink) => {
                    sink.target = target;
                    sink.from_command_line = true;
                }
                None => self.sinks.push(SinkSpec {
                    output: output.clone(),
                    target,
                    upsert: None,
                    from_command_line: true,
                }),
            }
        }
        for (key, value) in &overrides.config {
            self.udf.config_from_command_line.push(key.clone());
            match self.udf.config.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.clone(),
                None => self.udf.config.push((key.clone(), value.clone())),
            }
        }
        if let Some(udf) = &overrides.udf {
            self.udf.path = udf.clone();
            // Another component: messages name it after its file, not the one it replaces.
            if let Some(stem) = udf.file_stem() {
                self.udf.name = stem.to_string_lossy().replace('_', "-");
            }
        }
        if let Some(dead_letter) = &overrides.dead_letter {
            self.dead_letter = dead_letter.clone();
        }
        if let Some(dir) = &overrides.state_dir {
            self.checkpoint.dir = dir.clone();
        }
        if let Some(interval) = &overrides.checkpoint_interval {
            self.checkpoint.interval = checkpoint_interval(interval)
                .map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e:#}"))?;
        }
        if overrides.no_checkpoints {
            self.checkpoint.enabled = false;
        }
        Ok(())
    }

    /// The UDF's input names, in the order the sources first name them.
    pub fn input_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for s in &self.sources {
            if !names.contains(&s.input) {
                names.push(s.input.clone());
            }
        }
        names
    }
}

fn checkpoint_spec(
    entry: Option<&CheckpointEntry>,
    name: &str,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<CheckpointSpec> {
    let dir = match entry.and_then(|e| e.dir.as_deref()) {
        Some(dir) => resolve(dir),
        None => resolve(".weir-state").join(name),
    };
    let interval = match entry.and_then(|e| e.interval.as_deref()) {
        Some(text) => checkpoint_interval(text).context("interval")?,
        None => weir_checkpoint::DEFAULT_INTERVAL,
    };
    Ok(CheckpointSpec {
        enabled: entry.and_then(|e| e.enabled).unwrap_or(true),
        dir,
        interval,
        kafka: None,
    })
}

fn checkpoint_interval(text: &str) -> anyhow::Result<Duration> {
    let ms = parse_duration_ms(text)?;
    anyhow::ensure!(
        ms > 0,
        "must be more than zero (to turn checkpoints off, set enabled = false)"
    );
    Ok(Duration::from_millis(ms as u64))
}

fn resolve_source(
    entry: &SourceEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<SourceSpec> {
    let kafka_fields = [
        ("brokers", entry.brokers.is_some()),
        ("topic", entry.topic.is_some() || entry.topics.is_some()),
        ("group", entry.group.is_some()),
        ("startup", entry.startup.is_some()),
        ("bounded", entry.bounded.is_some()),
        ("connect_timeout", entry.connect_timeout.is_some()),
        ("properties", entry.properties.is_some()),
        ("repartition", entry.repartition.is_some()),
    ];
    if entry.kind != SourceKind::Kafka {
        if let Some((field, _)) = kafka_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only kafka sources take it");
        }
    }
    let location = match (entry.kind, &entry.path) {
        (SourceKind::File, Some(path)) => SourceLocation::File(resolve(path)),
        (SourceKind::File, None) => bail!("path: a file source needs a path"),
        (SourceKind::Stdin, None) => SourceLocation::Stdin,
        (SourceKind::Stdin | SourceKind::Kafka, Some(_)) => {
            bail!("path: a {:?} source takes no path", entry.kind)
        }
        (SourceKind::Kafka, None) => SourceLocation::Kafka(kafka_source(entry)?),
    };
    let out_of_orderness_ms = match &entry.out_of_orderness {
        Some(text) => parse_duration_ms(text).context("out_of_orderness")?,
        None => 0,
    };
    let idle_timeout = match (&entry.idle_timeout, entry.kind) {
        (Some(text), _) => match parse_duration_ms(text).context("idle_timeout")? {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        },
        (None, SourceKind::Kafka) => Some(DEFAULT_KAFKA_IDLE_TIMEOUT),
        (None, _) => None,
    };
    let max_record_bytes = match &entry.max_record_bytes {
        Some(text) => parse_size(text).context("max_record_bytes")?,
        None => weir_io::source::DEFAULT_MAX_RECORD_BYTES,
    };
    anyhow::ensure!(
        max_record_bytes > 0,
        "max_record_bytes: must be more than zero (default 16MiB)"
    );
    // Check the field paths now, so a bad pointer is a start-up error, not a dead letter per line.
    weir_io::source::decode::RecordDecoder::new(
        &entry.key,
        &entry.timestamp,
        entry.timestamp_format,
    )
    .map_err(|e| anyhow::anyhow!("key/timestamp: {e}"))?;
    Ok(SourceSpec {
        name: entry.name.clone(),
        input: entry.input.clone().unwrap_or_else(|| entry.name.clone()),
        location,
        key: entry.key.clone(),
        timestamp: entry.timestamp.clone(),
        timestamp_format: entry.timestamp_format,
        out_of_orderness_ms,
        idle_timeout,
        max_record_bytes,
    })
}

/// How long a Kafka partition may be quiet before it stops holding the watermark back.
pub const DEFAULT_KAFKA_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

fn kafka_source(entry: &SourceEntry) -> anyhow::Result<KafkaSourceSpec> {
    let brokers = entry
        .brokers
        .clone()
        .filter(|b| !b.trim().is_empty())
        .context("brokers: a kafka source needs its bootstrap brokers, e.g. \"127.0.0.1:9092\"")?;
    let mut topics: Vec<String> = entry.topic.iter().cloned().collect();
    topics.extend(entry.topics.iter().flatten().cloned());
    anyhow::ensure!(
        !topics.is_empty() && topics.iter().all(|t| !t.trim().is_empty()),
        "topic: a kafka source needs a topic (or topics = [...])"
    );
    let connect_timeout = match &entry.connect_timeout {
        Some(text) => {
            Duration::from_millis(parse_duration_ms(text).context("connect_timeout")? as u64)
        }
        None => Duration::from_secs(30),
    };
    Ok(KafkaSourceSpec {
        brokers,
        topics,
        group: entry.group.clone().unwrap_or_default(),
        startup: entry.startup.unwrap_or(Startup::Committed),
        bounded: entry.bounded.unwrap_or(false),
        connect_timeout,
        properties: kafka_properties(entry.properties.as_ref())?,
        partitions: None,
        repartition: entry.repartition.unwrap_or(false),
        via: None,
    })
}

/// librdkafka properties from the pipeline file, as strings.
fn kafka_properties(
    properties: Option<&BTreeMap<String, toml::Value>>,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, value) in properties.into_iter().flatten() {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                value.to_string()
            }
            _ => bail!("properties: {name:?} must be a string, number or boolean"),
        };
        if name == "bootstrap.servers" {
            bail!("properties: set the brokers field, not \"bootstrap.servers\"");
        }
        out.push((name.clone(), text));
    }
    Ok(out)
}

fn restart_spec(entry: Option<&RestartEntry>) -> anyhow::Result<RestartSpec> {
    let mut spec = RestartSpec::default();
    if let Some(entry) = entry {
        if let Some(attempts) = entry.attempts {
            spec.attempts = attempts;
        }
        if let Some(delay) = &entry.delay {
            spec.delay = Duration::from_millis(parse_duration_ms(delay).context("delay")? as u64);
        }
    }
    Ok(spec)
}

fn resolve_udf(
    entry: &UdfEntry,
    resolve: &impl Fn(&str) -> PathBuf,
    pipeline: &Path,
) -> anyhow::Result<UdfSpec> {
    let path = resolve(&entry.path);
    let name = entry.name.clone().unwrap_or_else(|| {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.unwrap_or_else(|| default_name(pipeline))
            .replace('_', "-")
    });
    let memory_limit_bytes = match &entry.memory_limit {
        Some(text) => parse_size(text).context("memory_limit")?,
        None => DEFAULT_MEMORY_LIMIT,
    };
    anyhow::ensure!(
        memory_limit_bytes >= MIN_MEMORY_LIMIT,
        "memory_limit: {memory_limit_bytes} bytes is too little for any UDF: give at least 1MiB (default 64MiB)"
    );
    let max_emit_bytes = match &entry.max_emit_bytes {
        Some(text) => parse_size(text).context("max_emit_bytes")?,
        None => DEFAULT_MAX_EMIT_BYTES,
    };
    anyhow::ensure!(
        max_emit_bytes > 0,
        "max_emit_bytes: must be more than zero (default 64MiB)"
    );
    let call_timeout = match &entry.call_timeout {
        Some(text) => {
            Duration::from_millis(parse_duration_ms(text).context("call_timeout")? as u64)
        }
        None => DEFAULT_CALL_TIMEOUT,
    };
    anyhow::ensure!(
        !call_timeout.is_zero(),
        "call_timeout: must be more than zero"
    );
    let state_cache_bytes = match &entry.state_cache {
        Some(text) => parse_size(text).context("state_cache")?,
        None => memory_limit_bytes / 8,
    };
    let config = entry
        .config
        .iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                    v.to_string()
                }
                other => serde_json::to_string(other).unwrap_or_default(),
            };
            (k.clone(), text)
        })
        .collect();
    Ok(UdfSpec {
        name,
        path,
        config,
        memory_limit_bytes,
        call_timeout,
        max_batch: entry.max_batch.unwrap_or(DEFAULT_MAX_BATCH),
        state_cache_bytes,
        max_emit_bytes,
        on_error: OnUdfError::parse(entry)?,
        config_from_command_line: Vec::new(),
        dev: match &entry.dev {
            Some(dev) => {
                anyhow::ensure!(!dev.watch.is_empty(), "dev.watch: list at least one path");
                Some(DevSpec {
                    build: dev.build.clone(),
                    dir: resolve("."),
                    watch: dev.watch.iter().map(|p| resolve(p)).collect(),
                    test: dev.test.clone(),
                })
            }
            None => None,
        },
    })
}

fn upsert_spec(
    entry: &SinkEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<Option<UpsertSpec>> {
    match entry.mode.unwrap_or_default() {
        SinkMode::Append => {
            if entry.key.is_some() || entry.changelog.is_some() {
                bail!("key, changelog: only an upsert sink (mode = \"upsert\") takes them");
            }
            Ok(None)
        }
        SinkMode::Upsert => {
            if let Some(fields) = &entry.key {
                anyhow::ensure!(!fields.is_empty(), "key: list at least one field");
                let paths: Vec<&str> = fields.iter().map(String::as_str).collect();
                weir_io::source::extract::FieldPaths::new(&paths)
                    .map_err(|e| anyhow::anyhow!("key: {e}"))?;
            }
            Ok(Some(UpsertSpec {
                key_fields: entry.key.clone(),
                changelog: entry.changelog.as_deref().map(resolve),
            }))
        }
    }
}

fn sink_target(
    entry: &SinkEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<SinkTarget> {
    let postgres_fields = [
        ("url", entry.url.is_some()),
        ("table", entry.table.is_some()),
        ("primary_key", entry.primary_key.is_some()),
        ("columns", entry.columns.is_some()),
        ("create_table", entry.create_table.is_some()),
    ];
    if entry.kind != SinkKind::Postgres {
        if let Some((field, _)) = postgres_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only postgres sinks take it");
        }
    }
    let kafka_fields = [
        ("brokers", entry.brokers.is_some()),
        ("topic", entry.topic.is_some()),
        ("properties", entry.properties.is_some()),
        ("transactional", entry.transactional.is_some()),
    ];
    if entry.kind != SinkKind::Kafka {
        if let Some((field, _)) = kafka_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only kafka sinks take it");
        }
    }
    Ok(match (entry.kind, entry.path.as_deref()) {
        (SinkKind::File, Some(path)) => SinkTarget::File(resolve(path)),
        (SinkKind::File, None) => bail!("path: a file sink needs a path"),
        (SinkKind::Stdout, None) => SinkTarget::Stdout,
        (SinkKind::Discard, None) => SinkTarget::Discard,
        (SinkKind::Postgres, None) => SinkTarget::Postgres(postgres_target(entry)?),
        (SinkKind::Kafka, None) => SinkTarget::Kafka(kafka_target(entry)?),
        (_, Some(_)) => bail!("path: only file sinks take a path"),
    })
}

fn postgres_target(entry: &SinkEntry) -> anyhow::Result<PostgresTarget> {
    if entry.mode.is_some() || entry.key.is_some() || entry.changelog.is_some() {
        bail!("mode, key, changelog: a postgres sink always upserts, by its primary_key");
    }
    let url = entry
        .url
        .clone()
        .context("url: a postgres sink needs a connection string")?;
    let table = entry
        .table
        .clone()
        .context("table: a postgres sink needs a table")?;
    let columns = entry.columns.clone().unwrap_or_default();
    anyhow::ensure!(!columns.is_empty(), "columns: list the table's columns");
    let primary_key = entry.primary_key.clone().unwrap_or_default();
    anyhow::ensure!(
        !primary_key.is_empty(),
        "primary_key: name at least one column"
    );
    for pk in &primary_key {
        anyhow::ensure!(
            columns.iter().any(|c| &c.name == pk),
            "primary_key: {pk:?} is not one of the columns"
        );
    }
    let create_table = entry.create_table.unwrap_or(false);
    let columns: Vec<(String, String, Option<String>)> = columns
        .into_iter()
        .map(|c| {
            let field = c.field.unwrap_or_else(|| c.name.clone());
            (c.name, field, c.sql_type)
        })
        .collect();
    if create_table {
        if let Some((name, ..)) = columns.iter().find(|(_, _, ty)| ty.is_none()) {
            bail!("columns: {name:?} needs a type to create the table");
        }
    }
    let fields: Vec<&str> = columns.iter().map(|(_, f, _)| f.as_str()).collect();
    weir_io::source::extract::FieldPaths::new(&fields)
        .map_err(|e| anyhow::anyhow!("columns: {e}"))?;
    Ok(PostgresTarget {
        url,
        table,
        primary_key,
        columns,
        create_table,
    })
}

fn kafka_target(entry: &SinkEntry) -> anyhow::Result<KafkaTarget> {
    if entry.mode.unwrap_or_default() != SinkMode::Append
        || entry.key.is_some()
        || entry.changelog.is_some()
    {
        bail!("mode, key, changelog: a kafka sink appends every record, keyed by its key");
    }
    let brokers = entry
        .brokers
        .clone()
        .filter(|b| !b.trim().is_empty())
        .context("brokers: a kafka sink needs its bootstrap brokers, e.g. \"127.0.0.1:9092\"")?;
    let topic = entry
        .topic
        .clone()
        .filter(|t| !t.trim().is_empty())
        .context("topic: a kafka sink needs a topic")?;
    let properties = kafka_properties(entry.properties.as_ref())?;
    Ok(KafkaTarget {
        brokers,
        topic,
        properties,
        transactional: entry.transactional.unwrap_or(false),
    })
}

fn default_name(pipeline: &Path) -> String {
    let stem = pipeline
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "pipeline" {
        if let Some(dir) = pipeline.canonicalize().ok().and_then(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .map(|d| d.to_string_lossy().into_owned())
        }) {
            return dir;
        }
    }
    stem
}

/// Parses a size such as `64MiB`, `512KiB`, `1GiB`, `100MB` or a byte count.
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| anyhow::anyhow!("{text:?} is not a size like 64MiB"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => bail!("{text:?} is not a size like 64MiB (units: B, KiB, MiB, GiB, KB, MB, GB)"),
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| anyhow::anyhow!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "ad-clicks"

[[source]]
name = "clicks"
type = "file"
path = "clicks.jsonl"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "../udf.wasm"
memory_limit = "32MiB"
[udf.config]
window = "5m"
limit = 3

[[sink]]
output = "main"
type = "file"
path = "out/clicks.jsonl"
"#;

    fn parse(text: &str, overrides: &Overrides) -> anyhow::Result<PipelineSpec> {
        PipelineSpec::parse(text, Path::new("/p/demo/pipeline.toml"), overrides)
    }

    #[test]
    fn resolves_paths_and_defaults() {
        let spec = parse(GOOD, &Overrides::default()).unwrap();
        assert_eq!(spec.name, "ad-clicks");
        assert_eq!(
            spec.sources[0].location,
            SourceLocation::File("/p/demo/clicks.jsonl".into())
        );
        assert_eq!(spec.sources[0].input, "clicks");
        assert_eq!(spec.sources[0].out_of_orderness_ms, 5_000);
        assert_eq!(spec.udf.path, PathBuf::from("/p/demo/../udf.wasm"));
        assert_eq!(spec.udf.name, "udf");
        assert_eq!(spec.udf.memory_limit_bytes, 32 << 20);
        assert_eq!(spec.udf.call_timeout, DEFAULT_CALL_TIMEOUT);
        assert_eq!(
            spec.udf.config,
            vec![("limit".into(), "3".into()), ("window".into(), "5m".into())]
        );
        assert_eq!(
            spec.sinks[0].target,
            SinkTarget::File("/p/demo/out/clicks.jsonl".into())
        );
        assert_eq!(
            spec.dead_letter,
            PathBuf::from("/p/demo/pipeline.dead-letter.jsonl")
        );
    }

    #[test]
    fn dev_section_resolves_against_the_pipeline_file() {
        let text = GOOD.replace(
            "[udf.config]",
            "[udf.dev]\nbuild = \"./build.sh\"\nwatch = [\"app.py\", \"lib\"]\ntest = \"python3 -m unittest\"\n\n[udf.config]",
        );
        let spec = parse(&text, &Overrides::default()).unwrap();
        assert_eq!(
            spec.udf.dev,
            Some(DevSpec {
                build: "./build.sh".into(),
                dir: "/p/demo/.".into(),
                watch: vec!["/p/demo/app.py".into(), "/p/demo/lib".into()],
                test: Some("python3 -m unittest".into()),
            })
        );
        let empty = GOOD.replace(
            "[udf.config]",
            "[udf.dev]\nbuild = \"make\"\nwatch = []\n\n[udf.config]",
        );
        let error = parse(&empty, &Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains("dev.watch"), "{error:#}");
    }

    #[test]
    fn overrides() {
        let overrides = Overrides {
            inputs: vec![("clicks".into(), "-".into())],
            outputs: vec![
                ("main".into(), "o.jsonl".into()),
                ("late".into(), "-".into()),
            ],
            config: vec![("window".into(), "1m".into())],
            ..Overrides::default()
        };
        let spec = parse(GOOD, &overrides).unwrap();
        assert_eq!(spec.sources[0].location, SourceLocation::Stdin);
        assert_eq!(spec.sinks[0].target, SinkTarget::File("o.jsonl".into()));
        assert_eq!(spec.sinks[1].target, SinkTarget::Stdout);
        assert!(spec.udf.config.contains(&("window".into(), "1m".into())));

        let bad = Overrides {
            inputs: vec![("clickz".into(), "x".into())],
            ..Overrides::default()
        };
        let err = format!("{:#}", parse(GOOD, &bad).unwrap_err());
        assert!(
            err.contains("no source \"clickz\"") && err.contains("clicks"),
            "{err}"
        );
    }

    #[test]
    fn on_error_defaults_to_fail_and_retry_takes_its_settings() {
        let spec = parse(GOOD, &Overrides::default()).unwrap();
        assert_eq!(spec.udf.on_error, OnUdfError::Fail);
        let retry = GOOD.replace(
            "memory_limit",
            "on_error = \"retry\"\nretries = 4\nretry_backoff = \"250ms\"\nafter_retries = \"dead-letter\"\nmemory_limit",
        );
        let policy = parse(&retry, &Overrides::default()).unwrap().udf.on_error;
        assert_eq!(
            policy,
            OnUdfError::Retry {
                retries: 4,
                backoff: Duration::from_millis(250),
                then: AfterRetries::DeadLetter
            }
        );
        assert_eq!(policy.backoff(1), Duration::from_millis(250));
        assert_eq!(policy.backoff(3), Duration::from_millis(1000), "doubles");
        assert_eq!(policy.backoff(40), MAX_RETRY_BACKOFF, "at most");
        let defaults = GOOD.replace("memory_limit", "on_error = \"retry\"\nmemory_limit");
        assert_eq!(
            parse(&defaults, &Overrides::default())
                .unwrap()
                .udf
                .on_error,
            OnUdfError::Retry {
                retries: DEFAULT_RETRIES,
                backoff: DEFAULT_RETRY_BACKOFF,
                then: AfterRetries::Fail
            }
        );
    }

    #[test]
    fn mistakes_name_the_field() {
        let cases = [
            (
                GOOD.replace("out_of_orderness", "out_of_order"),
                "unknown field `out_of_order`",
            ),
            (GOOD.replace("\"5s\"", "\"5 parsecs\""), "out_of_orderness"),
            (
                GOOD.replace("\"datetime\"", "\"rfc822\""),
                "unknown variant `rfc822`",
            ),
            (GOOD.replace("32MiB", "lots"), "memory_limit"),
            (
                GOOD.replace("\"32MiB\"", "\"0\""),
                "memory_limit: 0 bytes is too little",
            ),
            (
                GOOD.replace("memory_limit", "max_emit_bytes = \"0\"\nmemory_limit"),
                "max_emit_bytes: must be more than zero",
            ),
            (
                GOOD.replace("memory_limit", "on_error = \"skip\"\nmemory_limit"),
                "on_error: \"skip\" is not a policy: use \"fail\", \"dead-letter\" or \"retry\"",
            ),
            (
                GOOD.replace("memory_limit", "retries = 5\nmemory_limit"),
                "apply only with on_error = \"retry\"",
            ),
            (
                GOOD.replace(
                    "memory_limit",
                    "on_error = \"retry\"\nafter_retries = \"ignore\"\nmemory_limit",
                ),
                "after_retries: \"ignore\" is not a policy",
            ),
            (
                GOOD.replace("name = \"ad-clicks\"", "name = \"../../escaped\""),
                "name: the name \"../../escaped\" holds '/'",
            ),
            (
                GOOD.replace("name = \"ad-clicks\"", "name = \"..\""),
                "starts with \".\"",
            ),
            (
                GOOD.replace("path = \"clicks.jsonl\"\n", ""),
                "a file source needs a path",
            ),
            (
                GOOD.replace("name = \"ad-clicks\"", "nme = \"ad-clicks\""),
                "unknown field `nme`",
            ),
            (
                GOOD.replace("memory_limit", "memory_limt"),
                "unknown field `memory_limt`",
            ),
            (
                GOOD.replace("key = \"ad_id\"", "key = \"/a//b\""),
                "empty segment",
            ),
            (
                GOOD.replace(
                    "type = \"file\"\npath = \"out",
                    "type = \"stdout\"\npath = \"out",
                ),
                "only file sinks take a path",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(&text, &Overrides::default()).unwrap_err());
            assert!(err.contains(expected), "expected {expected:?} in: {err}");
        }
    }

    #[test]
    fn upsert_sinks() {
        let upsert = GOOD.replace(
            "path = \"out/clicks.jsonl\"",
            "path = \"out/clicks.jsonl\"\nmode = \"upsert\"\nkey = [\"ad_id\"]\nchangelog = \"changes.jsonl\"",
        );
        let spec = parse(&upsert, &Overrides::default()).unwrap();
        let expected = UpsertSpec {
            key_fields: Some(vec!["ad_id".into()]),
            changelog: Some("/p/demo/changes.jsonl".into()),
        };
        assert_eq!(spec.sinks[0].upsert, Some(expected));
        let append_with_key = GOOD.replace(
            "path = \"out/clicks.jsonl\"",
            "path = \"out/clicks.jsonl\"\nkey = [\"ad_id\"]",
        );
        let err = format!(
            "{:#}",
            parse(&append_with_key, &Overrides::default()).unwrap_err()
        );
        assert!(err.contains("only an upsert sink"), "{err}");
    }

    #[test]
    fn kafka_sinks() {
        let sink = |lines: &str| {
            GOOD.replace(
                "type = \"file\"\npath = \"out/clicks.jsonl\"",
                &format!("type = \"kafka\"\n{lines}"),
            )
        };
        let spec = parse(
            &sink("brokers = \"b:9092\"\ntopic = \"clicks-out\"\nproperties = { \"linger.ms\" = \"5\", \"batch.num.messages\" = 100 }"),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            spec.sinks[0].target,
            SinkTarget::Kafka(KafkaTarget {
                brokers: "b:9092".into(),
                topic: "clicks-out".into(),
                properties: vec![
                    ("batch.num.messages".into(), "100".into()),
                    ("linger.ms".into(), "5".into())
                ],
                transactional: false,
            })
        );
        assert_eq!(spec.sinks[0].upsert, None);
        let cases = [
            (sink("topic = \"t\""), "brokers: a kafka sink needs"),
            (sink("brokers = \"b:9092\""), "topic: a kafka sink needs a topic"),
            (
                sink("brokers = \"b:9092\"\ntopic = \"\""),
                "topic: a kafka sink needs a topic",
            ),
            (
                sink("brokers = \"b\"\ntopic = \"t\"\nmode = \"upsert\""),
                "mode, key, changelog: a kafka sink appends",
            ),
            (
                sink("brokers = \"b\"\ntopic = \"t\"\nproperties = { \"linger.ms\" = [5] }"),
                "properties: \"linger.ms\" must be a string",
            ),
            (
                sink("brokers = \"b\"\ntopic = \"t\"\nproperties = { \"bootstrap.servers\" = \"x\" }"),
                "set the brokers field",
            ),
            (
                sink("brokers = \"b\"\ntopic = \"t\"\npath = \"x\""),
                "only file sinks take a path",
            ),
            (
                GOOD.replace("path = \"out/clicks.jsonl\"", "path = \"o\"\ntopic = \"t\""),
                "topic: only kafka sinks take it",
            ),
            (
                GOOD.replace("path = \"out/clicks.jsonl\"", "path = \"o\"\nbrokers = \"b\""),
                "brokers: only kafka sinks take it",
            ),
            (
                sink("brokers = \"b\"\ntopic = \"t\"\ntable = \"x\""),
                "table: only postgres sinks take it",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(&text, &Overrides::default()).unwrap_err());
            assert!(err.contains(expected), "expected {expected:?} in: {err}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("2 GB").unwrap(), 2_000_000_000);
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }
}
