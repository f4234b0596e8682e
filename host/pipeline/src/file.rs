//! The pipeline file's literal shape, checked by serde so that a misspelt field is an
//! error naming it. Nothing here is resolved: paths are as written, durations and sizes
//! are text (see [`crate::spec`] for what a run is given).

use serde::Deserialize;
use std::collections::BTreeMap;
use weir_core::time::format::TimestampFormat;
use weir_io::source::kafka::Startup;

/// The TOML file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// The pipeline's name (default: the file's stem, or for `pipeline.toml` its
    /// folder's name, made valid by [`crate::name::derive`]); checked by [`crate::name::check`].
    pub name: Option<String>,
    /// `[[source]]`: the inputs, at least one.
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceEntry>,
    /// `[udf]`: the component that processes the records, in a pipeline of one stage.
    pub udf: Option<UdfEntry>,
    /// `[[stage]]`: the keyed stages of a pipeline of several, each with its own UDF,
    /// inputs and key (instead of `[udf]`).
    #[serde(default, rename = "stage")]
    pub stages: Vec<StageEntry>,
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
    /// `[state]`: where keyed state is kept (default: in memory).
    pub state: Option<StateEntry>,
    /// `parallelism = N`: how many keyed shards process the records, each on its own
    /// thread with its own UDF instance (default 1; at most [`KEY_GROUPS`]).
    pub parallelism: Option<usize>,
}

/// One `[[stage]]`: a keyed stage of a pipeline of several, like Flink's
/// `keyBy(...).process(...)`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageEntry {
    /// Unique among the stages and sources; sinks (`stage = ...`), other stages'
    /// inputs (`from = ...`) and messages use it.
    pub name: String,
    /// `[stage.udf]`: its component and limits, as `[udf]` gives them.
    pub udf: UdfEntry,
    /// `[[stage.input]]`: what it reads, at least one.
    #[serde(default, rename = "input")]
    pub inputs: Vec<StageInputEntry>,
    /// How many keyed shards run it (default: the pipeline's `parallelism`).
    pub parallelism: Option<usize>,
}

/// One `[[stage.input]]`: a source, or another stage's output, that a stage reads.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageInputEntry {
    /// A source's name (its key and event time are the source's), or another stage's.
    pub from: String,
    /// From a stage: which of its outputs (default `main`).
    pub output: Option<String>,
    /// The UDF input it feeds (default: the source's `input`, or the stage's name).
    pub input: Option<String>,
    /// From a stage: the field path of the key in its records, or `@key` for the key
    /// that emitted each record (required: a stage says what it is keyed by).
    pub key: Option<String>,
    /// From a stage: the field path of the event time, or `@timestamp` (the default)
    /// for the time the upstream gave each record.
    pub timestamp: Option<String>,
    /// From a stage, with a `timestamp` field: how it is written.
    pub timestamp_format: Option<TimestampFormat>,
}

/// `[state]`: the state backend.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateEntry {
    /// `memory` (the default) or `disk`.
    pub backend: Option<String>,
    /// With `disk`: the bytes of state kept in memory at most, over all shards (default
    /// 256MiB).
    pub cache: Option<String>,
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
    /// In a pipeline of several stages: the stage whose output it takes.
    pub stage: Option<String>,
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
