//! The Kafka source: JSON messages from the partitions of one or more topics.
//!
//! Each partition is its own input to the pipeline, with its own watermark (the source's
//! watermark is the minimum over its partitions, as in Flink's Kafka source) and its own
//! idleness. Weir assigns itself every partition of its topics rather than joining the
//! consumer group's rebalancing (one process reads a whole topic; scaling out across
//! processes is a separate step), but it does use the group for offsets:
//! `startup = "committed"` starts from the group's committed offsets, and offsets are
//! committed only after a checkpoint holding them is durable, so they never run ahead
//! of what the sinks have taken. A restored checkpoint's positions win over all of that.
//!
//! `bounded = true` reads until it has caught up with every partition (librdkafka's
//! end-of-partition event) and then ends, like Flink's
//! `setBounded(OffsetsInitializer.latest())`: for backfills, benchmarks and tests. (The
//! end is taken from the fetches rather than from a ListOffsets request at start because
//! some Kafka-compatible brokers, tansu 0.6 among them, answer that request with the last
//! batch's first offset.)

use super::{Polled, Source, SourceRecord};
use crate::checkpoint::Position;
use crate::pipeline::{KafkaSourceSpec, Startup};
use anyhow::Context as _;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long one attempt to reach the brokers waits.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between the starts of two attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

pub struct KafkaSource {
    location: String,
    consumer: BaseConsumer<Logs>,
    /// (topic, partition) per input, in a stable order: topics as listed, partitions ascending.
    partitions: Vec<(String, i32)>,
    index: HashMap<(String, i32), usize>,
    /// The offset of the next message to hand out, per partition.
    next: Vec<i64>,
    /// With `bounded`: whether each partition has been read to its end.
    caught_up: Option<Vec<bool>>,
    /// The end offsets the brokers gave at start (a hint: see the module docs).
    ends: Vec<i64>,
    last_error_log: Option<Instant>,
}

/// Forwards librdkafka's logs and errors to the run's log.
struct Logs;

impl ClientContext for Logs {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => tracing::warn!("librdkafka: {fac} {message}"),
            _ => tracing::debug!("librdkafka: {fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // librdkafka logs each connection failure itself (see `log`); say once more only
        // when every broker is gone.
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown) {
            tracing::warn!("kafka source: {reason}; waiting for the brokers to come back");
        } else {
            tracing::debug!("kafka source: {error}: {reason}");
        }
    }
}

impl ConsumerContext for Logs {}

impl KafkaSource {
    /// Connects, finds the partitions, and assigns them at their starting offsets:
    /// `resume`'s (a checkpoint's) where given, else per `spec.startup`.
    pub fn open(
        name: &str,
        spec: &KafkaSourceSpec,
        resume: &HashMap<(String, i32), i64>,
    ) -> anyhow::Result<Self> {
        let location = format!(
            "kafka topic(s) {} on {}",
            spec.topics.join(","),
            spec.brokers
        );
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &spec.brokers)
            .set("group.id", &spec.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set(
                "enable.partition.eof",
                if spec.bounded { "true" } else { "false" },
            )
            .set("client.id", format!("weir-{name}"));
        for (key, value) in &spec.properties {
            config.set(key, value);
        }
        let consumer: BaseConsumer<Logs> = config
            .create_with_context(Logs)
            .map_err(|e| anyhow::anyhow!("{location}: invalid consumer configuration: {e}"))?;

        let partitions = find_partitions(&consumer, spec, &location)?;
        let index = partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i))
            .collect();
        let mut starts = Vec::with_capacity(partitions.len());
        let mut ends = Vec::with_capacity(partitions.len());
        let committed = if spec.startup == Startup::Committed {
            let mut list = TopicPartitionList::new();
            for (topic, partition) in &partitions {
                list.add_partition(topic, *partition);
            }
            Some(
                consumer
                    .committed_offsets(list, spec.connect_timeout)
                    .with_context(|| {
                        format!(
                            "{location}: cannot read the committed offsets of group {:?}",
                            spec.group
                        )
                    })?,
            )
        } else {
            None
        };
        for (topic, partition) in &partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, *partition, spec.connect_timeout)
                .with_context(|| {
                    format!("{location}: cannot read the offsets of {topic}[{partition}]")
                })?;
            let committed = committed
                .as_ref()
                .and_then(|c| c.find_partition(topic, *partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(n) => Some(n),
                    _ => None,
                });
            let start = match resume.get(&(topic.clone(), *partition)) {
                Some(&offset) => offset,
                None => match spec.startup {
                    Startup::Earliest => low,
                    Startup::Latest => high,
                    Startup::Committed => committed.unwrap_or(low),
                },
            };
            // Offsets below the log's start were deleted by retention: start at the oldest.
            starts.push(start.max(low));
            ends.push(high);
        }
        let mut assignment = TopicPartitionList::new();
        for ((topic, partition), start) in partitions.iter().zip(&starts) {
            assignment
                .add_partition_offset(topic, *partition, Offset::Offset(*start))
                .map_err(|e| anyhow::anyhow!("{location}: {e}"))?;
        }
        consumer
            .assign(&assignment)
            .with_context(|| format!("{location}: cannot assign partitions"))?;
        if spec.bounded {
            tracing::info!(
                "source {name:?}: reading {} partition(s) of {location} from offsets {starts:?} until caught up (end offsets at start: {ends:?})",
                partitions.len()
            );
        } else {
            tracing::info!(
                "source {name:?}: reading {} partition(s) of {location} from offsets {starts:?}",
                partitions.len()
            );
        }
        Ok(Self {
            location,
            consumer,
            partitions,
            index,
            next: starts,
            caught_up: spec.bounded.then(|| vec![false; ends.len()]),
            ends,
            last_error_log: None,
        })
    }

    fn all_done(&self) -> bool {
        self.caught_up
            .as_ref()
            .is_some_and(|done| done.iter().all(|&d| d))
    }

    /// librdkafka says partition `id` (of some topic) has no more messages for now.
    fn reached_end(&mut self, id: i32) {
        let Some(done) = &mut self.caught_up else {
            return;
        };
        let candidates: Vec<usize> = (0..self.partitions.len())
            .filter(|&i| self.partitions[i].1 == id)
            .collect();
        for &i in &candidates {
            // The event does not name the topic: with several topics, a partition counts
            // as done once it is also past the end offset the brokers gave at start.
            if candidates.len() == 1 || self.next[i] >= self.ends[i] {
                done[i] = true;
            }
        }
    }
}

