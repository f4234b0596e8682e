//! Crash safety: `weir run` killed with SIGKILL at random moments and restarted each time
//! from the same state directory ends with exactly what an uninterrupted run writes —
//! the output files byte for byte (appended records, upsert tables and their changelogs,
//! dead letters) and the PostgreSQL table row for row. Nothing is lost, nothing doubled.
//!
//! Each run checkpoints every 100 ms; a kill lands somewhere between two checkpoints, so
//! the restart must cut the files back, seek the inputs and restore state and timers.
//! A Kafka topic cannot be cut back: there the replay re-sends byte-identical records with
//! the same `weir-id` headers, and the test de-duplicates by id as a consumer would.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::crash::{at_parallelisms, CrashLoop, Crashes};
use weir_e2e::gen::{self, rides, Click};
use weir_e2e::services::{
    file_revenue_rows, kafka_brokers, revenue_rows, taxi_revenue_to_postgres, unique_table,
};
use weir_e2e::{repo_root, weir, weir_bin, Workdir};

/// Runs `weir run ARGS` with checkpoints in `state`, killing it with SIGKILL at a random
/// moment within `span` (what an uninterrupted run takes) up to `kills` times (fewer if a
/// run completes first), then runs it to completion.
fn run_with_crashes(
    args: &[String],
    state: &Path,
    span: Duration,
    seed: u64,
    kills: usize,
) -> Crashes {
    run_with_crashes_at(args, &[], state, span, seed, kills)
}

/// [`run_with_crashes`], run `i` (the last one included) at `--parallelism
/// parallelisms[i % len]` (none given: the pipeline's).
fn run_with_crashes_at(
    args: &[String],
    parallelisms: &[usize],
    state: &Path,
    span: Duration,
    seed: u64,
    kills: usize,
) -> Crashes {
    CrashLoop {
        args,
        each_run: &at_parallelisms(parallelisms),
        state,
        watch: state,
        span,
        seed,
        kills,
    }
    .run()
}

/// The lines of `text` grouped by their `ad_id`, each ad's in their order, as one text.
fn per_ad(text: &str) -> String {
    let mut ads: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        ads.entry(v["ad_id"].to_string()).or_default().push(line);
    }
    ads.into_values()
        .flatten()
        .map(|l| format!("{l}\n"))
        .collect()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Where two outputs first differ, for failure messages.
