//! Scaling out on Kafka: many `weir run --group G` processes share one pipeline, and
//! Kafka's consumer-group protocol spreads its partitions over them. This is the Kafka
//! Streams model, with wasm UDFs.
//!
//! - A **task** is one partition number `p` of the pipeline's source topics: partition
//!   `p` of each topic (the topics must be co-partitioned: the same number of
//!   partitions, and the same key in the same partition). A task is a whole pipeline run
//!   of its own ([`weir_run::run`]) over those partitions: its own UDF instance, keyed
//!   state, timers and watermark. So its output does not depend on which process runs it,
//!   nor on what else that process runs.
//! - The process joins the group with one consumer subscribed to the first source
//!   topic (cooperative-sticky assignment, so a rebalance moves only the partitions that
//!   change hands). It fetches nothing itself (its partitions are paused): an assigned
//!   partition starts a task, a revoked one stops its task, which checkpoints first. The
//!   callback returns, and the group moves on, only once the task has stopped.
//! - A task's checkpoints go to partition `p` of the topic `<group>.<pipeline>.checkpoints`
//!   (created with the pipeline's partition count), not to a local directory, so the
//!   process that gets the partition next restores the task, timers included, before it
//!   reads a record. The checkpoint holds the source offsets, which win over committed
//!   ones; offsets are committed only after the checkpoint holding them is acknowledged,
//!   to the group `<group>.offsets` (a broker takes commits to a group only from its
//!   members, and the tasks' consumers are not members: they are assigned partitions).
//! - Each process says which tasks it runs, on every change and every few seconds, in
//!   the topic `<group>.status`; `weir status --group` reads it ([`status`]).
//! - Kafka sink records carry `weir-id: <pipeline>/p<task>/<output>/<n>`; `n` is in the
//!   checkpoints, so the records a task re-sends after it moved (or crashed) repeat ids,
//!   and a consumer drops them.
//! - A source not partitioned by the pipeline's key (`repartition = true`) is re-keyed
//!   through a repartition topic by a repartitioner beside each task ([`repartition`]).
//! - Every task runs the group's current UDF version, which a `weir serve --group`
//!   member can change for the whole group; [`steering`] also gives `weir serve` the
//!   process's tasks as one pipeline.

#![warn(missing_docs)]

pub mod repartition;
pub mod status;
pub mod steering;

pub use status::offsets_group;

use anyhow::Context as _;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::kafka::{client_config, consumer_config, drop_in_background};
use weir_io::sink::SinkTarget;
use weir_io::source::kafka::Via;
use weir_io::source::SourceLocation;
use weir_pipeline::{PipelineSpec, SourceSpec};
use weir_run::{run_with, RunControl, RunOptions};

/// A process that has no task this long after joining says so once.
const NO_ASSIGNMENT_WARNING: Duration = Duration::from_secs(30);

/// What the group's tasks share.
struct Plan {
    spec: PipelineSpec,
    group: String,
    brokers: String,
    /// The topic whose partitions the group assigns: the first source's first topic.
    task_topic: String,
    checkpoint_topic: String,
    /// The number of tasks: the partition count of every source topic.
    partitions: i32,
    /// Where each process says which tasks it runs (for `weir status --group`).
    status_topic: String,
}

/// A task running on its own thread, with the repartitioners of its partition.
struct Task {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<()>>,
    repartitioners: Vec<repartition::Repartitioner>,
}

/// The tasks of this process, by partition.
struct Tasks {
    running: BTreeMap<i32, Task>,
    /// The first error of a task, which ends the process.
    failed: Option<anyhow::Error>,
    /// The tasks' controls, and the UDF version a task starts with.
    steering: Arc<steering::Steering>,
}

/// Runs `spec` as one member of consumer group `group` until `stop` is set or a task
/// fails. Its tasks run the group's current UDF version (see [`steering`]): the
/// pipeline's component until one is deployed through a `weir serve --group` member.
pub fn run_in_group(spec: &PipelineSpec, group: &str, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let bytes = std::fs::read(&spec.udf.path)
        .with_context(|| format!("cannot read UDF component {}", spec.udf.path.display()))?;
    // A component that cannot work fails here, before the process joins the group.
    let prepared = weir_control::prepare(spec, &bytes).map_err(|refused| {
        anyhow::anyhow!("UDF component {}: {}", spec.udf.path.display(), refused)
    })?;
    let mut control = RunControl::default();
    control.stop = stop;
    let steering = steering::Steering::new(
        Arc::new(control),
        spec.clone(),
        weir_control::DEFAULT_PROBATION_CALLS,
        weir_control::Versions::starting_with(Arc::new(bytes), prepared.identity.sha256),
    );
    run_steered(spec, group, steering)
}

