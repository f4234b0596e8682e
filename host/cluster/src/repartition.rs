//! Re-keying a source that is not partitioned by the pipeline's key.
//!
//! A task owns one partition number `p` of the group. When a source says
//! `repartition = true`, the task runs a **repartitioner** beside its pipeline: it reads
//! partition `p` of the source's topics, takes each record's key as the pipeline would,
//! and produces the record unchanged (payload and timestamp; the key becomes the message
//! key) to the topic `<group>.<pipeline>.repartition-<source>`, which has one partition
//! per task, partitioned by Kafka's default partitioner (murmur2 of the key, as the Java
//! clients and Kafka Streams do, so another source keyed by Java producers stays
//! co-partitioned with it). The task's pipeline reads partition `p` of that topic in
//! place of the source's topics, so every record of a key reaches the one task that
//! holds the key's state.
//!
//! - **Nothing lost, nothing twice.** Each message carries where it came from
//!   (`weir-from: topic[q]`, `weir-offset`). The repartitioner commits its source offsets
//!   (to `<group>.offsets`) only after the records it sent are acknowledged; after a
//!   crash it sends again from there, and the reading task drops every message whose
//!   source offset it has seen, per source partition (those offsets are in its
//!   checkpoints, with its position in the repartition topic). The producer is
//!   idempotent, so the records of one source partition stay in order in each
//!   repartition partition.
//! - **Watermarks cross the topic.** The reading task keeps one input per source
//!   partition, each with its own watermark, as a task reading the source directly
//!   would. Since a source partition may send a given task few records, the
//!   repartitioner also sends, every [`MARKER_INTERVAL`] while its partition advances,
//!   a marker to every repartition partition (`weir-timestamp`: the largest event time
//!   read so far), which advances that input's watermark without a record — Flink's
//!   watermarks across a network shuffle, through Kafka.
//! - A record whose key or timestamp cannot be read goes, unchanged, to partition `q`
//!   (the repartitioner's own number): the task there sends it to its dead letters with
//!   the reason, naming the source partition and offset it came from.

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_io::kafka::consumer_config;
use weir_io::repartition::{origin, OFFSET_HEADER, TIMESTAMP_HEADER};
use weir_io::sink::kafka::CheckedProducer;
use weir_io::source::decode::{MessageMeta, RecordDecoder};
use weir_io::source::kafka::KafkaSourceSpec;
use weir_io::source::{KafkaSource, Polled, Source, SourceRecord};
use weir_pipeline::SourceSpec;

/// How often a repartitioner commits what was acknowledged, and sends markers.
pub const MARKER_INTERVAL: Duration = Duration::from_secs(1);

/// The repartition topic of source `source` of pipeline `pipeline` in group `group`.
pub fn topic(group: &str, pipeline: &str, source: &str) -> String {
    format!("{group}.{pipeline}.repartition-{source}")
}

/// A repartitioner running on its own thread.
pub struct Repartitioner {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<()>>,
}

/// What a repartitioner works on.
pub struct Plan {
    /// The source as the pipeline file gives it (its topics, key and timestamp).
    pub source: SourceSpec,
    /// Partition `partition` of each of its topics is read ...
    pub partition: i32,
    /// ... and re-keyed into this topic, which has `partitions` partitions.
    pub topic: String,
    /// The repartition topic's partition count: one per task. Watermark markers go to
    /// every one.
    pub partitions: i32,
    /// Where the source offsets are committed.
    pub offsets_group: String,
}

impl Repartitioner {
    /// Starts re-keying `plan`'s partition on a thread of its own, from the offsets last
    /// committed to `plan.offsets_group` (the source's `startup` where there are none),
    /// until [`stop`](Self::stop) or an error. Called when the task of that partition
    /// starts; fails only if the thread cannot be spawned (connection errors end the
    /// thread, see [`is_finished`](Self::is_finished)).
    pub fn start(plan: Plan) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("weir-repartition-{}", plan.partition))
            .spawn(move || repartition(&plan, &stopping))?;
        Ok(Self { stop, thread })
    }

    /// Whether its thread has ended. Before [`stop`](Self::stop), that means it failed:
    /// `stop` returns the error, and the member stops the task.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops after what was read is sent, acknowledged and committed.
    pub fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the repartitioner panicked")))
    }
}