fn first_difference(actual: &str, expected: &str) -> String {
    let (a, e): (Vec<_>, Vec<_>) = (actual.lines().collect(), expected.lines().collect());
    match a.iter().zip(&e).position(|(x, y)| x != y) {
        Some(i) => format!(
            "line {}: {:?} instead of {:?} (lines {}, {} expected)",
            i + 1,
            a[i],
            e[i],
            a.len(),
            e.len()
        ),
        None => format!("{} lines instead of {}", a.len(), e.len()),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn seed_000_counter_output_survives_kill_9() {
    counter_output_survives_kill_9(&[]);
}

/// The same in keyed shards whose number changes from run to run (4, 2, 1, 3, 2):
/// each restore takes the checkpoint of another parallelism. The output file holds
/// each ad's records exactly as the uninterrupted run at parallelism 1 wrote them.
#[test]
fn seed_000_counter_output_in_shards_survives_kill_9() {
    counter_output_survives_kill_9(&[4, 2, 1, 3, 2]);
}

/// The counter killed at random moments (each run at the next of `parallelisms`, or
/// the pipeline's 1): its output equals the uninterrupted run's (per ad, in shards).
fn counter_output_survives_kill_9(parallelisms: &[usize]) {
    let work = Workdir::new();
    // Enough clicks for a run of a second or two; some late, some not JSON.
    let clicks = gen::clicks(400_000, 5_000, 21, 20, 2_000, 0.01, 0.0005);
    let mut lines: Vec<String> = clicks
        .iter()
        .map(|c| Click::to_json(c).to_string())
        .collect();
    for i in (0..lines.len()).step_by(50_000) {
        lines[i] = format!("not json {i}");
    }
    let input = work.write("clicks.jsonl", &(lines.join("\n") + "\n"));

    let run_args = |out: &str| {
        args(&[
            "run",
            "examples/ad-clicks/pipeline.toml",
            "--input",
            &format!("clicks={input}"),
            "--output",
            &format!("main={}", work.path(&format!("{out}.jsonl")).display()),
            "--dead-letter",
            &work
                .path(&format!("{out}.dead.jsonl"))
                .display()
                .to_string(),
        ])
    };
    let mut uninterrupted: Vec<String> = run_args("expected");
    uninterrupted.extend(args(&["-q", "--no-checkpoints"]));
    let started = Instant::now();
    weir(&uninterrupted.iter().map(String::as_str).collect::<Vec<_>>()).assert_success();
    let span = started.elapsed();

    let crashes = run_with_crashes_at(
        &run_args("crashed"),
        parallelisms,
        &work.path("state"),
        span,
        7,
        4,
    );
    assert!(
        crashes.restored >= 1,
        "at least one kill must land after a checkpoint: {crashes:?}"
    );
    let mut expected = read(&work.path("expected.jsonl"));
    let mut actual = read(&work.path("crashed.jsonl"));
    if !parallelisms.is_empty() {
        // Shards interleave the ads differently: each ad's records, in order.
        (expected, actual) = (per_ad(&expected), per_ad(&actual));
    }
    assert!(expected.lines().count() > 400_000);
    assert!(
        actual == expected,
        "after {crashes:?}: {}",
        first_difference(&actual, &expected)
    );
    assert_eq!(
        read(&work.path("crashed.dead.jsonl")),
        read(&work.path("expected.dead.jsonl"))
    );
    assert_eq!(read(&work.path("expected.dead.jsonl")).lines().count(), 8);
    assert!(
        !std::fs::read_dir(work.path("state"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".weir")),
        "a completed run leaves no checkpoint behind"
    );
}

#[test]
fn seed_001_upsert_table_changelog_and_postgres_survive_kill_9() {
    let work = Workdir::new();
    // Rides, a few of them later than the hour of allowed lateness (they go to `late`).
    let mut all = rides(300_000, 5);
    for ride in all.iter_mut().step_by(997) {
        let ts = ride["tpep_pickup_datetime"].as_i64().unwrap();
        ride["tpep_pickup_datetime"] = (ts - 3 * 3_600_000).into();
    }
    let input = work.write_jsonl("rides.jsonl", &all);

    // Files: the upsert table, its changelog and the late output.
    let file_args = |out: &str| {
        args(&[
            "run",
            "examples/taxi-revenue/pipeline.toml",
            "--input",
            &format!("rides={input}"),
            "--output",
            &format!(
                "main={}",
                work.path(&format!("{out}.table.jsonl")).display()
            ),
            "--output",
            &format!("late={}", work.path(&format!("{out}.late.jsonl")).display()),
            "--dead-letter",
            &work
                .path(&format!("{out}.dead.jsonl"))
                .display()
                .to_string(),
        ])
    };
    let mut uninterrupted = file_args("expected");
    uninterrupted.extend(args(&["-q", "--no-checkpoints"]));
    let started = Instant::now();
    weir(&uninterrupted.iter().map(String::as_str).collect::<Vec<_>>()).assert_success();
    let span = started.elapsed();
    let crashes = run_with_crashes(
        &file_args("crashed"),
        &work.path("state-files"),
        span,
        11,
        4,
    );
    assert!(crashes.restored >= 1, "{crashes:?}");
    for suffix in ["table.jsonl", "late.jsonl"] {
        let expected = read(&work.path(&format!("expected.{suffix}")));
        assert!(!expected.is_empty(), "{suffix} is empty");
        let actual = read(&work.path(&format!("crashed.{suffix}")));
        assert!(
            actual == expected,
            "{suffix} differs after {crashes:?}: {}",
            first_difference(&actual, &expected)
        );
    }

    // PostgreSQL: upserts are idempotent, so the replays converge on the same table.
    let table = unique_table("revenue_crash");
    let pipeline = taxi_revenue_to_postgres(&work, &table);
    let pg_args = args(&[
        "run",
        &pipeline,
        "--input",
        &format!("rides={input}"),
        "--output",
        &format!("late={}", work.path("pg.late.jsonl").display()),
        "--dead-letter",
        &work.path("pg.dead.jsonl").display().to_string(),
    ]);
    let crashes = run_with_crashes(&pg_args, &work.path("state-pg"), span, 13, 3);
    assert!(crashes.restored >= 1, "{crashes:?}");
    let expected: std::collections::BTreeSet<String> = file_revenue_rows(&work, &input);
    assert!(expected.len() > 100, "{} windows", expected.len());
    assert_eq!(revenue_rows(&table), expected);
    assert_eq!(
        read(&work.path("pg.late.jsonl")),
        read(&work.path("expected.late.jsonl"))
    );
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_for_the_one_before() {
    let work = Workdir::new();
    let clicks = gen::clicks(300_000, 2_000, 3, 20, 1_000, 0.0, 0.0);
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let input = work.write_jsonl("clicks.jsonl", &records);
    let state = work.path("state");
    let run_args = |out: &str| {
        args(&[
            "run",
            "examples/ad-clicks/pipeline.toml",
            "--input",
            &format!("clicks={input}"),
            "--output",
            &format!("main={}", work.path(out).display()),
            "--dead-letter",
            &work.path("dead.jsonl").display().to_string(),
        ])
    };
    let mut uninterrupted = run_args("expected.jsonl");
    uninterrupted.extend(args(&["-q", "--no-checkpoints"]));
    weir(&uninterrupted.iter().map(String::as_str).collect::<Vec<_>>()).assert_success();

    // Kill a run once it has written at least two checkpoints, then flip a byte in the
    // newest.
    let mut child = Command::new(weir_bin())
        .args(run_args("crashed.jsonl"))
        .args(["--checkpoint-interval", "50ms", "-q", "--state-dir"])
        .arg(&state)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let checkpoints = || -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(&state)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "weir"));
        files.sort();
        files
    };
    let started = Instant::now();
    while checkpoints().len() < 2 && child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let files = checkpoints();
    assert!(files.len() >= 2, "the run ended before two checkpoints");
    let newest = files.last().unwrap();
    let mut bytes = std::fs::read(newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(newest, bytes).unwrap();

    let mut resume: Vec<String> = run_args("crashed.jsonl");
    resume.extend(args(&["--state-dir", &state.display().to_string()]));
    let finished = weir(&resume.iter().map(String::as_str).collect::<Vec<_>>());
    finished.assert_success();
    assert!(
        finished.stderr.contains("cannot be used") && finished.stderr.contains("checksum"),
        "the damaged checkpoint is reported: {}",
        finished.stderr
    );
    assert!(finished.stderr.contains("resuming from checkpoint"));
    assert!(read(&work.path("crashed.jsonl")) == read(&work.path("expected.jsonl")));
}

/// A Kafka record as the test compares it: key, payload, timestamp.
type Produced = (Option<Vec<u8>>, String, Option<i64>);

/// Every message of partition 0 of `topic` with its weir-id, read until nothing new has
/// come for two seconds.
fn read_topic_ids(topic: &str) -> Vec<(String, Produced)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", "crash-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&list).unwrap();
    let mut got = Vec::new();
    let mut last = Instant::now();
    let started = Instant::now();
    while last.elapsed() < Duration::from_secs(2) && started.elapsed() < Duration::from_secs(120) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let id = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "weir-id"))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8(v.to_vec()).unwrap())
                .expect("every record has a weir-id header");
            let payload = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
            let key = m.key().map(<[u8]>::to_vec);
            got.push((id, (key, payload, m.timestamp().to_millis())));
            last = Instant::now();
        }
    }
    got
}