/// Runs `spec` as one member of consumer group `group`, steered through `steering`
/// (`weir serve --group`): until its control's stop flag is set, with the tasks' summed
/// status published there.
pub fn run_steered(
    spec: &PipelineSpec,
    group: &str,
    steering: Arc<steering::Steering>,
) -> anyhow::Result<()> {
    let stop = Arc::clone(&steering.control.stop);
    let mut plan = plan(spec, group)?;
    let partitions = check_co_partitioned(&plan)?;
    plan.partitions = partitions;
    let plan = Arc::new(plan);
    let versions_topic = format!("{group}.{}.udf", plan.spec.name);
    let mut topics = vec![
        (plan.checkpoint_topic.clone(), partitions),
        (versions_topic.clone(), 1),
        (plan.status_topic.clone(), 1),
    ];
    topics.extend(plan.repartitioned().map(|(_, topic)| (topic, partitions)));
    ensure_topics(&plan.brokers, &topics)?;
    // The tasks' checkpoint stores share one producer; made now, it has its producer id
    // by the time the first task claims its partition (weir_checkpoint::kafka_store).
    weir_checkpoint::kafka_store::warm_up(&plan.brokers)?;
    let tasks = Arc::new(Mutex::new(Tasks {
        running: BTreeMap::new(),
        failed: None,
        steering: Arc::clone(&steering),
    }));
    let context = Member {
        plan: Arc::clone(&plan),
        tasks: Arc::clone(&tasks),
    };
    let mut config = consumer_config(&plan.brokers, &plan.group);
    config
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        // Names the process in `weir status --group`.
        .set(
            "client.id",
            format!("weir-{}-pid{}", plan.spec.name, std::process::id()),
        );
    // `WEIR_KAFKA_DEBUG=cgrp` (with `WEIR_LOG=debug`) logs librdkafka's side of the
    // group protocol: each JoinGroup and SyncGroup with its time (docs/scaling.md).
    if let Ok(facilities) = std::env::var("WEIR_KAFKA_DEBUG") {
        config.set("debug", facilities);
    }
    let consumer: BaseConsumer<Member> = config
        .create_with_context(context)
        .context("cannot create the group member")?;
    consumer
        .subscribe(&[&plan.task_topic])
        .with_context(|| format!("cannot join group {group:?}"))?;
    // While librdkafka joins the group in the background: tasks start (in `poll`, below)
    // with the group's current UDF version, read here.
    steering.open_log(&plan.brokers, &versions_topic)?;
    tracing::info!(
        "pipeline {:?}: joined group {group:?} on topic {:?} ({partitions} partitions); checkpoints in {:?}",
        plan.spec.name,
        plan.task_topic,
        plan.checkpoint_topic
    );
    let mut reporter = status::Reporter::new(
        &plan.brokers,
        &plan.status_topic,
        &plan.spec.name,
        &plan.task_topic,
        plan.repartitioned().map(|(_, topic)| topic).collect(),
    )?;
    let joined = std::time::Instant::now();
    let mut waiting_said = false;
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if !waiting_said && joined.elapsed() > NO_ASSIGNMENT_WARNING {
            waiting_said = true;
            if consumer.assignment().map_or(0, |a| a.count()) == 0 {
                tracing::warn!(
                    "no partition of {:?} assigned after {} s: the group is still rebalancing, or every task runs elsewhere (more processes than partitions)",
                    plan.task_topic,
                    NO_ASSIGNMENT_WARNING.as_secs()
                );
            }
        }
        // Rebalance callbacks (starting and stopping tasks) run inside poll.
        let _ = consumer.poll(Duration::from_millis(100));
        let mut tasks = tasks.lock().expect("not poisoned");
        reap(&mut tasks);
        if let Some(error) = tasks.failed.take() {
            break Err(error);
        }
        let owned: Vec<i32> = tasks.running.keys().copied().collect();
        drop(tasks);
        reporter.report(&owned);
        steering.publish_status();
        steering.follow();
    };
    // Leave the group: our tasks stop (and checkpoint) in the revocation, and the
    // others get their partitions without waiting for the session to time out.
    consumer.unsubscribe();
    for _ in 0..50 {
        let _ = consumer.poll(Duration::from_millis(100));
        if tasks.lock().expect("not poisoned").running.is_empty() {
            break;
        }
    }
    let mut tasks = tasks.lock().expect("not poisoned");
    let left: Vec<i32> = tasks.running.keys().copied().collect();
    for partition in left {
        stop_task(&mut tasks, partition);
    }
    reporter.leave();
    match (result, tasks.failed.take()) {
        (Err(error), _) | (Ok(()), Some(error)) => Err(error),
        (Ok(()), None) => Ok(()),
    }
}

