//! Who runs which task of a pipeline run in a consumer group, and how far behind each
//! task is: `weir status --group G --brokers B`.
//!
//! Every process of the group writes a line to the topic `<group>.status` whenever its
//! tasks change and every [`EVERY`] (`{"process", "pipeline", "tasks", "at"}`, keyed by
//! the process), and one with no tasks when it leaves. The status reads the topic and
//! keeps each process's last line; a process silent for [`STALE`] is shown as gone (it
//! was killed). Lag is the partition's end offset minus the offset the task committed
//! after its last checkpoint. (Describing the group itself would need the brokers'
//! DescribeGroups, which Kafka-compatible brokers do not all answer: tansu 0.6 does not.)

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use weir_io::kafka::{client_config, Quiet};

/// How often a process repeats its line.
pub const EVERY: Duration = Duration::from_secs(5);
/// A process whose last line is older than this is taken as gone (killed): two missed
/// lines and a second.
pub const STALE: Duration = Duration::from_secs(11);
const TIMEOUT: Duration = Duration::from_secs(15);

/// The status topic of `group`.
pub fn topic(group: &str) -> String {
    format!("{group}.status")
}

/// Where the tasks of group `group` commit their source offsets (the lag is read from
/// there).
pub fn offsets_group(group: &str) -> String {
    format!("{group}.offsets")
}

/// One process's line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Line {
    process: String,
    pipeline: String,
    /// The topic whose partitions are the tasks.
    topic: String,
    /// The tasks (partition numbers) it runs.
    tasks: Vec<i32>,
    /// Wall clock, ms since the epoch.
    at: i64,
    /// The process stopped.
    #[serde(default)]
    left: bool,
    /// The repartition topics the tasks read (partition p for task p), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    repartition: Vec<String>,
}

/// Writes this process's lines.
pub struct Reporter {
    producer: BaseProducer,
    topic: String,
    process: String,
    pipeline: String,
    task_topic: String,
    repartition: Vec<String>,
    last: Option<(Vec<i32>, Instant)>,
}

impl Reporter {
    /// A reporter writing this process's lines to `topic` on `brokers`, each naming the
    /// pipeline, the topic whose partitions are the tasks (`task_topic`) and the
    /// repartition topics the tasks read. The process is named `<hostname>/pid<pid>`.
    /// Nothing is sent before [`report`](Self::report).
    pub fn new(
        brokers: &str,
        topic: &str,
        pipeline: &str,
        task_topic: &str,
        repartition: Vec<String>,
    ) -> anyhow::Result<Self> {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        Ok(Self {
            producer: client_config(brokers)
                .create()
                .context("cannot create the status producer")?,
            topic: topic.to_string(),
            process: format!("{host}/pid{}", std::process::id()),
            pipeline: pipeline.to_string(),
            task_topic: task_topic.to_string(),
            repartition,
            last: None,
        })
    }

    /// Says which tasks this process runs, if they changed or [`EVERY`] has passed.
    pub fn report(&mut self, tasks: &[i32]) {
        let due = match &self.last {
            Some((said, at)) => said != tasks || at.elapsed() >= EVERY,
            None => true,
        };
        if due {
            self.send(tasks, false);
            self.last = Some((tasks.to_vec(), Instant::now()));
        }
    }

    /// Says this process runs nothing any more.
    pub fn leave(&mut self) {
        self.send(&[], true);
        let _ = self.producer.flush(TIMEOUT);
    }

    fn send(&self, tasks: &[i32], left: bool) {
        let line = Line {
            process: self.process.clone(),
            pipeline: self.pipeline.clone(),
            topic: self.task_topic.clone(),
            tasks: tasks.to_vec(),
            at: weir_core::time::wall_clock_ms(),
            left,
            repartition: self.repartition.clone(),
        };
        let payload = serde_json::to_vec(&line).expect("a line serializes");
        let record = BaseRecord::to(&self.topic)
            .key(&self.process)
            .payload(&payload);
        if let Err((e, _)) = self.producer.send(record) {
            tracing::debug!("cannot write the status line: {e}");
        }
        self.producer.poll(Duration::ZERO);
    }
}

