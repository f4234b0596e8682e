//! Kafka -> Kafka throughput of the change-only counter, against the broker that
//! `scripts/services.sh` runs (tansu, in memory, on loopback).
//!
//! The clicks are produced into a fresh input topic first (not timed), partitioned by ad
//! id, so each ad's clicks stay in order within one partition. The pipeline then reads
//! that topic with a bounded source (up to the end offsets seen at start) and produces its
//! counts to a fresh output topic with as many partitions, with checkpoints on; it runs
//! in this process, with the source's and sink's librdkafka settings left at Weir's
//! defaults. The timed figure is the run's own, `RunReport::records_per_second`: from
//! opening the source and sink to the last record acknowledged by the broker. After each
//! run the output topic is read back: it must hold exactly as many messages as the run
//! says it emitted, all with distinct `weir-id` headers.

use crate::state_dir::{self, StateDirUse, StateDirWatch};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_checkpoint::CheckpointSpec;
use weir_e2e::gen::Click;
use weir_e2e::kafka::block_on;
use weir_e2e::{component, datetime_millis};
use weir_pipeline::{Overrides, PipelineSpec};
use weir_run::{run, RunOptions, RunReport};

/// One Kafka -> Kafka run.
pub struct KafkaRun {
    pub partitions: i32,
    /// The pipeline's keyed shards.
    pub parallelism: usize,
    pub report: RunReport,
    /// CPU seconds the process used during the run (the broker's are not counted).
    pub cpu_s: f64,
    /// Seconds a plain librdkafka consumer took to read the outputs back.
    pub read_back_secs: f64,
    /// Messages read back from the output topic after the run.
    pub in_topic: u64,
    /// Seconds it took to produce the input (not part of the figure).
    pub produce_secs: f64,
    pub state: StateDirUse,
}

/// Deletes the topics that earlier bench runs left behind (a run stopped half-way does
/// not delete its own), so that the in-memory broker does not keep growing.
pub fn delete_leftover_topics(brokers: &str) -> anyhow::Result<()> {
    let consumer = consumer(brokers)?;
    let metadata = consumer.fetch_metadata(None, TIMEOUT)?;
    let leftovers: Vec<&str> = metadata
        .topics()
        .iter()
        .map(|t| t.name())
        .filter(|n| n.starts_with("bench-clicks-p") || n.starts_with("bench-counts-p"))
        .collect();
    if !leftovers.is_empty() {
        eprintln!(
            "  deleting {} topic(s) left by earlier bench runs",
            leftovers.len()
        );
        delete_topics(brokers, &leftovers)?;
    }
    Ok(())
}

/// Produces `clicks` into a new topic of `partitions` partitions, then runs the counter
/// from it `runs` times, each time to a new output topic of as many partitions,
/// checkpointing every `interval`; returns the fastest run. Deletes the topics after.
pub fn kafka_to_kafka(
    data: &Path,
    brokers: &str,
    clicks: &[Click],
    partitions: i32,
    parallelism: usize,
    interval: Duration,
    runs: usize,
) -> anyhow::Result<KafkaRun> {
    let tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let input = format!("bench-clicks-p{partitions}-{tag}");
    create_topics(brokers, &[&input], partitions)?;
    let result = (|| {
        let started = Instant::now();
        produce_clicks(brokers, &input, partitions, clicks)?;
        let produce_secs = started.elapsed().as_secs_f64();
        // What the bounded source will take as the end of its input.
        let produced = end_offsets(brokers, &input)?;
        anyhow::ensure!(
            produced == clicks.len() as u64,
            "the end offsets of {input} add up to {produced} after producing {} messages",
            clicks.len()
        );
        eprintln!(
            "  produced {} clicks to {input} ({partitions} partition(s)) in {produce_secs:.2} s",
            clicks.len()
        );
        let mut best: Option<KafkaRun> = None;
        for attempt in 1..=runs {
            let output = format!("bench-counts-p{partitions}-{tag}-{attempt}");
            create_topics(brokers, &[&output], partitions)?;
            let run = run_once(
                data,
                brokers,
                clicks.len(),
                (partitions, parallelism),
                interval,
                &input,
                &output,
            );
            delete(brokers, &output);
            let mut run = run?;
            run.produce_secs = produce_secs;
            if best
                .as_ref()
                .is_none_or(|b| run.report.elapsed < b.report.elapsed)
            {
                best = Some(run);
            }
        }
        best.ok_or_else(|| anyhow::anyhow!("no run"))
    })();
    delete(brokers, &input);
    result
}

/// Deletes a topic: the broker keeps topics in memory.
fn delete(brokers: &str, topic: &str) {
    if let Err(e) = delete_topics(brokers, &[topic]) {
        eprintln!("  (could not delete topic {topic}: {e:#})");
    }
}

