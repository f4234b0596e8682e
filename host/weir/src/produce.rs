//! `weir produce`: JSON lines into a Kafka topic, the other end of a Kafka source. For
//! demos, tests and backfills where no Kafka command-line producer is at hand.

use std::path::Path;
use std::time::Duration;
use weir_core::time::format::TimestampFormat;
use weir_io::sink::kafka::KafkaTarget;
use weir_io::sink::{KafkaSink, OutputRecord, Sink};
use weir_io::source::decode::RecordDecoder;
use weir_io::source::{
    FileSource, Polled, Source, SourceRecord, StdinSource, DEFAULT_MAX_RECORD_BYTES,
};

/// Produces every non-blank line of `input` (a path, or `-` for stdin) to `topic`, keyed
/// by the JSON field `key` if given; returns how many records were produced.
pub fn produce(brokers: &str, topic: &str, input: &str, key: Option<&str>) -> anyhow::Result<u64> {
    let target = KafkaTarget {
        brokers: brokers.to_string(),
        topic: topic.to_string(),
        properties: vec![("linger.ms".into(), "5".into())],
        transactional: false,
    };
    let mut sink = KafkaSink::connect(&target, "produce", topic)?;
    let mut source: Box<dyn Source> = match input {
        "-" => Box::new(StdinSource::stdin(DEFAULT_MAX_RECORD_BYTES)),
        path => Box::new(FileSource::open(Path::new(path), DEFAULT_MAX_RECORD_BYTES)?),
    };
    // Only the key is wanted: the timestamp path is one no record has, and is ignored.
    let decoder = match key {
        Some(field) => Some(
            RecordDecoder::new(field, "\u{1}none", TimestampFormat::EpochMs)
                .map_err(|e| anyhow::anyhow!("--key: {e}"))?,
        ),
        None => None,
    };
    let mut record = SourceRecord::default();
    let mut produced = 0;
    loop {
        match source.poll(&mut record, Duration::from_secs(3600))? {
            Polled::End | Polled::Stopped => break,
            Polled::Idle | Polled::Progress { .. } | Polled::Barrier { .. } => continue,
            Polled::Record => {}
        }
        let text = std::str::from_utf8(&record.data).map_err(|e| {
            anyhow::anyhow!(
                "line {} of {input} is not UTF-8: {e}",
                record.line.unwrap_or_default()
            )
        })?;
        let key = match &decoder {
            Some(decoder) => Some(decoder.key_of(text).map_err(|e| {
                anyhow::anyhow!("line {} of {input}: {e}", record.line.unwrap_or_default())
            })?),
            None => None,
        };
        sink.write(&OutputRecord {
            key: key.as_deref(),
            value: &record.data,
            timestamp: -1,
            sequence: produced,
        })?;
        produced += 1;
    }
    sink.finish()?;
    Ok(produced)
}
