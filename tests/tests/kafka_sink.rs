//! The Kafka sink against a real broker (tansu, started by scripts/services.sh): the seed
//! 000 pipeline with its main output produced to a topic puts exactly the file sink's
//! records there, in order, keyed by ad and stamped with the records' event time; a broker
//! that cannot be reached fails the run with an error naming it, without hanging.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};
use weir_e2e::gen::{self, Click};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{datetime_millis, read_jsonl, weir, Workdir};

/// The seed 000 pipeline with its main output going to `sink_lines` (the lines of a
/// `[[sink]]` table after `output = "main"`); returns the new pipeline file's path.
fn ad_clicks_to(work: &Workdir, name: &str, sink_lines: &str) -> String {
    let dir = weir_e2e::repo_root().join("examples/ad-clicks");
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).expect("the example pipeline");
    let main = "[[sink]]\noutput = \"main\"\ntype = \"stdout\"";
    assert!(text.contains(main), "the example's main sink changed");
    let text = text
        .replace(main, &format!("[[sink]]\noutput = \"main\"\n{sink_lines}"))
        .replace(
            "path = \"../../",
            &format!("path = \"{}/../../", dir.display()),
        );
    work.write(name, &text)
}

/// Runs a future on this thread (the admin client's futures are completed by its own
/// thread, so nothing needs driving here).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

fn create_topic(topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client");
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics(
        &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
        &options,
    ))
    .expect("create topics");
    for result in results {
        result.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// A message read back: key, payload, timestamp.
type Read = (Option<Vec<u8>>, Vec<u8>, Option<i64>);

/// Reads partition 0 of `topic` from the beginning until `expected` messages arrived (or
/// panics after a minute), without joining a consumer group.
fn read_topic(topic: &str, expected: usize) -> Vec<Read> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", "weir-kafka-sink-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut partitions = TopicPartitionList::new();
    partitions
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&partitions).expect("assign partition 0");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < expected {
        assert!(
            Instant::now() < deadline,
            "only {} of {expected} messages arrived in {topic} within 60 s",
            got.len()
        );
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(e)) => panic!("consuming {topic}: {e}"),
            Some(Ok(m)) => got.push((
                m.key().map(<[u8]>::to_vec),
                m.payload().unwrap_or_default().to_vec(),
                m.timestamp().to_millis(),
            )),
        }
    }
    // Nothing more than expected arrives.
    if let Some(Ok(m)) = consumer.poll(Duration::from_secs(1)) {
        panic!(
            "an extra message in {topic}: {:?}",
            String::from_utf8_lossy(m.payload().unwrap_or_default())
        );
    }
    got
}

fn run(pipeline: &str, input: &str, work: &Workdir, extra: &[&str]) -> weir_e2e::Finished {
    let dead = work.path("dead.jsonl").display().to_string();
    let input = format!("clicks={input}");
    let mut args = vec![
        "run",
        pipeline,
        "-q",
        "--input",
        &input,
        "--dead-letter",
        &dead,
    ];
    args.extend_from_slice(extra);
    weir(&args)
}

#[test]
fn the_topic_gets_the_file_sinks_records_in_order_keyed_by_ad() {
    let clicks = gen::clicks(4_000, 20, 23, 400, 4_000, 0.02, 0.003);
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let work = Workdir::new();
    let input = work.write_jsonl("clicks.jsonl", &records);

    let file = work.path("counts.jsonl").display().to_string();
    run(
        "examples/ad-clicks/pipeline.toml",
        &input,
        &work,
        &["--output", &format!("main={file}")],
    )
    .assert_success();
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() > 1_000, "enough records: {}", lines.len());

    let topic = unique_table("clicks-out");
    create_topic(&topic);
    let pipeline = ad_clicks_to(
        &work,
        "to-kafka.toml",
        &format!(
            "type = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\nproperties = {{ \"linger.ms\" = \"5\" }}",
            kafka_brokers()
        ),
    );
    run(&pipeline, &input, &work, &[]).assert_success();

    let got = read_topic(&topic, lines.len());
    for (i, ((key, payload, timestamp), line)) in got.iter().zip(&lines).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(payload),
            *line,
            "payload of message {i}"
        );
        let record: Value = serde_json::from_str(line).unwrap();
        let ad = record["ad_id"].as_str().expect("ad_id");
        assert_eq!(key.as_deref(), Some(ad.as_bytes()), "key of message {i}");
        let timestamp = timestamp.unwrap_or_else(|| panic!("message {i} has no timestamp"));
        assert_eq!(
            Value::String(datetime_millis(timestamp)),
            record["updated_at"],
            "timestamp of message {i}"
        );
    }
    assert_eq!(read_jsonl(&file).len(), got.len());
}

#[test]
fn an_unreachable_broker_fails_the_run_naming_it() {
    let clicks = gen::clicks(50, 3, 5, 400, 1_000, 0.0, 0.0);
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let work = Workdir::new();
    let input = work.write_jsonl("clicks.jsonl", &records);
    // Port 1 on loopback: nothing listens, connections are refused.
    let pipeline = ad_clicks_to(
        &work,
        "nowhere.toml",
        "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"clicks-out\"",
    );
    let started = Instant::now();
    let run = run(&pipeline, &input, &work, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("kafka topic \"clicks-out\" on 127.0.0.1:1: cannot reach the brokers"),
        "{}",
        run.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn undelivered_records_fail_the_run_naming_the_topic() {
    let clicks = gen::clicks(50, 3, 5, 400, 1_000, 0.0, 0.0);
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let work = Workdir::new();
    let input = work.write_jsonl("clicks.jsonl", &records);
    // A topic that does not exist and that the producer may not create: librdkafka gives
    // up on every record after message.timeout.ms.
    let topic = unique_table("never-created");
    let pipeline = ad_clicks_to(
        &work,
        "missing-topic.toml",
        &format!(
            "type = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\nproperties = {{ \"message.timeout.ms\" = 3000, \"allow.auto.create.topics\" = false }}",
            kafka_brokers()
        ),
    );
    let run = run(&pipeline, &input, &work, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let location = format!("kafka topic \"{topic}\" on {}: ", kafka_brokers());
    assert!(
        run.stderr.contains(&location)
            && run.stderr.contains("record(s) could not be delivered")
            && run.stderr.contains("Message timed out"),
        "{}",
        run.stderr
    );
}
