//! A broker outage in the middle of a live run. The broker here is librdkafka's mock
//! cluster, a Kafka broker running inside the test process on a real socket, which the
//! test can take down and bring back (tansu keeps its data in memory, so restarting it
//! would lose the topics). `weir` reads clicks from it and writes the seed 000 counts back
//! to it; the broker goes away for a few seconds, new clicks arrive once it is back, and
//! in the end the output topic holds exactly the records a file run gives on the same
//! clicks: nothing lost, nothing doubled.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::gen::{self, Click};
use weir_e2e::{datetime_millis, read_jsonl, repo_root, weir, weir_bin, Workdir};

fn produce(brokers: &str, topic: &str, clicks: &[Click]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    for click in clicks {
        let payload = click.to_json().to_string();
        let mut record = BaseRecord::<(), _>::to(topic).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("delivered");
}

/// Reads `topic` from the start until no message has come for `quiet`, or `wanted`
/// messages are in.
fn read_all(brokers: &str, topic: &str, wanted: usize, deadline: Duration) -> Vec<Value> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "outage-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&list).unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < wanted && started.elapsed() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.push(serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON"));
        }
    }
    got
}

#[test]
fn a_broker_outage_mid_run_loses_and_doubles_nothing() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let brokers = mock.bootstrap_servers();
    mock.create_topic("clicks", 1, 1).unwrap();
    mock.create_topic("counts", 1, 1).unwrap();

    // Clicks before and after the outage; the last one is a day later, so every window
    // before it has closed by the time the run is stopped.
    let mut clicks = gen::clicks(3_000, 50, 9, 200, 500, 0.0, 0.0);
    let last = clicks.last().unwrap().ts + 86_400_000;
    clicks.push(Click {
        ad: "sentinel".into(),
        ts: last,
    });
    let (before, after) = clicks.split_at(1_500);

    let work = Workdir::new();
    // What a file run gives on the same clicks, without the sentinel's own expiry (which
    // only the end of a file input reaches).
    let file_input = work.write_jsonl(
        "clicks.jsonl",
        &clicks.iter().map(Click::to_json).collect::<Vec<_>>(),
    );
    let file_output = work.path("expected.jsonl");
    weir(&[
        "run",
        "examples/ad-clicks/pipeline.toml",
        "-q",
        "--no-checkpoints",
        "--input",
        &format!("clicks={file_input}"),
        "--output",
        &format!("main={}", file_output.display()),
        "--dead-letter",
        &work.path("dead.jsonl").display().to_string(),
    ])
    .assert_success();
    let mut expected = read_jsonl(&file_output);
    let sentinel_expiry = expected.pop().unwrap();
    assert_eq!(sentinel_expiry["ad_id"], "sentinel");
    assert_eq!(sentinel_expiry["clicks"], 0);
    assert_eq!(
        sentinel_expiry["updated_at"],
        datetime_millis(last + 300_000).as_str()
    );

    let pipeline = work.write(
        "pipeline.toml",
        &format!(
            r#"name = "outage"
[[source]]
name = "clicks"
type = "kafka"
brokers = "{brokers}"
topic = "clicks"
startup = "earliest"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "{udf}"
[udf.config]
window = "5m"

[[sink]]
output = "main"
type = "kafka"
brokers = "{brokers}"
topic = "counts"
"#,
            udf = weir_e2e::component("change-only-counter").display()
        ),
    );
    produce(&brokers, "clicks", before);
    let log = work.path("weir.log");
    let mut child = Command::new(weir_bin())
        .current_dir(repo_root())
        .args(["run", &pipeline, "--checkpoint-interval", "500ms"])
        .arg("--state-dir")
        .arg(work.path("state"))
        .arg("--dead-letter")
        .arg(work.path("kafka-dead.jsonl"))
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start weir");

    // Some output arrives; then the broker goes away for three seconds.
    assert!(!read_all(&brokers, "counts", 1, Duration::from_secs(30)).is_empty());
    mock.broker_down(-1).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        child.try_wait().unwrap().is_none(),
        "weir survives the outage"
    );
    mock.broker_up(-1).unwrap();
    produce(&brokers, "clicks", after);

    let got = read_all(&brokers, "counts", expected.len(), Duration::from_secs(60));
    // Nothing more comes.
    std::thread::sleep(Duration::from_secs(1));
    let all = read_all(
        &brokers,
        "counts",
        expected.len() + 1,
        Duration::from_secs(2),
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert_eq!(got.len(), expected.len(), "{stderr}");
    assert!(got == expected, "the counts differ from the file run's");
    assert_eq!(all.len(), expected.len(), "no duplicates");
    assert!(
        stderr.contains("waiting for the brokers to come back"),
        "the outage is logged, not silent: {stderr}"
    );
}
