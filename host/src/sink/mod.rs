//! Sinks: where a pipeline's outputs go.
//!
//! Every output the UDF declares (the main output and each side output) is routed to one
//! sink in the pipeline file. Today's sinks write JSON lines to a file or stdout, or
//! discard (for benchmarks); an [`UpsertSink`] keeps the last record per key and writes
//! the final table; a [`PostgresSink`] upserts into a table and a [`KafkaSink`] produces
//! to a topic. The dead-letter output is a JSON-lines sink too.

mod dead_letter;
mod kafka;
mod postgres;
mod upsert;

pub use dead_letter::{DeadLetter, DeadLetters};
pub use kafka::KafkaSink;
pub use postgres::PostgresSink;
pub use upsert::UpsertSink;

use anyhow::Context as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// One record the UDF emitted, as a sink sees it.
#[derive(Debug, Clone, Copy)]
pub struct OutputRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub timestamp: i64,
}

pub trait Sink: Send {
    /// Where records go, for messages.
    fn location(&self) -> &str;
    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()>;
    /// Writes out what is buffered (called while the input is idle, and at the end).
    fn flush(&mut self) -> anyhow::Result<()>;
    /// Called once when the run completes (not after a failure).
    fn finish(&mut self) -> anyhow::Result<()> {
        self.flush()
    }
}

/// One JSON document per line: the value the UDF emitted.
pub struct JsonLinesSink {
    location: String,
    out: BufWriter<Box<dyn Write + Send>>,
}

impl JsonLinesSink {
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create directory {}", dir.display()))?;
        }
        let file = File::create(path)
            .with_context(|| format!("cannot create output file {}", path.display()))?;
        Ok(Self::new(path.display().to_string(), Box::new(file)))
    }

    pub fn stdout() -> Self {
        Self::new("stdout".into(), Box::new(std::io::stdout()))
    }

    pub fn new(location: String, out: Box<dyn Write + Send>) -> Self {
        Self {
            location,
            out: BufWriter::with_capacity(1 << 17, out),
        }
    }

    /// Writes one JSON document on one line. A document spread over several lines is
    /// compacted; bytes that are not JSON are refused, since the file would not be
    /// JSON lines any more.
    pub fn write_json(&mut self, value: &[u8]) -> anyhow::Result<()> {
        let valid = serde_json::from_slice::<&serde_json::value::RawValue>(value);
        if let Err(e) = valid {
            let shown = String::from_utf8_lossy(&value[..value.len().min(200)]).into_owned();
            anyhow::bail!(
                "a record for {} is not JSON ({e}): {shown:?}",
                self.location
            );
        }
        let result = if value.contains(&b'\n') {
            let parsed: serde_json::Value = serde_json::from_slice(value)?;
            serde_json::to_writer(&mut self.out, &parsed).map_err(std::io::Error::from)
        } else {
            self.out.write_all(value)
        };
        result
            .and_then(|()| self.out.write_all(b"\n"))
            .with_context(|| format!("cannot write to {}", self.location))
    }
}

impl Sink for JsonLinesSink {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        self.write_json(record.value)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.out
            .flush()
            .with_context(|| format!("cannot write to {}", self.location))
    }
}

/// Drops every record: for benchmarks that measure the engine, not the disk.
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn location(&self) -> &str {
        "discard"
    }

    fn write(&mut self, _record: &OutputRecord<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_compacts_and_refuses_non_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.jsonl");
        let mut sink = JsonLinesSink::create(&path).unwrap();
        let rec = |value: &'static [u8]| OutputRecord {
            key: None,
            value,
            timestamp: 0,
        };
        sink.write(&rec(br#"{"a":1}"#)).unwrap();
        sink.write(&rec(b"{\n  \"b\": [1,\n 2]\n}")).unwrap();
        let err = sink.write(&rec(b"not json")).unwrap_err().to_string();
        assert!(err.contains("is not JSON"), "{err}");
        sink.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"a\":1}\n{\"b\":[1,2]}\n"
        );
    }
}
