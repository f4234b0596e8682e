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
//! Read through a repartition topic (a task of a group whose source is not partitioned
//! by the key, the cluster crate's repartitioner, [`crate::repartition`]), the inputs are still the source's
//! partitions, each with its watermark, but the consumer reads one partition of the
//! repartition topic: each message names its source partition and offset, repeats are
//! dropped, and watermark markers advance a partition's watermark without a record.
//!
//! `bounded = true` reads until it has caught up with every partition (librdkafka's
//! end-of-partition event) and then ends, like Flink's
//! `setBounded(OffsetsInitializer.latest())`: for backfills, benchmarks and tests. (The
//! end is taken from the fetches rather than from a ListOffsets request at start because
//! some Kafka-compatible brokers, tansu 0.6 among them, answer that request with the last
//! batch's first offset.)

use super::poll::{Polled, Source, SourceRecord};
use crate::kafka::Logs;
use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use weir_core::position::Position;

/// A Kafka source's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSourceSpec {
    /// The bootstrap brokers, `host:port[,host:port...]` (librdkafka's
    /// `bootstrap.servers`).
    pub brokers: String,
    /// The topics read, in the order listed; each of their partitions is an input.
    pub topics: Vec<String>,
    /// The consumer group whose committed offsets [`Startup::Committed`] starts from and
    /// to which offsets are committed after each checkpoint. The pipeline loader fills
    /// in `weir-<pipeline>` when the file names none.
    pub group: String,
    /// Where to start when no checkpoint gives the offsets.
    pub startup: Startup,
    /// Read until every partition has been caught up with, then end (see the module
    /// docs); otherwise the source never ends by itself.
    pub bounded: bool,
    /// How long [`KafkaSource::open`] keeps trying to reach the brokers before it fails,
    /// and how long each of its offset requests may wait.
    pub connect_timeout: Duration,
    /// librdkafka consumer properties from the pipeline file, set after (so over) the
    /// source's own settings.
    pub properties: Vec<(String, String)>,
    /// Only these partition numbers of each topic (a task of a pipeline run in a
    /// consumer group, see the cluster crate); all of them when `None`.
    pub partitions: Option<Vec<i32>>,
    /// The topics are not partitioned by the pipeline's key: with `--group`, they are
    /// re-keyed through a repartition topic first (the cluster crate's repartitioner).
    pub repartition: bool,
    /// Set for a task of a group whose source is repartitioned: the task reads this
    /// partition of the repartition topic, which carries the records of every
    /// partition of `topics` (those stay the source's inputs, each with its watermark).
    pub via: Option<Via>,
}

/// One partition of a repartition topic, read in place of the source's topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    /// The repartition topic.
    pub topic: String,
    /// The partition of it that this task reads: the task's partition number.
    pub partition: i32,
}

/// Where a Kafka source starts when there is no checkpoint to resume from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Startup {
    /// The oldest message still in the topic.
    Earliest,
    /// Only messages produced from now on.
    Latest,
    /// The consumer group's committed offsets (earliest where it has none).
    Committed,
}

/// How long one attempt to reach the brokers waits.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between the starts of two attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A Kafka source: every partition of its topics (or those of
/// [`KafkaSourceSpec::partitions`]), assigned by the source itself rather than by the
/// group's rebalancing, each one an input of its own. A run opens it through
/// [`super::open`], with the offsets of the checkpoint it restores; a group's
/// repartitioner opens one directly.
pub struct KafkaSource {
    location: String,
    consumer: BaseConsumer<Logs>,
    /// (topic, partition) per input, in a stable order: topics as listed, partitions ascending.
    partitions: Vec<(String, i32)>,
    index: HashMap<(String, i32), usize>,
    /// The offset of the next message to hand out, per partition (read through a
    /// repartition topic: the next one not seen yet, so that repeats are dropped).
    next: Vec<i64>,
    /// Set when the inputs are read through one partition of a repartition topic.
    via: Option<Through>,
    /// With `bounded`: whether each partition has been read to its end.
    caught_up: Option<Vec<bool>>,
    /// The end offsets the brokers gave at start (a hint: see the module docs).
    ends: Vec<i64>,
    last_error_log: Option<Instant>,
}

