//! The dead-letter output: records the pipeline could not process, with the reason.
//!
//! Nothing is dropped silently: a line that is not JSON, lacks its key or timestamp, or
//! has an unparsable timestamp is written here as one JSON line naming the source, the
//! line number and byte offset (or Kafka partition and offset), the reason and the raw
//! text, and counted.

use super::file::JsonLinesSink;
use serde::Serialize;
use std::path::Path;

/// One refused record.
#[derive(Debug, Serialize)]
pub struct DeadLetter<'a> {
    /// The name of the source the record came from (`timer` for a timer the UDF could
    /// not run).
    pub source: &'a str,
    /// The line number, for files and stdin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The Kafka partition, as `topic[partition]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<&'a str>,
    /// The byte offset in a file, or the Kafka message's offset.
    pub offset: u64,
    /// Why the record was refused, naming the field (or the UDF and key).
    pub reason: &'a str,
    /// The refused record as text (the run replaces invalid UTF-8 with U+FFFD); for a
    /// timer, its time, domain and key as a JSON object.
    pub raw: &'a str,
}

/// The dead-letter sink and its count.
pub struct DeadLetters {
    sink: JsonLinesSink,
    count: u64,
}

impl DeadLetters {
    /// Creates (or empties) the dead-letter file at `path`, with a count of zero.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        Self::open(path, None)
    }

    /// Opens the output; when a checkpoint is restored, cut back to its length and count
    /// (`(length, count)`), like every file sink.
    pub fn open(path: &Path, resume: Option<(u64, u64)>) -> anyhow::Result<Self> {
        Ok(Self {
            sink: JsonLinesSink::open(path, resume.map(|(length, _)| length))?,
            count: resume.map_or(0, |(_, count)| count),
        })
    }

    /// Makes the dead letters so far durable; returns the output's length.
    pub fn checkpoint(&mut self) -> anyhow::Result<Option<u64>> {
        use super::Sink;
        let state = self.sink.checkpoint();
        Ok(self.count_only_kept(state)?.length)
    }

    /// Dead letters written to an already open JSON-lines sink, counted from zero.
    pub fn to_sink(sink: JsonLinesSink) -> Self {
        Self { sink, count: 0 }
    }

    /// Writes one dead letter as a JSON line and counts it. Buffered: it reaches the
    /// file on [`flush`](Self::flush) or [`checkpoint`](Self::checkpoint).
    pub fn write(&mut self, letter: &DeadLetter<'_>) -> anyhow::Result<()> {
        let json = serde_json::to_vec(letter)?;
        let written = self.sink.write_json(&json);
        if written.is_ok() {
            self.count += 1;
        }
        self.count_only_kept(written)
    }

    /// After a failure, counts only the dead letters the file holds.
    fn count_only_kept<T>(&mut self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        use super::Sink;
        if result.is_err() {
            self.count = self.count.saturating_sub(self.sink.lost());
        }
        result
    }

    /// Dead letters written, counting those of the checkpoint the run was restored
    /// from.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The output's path (or name), for the run's summary and messages.
    pub fn location(&self) -> &str {
        use super::Sink;
        self.sink.location()
    }

    /// Hands the buffered dead letters to the file (without syncing it).
    pub fn flush(&mut self) -> anyhow::Result<()> {
        use super::Sink;
        let flushed = self.sink.flush();
        self.count_only_kept(flushed)
    }
}
