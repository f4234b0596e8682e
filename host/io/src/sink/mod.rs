//! Sinks: where a pipeline's outputs go.
//!
//! Every output the UDF declares (the main output and each side output) is routed to one
//! sink in the pipeline file. Today's sinks write JSON lines to a file or stdout, or
//! discard (for benchmarks); an [`UpsertSink`] keeps the last record per key and writes
//! the final table; a [`PostgresSink`] upserts into a table and a [`KafkaSink`] produces
//! to a topic. The dead-letter output is a JSON-lines sink too.

mod dead_letter;
mod file;
pub mod kafka;
pub mod postgres;
pub mod upsert;

pub use dead_letter::{DeadLetter, DeadLetters};
pub use file::{DiscardSink, JsonLinesSink};
pub use kafka::KafkaSink;
pub use postgres::PostgresSink;
pub use upsert::UpsertSink;

pub use weir_core::output::{OutputRecord, Sink, SinkState};

use anyhow::Context as _;
use kafka::KafkaTarget;
use postgres::PostgresTarget;
use std::path::PathBuf;
use upsert::UpsertSpec;

/// Where an output's records go: its sink's section of the pipeline file, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkTarget {
    /// A JSON-lines file.
    File(PathBuf),
    /// Standard output, as JSON lines.
    Stdout,
    /// Nowhere (benchmarks).
    Discard,
    /// A PostgreSQL table, upserted into.
    Postgres(PostgresTarget),
    /// A Kafka topic.
    Kafka(KafkaTarget),
}

impl SinkTarget {
    /// Its `type` in the pipeline file: `file`, `stdout`, `discard`, `postgres` or
    /// `kafka`.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkTarget::File(_) => "file",
            SinkTarget::Stdout => "stdout",
            SinkTarget::Discard => "discard",
            SinkTarget::Postgres(_) => "postgres",
            SinkTarget::Kafka(_) => "kafka",
        }
    }
}

/// Opens the sink of output `output` of pipeline `pipeline`: `target`, kept as an upsert
/// table if `upsert` says so, reopened where `resume` (the checkpoint a run restores)
/// says it stood. Called once per output when a run starts.
pub fn open(
    target: &SinkTarget,
    upsert: Option<&UpsertSpec>,
    pipeline: &str,
    output: &str,
    resume: Option<&SinkState>,
) -> anyhow::Result<Box<dyn Sink>> {
    let length = resume.and_then(|r| r.length);
    let out = match target {
        SinkTarget::Postgres(target) => return Ok(Box::new(PostgresSink::connect(target)?)),
        SinkTarget::Kafka(target) => {
            return Ok(Box::new(KafkaSink::connect(target, pipeline, output)?))
        }
        SinkTarget::Discard => return Ok(Box::new(DiscardSink)),
        SinkTarget::File(path) if upsert.is_some() => JsonLinesSink::create(path)?,
        SinkTarget::File(path) => JsonLinesSink::open(path, length)?,
        SinkTarget::Stdout => JsonLinesSink::stdout(),
    };
    let Some(upsert) = upsert else {
        return Ok(Box::new(out));
    };
    let changelog = match &upsert.changelog {
        Some(path) => Some(JsonLinesSink::open(path, length)?),
        None => None,
    };
    let mut sink = UpsertSink::new(out, changelog, upsert.key_fields.clone())?;
    if let Some(resume) = resume {
        sink.restore_table(&resume.data)
            .context("the checkpoint's upsert table")?;
    }
    Ok(Box::new(sink))
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
            sequence: 0,
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

    #[test]
    fn resuming_cuts_the_file_back_to_its_checkpointed_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut sink = JsonLinesSink::create(&path).unwrap();
        sink.write_json(b"1").unwrap();
        let state = sink.checkpoint().unwrap();
        assert_eq!(state.length, Some(2));
        sink.write_json(b"22").unwrap();
        sink.flush().unwrap();
        drop(sink);
        let mut resumed = JsonLinesSink::open(&path, state.length).unwrap();
        resumed.write_json(b"3").unwrap();
        resumed.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n3\n");
        assert_eq!(resumed.checkpoint().unwrap().length, Some(4));
        std::fs::write(&path, "").unwrap();
        let err = JsonLinesSink::open(&path, Some(4))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("changed outside weir"), "{err}");
    }
}