/// The group member's side of the rebalance protocol.
struct Member {
    plan: Arc<Plan>,
    tasks: Arc<Mutex<Tasks>>,
}

impl ClientContext for Member {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        weir_io::kafka::Logs("group member").log(level, fac, message)
    }
}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            tracing::info!(
                "group rebalance: revoked partitions {:?}",
                partitions_of(list)
            );
            let mut tasks = self.tasks.lock().expect("not poisoned");
            for partition in partitions_of(list) {
                stop_task(&mut tasks, partition);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            // With cooperative rebalancing a joining member's first round assigns
            // nothing (the others give up what moves); the second assigns it.
            tracing::info!(
                "group rebalance: assigned partitions {:?}",
                partitions_of(list)
            );
            // The member only keeps the assignment; the tasks read.
            if let Err(e) = consumer.pause(list) {
                tracing::warn!("cannot pause the member's partitions: {e}");
            }
            let mut tasks = self.tasks.lock().expect("not poisoned");
            for partition in partitions_of(list) {
                start_task(&self.plan, &mut tasks, partition);
            }
        }
    }
}

fn partitions_of(list: &TopicPartitionList) -> Vec<i32> {
    list.elements().iter().map(|e| e.partition()).collect()
}

fn start_task(plan: &Plan, tasks: &mut Tasks, partition: i32) {
    if tasks.running.contains_key(&partition) {
        return;
    }
    let spec = task_spec(plan, partition);
    let mut repartitioners = Vec::new();
    for (source, topic) in plan.repartitioned() {
        let started = repartition::Repartitioner::start(repartition::Plan {
            source: source.clone(),
            partition,
            topic,
            partitions: plan.partitions,
            offsets_group: offsets_group(&plan.group),
        });
        match started {
            Ok(repartitioner) => repartitioners.push(repartitioner),
            Err(e) => {
                tasks
                    .failed
                    .get_or_insert(e.context(format!("cannot start task {partition}")));
                return;
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    // A task has a control of its own (for swaps and its status) and starts with the
    // group's current UDF version.
    let control = RunControl::new();
    tasks.steering.add_task(partition, Arc::clone(&control));
    let udf = tasks.steering.udf();
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(&stop)),
        fresh: false,
        control: Some(control),
    };
    tracing::info!("task {partition}: starting");
    let thread = std::thread::Builder::new()
        .name(format!("weir-task-{partition}"))
        .spawn(move || {
            let prepared = weir_control::prepare(&spec, &udf)
                .map_err(|refused| anyhow::anyhow!("{refused}"))?;
            let result = run_with(&spec, prepared.function, prepared.identity, &options);
            let report = result.map_err(|f| anyhow::anyhow!("{f}"))?;
            tracing::info!("task {partition}: stopped\n{}", report.summary());
            Ok(())
        });
    match thread {
        Ok(thread) => {
            tasks.running.insert(
                partition,
                Task {
                    stop,
                    thread,
                    repartitioners,
                },
            );
        }
        Err(e) => {
            tasks
                .failed
                .get_or_insert(anyhow::anyhow!("cannot start task {partition}: {e}"));
        }
    }
}

/// Stops a task and waits for it: it finishes what it read, checkpoints and commits.
fn stop_task(tasks: &mut Tasks, partition: i32) {
    let Some(task) = tasks.running.remove(&partition) else {
        return;
    };
    tasks.steering.remove_task(partition);
    task.stop.store(true, Ordering::Relaxed);
    let mut results: Vec<anyhow::Result<()>> =
        task.repartitioners.into_iter().map(|r| r.stop()).collect();
    results.push(
        task.thread
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("task {partition} panicked"))),
    );
    for error in results.into_iter().filter_map(Result::err) {
        tasks
            .failed
            .get_or_insert(error.context(format!("task {partition}")));
    }
}

/// Collects the tasks that ended on their own (a failure).
fn reap(tasks: &mut Tasks) {
    let ended: Vec<i32> = tasks
        .running
        .iter()
        .filter(|(_, task)| {
            task.thread.is_finished() || task.repartitioners.iter().any(|r| r.is_finished())
        })
        .map(|(&partition, _)| partition)
        .collect();
    for partition in ended {
        stop_task(tasks, partition);
        if tasks.failed.is_none() {
            tasks.failed = Some(anyhow::anyhow!(
                "task {partition} ended while its partition was assigned"
            ));
        }
    }
}

