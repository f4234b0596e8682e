//! Scaling out on a consumer group (`weir run --group`): three processes on a
//! 6-partition input, one killed with `kill -9` mid-run and started again later, a
//! fourth added; the output, de-duplicated by the records' `weir-id`, equals that of a
//! single process on the same data, and every repeated id repeats the same record.

use std::collections::BTreeMap;
use std::path::Path;
use weir_e2e::gen::{self, Click};
use weir_e2e::group::{by_id, come_and_go, wait_until_committed, Process};
use weir_e2e::kafka::{create_topic, Outgoing};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, Workdir};

const PARTITIONS: i32 = 6;
const CLICKS: usize = 24_000;
/// The input arrives in this many slices, a little apart, so the processes come and go
/// while it is being read.
const SLICES: usize = 12;

fn pipeline(work: &Workdir, input: &str, output: &str) -> String {
    let text = format!(
        r#"
name = "scale-out"

[[source]]
name = "clicks"
type = "kafka"
brokers = "{brokers}"
topic = "{input}"
startup = "earliest"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "{udf}"

[checkpoint]
interval = "500ms"

[[sink]]
output = "main"
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
"#,
        brokers = kafka_brokers(),
        udf = component("change-only-counter").display()
    );
    work.write(&format!("{output}.toml"), &text)
}

#[test]
fn processes_come_and_go_and_the_output_is_that_of_one_process() {
    let work = Workdir::new();
    let input = unique_table("scale_in");
    create_topic(&input, PARTITIONS);
    let clicks = gen::clicks(CLICKS, 60, 5, 300, 3_000, 0.01, 0.002);
    let messages: Vec<Outgoing> = clicks
        .iter()
        .map(|c: &Click| {
            Outgoing::new(c.to_json().to_string())
                .key(c.ad.clone())
                .partition(partition_of(&c.ad))
        })
        .collect();
    let mut ends = BTreeMap::new();
    for m in &messages {
        *ends.entry(m.partition).or_insert(0) += 1;
    }

    // The scaled run first, while the input is produced slice by slice.
    let scaled_out = unique_table("scale_out");
    create_topic(&scaled_out, 1);
    let scaled = pipeline(&work, &input, &scaled_out);
    let group = unique_table("scaled");
    let log = |name: &str| work.path(&format!("{name}.log"));
    let (running, logs) = come_and_go(&scaled, &group, &input, &messages, SLICES, log, |i| {
        if i == 10 {
            status_names_every_task(&group);
        }
    });
    let log_refs: Vec<&Path> = logs.iter().map(|p| p.as_path()).collect();
    wait_until_committed(&group, &input, &ends, &log_refs);
    for process in running {
        process.stop();
    }

    // One process on all of it.
    let single_out = unique_table("single_out");
    create_topic(&single_out, 1);
    let single = pipeline(&work, &input, &single_out);
    let single_group = unique_table("single");
    let one = Process::start(&single, &single_group, &log("single"));
    wait_until_committed(&single_group, &input, &ends, &[&log("single")]);
    one.stop();

    let (expected, _) = by_id(&single_out);
    if expected.is_empty() {
        eprintln!(
            "{}",
            std::fs::read_to_string(log("single")).unwrap_or_default()
        );
    }
    let (got, repeats) = by_id(&scaled_out);
    assert!(
        expected.len() > CLICKS / 2,
        "the counter emitted {} records",
        expected.len()
    );
    assert_eq!(got.len(), expected.len(), "distinct records");
    assert!(
        got == expected,
        "the scaled output differs from the single process's"
    );
    eprintln!(
        "scale-out: {} distinct records, {repeats} repeats dropped by id",
        got.len()
    );
}

/// `weir status --group` shows live processes owning the six tasks between them, and
/// each task's committed offset.
fn status_names_every_task(group: &str) {
    let run = weir_e2e::weir(&["status", "--group", group, "--brokers", &kafka_brokers()]);
    run.assert_success();
    let owned: Vec<i32> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once(": tasks "))
        .flat_map(|(_, tasks)| {
            tasks
                .split(", ")
                .map(|t| t.parse::<i32>().expect("a task number"))
                .collect::<Vec<_>>()
        })
        .collect();
    // Right after a rebalance a task may be between two processes: at most six, no twice.
    let mut sorted = owned.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        owned.len(),
        "a task owned twice:\n{}",
        run.stdout
    );
    assert!(owned.len() <= 6 && !owned.is_empty(), "{}", run.stdout);
    assert!(run.stdout.contains("committed"), "{}", run.stdout);
    eprintln!("{}", run.stdout);
}

/// The partition Kafka's default partitioner would choose is not needed: the test puts
/// each ad in a partition of its own choosing, the same for every click of the ad.
fn partition_of(ad: &str) -> i32 {
    let n: i32 = ad.trim_start_matches("ad-").parse().unwrap_or(0);
    n % PARTITIONS
}