#[test]
fn seed_000_kafka_output_deduplicates_by_weir_id_after_kill_9() {
    kafka_output_survives_kill_9("crash-to-kafka", &[]);
}

/// Like `seed_000_kafka_output_deduplicates_by_weir_id_after_kill_9`, in keyed shards
/// whose number changes from run to run (2, 4, 2, ...): the records of each key group
/// are numbered on their own (`<pipeline>/<output>/g<group>.<n>`), so every replayed
/// record comes back with the id it had, and each key's records equal the file run's.
#[test]
fn seed_000_kafka_output_in_shards_deduplicates_by_weir_id_after_kill_9() {
    kafka_output_survives_kill_9("crash-to-kafka-in-shards", &[2, 4]);
}

/// The counter into a Kafka topic, killed at random moments (each run at the next of
/// `parallelisms`, or the pipeline's 1); the topic de-duplicated by `weir-id` must hold
/// exactly the uninterrupted file run's records (per key, in shards).
fn kafka_output_survives_kill_9(name: &str, parallelisms: &[usize]) {
    let work = Workdir::new();
    let topic = unique_table("counts_crash");
    let status = Command::new("bash")
        .arg(repo_root().join("scripts/services.sh"))
        .args(["topic", &topic, "1"])
        .status()
        .unwrap();
    assert!(status.success());
    let clicks = gen::clicks(150_000, 2_000, 31, 20, 2_000, 0.01, 0.0005);
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let input = work.write_jsonl("clicks.jsonl", &records);
    let pipeline = work.write(
        "pipeline.toml",
        &format!(
            r#"name = "{name}"
[[source]]
name = "clicks"
type = "file"
path = "{input}"
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
topic = "{topic}"
transactional = true
"#,
            udf = weir_e2e::component("change-only-counter").display(),
            brokers = kafka_brokers()
        ),
    );
    let dead = work.path("dead.jsonl").display().to_string();
    let expected_file = work.path("expected.jsonl");
    let started = Instant::now();
    weir(&[
        "run",
        &pipeline,
        "-q",
        "--no-checkpoints",
        "--output",
        &format!("main={}", expected_file.display()),
        "--dead-letter",
        &dead,
    ])
    .assert_success();
    let span = started.elapsed();
    let expected: Vec<String> = read(&expected_file).lines().map(str::to_string).collect();

    let crashes = run_with_crashes_at(
        &args(&["run", &pipeline, "--dead-letter", &dead]),
        parallelisms,
        &work.path("state"),
        span,
        17,
        3,
    );
    assert!(crashes.restored >= 1, "{crashes:?}");

    // De-duplicate by id, as a consumer would; every copy of an id is the same record.
    let messages = read_topic_ids(&topic);
    if !parallelisms.is_empty() {
        return check_grouped_ids(name, messages, &expected, crashes);
    }
    let mut by_id: std::collections::BTreeMap<u64, Produced> = Default::default();
    let mut repeats = 0;
    for (id, record) in messages {
        let n: u64 = id
            .strip_prefix(&format!("{name}/main/"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected id {id}"));
        match by_id.get(&n) {
            Some(first) => {
                assert_eq!(first, &record, "record {n} was re-sent differently");
                repeats += 1;
            }
            None => {
                by_id.insert(n, record);
            }
        }
    }
    let ids: Vec<u64> = by_id.keys().copied().collect();
    assert_eq!(
        ids,
        (0..expected.len() as u64).collect::<Vec<_>>(),
        "ids are 0..n without gaps"
    );
    let payloads: Vec<String> = by_id.into_values().map(|(_, p, _)| p).collect();
    assert!(
        payloads == expected,
        "the de-duplicated topic differs from the file run"
    );
    eprintln!("{crashes:?}, {repeats} repeated records de-duplicated");
}

/// The topic of a run in shards, de-duplicated by id: within each key group the numbers
/// run 0..n without gaps, and each ad's records equal the file run's `expected`, in order.
fn check_grouped_ids(
    name: &str,
    messages: Vec<(String, Produced)>,
    expected: &[String],
    crashes: Crashes,
) {
    let mut by_id: std::collections::BTreeMap<(u16, u64), Produced> = Default::default();
    let mut repeats = 0;
    for (id, record) in messages {
        let (group, number) = id
            .strip_prefix(&format!("{name}/main/g"))
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(g, n)| Some((g.parse().ok()?, n.parse().ok()?)))
            .unwrap_or_else(|| panic!("unexpected id {id}"));
        match by_id.get(&(group, number)) {
            Some(first) => {
                assert_eq!(first, &record, "record {id} was re-sent differently");
                repeats += 1;
            }
            None => {
                by_id.insert((group, number), record);
            }
        }
    }
    let mut per_group: std::collections::BTreeMap<u16, Vec<u64>> = Default::default();
    for (group, number) in by_id.keys() {
        per_group.entry(*group).or_default().push(*number);
    }
    for (group, numbers) in &per_group {
        assert_eq!(
            numbers,
            &(0..numbers.len() as u64).collect::<Vec<_>>(),
            "group {group}'s ids are 0..n without gaps"
        );
    }
    let ad = |payload: &str| -> String {
        let v: Value = serde_json::from_str(payload).expect("a JSON record");
        v["ad_id"].to_string()
    };
    let per_ad = |payloads: Vec<&str>| {
        let mut ads: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for p in payloads {
            ads.entry(ad(p)).or_default().push(p.to_string());
        }
        ads
    };
    // Within a group the ids give the order of its records.
    let got = per_ad(by_id.values().map(|(_, p, _)| p.as_str()).collect());
    let want = per_ad(expected.iter().map(String::as_str).collect());
    assert_eq!(got.len(), want.len(), "as many ads as the file run");
    assert!(
        got == want,
        "the de-duplicated topic differs from the file run, per ad"
    );
    assert!(per_group.len() > 16, "the ads spread over the key groups");
    eprintln!("{crashes:?}, {repeats} repeated records de-duplicated");
}
