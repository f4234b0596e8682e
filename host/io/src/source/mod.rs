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
mod poll;

pub use jsonl::{FileSource, StdinSource};
pub use kafka::KafkaSource;
pub use poll::{Polled, Source, SourceRecord, DEFAULT_MAX_RECORD_BYTES};

use kafka::KafkaSourceSpec;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir_core::position::Position;

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