/// The report, as printed.
pub fn group_status(group: &str, brokers: &str) -> anyhow::Result<String> {
    let consumer: BaseConsumer<Quiet> = client_config(brokers)
        .set("group.id", offsets_group(group))
        .set("enable.partition.eof", "true")
        .create_with_context(Quiet("reading the group status"))?;
    let lines = read_lines(&consumer, &topic(group))
        .with_context(|| format!("cannot read {} on {brokers}", topic(group)))?;
    anyhow::ensure!(
        !lines.is_empty(),
        "no weir process has run in group {group:?} on {brokers}"
    );
    let now = weir_core::time::wall_clock_ms();
    let mut out = String::new();
    let pipeline = lines
        .values()
        .next()
        .map(|l| l.pipeline.clone())
        .unwrap_or_default();
    writeln!(out, "group {group:?}, pipeline {pipeline:?}:")?;
    // A task claimed by two processes (one was killed, and its line is not stale yet)
    // belongs to the newer claim.
    let live = |line: &Line| !line.left && now - line.at <= STALE.as_millis() as i64;
    let mut owners: BTreeMap<i32, &Line> = BTreeMap::new();
    for line in lines.values().filter(|l| live(l)) {
        for &task in &line.tasks {
            if owners.get(&task).is_none_or(|o| o.at < line.at) {
                owners.insert(task, line);
            }
        }
    }
    for line in lines.values() {
        let age = Duration::from_millis((now - line.at).max(0) as u64).as_secs();
        if line.left {
            writeln!(out, "  process {}: left, {age} s ago", line.process)?;
        } else if !live(line) {
            writeln!(out, "  process {}: gone, silent for {age} s", line.process)?;
        } else {
            let tasks: Vec<String> = owners
                .iter()
                .filter(|(_, o)| o.process == line.process)
                .map(|(task, _)| task.to_string())
                .collect();
            match tasks.is_empty() {
                true => writeln!(out, "  process {}: no tasks", line.process)?,
                false => writeln!(
                    out,
                    "  process {}: tasks {}",
                    line.process,
                    tasks.join(", ")
                )?,
            }
        }
    }
    let owners: BTreeMap<i32, String> = owners
        .into_iter()
        .map(|(task, line)| (task, line.process.clone()))
        .collect();
    // Lag per task, on the topic the group assigns, and on the repartition topics the
    // tasks read through (the source topic is then the repartitioners' to commit).
    let last = lines.values().last().expect("not empty");
    let partitions: Vec<i32> = consumer
        .fetch_metadata(Some(&last.topic), TIMEOUT)?
        .topics()
        .first()
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    let topics: Vec<&String> = std::iter::once(&last.topic)
        .chain(&last.repartition)
        .collect();
    let mut list = TopicPartitionList::new();
    for topic in &topics {
        for &p in &partitions {
            list.add_partition(topic, p);
        }
    }
    let committed = consumer.committed_offsets(list, TIMEOUT)?;
    let offsets = offsets_group(group);
    for p in partitions {
        let owner = owners.get(&p).map_or("no process", String::as_str);
        for (i, topic) in topics.iter().enumerate() {
            let done = committed
                .find_partition(topic, p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(n) => Some(n),
                    _ => None,
                });
            let (_, end) = consumer.fetch_watermarks(topic, p, TIMEOUT)?;
            let what = match (i, last.repartition.is_empty()) {
                (0, true) => format!("task {p}"),
                (0, false) => format!("task {p} repartitioner"),
                _ => format!("task {p} via"),
            };
            match done {
                Some(done) => writeln!(
                    out,
                    "  {what} ({topic}[{p}]): committed {done} of {end}, lag {} ({owner})",
                    (end - done).max(0)
                )?,
                None => writeln!(
                    out,
                    "  {what} ({topic}[{p}]): nothing committed to {offsets:?} yet ({owner})"
                )?,
            }
        }
    }
    Ok(out)
}

/// Each process's last line.
fn read_lines(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
) -> anyhow::Result<BTreeMap<String, Line>> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&list)?;
    let mut lines = BTreeMap::new();
    let started = Instant::now();
    while started.elapsed() < TIMEOUT {
        match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => tracing::debug!("reading {topic}: {e}"),
            Some(Ok(message)) => {
                if let Some(line) = message
                    .payload()
                    .and_then(|p| serde_json::from_slice::<Line>(p).ok())
                {
                    lines.insert(line.process.clone(), line);
                }
            }
        }
    }
    Ok(lines)
}
