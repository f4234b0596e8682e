//! Where an input stands: what a source reports with every record and a checkpoint
//! keeps, so a restored run reads on from exactly there.

use serde::{Deserialize, Serialize};

/// Where an input goes on reading.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Position {
    /// A file: the byte offset and line number of the next line.
    File {
        /// Byte offset in the file where the next line starts.
        offset: u64,
        /// How many lines (blank ones included) had been read: the 1-based number of
        /// the last line read, 0 at the start.
        line: u64,
        /// What identifies the bytes before `offset` (a hash of the first and last KiBs
        /// read), so that a run resumed on a file that was replaced is refused; absent in
        /// checkpoints written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fingerprint: Option<String>,
    },
    /// A stream that cannot be rewound (stdin): how many lines had been read.
    Stream {
        /// How many lines had been read; only reported, since the stream cannot be
        /// reopened there.
        line: u64,
    },
    /// A Kafka partition: the offset of the next message.
    Kafka {
        /// The topic read.
        topic: String,
        /// The partition of `topic` read.
        partition: i32,
        /// The offset of the next message to read in that partition.
        offset: i64,
    },
    /// A Kafka partition read through the pipeline's repartition topic (a task of a
    /// group, the cluster crate's repartitioner): the partition's next offset not seen yet
    /// (repeats below it are dropped), and where the repartition topic is read next.
    Repartitioned {
        /// The source topic the records came from.
        topic: String,
        /// The partition of `topic` the records came from.
        partition: i32,
        /// The offset in that source partition of the next message not seen yet; any
        /// message below it that arrives again through the repartition topic is dropped.
        offset: i64,
        /// The repartition topic actually read.
        via_topic: String,
        /// The partition of `via_topic` this task reads.
        via_partition: i32,
        /// The offset of the next message to read in that repartition partition (the
        /// one committed to Kafka for this input).
        via_offset: i64,
    },
}