/// The partitions of the topics, retrying while the brokers cannot be reached.
fn find_partitions(
    consumer: &BaseConsumer<Logs>,
    spec: &KafkaSourceSpec,
    location: &str,
) -> anyhow::Result<Vec<(String, i32)>> {
    let started = Instant::now();
    let mut partitions = Vec::new();
    for topic in &spec.topics {
        let metadata = loop {
            // Each attempt waits at most ATTEMPT_TIMEOUT, and never past the deadline.
            let attempt = Instant::now();
            let left = spec.connect_timeout.saturating_sub(started.elapsed());
            match consumer.fetch_metadata(Some(topic), ATTEMPT_TIMEOUT.min(left)) {
                Ok(metadata) => break metadata,
                Err(e) if started.elapsed() + RETRY_PAUSE < spec.connect_timeout => {
                    tracing::warn!("{location}: brokers not reachable yet ({e}); retrying");
                    // An attempt that failed at once is not repeated in a tight loop.
                    std::thread::sleep(RETRY_PAUSE.saturating_sub(attempt.elapsed()));
                }
                Err(e) => anyhow::bail!(
                    "{location}: cannot reach the brokers within {} s: {e}",
                    spec.connect_timeout.as_secs()
                ),
            }
        };
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .filter(|t| t.error().is_none() && !t.partitions().is_empty());
        let Some(found) = found else {
            anyhow::bail!("{location}: topic {topic:?} does not exist (create it first)");
        };
        let mut ids: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
        ids.sort_unstable();
        if let Some(only) = &spec.partitions {
            ids.retain(|id| only.contains(id));
        }
        partitions.extend(ids.into_iter().map(|p| (topic.clone(), p)));
    }
    Ok(partitions)
}

impl Source for KafkaSource {
    fn location(&self) -> &str {
        &self.location
    }

    fn partitions(&self) -> Vec<String> {
        self.partitions
            .iter()
            .map(|(topic, partition)| format!("{topic}[{partition}]"))
            .collect()
    }

    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled> {
        loop {
            if self.all_done() {
                return Ok(Polled::End);
            }
            let Some(result) = self.consumer.poll(wait) else {
                return Ok(Polled::Idle);
            };
            let message = match result {
                Ok(message) => message,
                Err(KafkaError::PartitionEOF(id)) => {
                    self.reached_end(id);
                    continue;
                }
                Err(e) => {
                    // librdkafka reconnects by itself; say so now and then, not per poll.
                    if self
                        .last_error_log
                        .is_none_or(|at| at.elapsed() > Duration::from_secs(5))
                    {
                        tracing::warn!("{}: {e}; librdkafka keeps retrying", self.location);
                        self.last_error_log = Some(Instant::now());
                    }
                    return Ok(Polled::Idle);
                }
            };
            let Some(&index) = self
                .index
                .get(&(message.topic().to_string(), message.partition()))
            else {
                continue;
            };
            self.next[index] = message.offset() + 1;
            record.data.clear();
            record
                .data
                .extend_from_slice(message.payload().unwrap_or_default());
            record.line = 0;
            record.offset = message.offset() as u64;
            record.partition = index;
            record.message_key = message.key().map(<[u8]>::to_vec);
            record.message_timestamp = message.timestamp().to_millis();
            return Ok(Polled::Record);
        }
    }

    fn positions(&self) -> Vec<Position> {
        self.partitions
            .iter()
            .zip(&self.next)
            .map(|((topic, partition), &offset)| Position::Kafka {
                topic: topic.clone(),
                partition: *partition,
                offset,
            })
            .collect()
    }

    fn commit(&mut self, positions: &[Position]) -> anyhow::Result<()> {
        let mut list = TopicPartitionList::new();
        for position in positions {
            if let Position::Kafka {
                topic,
                partition,
                offset,
            } = position
            {
                list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                    .map_err(|e| anyhow::anyhow!("{}: {e}", self.location))?;
            }
        }
        // Synchronous: once per checkpoint, and the last one must land before the exit.
        if let Err(e) = self.consumer.commit(&list, CommitMode::Sync) {
            // The checkpoint holds the positions; a failed commit only delays what other
            // tools see as the group's progress.
            tracing::warn!("{}: cannot commit offsets: {e}", self.location);
        }
        Ok(())
    }
}
