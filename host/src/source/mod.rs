//! Sources: where records come from.
//!
//! A source yields raw lines ([`SourceRecord`]) with their position (line number and
//! byte offset, for dead letters now and checkpoints later); the [`decode`] step pulls
//! out each record's key and event time. JSON-lines files and stdin are the sources
//! today; a source that has nothing to give says [`Polled::Idle`] so the pipeline can
//! fire processing-time timers meanwhile.

pub mod decode;
pub mod extract;
mod jsonl;

pub use jsonl::{FileSource, StdinSource};

use std::time::Duration;

/// One raw record, in a buffer the caller reuses.
#[derive(Debug, Default, Clone)]
pub struct SourceRecord {
    pub data: Vec<u8>,
    /// 1-based line number in the source.
    pub line: u64,
    /// Byte offset of the line's start.
    pub offset: u64,
}

/// What a poll gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    Record,
    /// Nothing arrived within the wait; more may come.
    Idle,
    End,
}

pub trait Source: Send {
    /// Where the records come from, for messages: a path, or `stdin`.
    fn location(&self) -> &str;

    /// Fills `record` with the next record, waiting at most `wait` for one.
    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled>;
}
