//! What every source is: a [`Source`], polled for [`SourceRecord`]s.

use std::time::Duration;
use weir_core::position::Position;

/// One raw record, in a buffer the caller reuses.
#[derive(Debug, Default, Clone)]
pub struct SourceRecord {
    /// The record's bytes: one line (without its line break) or one message's payload.
    pub data: Vec<u8>,
    /// 1-based line number in a file or stdin (`None` for a Kafka message).
    pub line: Option<u64>,
    /// Byte offset of the line's start, or the Kafka message's offset.
    pub offset: u64,
    /// Which of the source's partitions it came from (an index into `partitions()`).
    pub partition: usize,
    /// The Kafka message's key, if any.
    pub message_key: Option<Vec<u8>>,
    /// The Kafka message's timestamp, if any.
    pub message_timestamp: Option<i64>,
    /// Set when the line was longer than its source's `max_record_bytes`: its length.
    /// `data` then holds only its first KiB, and the run sends it to the dead letters.
    pub oversized: Option<u64>,
}

/// The longest record a source hands on unless the pipeline says otherwise
/// (`max_record_bytes`): 16 MiB. A longer one goes to the dead letters.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 << 20;

/// What a poll gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    /// The record buffer holds the next record.
    Record,
    /// Nothing arrived within the wait; more may come.
    Idle,
    /// Partition `input` has seen event time up to `timestamp` (a watermark marker from
    /// a repartition topic): its watermark may advance without a record.
    Progress {
        /// The partition (an index into `partitions()`).
        input: usize,
        /// The largest event time read there.
        timestamp: i64,
    },
    /// Partition `input` delivered a checkpoint barrier: the upstream stage's checkpoint
    /// covers the records before it (an exchange between stages,
    /// [`exchange`]). The run reads no further there until it took its own checkpoint.
    Barrier {
        /// The partition (an index into `partitions()`).
        input: usize,
    },
    /// Every partition has ended: the source will give nothing more.
    End,
    /// The stage feeding this source (an exchange between stages) stopped on request
    /// after its last checkpoint: nothing more comes in this run, but the input has not
    /// ended; a run resumed from that checkpoint reads on. Not polled again after it.
    Stopped,
}

/// An input connector: yields raw records of one or more partitions, each of which is
/// one input of the pipeline with its own watermark.
///
/// A source is opened when a run starts, at the positions of the checkpoint the run
/// restores (or at its start), and is driven by the run's one thread: the engine never
/// calls two methods at once. It reads ahead (see `weir-run`), so records polled may
/// not have been processed yet; what is durable is decided by [`commit`](Source::commit).
pub trait Source: Send {
    /// Where the records come from, for messages: a path, `stdin`, `kafka topic(s) ...`.
    /// Called at any time; must be cheap.
    fn location(&self) -> &str;

    /// Fills `record` with the next record, waiting at most `wait` for one. Called
    /// whenever one of this source's partitions has room in its read-ahead queue; `wait`
    /// is zero while other inputs have records ready, else at most until the next
    /// processing-time timer is due. After [`Polled::End`] it is not called again.
    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled>;

    /// Names of the partitions, for messages and checkpoints (one for a file). Called
    /// once, after opening: the set of partitions does not change during a run.
    fn partitions(&self) -> Vec<String> {
        vec![self.location().to_string()]
    }

    /// Where each partition would read next, one per partition. Called when a
    /// checkpoint is taken, with every record polled so far processed: what the
    /// checkpoint records, and what a run restored from it starts at.
    fn positions(&self) -> Vec<Position>;

    /// Bytes read so far and the source's whole size, where the size is known (a
    /// file); `None` otherwise. For the progress line's percentage and ETA.
    fn bytes_read(&self) -> Option<(u64, u64)> {
        None
    }

    /// A checkpoint holding `positions` is durable: a source with a position store of
    /// its own (Kafka's committed offsets) may now record them there. Called after each
    /// checkpoint is written and when a run completes (with the final positions).
    fn commit(&mut self, positions: &[Position]) -> anyhow::Result<()> {
        let _ = positions;
        Ok(())
    }
}