/// The partition of a repartition topic a task reads its source's records from.
struct Through {
    topic: String,
    partition: i32,
    /// The offset of its next message.
    next: i64,
    /// Messages dropped because their source offset had been seen (re-sent after a
    /// repartitioner restarted).
    repeats: u64,
}

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
        let mut config = crate::kafka::consumer_config(&spec.brokers, &spec.group);
        config
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
            .create_with_context(Logs("kafka source"))
            .map_err(|e| anyhow::anyhow!("{location}: invalid consumer configuration: {e}"))?;

        let partitions = find_partitions(&consumer, spec, &location)?;
        let index = partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i))
            .collect();
        anyhow::ensure!(
            spec.via.is_none() || !spec.bounded,
            "{location}: a source read through a repartition topic cannot be bounded"
        );
        // What the consumer reads: the partitions themselves, or the one partition of
        // the repartition topic that carries them (always from where the group left it).
        let (reads, startup) = match &spec.via {
            Some(via) => (vec![(via.topic.clone(), via.partition)], Startup::Committed),
            None => (partitions.clone(), spec.startup),
        };
        let mut starts = Vec::with_capacity(reads.len());
        let mut ends = Vec::with_capacity(reads.len());
        let committed = if startup == Startup::Committed {
            let mut list = TopicPartitionList::new();
            for (topic, partition) in &reads {
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
        for (topic, partition) in &reads {
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
                None => match startup {
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
        for ((topic, partition), start) in reads.iter().zip(&starts) {
            assignment
                .add_partition_offset(topic, *partition, Offset::Offset(*start))
                .map_err(|e| anyhow::anyhow!("{location}: {e}"))?;
        }
        consumer
            .assign(&assignment)
            .with_context(|| format!("{location}: cannot assign partitions"))?;
        if let Some(via) = &spec.via {
            tracing::info!(
                "source {name:?}: reading the {} partition(s) of {location} through {}[{}] from offset {}",
                partitions.len(),
                via.topic,
                via.partition,
                starts[0]
            );
        } else if spec.bounded {
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
        let (next, via) = match &spec.via {
            Some(via) => {
                // Per input, the next source offset not seen yet; 0 when nothing was.
                let seen = partitions
                    .iter()
                    .map(|p| resume.get(p).copied().unwrap_or(0))
                    .collect();
                let through = Through {
                    topic: via.topic.clone(),
                    partition: via.partition,
                    next: starts[0],
                    repeats: 0,
                };
                (seen, Some(through))
            }
            None => (starts, None),
        };
        Ok(Self {
            location,
            consumer,
            partitions,
            index,
            next,
            via,
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

/// What a message of a repartition topic is.
enum Unwrapped {
    /// A record of input `input`, at `offset` in its source partition.
    Record { input: usize, offset: i64 },
    /// A watermark marker: input `input` has seen event time up to `timestamp`.
    Progress { input: usize, timestamp: i64 },
    /// A record already handed out (a repartitioner re-sent it after a restart).
    Repeat,
}

impl Through {
    /// Reads the headers the repartitioner put on a message (see
    /// [`crate::repartition`]): where it came from, and whether it is a marker.
    /// `index` finds the source's inputs, whose next unseen offsets are `next`.
    fn unwrap(
        &mut self,
        message: &rdkafka::message::BorrowedMessage<'_>,
        index: &HashMap<(String, i32), usize>,
        next: &[i64],
        location: &str,
    ) -> anyhow::Result<Unwrapped> {
        use rdkafka::message::Headers as _;
        let via = self;
        via.next = message.offset() + 1;
        let at = || {
            format!(
                "{}[{}] offset {}",
                message.topic(),
                message.partition(),
                message.offset()
            )
        };
        let mut from = None;
        let mut offset = None;
        let mut timestamp = None;
        for header in message.headers().into_iter().flat_map(|h| h.iter()) {
            let text = header.value.and_then(|v| std::str::from_utf8(v).ok());
            match header.key {
                crate::repartition::FROM_HEADER => from = text,
                crate::repartition::OFFSET_HEADER => {
                    offset = text.and_then(|t| t.parse::<i64>().ok())
                }
                crate::repartition::TIMESTAMP_HEADER => {
                    timestamp = text.and_then(|t| t.parse::<i64>().ok())
                }
                _ => {}
            }
        }
        let from = from.with_context(|| format!("{}: no weir-from header", at()))?;
        let input = crate::repartition::parse_from(from)
            .and_then(|p| index.get(&p).copied())
            .with_context(|| {
                format!(
                    "{}: comes from {from:?}, which is not a partition of {location}",
                    at()
                )
            })?;
        if let Some(timestamp) = timestamp {
            return Ok(Unwrapped::Progress { input, timestamp });
        }
        let offset = offset.with_context(|| format!("{}: no weir-offset header", at()))?;
        if offset < next[input] {
            via.repeats += 1;
            if via.repeats.is_power_of_two() {
                tracing::debug!(
                    "{location}: {} repeated record(s) dropped (re-sent after a repartitioner restarted)",
                    via.repeats
                );
            }
            return Ok(Unwrapped::Repeat);
        }
        Ok(Unwrapped::Record { input, offset })
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
            let (index, offset) = if let Some(via) = &mut self.via {
                match via.unwrap(&message, &self.index, &self.next, &self.location)? {
                    Unwrapped::Record { input, offset } => (input, offset),
                    Unwrapped::Progress { input, timestamp } => {
                        return Ok(Polled::Progress { input, timestamp })
                    }
                    Unwrapped::Repeat => continue,
                }
            } else {
                let Some(&index) = self
                    .index
                    .get(&(message.topic().to_string(), message.partition()))
                else {
                    continue;
                };
                (index, message.offset())
            };
            self.next[index] = offset + 1;
            record.data.clear();
            record
                .data
                .extend_from_slice(message.payload().unwrap_or_default());
            record.line = None;
            record.offset = offset as u64;
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
            .map(|((topic, partition), &offset)| match &self.via {
                None => Position::Kafka {
                    topic: topic.clone(),
                    partition: *partition,
                    offset,
                },
                Some(via) => Position::Repartitioned {
                    topic: topic.clone(),
                    partition: *partition,
                    offset,
                    via_topic: via.topic.clone(),
                    via_partition: via.partition,
                    via_offset: via.next,
                },
            })
            .collect()
    }

    fn commit(&mut self, positions: &[Position]) -> anyhow::Result<()> {
        let mut list = TopicPartitionList::new();
        for position in positions {
            let (topic, partition, offset) = match position {
                Position::Kafka {
                    topic,
                    partition,
                    offset,
                } => (topic, partition, offset),
                // The source partitions' offsets are the repartitioner's to commit.
                Position::Repartitioned {
                    via_topic,
                    via_partition,
                    via_offset,
                    ..
                } => (via_topic, via_partition, via_offset),
                Position::File { .. } | Position::Stream { .. } => continue,
            };
            if list.find_partition(topic, *partition).is_none() {
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
