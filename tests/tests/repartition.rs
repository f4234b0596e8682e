//! Scaling out a source that is not partitioned by the pipeline's key
//! (`repartition = true`): taxi rides spread round-robin over a 6-partition topic,
//! counted per pickup zone in tumbling windows. Three `weir run --group` processes, one
//! killed with `kill -9` mid-run and started again, a fourth added: the output,
//! de-duplicated by `weir-id`, equals a single group process's, and its windows equal
//! those of one plain `weir run` over the whole topic (which needs no repartitioning).
//! Malformed rides reach the dead letters once each, naming the partition and offset
//! they were produced at.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use weir_e2e::gen::Rng;
use weir_e2e::group::{
    by_id, come_and_go, wait_until_committed, wait_until_repartition_read, Process,
};
use weir_e2e::kafka::{create_topic, read_all, Outgoing};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, read_jsonl, Workdir};

const PARTITIONS: i32 = 6;
const RIDES: usize = 18_000;
const ZONES: u64 = 40;
const SLICES: usize = 12;
/// The zone of the last ride of each partition, an hour after the others: it moves every
/// partition's watermark past the real windows, so that they all fire.
const FLUSH_ZONE: u64 = 999;

/// `group = true`: the pipeline as the group runs it; `false`: one plain bounded run.
fn pipeline(work: &Workdir, name: &str, input: &str, output: &str, group: bool) -> String {
    let (sinks, bounded) = if group {
        (
            format!(
                r#"
[[sink]]
output = "main"
type = "kafka"
brokers = "{brokers}"
topic = "{output}"

[[sink]]
output = "late"
type = "kafka"
brokers = "{brokers}"
topic = "{output}-late"
"#,
                brokers = kafka_brokers()
            ),
            "repartition = true",
        )
    } else {
        (
            format!(
                r#"
[[sink]]
output = "main"
type = "file"
path = "{output}.jsonl"

[[sink]]
output = "late"
type = "file"
path = "{output}-late.jsonl"
"#
            ),
            "bounded = true",
        )
    };
    let text = format!(
        r#"
name = "zones"

[[source]]
name = "rides"
type = "kafka"
brokers = "{brokers}"
topic = "{input}"
startup = "earliest"
{bounded}
key = "PULocationID"
timestamp = "tpep_pickup_datetime"
timestamp_format = "epoch_ms"
out_of_orderness = "5s"
idle_timeout = "60s"

[udf]
path = "{udf}"

[udf.config]
size = "1m"
allowed_lateness = "10m"

[checkpoint]
interval = "500ms"

[dead_letter]
path = "{dead}"
{sinks}"#,
        brokers = kafka_brokers(),
        udf = component("tumbling-window").display(),
        dead = work.path(&format!("{name}.dead.jsonl")).display(),
    );
    work.write(&format!("{name}.toml"), &text)
}

/// Rides in event-time order but for up to 4 s of jitter (within the 5 s
/// out-of-orderness, so none is late), dealt round-robin over the partitions: every
/// partition holds every zone. Then two malformed ones, and a flush ride per partition.
fn rides() -> Vec<Outgoing> {
    let mut rng = Rng::new(11);
    let mut clock = 1_761_955_200_000i64;
    let ride = |zone: u64, ts: i64, cents: u64| {
        json!({
            "PULocationID": zone,
            "total_amount": format!("{}.{:02}", cents / 100, cents % 100),
            "tpep_pickup_datetime": ts,
        })
        .to_string()
    };
    let mut messages: Vec<Outgoing> = (0..RIDES)
        .map(|i| {
            clock += rng.below(1_500) as i64;
            let ts = clock - rng.below(4_000) as i64;
            let zone = 1 + rng.below(ZONES);
            let payload = ride(zone, ts, 300 + rng.below(9_000));
            // A key that is not the zone, and partitions that do not follow it.
            Outgoing::new(payload)
                .key(format!("ride-{i}"))
                .partition(i as i32 % PARTITIONS)
        })
        .collect();
    let missing_zone = json!({"total_amount": "9.99", "tpep_pickup_datetime": clock}).to_string();
    messages.insert(RIDES / 2, Outgoing::new("not json at all").partition(2));
    messages.insert(RIDES / 3, Outgoing::new(missing_zone).partition(4));
    for partition in 0..PARTITIONS {
        let flush = ride(FLUSH_ZONE, clock + 3_600_000, 0);
        messages.push(Outgoing::new(flush).partition(partition));
    }
    messages
}

/// Waits until the group has read all of `input` and all of its repartition topic;
/// returns how many records the repartitioners sent twice (after a restart), which the
/// tasks must have dropped.
fn wait_until_done(group: &str, input: &str, ends: &BTreeMap<i32, i64>, logs: &[&Path]) -> usize {
    wait_until_committed(group, input, ends, logs);
    // The repartitioners have sent (and committed after) their last markers.
    let topic = format!("{group}.zones.repartition-rides");
    let read = wait_until_repartition_read(group, &topic, logs);
    assert_eq!(
        read.ends.len(),
        PARTITIONS as usize,
        "every task got records"
    );
    read.resent
}

