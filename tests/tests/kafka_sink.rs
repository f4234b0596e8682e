//! The Kafka sink against a real broker (tansu, started by scripts/services.sh): the seed
//! 000 pipeline with its main output produced to a topic puts exactly the file sink's
//! records there, in order, keyed by ad, stamped with the records' event time and
//! numbered by their `weir-id` header (`ad-clicks/main/<n>`); a broker
//! that cannot be reached fails the run with an error naming it, without hanging.

use serde_json::Value;
use std::time::{Duration, Instant};
use weir_e2e::gen::{self, Click};
use weir_e2e::kafka::{create_topic, read_topic};
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
    create_topic(&topic, 1);
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
    for (i, (message, line)) in got.iter().zip(&lines).enumerate() {
        assert_eq!(message.payload_str(), line, "payload of message {i}");
        let record: Value = serde_json::from_str(line).unwrap();
        let ad = record["ad_id"].as_str().expect("ad_id");
        assert_eq!(
            message.key.as_deref(),
            Some(ad.as_bytes()),
            "key of message {i}"
        );
        let timestamp = message
            .timestamp
            .unwrap_or_else(|| panic!("message {i} has no timestamp"));
        assert_eq!(
            Value::String(datetime_millis(timestamp)),
            record["updated_at"],
            "timestamp of message {i}"
        );
        let id = format!("ad-clicks/main/{i}");
        assert_eq!(message.header("weir-id"), Some(&*id), "id of message {i}");
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
