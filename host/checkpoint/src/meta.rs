//! A checkpoint's [`Meta`]: everything in it but the sinks' data and the keyed state.

use serde::{Deserialize, Serialize};
use weir_core::identity::UdfIdentity;
use weir_core::position::Position;
use weir_core::time::Timestamp;

/// Everything in a checkpoint except the sinks' data and the keyed state. Stored as
/// JSON, so `weir` users can read a checkpoint's positions and watermarks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    /// The checkpoint's number: one more than the checkpoint before it (a run's first
    /// is 1). Files and Kafka messages are keyed by it.
    pub epoch: u64,
    /// The checkpoint this one's keyed state adds to (`None`: a full checkpoint).
    pub parent: Option<u64>,
    /// The name of the pipeline that wrote it: a run refuses a checkpoint of another.
    pub pipeline: String,
    /// The UDF that wrote it: one of another name is refused, another build of the same
    /// one restored with a warning.
    pub udf: UdfIdentity,
    /// Wall-clock time of the checkpoint, in ms since the epoch.
    pub written_at: Timestamp,
    /// The states the UDF had declared, in id order: the keyed section refers to them by
    /// index.
    pub states: Vec<DeclaredState>,
    /// The pipeline's watermark.
    pub watermark: Timestamp,
    /// Every input of every source: where it reads on, and its watermark.
    pub inputs: Vec<InputMeta>,
    /// The UDF's outputs, in the order of the file's sink states
    /// ([`CheckpointFile::sinks`]).
    pub outputs: Vec<OutputMeta>,
    /// Where the dead-letter output stood.
    pub dead_letters: DeadLetterMeta,
    /// The operator's counters, which a restored run counts on from.
    pub counters: CounterMeta,
    /// A stage of several wrote it when its run completed: its final section, which
    /// stands for the stage in every later epoch of its graph ([`aligned`]). Absent
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
}

/// One state the UDF had declared: restoring matches it to the running UDF's state of
/// the same name and kind, and drops its contents, with a warning, if there is none.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeclaredState {
    /// The name the UDF declared it by.
    pub name: String,
    /// Its kind's label: `Value`, `List` or `Map`.
    pub kind: String,
    /// Its time-to-live (`600000ms event-time on-write`), if it had one: then each of
    /// its entries carries its stamp. Absent in checkpoints of states without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// One input (a file, stdin, or one Kafka partition): where to read on, and its watermark.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InputMeta {
    /// The input's name: its source's name, or `<source>:<topic>[<partition>]` for a
    /// partition of a Kafka source.
    pub name: String,
    /// Where the input reads on: the position after the last record the checkpoint
    /// covers.
    pub position: Position,
    /// The input's own watermark (before the minimum over inputs).
    pub watermark: Timestamp,
    /// The input had ended (its source had no more records, all of them processed).
    pub ended: bool,
    /// Records read so far (for the summary).
    pub read: u64,
}

/// One output of the UDF.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputMeta {
    /// The output's name (`main`, or a side output's).
    pub name: String,
    /// Records emitted to this output so far: the next record's sequence number.
    pub emitted: u64,
    /// At a parallelism above 1: the records each numbering slot emitted to this output
    /// so far (one entry per key group, then one per shard for its records without a key
    /// of its own groups: `weir_core::key::NUMBERING_SLOTS`), which number the next ones
    /// (empty at parallelism 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_group: Vec<u64>,
}

/// Where the dead-letter output stood.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeadLetterMeta {
    /// Dead letters written so far.
    pub count: u64,
    /// The file's length, which a restored run cuts it back to; `None` when it is not a
    /// regular file (a pipe, a device), which cannot be cut back.
    pub length: Option<u64>,
}

/// The operator's counters, for the run's summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CounterMeta {
    /// Records the UDF processed.
    pub elements: u64,
    /// Of those, the records whose timestamp was at or behind the watermark.
    pub late: u64,
    /// Event-time timers fired.
    pub event_timers: u64,
    /// Processing-time timers fired.
    pub processing_timers: u64,
}