/// The dead letters of every task of a group run (`<stem>.p<N>.jsonl`), as
/// (partition, offset, reason), once each.
fn group_dead_letters(work: &Workdir, name: &str) -> BTreeSet<(String, u64, String)> {
    let mut letters = BTreeSet::new();
    for task in 0..PARTITIONS {
        let path = work.path(&format!("{name}.dead.p{task}.jsonl"));
        if path.exists() {
            letters.extend(read_jsonl(&path).iter().map(letter));
        }
    }
    letters
}

fn letter(v: &Value) -> (String, u64, String) {
    (
        v["partition"].as_str().unwrap_or_default().to_string(),
        v["offset"].as_u64().unwrap_or(u64::MAX),
        v["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn a_source_not_partitioned_by_the_key_is_repartitioned_and_nothing_is_lost_or_doubled() {
    let work = Workdir::new();
    let input = unique_table("rides_in");
    create_topic(&input, PARTITIONS);
    let messages = rides();
    let mut ends = BTreeMap::new();
    for m in &messages {
        *ends.entry(m.partition).or_insert(0) += 1;
    }
    let log = |name: &str| work.path(&format!("{name}.log"));

    // Scaled: three processes, one killed mid-run and started again, a fourth.
    let scaled_out = unique_table("rides_scaled");
    create_topic(&scaled_out, 1);
    create_topic(&format!("{scaled_out}-late"), 1);
    let scaled = pipeline(&work, "scaled", &input, &scaled_out, true);
    let group = unique_table("rescaled");
    let (running, logs) = come_and_go(&scaled, &group, &input, &messages, SLICES, log, |_| {});
    let log_refs: Vec<&Path> = logs.iter().map(|p| p.as_path()).collect();
    let resent = wait_until_done(&group, &input, &ends, &log_refs);
    // `weir status` shows each task's repartitioner and its reading through the topic.
    let status = weir_e2e::weir(&["status", "--group", &group, "--brokers", &kafka_brokers()]);
    status.assert_success();
    for task in 0..PARTITIONS {
        for part in [
            format!("  task {task} repartitioner ({input}[{task}]): committed "),
            format!("  task {task} via ({group}.zones.repartition-rides[{task}]): committed "),
        ] {
            assert!(
                status.stdout.contains(&part),
                "no {part:?} in:\n{}",
                status.stdout
            );
        }
    }
    for process in running {
        process.stop();
    }

    // One group process on all of it.
    let single_out = unique_table("rides_single");
    create_topic(&single_out, 1);
    create_topic(&format!("{single_out}-late"), 1);
    let single = pipeline(&work, "single", &input, &single_out, true);
    let single_group = unique_table("resingle");
    let one = Process::start(&single, &single_group, &log("single"));
    wait_until_done(&single_group, &input, &ends, &[&log("single")]);
    one.stop();

    // One plain run, which reads every partition itself.
    let plain_out = work.path("plain").display().to_string();
    let plain = pipeline(&work, "plain", &input, &plain_out, false);
    weir_e2e::weir(&["run", &plain]).assert_success();

    let (expected, _) = by_id(&single_out);
    let (got, repeats) = by_id(&scaled_out);
    assert!(expected.len() > 5_000, "{} windows", expected.len());
    assert_eq!(got.len(), expected.len(), "distinct records");
    assert!(
        got == expected,
        "the scaled output differs from the single process's"
    );

    let windows: BTreeSet<String> = expected.values().cloned().collect();
    let zone = format!("\"PULocationID\":{FLUSH_ZONE}");
    let plain_windows: BTreeSet<String> = std::fs::read_to_string(format!("{plain_out}.jsonl"))
        .expect("plain output")
        .lines()
        .filter(|l| !l.contains(&zone))
        .map(str::to_string)
        .collect();
    assert_eq!(windows.len(), expected.len(), "each window once");
    assert!(
        windows == plain_windows,
        "the group's windows differ from one plain run's: {} vs {}",
        windows.len(),
        plain_windows.len()
    );
    assert!(
        read_all(&format!("{scaled_out}-late")).is_empty(),
        "no ride was late"
    );

    // The malformed rides, once each, where they were produced.
    let plain_letters: BTreeSet<_> = read_jsonl(work.path("plain.dead.jsonl"))
        .iter()
        .map(letter)
        .collect();
    let places: Vec<(String, u64)> = plain_letters
        .iter()
        .map(|(p, o, _)| (p.clone(), *o))
        .collect();
    assert_eq!(places.len(), 2, "{plain_letters:?}");
    assert!(
        places[0].0 == format!("{input}[2]") || places[1].0 == format!("{input}[2]"),
        "{places:?}"
    );
    assert_eq!(group_dead_letters(&work, "scaled"), plain_letters);
    assert_eq!(group_dead_letters(&work, "single"), plain_letters);
    // A repartitioner that restarts goes on from its last commit (about a second back),
    // not from the start of its partition.
    assert!(
        resent <= RIDES / SLICES,
        "{resent} records re-sent after the restart: more than one slice of the input"
    );
    eprintln!(
        "repartition: {} windows, {resent} records re-sent through the repartition topic and dropped, {repeats} output repeats dropped by id",
        got.len()
    );
}
