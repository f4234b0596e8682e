//! Where an input stands: what a source reports with every record and a checkpoint
//! keeps, so a restored run reads on from exactly there.

use serde::{Deserialize, Serialize};

/// Where an input goes on reading.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Position {
    /// A file: the byte offset and line number of the next line.
    File { offset: u64, line: u64 },
    /// A stream that cannot be rewound (stdin): how many lines had been read.
    Stream { line: u64 },
    /// A Kafka partition: the offset of the next message.
    Kafka {
        topic: String,
        partition: i32,
        offset: i64,
    },
    /// A Kafka partition read through the pipeline's repartition topic (a task of a
    /// group, the cluster crate's repartitioner): the partition's next offset not seen yet
    /// (repeats below it are dropped), and where the repartition topic is read next.
    Repartitioned {
        topic: String,
        partition: i32,
        offset: i64,
        via_topic: String,
        via_partition: i32,
        via_offset: i64,
    },
}