fn repartition(plan: &Plan, stop: &AtomicBool) -> anyhow::Result<()> {
    let weir_io::source::SourceLocation::Kafka(kafka) = &plan.source.location else {
        anyhow::bail!("source {:?} is not a Kafka source", plan.source.name);
    };
    let spec = KafkaSourceSpec {
        partitions: Some(vec![plan.partition]),
        group: plan.offsets_group.clone(),
        via: None,
        ..kafka.clone()
    };
    let name = format!("{}/repartition", plan.source.name);
    let resume = committed(&spec)?;
    let mut source = KafkaSource::open(&name, &spec, &resume)?;
    let decoder = RecordDecoder::new(
        &plan.source.key,
        &plan.source.timestamp,
        plan.source.timestamp_format,
    )
    .map_err(|e| anyhow::anyhow!("source {:?}: {e}", plan.source.name))?;
    let mut producer = CheckedProducer::connect(
        format!("repartition topic {:?}", plan.topic),
        &kafka.brokers,
        &[
            // Kafka's default partitioner for keyed records (the Java clients' murmur2).
            ("partitioner".to_string(), "murmur2_random".to_string()),
            ("linger.ms".to_string(), "5".to_string()),
        ],
        None,
    )?;
    let labels: Vec<String> = source.partitions();
    // The largest event time read per source partition, and the one last sent as a marker.
    let mut newest: Vec<Option<i64>> = vec![None; labels.len()];
    let mut marked: Vec<Option<i64>> = vec![None; labels.len()];
    let mut record = SourceRecord::default();
    let mut last_commit = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if stopping || last_commit.elapsed() >= MARKER_INTERVAL {
            for (input, label) in labels.iter().enumerate() {
                let Some(timestamp) = newest[input].filter(|&t| Some(t) != marked[input]) else {
                    continue;
                };
                let text = timestamp.to_string();
                for partition in 0..plan.partitions {
                    let headers = origin(label, TIMESTAMP_HEADER, &text);
                    producer.send(
                        BaseRecord::to(&plan.topic)
                            .partition(partition)
                            .headers(headers),
                    )?;
                }
                marked[input] = Some(timestamp);
            }
            // Committed only once everything read is acknowledged.
            producer.flush()?;
            source.commit(&source.positions())?;
            last_commit = Instant::now();
            if stopping {
                return Ok(());
            }
        }
        match source.poll(&mut record, Duration::from_millis(100))? {
            Polled::Record => {}
            Polled::Idle
            | Polled::Progress { .. }
            | Polled::Barrier { .. }
            | Polled::End
            | Polled::Stopped => continue,
        }
        let offset = record.offset.to_string();
        let headers = origin(&labels[record.partition], OFFSET_HEADER, &offset);
        let meta = MessageMeta {
            key: record.message_key.as_deref(),
            timestamp: record.message_timestamp,
        };
        let decoded = std::str::from_utf8(&record.data)
            .map_err(|e| e.to_string())
            .and_then(|line| decoder.decode_message(line, meta));
        let mut message = BaseRecord::to(&plan.topic)
            .payload(record.data.as_slice())
            .headers(headers);
        if let Some(ts) = record.message_timestamp.filter(|&t| t >= 0) {
            message = message.timestamp(ts);
        }
        match decoded {
            Ok(decoded) => {
                let newest = &mut newest[record.partition];
                *newest = Some(newest.map_or(decoded.timestamp, |n| n.max(decoded.timestamp)));
                producer.send(message.key(&*decoded.key))?;
            }
            Err(_) => {
                // The task at this partition number dead-letters it, with the reason.
                if let Some(key) = record.message_key.as_deref() {
                    message = message.key(key);
                }
                producer.send(message.partition(plan.partition))?;
            }
        }
    }
}

/// Where the repartitioner of this partition left off: the offsets it committed, its
/// only state. (The source's `startup` applies where there are none.)
fn committed(spec: &KafkaSourceSpec) -> anyhow::Result<HashMap<(String, i32), i64>> {
    let consumer: BaseConsumer = consumer_config(&spec.brokers, &spec.group).create()?;
    let mut list = TopicPartitionList::new();
    for topic in &spec.topics {
        for &partition in spec.partitions.iter().flatten() {
            list.add_partition(topic, partition);
        }
    }
    let committed = consumer
        .committed_offsets(list, spec.connect_timeout)
        .with_context(|| format!("cannot read the offsets committed to {:?}", spec.group))?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(n) => Some(((e.topic().to_string(), e.partition()), n)),
            _ => None,
        })
        .collect())
}