/// Checks that the pipeline can run in a group.
fn plan(spec: &PipelineSpec, group: &str) -> anyhow::Result<Plan> {
    let mut kafka = spec.sources.iter().map(|source| match &source.location {
        SourceLocation::Kafka(kafka) => Ok(kafka),
        _ => anyhow::bail!(
            "source {:?} is not a Kafka source: with --group every source must be one",
            source.name
        ),
    });
    let first = kafka.next().expect("a pipeline has a source")?;
    for other in kafka {
        let other = other?;
        anyhow::ensure!(
            other.brokers == first.brokers,
            "with --group all sources must use the same brokers"
        );
    }
    for source in &spec.sources {
        if let SourceLocation::Kafka(kafka) = &source.location {
            anyhow::ensure!(
                !kafka.bounded,
                "source {:?} is bounded: with --group sources run until stopped",
                source.name
            );
        }
    }
    for sink in &spec.sinks {
        anyhow::ensure!(
            matches!(
                sink.target,
                SinkTarget::Kafka(_) | SinkTarget::Postgres(_) | SinkTarget::Discard
            ),
            "output {:?} goes to a file or stdout: with --group outputs go to Kafka, PostgreSQL or discard (every process would write its own part of a file)",
            sink.output
        );
    }
    Ok(Plan {
        spec: spec.clone(),
        group: group.to_string(),
        brokers: first.brokers.clone(),
        task_topic: first.topics[0].clone(),
        checkpoint_topic: format!("{group}.{}.checkpoints", spec.name),
        partitions: 0,
        status_topic: status::topic(group),
    })
}

/// The pipeline of task `partition`: partition `partition` of every source topic, its
/// checkpoints in partition `partition` of the checkpoint topic.
fn task_spec(plan: &Plan, partition: i32) -> PipelineSpec {
    let mut spec = plan.spec.clone();
    spec.name = format!("{}/p{partition}", plan.spec.name);
    let mut vias: BTreeMap<String, String> = plan
        .repartitioned()
        .map(|(source, topic)| (source.name.clone(), topic))
        .collect();
    for source in &mut spec.sources {
        let via = vias
            .remove(&source.name)
            .map(|topic| Via { topic, partition });
        if let SourceLocation::Kafka(kafka) = &mut source.location {
            if via.is_some() {
                // Every partition of the topics is an input (each with its watermark),
                // read through partition `partition` of the repartition topic.
                kafka.partitions = None;
                kafka.via = via;
            } else {
                kafka.partitions = Some(vec![partition]);
            }
            // Only the member may commit to the group it belongs to: the tasks commit
            // their offsets (for lag, and `startup = "committed"`) to a group of their own.
            kafka.group = offsets_group(&plan.group);
        }
    }
    spec.checkpoint.enabled = true;
    spec.checkpoint.kafka = Some(weir_checkpoint::kafka_store::KafkaCheckpoints {
        brokers: plan.brokers.clone(),
        topic: plan.checkpoint_topic.clone(),
        partition,
    });
    let dead_letter = &plan.spec.dead_letter;
    let stem = dead_letter
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    spec.dead_letter = dead_letter.with_file_name(format!("{stem}.p{partition}.jsonl"));
    spec
}

impl Plan {
    /// The sources the group re-keys (`repartition = true`), with their repartition topics.
    fn repartitioned(&self) -> impl Iterator<Item = (&SourceSpec, String)> + '_ {
        self.spec
            .sources
            .iter()
            .filter(|s| matches!(&s.location, SourceLocation::Kafka(k) if k.repartition))
            .map(|s| (s, repartition::topic(&self.group, &self.spec.name, &s.name)))
    }
}

/// The partition count shared by every source topic.
fn check_co_partitioned(plan: &Plan) -> anyhow::Result<i32> {
    let consumer: BaseConsumer = client_config(&plan.brokers).create()?;
    let mut counts = Vec::new();
    for source in &plan.spec.sources {
        if let SourceLocation::Kafka(kafka) = &source.location {
            for topic in &kafka.topics {
                let metadata = consumer
                    .fetch_metadata(Some(topic), Duration::from_secs(30))
                    .with_context(|| format!("cannot read the metadata of topic {topic:?}"))?;
                let count = metadata
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic)
                    .map_or(0, |t| t.partitions().len());
                anyhow::ensure!(
                    count > 0,
                    "topic {topic:?} does not exist (create it first)"
                );
                counts.push((topic.clone(), count as i32));
            }
        }
    }
    let first = counts[0].1;
    if let Some((topic, count)) = counts.iter().find(|(_, c)| *c != first) {
        anyhow::bail!(
            "the source topics are not co-partitioned: {:?} has {first} partitions, {topic:?} has {count}; with --group every source topic needs the same number, with the same key in the same partition",
            counts[0].0
        );
    }
    Ok(first)
}

