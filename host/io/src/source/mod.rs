//! Sources: where records come from.
//!
//! A source yields raw records ([`SourceRecord`]) with their position (line number and
//! byte offset, or Kafka partition and offset: for dead letters and checkpoints); the
//! [`decode`] step pulls out each record's key and event time. A source has one or more
//! partitions (a file has one; a Kafka source one per topic partition), each with its
//! own watermark in the pipeline. A source that has nothing to give says
//! [`Polled::Idle`] so the pipeline can fire processing-time timers meanwhile.

pub mod decode;
pub mod exchange;
pub mod extract;
mod jsonl;

pub mod kafka;

pub use jsonl::{FileSource, StdinSource};
pub use kafka::KafkaSource;

use kafka::KafkaSourceSpec;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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

/// Where a source reads from: its section of the pipeline file, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLocation {
    /// A JSON-lines file (or a named pipe, read as a stream).
    File(PathBuf),
    /// Standard input.
    Stdin,
    /// Kafka topics.
    Kafka(KafkaSourceSpec),
    /// Another stage's output, in the same process (a pipeline of several stages).
    Stage(exchange::Exchange),
}

impl SourceLocation {
    /// Whether a source here has several partitions, each an input named after it
    /// (`source:topic[partition]`): Kafka topics; a file or stdin is one input.
    pub fn is_partitioned(&self) -> bool {
        matches!(self, SourceLocation::Kafka(_))
    }

    /// Its `type` in the pipeline file: `file`, `stdin` or `kafka`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceLocation::File(_) => "file",
            SourceLocation::Stdin => "stdin",
            SourceLocation::Kafka(_) => "kafka",
            SourceLocation::Stage(_) => "stage",
        }
    }
}

/// Opens the source `name` reads from `location`, at `resume`: the positions its inputs
/// had in the checkpoint a run restores (none for a fresh start). A file or stdin holds
/// no line longer than `max_record_bytes` whole (see [`SourceRecord::oversized`]).
/// Called once per source when a run starts.
pub fn open(
    name: &str,
    location: &SourceLocation,
    resume: &[Position],
    max_record_bytes: usize,
) -> anyhow::Result<Box<dyn Source>> {
    Ok(match location {
        SourceLocation::File(path) if is_stream(path) => {
            Box::new(StdinSource::open_stream(path, max_record_bytes))
        }
        SourceLocation::File(path) => match resume.first() {
            Some(Position::File {
                offset,
                line,
                fingerprint,
            }) => Box::new(FileSource::open_at(
                path,
                *offset,
                *line,
                fingerprint.as_deref(),
                max_record_bytes,
            )?),
            _ => Box::new(FileSource::open(path, max_record_bytes)?),
        },
        SourceLocation::Stdin => {
            if let Some(Position::Stream { line }) = resume.first() {
                tracing::warn!(
                    "source {name:?} is stdin, which cannot be rewound: the state is restored, \
                     but stdin is read from wherever it is now (the checkpoint had read {line} lines)"
                );
            }
            Box::new(StdinSource::stdin(max_record_bytes))
        }
        SourceLocation::Stage(exchange) => {
            Box::new(exchange::ExchangeSource::new(exchange.clone()))
        }
        SourceLocation::Kafka(kafka) => {
            let mut offsets = HashMap::new();
            for position in resume {
                match position {
                    Position::Kafka {
                        topic,
                        partition,
                        offset,
                    } => {
                        offsets.insert((topic.clone(), *partition), *offset);
                    }
                    Position::Repartitioned {
                        topic,
                        partition,
                        offset,
                        via_topic,
                        via_partition,
                        via_offset,
                    } => {
                        offsets.insert((topic.clone(), *partition), *offset);
                        offsets.insert((via_topic.clone(), *via_partition), *via_offset);
                    }
                    Position::File { .. } | Position::Stream { .. } => {}
                }
            }
            Box::new(KafkaSource::open(name, kafka, &offsets)?)
        }
    })
}

/// A named pipe or device: read as a stream, not seeked like a file.
fn is_stream(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}
