//! Sources: where records come from.
//!
//! A source yields raw records ([`SourceRecord`]) with their position (line number and
//! byte offset, or Kafka partition and offset: for dead letters and checkpoints); the
//! [`decode`] step pulls out each record's key and event time. A source has one or more
//! partitions (a file has one; a Kafka source one per topic partition), each with its
//! own watermark in the pipeline. A source that has nothing to give says
//! [`Polled::Idle`] so the pipeline can fire processing-time timers meanwhile.

pub mod decode;
pub mod extract;
mod jsonl;

pub mod kafka;

pub use jsonl::{FileSource, StdinSource};
pub use kafka::KafkaSource;

use crate::checkpoint::Position;
use std::time::Duration;

/// One raw record, in a buffer the caller reuses.
#[derive(Debug, Default, Clone)]
pub struct SourceRecord {
    pub data: Vec<u8>,
    /// 1-based line number in the source (0 for Kafka).
    pub line: u64,
    /// Byte offset of the line's start, or the Kafka message's offset.
    pub offset: u64,
    /// Which of the source's partitions it came from (an index into `partitions()`).
    pub partition: usize,
    /// The Kafka message's key, if any.
    pub message_key: Option<Vec<u8>>,
    /// The Kafka message's timestamp, if any.
    pub message_timestamp: Option<i64>,
}

/// What a poll gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    Record,
    /// Nothing arrived within the wait; more may come.
    Idle,
    /// Partition `input` has seen event time up to `timestamp` (a watermark marker from
    /// a repartition topic): its watermark may advance without a record.
    Progress {
        input: usize,
        timestamp: i64,
    },
    End,
}

pub trait Source: Send {
    /// Where the records come from, for messages: a path, or `stdin`.
    fn location(&self) -> &str;

    /// Fills `record` with the next record, waiting at most `wait` for one.
    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled>;

    /// Names of the partitions, for messages and checkpoints (one for a file).
    fn partitions(&self) -> Vec<String> {
        vec![self.location().to_string()]
    }

    /// Where each partition would read next: what a checkpoint records.
    fn positions(&self) -> Vec<Position>;

    /// A checkpoint holding `positions` is durable: a source with a position store of
    /// its own (Kafka's committed offsets) may now record them there.
    fn commit(&mut self, positions: &[Position]) -> anyhow::Result<()> {
        let _ = positions;
        Ok(())
    }
}