/// Creates each `(topic, partitions)` that does not exist yet, with the brokers' default
/// replication factor (`default.replication.factor`; KIP-464, Kafka 2.4): one admin
/// client and one CreateTopics request for all of them, as a member's start needs
/// several topics and each round trip costs.
fn ensure_topics(brokers: &str, topics: &[(String, i32)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(brokers).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(topic, partitions)| NewTopic::new(topic, *partitions, TopicReplication::Fixed(-1)))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(admin.create_topics(&new, &options))?;
    // A member's start need not wait for the client's teardown.
    drop_in_background(admin);
    for result in results {
        match result {
            Ok(topic) => tracing::info!("created topic {topic:?}"),
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => anyhow::bail!("cannot create topic {topic:?}: {code}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use weir_pipeline::Overrides;

    const PIPELINE: &str = r#"
name = "clicks"

[[source]]
name = "clicks"
type = "kafka"
brokers = "b:9092"
topic = "in"
key = "ad_id"
timestamp = "ts"
timestamp_format = "epoch_ms"

[udf]
path = "udf.wasm"

[[sink]]
output = "main"
type = "kafka"
brokers = "b:9092"
topic = "out"
"#;

    fn spec(text: &str) -> PipelineSpec {
        PipelineSpec::parse(text, Path::new("/p/pipeline.toml"), &Overrides::default()).unwrap()
    }

    #[test]
    fn a_task_reads_its_partition_and_keeps_its_state_in_the_group() {
        let plan = plan(&spec(PIPELINE), "g").unwrap();
        assert_eq!(plan.task_topic, "in");
        assert_eq!(plan.checkpoint_topic, "g.clicks.checkpoints");
        let task = task_spec(&plan, 3);
        assert_eq!(task.name, "clicks/p3");
        let SourceLocation::Kafka(kafka) = &task.sources[0].location else {
            panic!("a Kafka source");
        };
        assert_eq!(kafka.partitions, Some(vec![3]));
        assert_eq!(kafka.group, "g.offsets");
        let checkpoints = task.checkpoint.kafka.expect("checkpoints in Kafka");
        assert_eq!(
            (checkpoints.topic.as_str(), checkpoints.partition),
            ("g.clicks.checkpoints", 3)
        );
        assert!(task.checkpoint.enabled);
        assert_eq!(
            task.dead_letter,
            Path::new("/p/pipeline.dead-letter.p3.jsonl")
        );
    }

    #[test]
    fn a_repartitioned_source_is_read_through_the_task_s_partition_of_its_repartition_topic() {
        let text = PIPELINE.replace(
            "timestamp = \"ts\"",
            "timestamp = \"ts\"\nrepartition = true",
        );
        let repartitioned = plan(&spec(&text), "g").unwrap();
        let task = task_spec(&repartitioned, 4);
        let SourceLocation::Kafka(kafka) = &task.sources[0].location else {
            panic!("a Kafka source");
        };
        assert_eq!(
            kafka.partitions, None,
            "every partition of the topic is an input"
        );
        assert_eq!(
            kafka.via,
            Some(Via {
                topic: "g.clicks.repartition-clicks".to_string(),
                partition: 4
            })
        );
        assert_eq!(kafka.group, "g.offsets");
        let plain = task_spec(&plan(&spec(PIPELINE), "g").unwrap(), 4);
        let SourceLocation::Kafka(kafka) = &plain.sources[0].location else {
            panic!("a Kafka source");
        };
        assert_eq!(
            kafka.via, None,
            "a source partitioned by the key is read directly"
        );
    }

    #[test]
    fn what_cannot_run_in_a_group_is_refused_with_the_reason() {
        let refused = |text: String, reason: &str| {
            let error = plan(&spec(&text), "g").err().expect("refused").to_string();
            assert!(error.contains(reason), "{error}");
        };
        refused(
            PIPELINE.replace(
                "type = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"out\"",
                "type = \"file\"\npath = \"out.jsonl\"",
            ),
            "goes to a file or stdout",
        );
        refused(
            PIPELINE.replace("topic = \"in\"", "topic = \"in\"\nbounded = true"),
            "is bounded",
        );
        refused(
            PIPELINE.replace(
                "type = \"kafka\"\nbrokers = \"b:9092\"\ntopic = \"in\"",
                "type = \"file\"\npath = \"in.jsonl\"",
            ),
            "is not a Kafka source",
        );
    }
}
