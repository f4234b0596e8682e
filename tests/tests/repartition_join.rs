//! A two-input pipeline in a group where one input is keyed by its producers and the other
//! is not: `left` is produced by Kafka's default partitioner on the join key (as a Java
//! producer would), `right` round-robin with `repartition = true`. The repartition topic
//! uses the same partitioner, so both inputs of a key meet in one task; the joined,
//! unmatched and duplicate rows of two group processes equal those of one plain run.

use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use weir_e2e::gen::Rng;
use weir_e2e::group::{by_id, wait_until_committed, wait_until_repartition_read, Process};
use weir_e2e::kafka::{committed_offsets, create_topic, produce, Outgoing};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, Workdir};

const PARTITIONS: i32 = 6;
const ROWS: u64 = 3_000;
/// Row ids of the flush records (one per partition and side, two hours on): they move
/// every input's watermark past the real rows' expiries.
const FLUSH_ROWS: u64 = 1_000_000;
const OUTPUTS: [&str; 3] = ["main", "duplicates", "unmatched"];

fn source(name: &str, topic: &str, extra: &str) -> String {
    format!(
        r#"
[[source]]
name = "{name}"
input = "{name}"
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"
startup = "earliest"
{extra}
key = "row_id"
timestamp = "ts"
timestamp_format = "epoch_ms"
out_of_orderness = "1s"
"#,
        brokers = kafka_brokers()
    )
}

/// The pipeline in a group (outputs to Kafka topics `<out>-<output>`) or plain (bounded,
/// outputs to files `<out>-<output>.jsonl`).
fn pipeline(work: &Workdir, name: &str, left: &str, right: &str, out: &str, group: bool) -> String {
    let mut text = String::from("name = \"join\"\n");
    if group {
        text += &source("left", left, "");
        text += &source("right", right, "repartition = true");
    } else {
        text += &source("left", left, "bounded = true");
        text += &source("right", right, "bounded = true");
    }
    text += &format!(
        "\n[udf]\npath = \"{}\"\n\n[udf.config]\nttl = \"10m\"\n\n[checkpoint]\ninterval = \"500ms\"\n",
        component("stream-join").display()
    );
    for output in OUTPUTS {
        text += &if group {
            format!(
                "\n[[sink]]\noutput = \"{output}\"\ntype = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{out}-{output}\"\n",
                kafka_brokers()
            )
        } else {
            format!("\n[[sink]]\noutput = \"{output}\"\ntype = \"file\"\npath = \"{out}-{output}.jsonl\"\n")
        };
    }
    work.write(&format!("{name}.toml"), &text)
}

/// Left rows keyed by their row id; right rows (most rows have one, within a minute)
/// round-robin; and the flush rows.
fn rows() -> (Vec<Outgoing>, Vec<Outgoing>) {
    let mut rng = Rng::new(5);
    let base = 1_795_946_400_000i64;
    let row = |id: u64, data: String, ts: i64| {
        json!({"row_id": id, "row_data": data, "ts": ts}).to_string()
    };
    let mut left = Vec::new();
    let mut right = Vec::new();
    for id in 0..ROWS {
        let ts = base + id as i64 * 1_000;
        left.push(
            Outgoing::new(row(id, format!("l{id}"), ts))
                .key(id.to_string())
                .by_key(),
        );
        if !rng.chance(0.1) {
            let later = ts + rng.below(60_000) as i64;
            right.push(Outgoing::new(row(id, format!("r{id}"), later)).partition((id % 6) as i32));
        }
    }
    let end = base + ROWS as i64 * 1_000 + 7_200_000;
    for p in 0..PARTITIONS {
        let id = FLUSH_ROWS + p as u64;
        left.push(Outgoing::new(row(id, "flush".into(), end)).partition(p));
        right.push(Outgoing::new(row(id + 100, "flush".into(), end)).partition(p));
    }
    // The right side in time order across partitions, as it was produced.
    right.sort_by_key(|m| {
        serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap()["ts"].as_i64()
    });
    (left, right)
}

fn is_flush(payload: &str) -> bool {
    let v: serde_json::Value = serde_json::from_str(payload).expect("JSON");
    v["row_id"].as_u64().is_some_and(|id| id >= FLUSH_ROWS)
}

fn sorted(payloads: impl Iterator<Item = String>) -> Vec<String> {
    let mut all: Vec<String> = payloads.filter(|p| !is_flush(p)).collect();
    all.sort();
    all
}

#[test]
fn a_keyed_input_and_a_repartitioned_one_meet_in_the_same_task() {
    let work = Workdir::new();
    let (left_topic, right_topic) = (unique_table("join_left"), unique_table("join_right"));
    create_topic(&left_topic, PARTITIONS);
    create_topic(&right_topic, PARTITIONS);
    let (left, right) = rows();
    produce(&left_topic, &left);
    produce(&right_topic, &right);

    let out = unique_table("joined");
    for output in OUTPUTS {
        create_topic(&format!("{out}-{output}"), 1);
    }
    let grouped = pipeline(&work, "grouped", &left_topic, &right_topic, &out, true);
    let group = unique_table("joiners");
    let log = |name: &str| work.path(&format!("{name}.log"));
    let a = Process::start(&grouped, &group, &log("a"));
    let b = Process::start(&grouped, &group, &log("b"));
    let logs = [log("a"), log("b")];
    let log_refs: Vec<&Path> = logs.iter().map(|p| p.as_path()).collect();
    // Where the left rows went is the partitioner's choice: wait for all of them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while committed_offsets(&format!("{group}.offsets"), &left_topic)
        .values()
        .sum::<i64>()
        < left.len() as i64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the left rows were not all read"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let mut ends = BTreeMap::new();
    for m in &right {
        *ends.entry(m.partition).or_insert(0) += 1;
    }
    wait_until_committed(&group, &right_topic, &ends, &log_refs);
    wait_until_repartition_read(
        &group,
        &format!("{group}.join.repartition-right"),
        &log_refs,
    );
    a.stop();
    b.stop();

    let plain_out = work.path("plain").display().to_string();
    let plain = pipeline(&work, "plain", &left_topic, &right_topic, &plain_out, false);
    weir_e2e::weir(&["run", &plain]).assert_success();

    for output in OUTPUTS {
        let (records, _) = by_id(&format!("{out}-{output}"));
        let got = sorted(records.into_values());
        let text =
            std::fs::read_to_string(format!("{plain_out}-{output}.jsonl")).unwrap_or_default();
        let expected = sorted(text.lines().map(str::to_string));
        if output == "main" {
            assert!(expected.len() > 2_500, "{} joined rows", expected.len());
        }
        assert_eq!(got.len(), expected.len(), "{output}: records");
        assert!(
            got == expected,
            "{output}: the group's records differ from the plain run's"
        );
    }
}