/// One timed run from `input` to the empty topic `output`, then the read-back.
fn run_once(
    data: &Path,
    brokers: &str,
    clicks: usize,
    (partitions, parallelism): (i32, usize),
    interval: Duration,
    input: &str,
    output: &str,
) -> anyhow::Result<KafkaRun> {
    let state = data.join(format!("state-kafka-p{partitions}"));
    let mut spec = pipeline(data, brokers, input, output, partitions, &state, interval)?;
    spec.parallelism = parallelism;
    let cpu_before = crate::parallel::cpu_seconds();
    state_dir::clear(&state)?;
    let watch = StateDirWatch::start(&state);
    let options = RunOptions {
        fresh: true,
        ..RunOptions::default()
    };
    let report = run(&spec, &options).map_err(|f| anyhow::anyhow!("{f}"));
    let state = watch.finish();
    let cpu_s = crate::parallel::cpu_seconds() - cpu_before;
    let report = report?;
    anyhow::ensure!(
        report.processed == clicks as u64 && report.dead_letters == 0,
        "the run processed {} of {clicks} clicks ({} dead letters)",
        report.processed,
        report.dead_letters
    );
    let emitted = report.outputs[0].1;
    let started = Instant::now();
    let read = read_back(brokers, output, emitted)?;
    let read_back_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "  {:.0} records/s; read {} messages back from {output} in {:.2} s",
        report.records_per_second(),
        read.messages,
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(
        read.distinct_ids == read.messages,
        "{output}: {} messages but {} distinct weir-id headers",
        read.messages,
        read.distinct_ids
    );
    anyhow::ensure!(
        read.messages == emitted,
        "{output}: the run says it emitted {emitted} records, {} were read back",
        read.messages
    );
    Ok(KafkaRun {
        partitions,
        parallelism,
        report,
        cpu_s,
        read_back_secs,
        in_topic: read.messages,
        produce_secs: 0.0,
        state,
    })
}

fn pipeline(
    data: &Path,
    brokers: &str,
    input: &str,
    output: &str,
    partitions: i32,
    state: &Path,
    interval: Duration,
) -> anyhow::Result<PipelineSpec> {
    // `idle_timeout` stays at its default (30 s): a bounded read of a full topic never
    // leaves a partition quiet for that long.
    let toml = format!(
        r#"
name = "bench-kafka-p{partitions}"

[[source]]
name = "clicks"
type = "kafka"
brokers = "{brokers}"
topic = "{input}"
startup = "earliest"
bounded = true
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "{udf}"

[[sink]]
output = "main"
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
properties = {{ "linger.ms" = "5" }}
"#,
        udf = component("change-only-counter").display()
    );
    let path = data.join(format!("kafka-p{partitions}.toml"));
    std::fs::write(&path, toml)?;
    let overrides = Overrides {
        dead_letter: Some(data.join(format!("kafka-p{partitions}.dead-letter.jsonl"))),
        ..Overrides::default()
    };
    let mut spec = PipelineSpec::load(&path, &overrides)?;
    spec.checkpoint = CheckpointSpec {
        enabled: true,
        dir: state.to_path_buf(),
        interval,
        kafka: None,
        aligned: None,
    };
    Ok(spec)
}

/// The partition of an ad: FNV-1a of its id, so an ad's clicks share a partition.
fn partition_of(ad: &str, partitions: i32) -> i32 {
    let hash = ad.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % partitions as u64) as i32
}

/// Produces the clicks as the JSON lines the file bench reads, keyed by ad id.
fn produce_clicks(
    brokers: &str,
    topic: &str,
    partitions: i32,
    clicks: &[Click],
) -> anyhow::Result<()> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "200000")
        .create_with_context(Deliveries::default())?;
    // tansu 0.6 answers a ListOffsets(latest) with the base offset of the partition's
    // last record batch plus one, not its last offset plus one. Each partition's last
    // click goes in a batch of its own, so that the end offsets are the true ones: the
    // check after producing can use them, and so could a bounded source that bounds
    // its read by them (Weir's now stops at librdkafka's end-of-partition instead).
    let mut last = vec![None; partitions as usize];
    for (i, click) in clicks.iter().enumerate() {
        last[partition_of(&click.ad, partitions) as usize] = Some(i);
    }
    let send = |click: &Click, payload: &mut String| -> anyhow::Result<()> {
        use std::fmt::Write as _;
        payload.clear();
        write!(
            payload,
            r#"{{"ad_id":"{}","clicked_at":"{}"}}"#,
            click.ad,
            datetime_millis(click.ts)
        )?;
        let mut record = BaseRecord::to(topic)
            .key(click.ad.as_str())
            .payload(payload.as_str())
            .partition(partition_of(&click.ad, partitions));
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((e, back)) => {
                    anyhow::ensure!(
                        e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull),
                        "producing to {topic}: {e}"
                    );
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    };
    let mut payload = String::new();
    for (i, click) in clicks.iter().enumerate() {
        if !last.contains(&Some(i)) {
            send(click, &mut payload)?;
        }
    }
    let flush = || {
        producer
            .flush(Duration::from_secs(60))
            .map_err(|e| anyhow::anyhow!("producing to {topic}: {e}"))
    };
    flush()?;
    for &i in last.iter().flatten() {
        send(&clicks[i], &mut payload)?;
    }
    flush()?;
    let deliveries = producer.context();
    let failed = deliveries.failed.load(Ordering::Relaxed);
    anyhow::ensure!(
        failed == 0,
        "producing to {topic}: {failed} message(s) not delivered: {}",
        deliveries
            .first_error
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_default()
    );
    Ok(())
}

/// Counts the messages librdkafka could not deliver, and keeps the first error.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {}
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert_with(|| error.to_string());
            }
        }
    }
}

/// The end offsets of every partition of `topic` minus their start offsets: the number
/// of messages, for a topic written without transactions, as long as the broker reports
/// end offsets right (see [`produce_clicks`]).
fn end_offsets(brokers: &str, topic: &str) -> anyhow::Result<u64> {
    let consumer = consumer(brokers)?;
    let mut total = 0;
    for partition in partitions_of(&consumer, topic)? {
        let (low, high) = consumer.fetch_watermarks(topic, partition, TIMEOUT)?;
        total += (high - low).max(0) as u64;
    }
    Ok(total)
}

/// What [`read_back`] found in a topic.
struct ReadBack {
    messages: u64,
    /// Distinct `weir-id` headers (the Kafka sink numbers every record it sends).
    distinct_ids: u64,
}

/// Reads every partition of `topic` from the start until `expected` messages arrived and
/// one more second brought none (or nothing arrived for 10 s): the count of messages, not
/// of offsets, which tansu's end offsets do not give for a topic written in batches.
fn read_back(brokers: &str, topic: &str, expected: u64) -> anyhow::Result<ReadBack> {
    let consumer = consumer(brokers)?;
    let mut assignment = TopicPartitionList::new();
    for partition in partitions_of(&consumer, topic)? {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut ids = HashSet::new();
    let mut messages = 0;
    let mut last_arrival = Instant::now();
    loop {
        let quiet = last_arrival.elapsed();
        if (messages >= expected && quiet >= Duration::from_secs(1))
            || quiet >= Duration::from_secs(10)
        {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => anyhow::bail!("reading {topic}: {e}"),
            Some(Ok(message)) => {
                messages += 1;
                last_arrival = Instant::now();
                let id = message.headers().and_then(|headers| {
                    headers
                        .iter()
                        .find(|h| h.key == "weir-id")
                        .and_then(|h| h.value)
                        .map(<[u8]>::to_vec)
                });
                if let Some(id) = id {
                    ids.insert(id);
                }
            }
        }
    }
    Ok(ReadBack {
        messages,
        distinct_ids: ids.len() as u64,
    })
}

const TIMEOUT: Duration = Duration::from_secs(10);

fn consumer(brokers: &str) -> anyhow::Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-bench-read-back")
        .set("enable.auto.commit", "false")
        // librdkafka's default (1 s) pauses fetching whenever 100,000 messages are
        // queued, which caps a consumer at about 100,000-150,000 messages/s here.
        .set("fetch.queue.backoff.ms", "10")
        .create()?)
}

/// The partition ids of `topic`.
fn partitions_of(consumer: &BaseConsumer, topic: &str) -> anyhow::Result<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| anyhow::anyhow!("no topic {topic}"))?;
    Ok(found.partitions().iter().map(|p| p.id()).collect())
}

fn admin(brokers: &str) -> anyhow::Result<(AdminClient<DefaultClientContext>, AdminOptions)> {
    let admin = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)));
    Ok((admin, options))
}

fn create_topics(brokers: &str, topics: &[&str], partitions: i32) -> anyhow::Result<()> {
    let (admin, options) = admin(brokers)?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    for result in block_on(admin.create_topics(&new, &options))? {
        result.map_err(|(t, e)| anyhow::anyhow!("cannot create topic {t}: {e}"))?;
    }
    Ok(())
}

fn delete_topics(brokers: &str, topics: &[&str]) -> anyhow::Result<()> {
    let (admin, options) = admin(brokers)?;
    for result in block_on(admin.delete_topics(topics, &options))? {
        result.map_err(|(t, e)| anyhow::anyhow!("cannot delete topic {t}: {e}"))?;
    }
    Ok(())
}
