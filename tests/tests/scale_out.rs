//! Scaling out on a consumer group (`weir run --group`): three processes on a
//! 6-partition input, one killed with `kill -9` mid-run and started again later, a
//! fourth added; the output, de-duplicated by the records' `weir-id`, equals that of a
//! single process on the same data, and every repeated id repeats the same record.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use weir_e2e::gen::{self, Click};
use weir_e2e::kafka::{committed_offsets, create_topic, produce, read_all, Outgoing};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, spawn_group_member, Workdir};

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

/// A `weir` process of the test, killed if the test ends early (a failed assertion)
/// so that it does not outlive the test.
struct Process(Option<Child>);

impl Process {
    fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    fn take(mut self) -> Child {
        self.0.take().expect("running")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start(pipeline: &str, group: &str, log: &Path) -> Process {
    Process(Some(spawn_group_member(pipeline, group, log)))
}

/// Stops a process gracefully (its tasks checkpoint) and waits for it; if it does not
/// stop, the panic's unwinding kills it (`Process::drop`).
fn stop(mut process: Process) {
    let _ = Command::new("kill")
        .args(["-TERM", &process.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let exited = process.0.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            process.0 = None;
            assert!(status.success(), "weir exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("weir did not stop within a minute of SIGTERM");
}

/// Waits until the tasks of `group` have committed every partition's end offset.
fn wait_until_read(group: &str, topic: &str, ends: &BTreeMap<i32, i64>, logs: &[&Path]) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let committed = committed_offsets(&format!("{group}.offsets"), topic);
        if &committed == ends {
            return;
        }
        if Instant::now() > deadline {
            let tails: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            panic!(
                "group {group} committed {committed:?}, not {ends:?}, within 3 minutes; logs:\n{}",
                tails.join("\n----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The output by id; panics if an id repeats with another record.
fn by_id(topic: &str) -> (BTreeMap<String, String>, usize) {
    let mut records = BTreeMap::new();
    let mut repeats = 0;
    for message in read_all(topic) {
        let id = message
            .header("weir-id")
            .expect("a weir-id header")
            .to_string();
        let payload = message.payload_str().to_string();
        if let Some(previous) = records.insert(id.clone(), payload.clone()) {
            assert_eq!(previous, payload, "id {id} repeats another record");
            repeats += 1;
        }
    }
    (records, repeats)
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
    let a = start(&scaled, &group, &log("a"));
    let b = start(&scaled, &group, &log("b"));
    let c = start(&scaled, &group, &log("c"));
    let slice = messages.len().div_ceil(SLICES);
    let mut b = Some(b);
    let mut b2 = None;
    let mut d = None;
    for (i, part) in messages.chunks(slice).enumerate() {
        if i == 3 {
            // Once b has tasks and has checkpointed some, more input and, while it is
            // being read, kill -9: no checkpoint, no goodbye to the group.
            let victim = b.as_ref().expect("b runs");
            wait_until_working(&group, victim.id());
        }
        produce(&input, part);
        if i == 3 {
            std::thread::sleep(Duration::from_millis(150));
            let mut victim = b.take().expect("b runs").take();
            victim.kill().expect("kill -9");
            let _ = victim.wait();
        } else {
            std::thread::sleep(Duration::from_millis(700));
        }
        match i {
            6 => b2 = Some(start(&scaled, &group, &log("b2"))),
            8 => d = Some(start(&scaled, &group, &log("d"))),
            10 => status_names_every_task(&group),
            _ => {}
        }
    }
    let logs = [log("a"), log("b"), log("c"), log("b2"), log("d")];
    let log_refs: Vec<&Path> = logs.iter().map(|p| p.as_path()).collect();
    wait_until_read(&group, &input, &ends, &log_refs);
    for child in [Some(a), Some(c), b2, d].into_iter().flatten() {
        stop(child);
    }

    // One process on all of it.
    let single_out = unique_table("single_out");
    create_topic(&single_out, 1);
    let single = pipeline(&work, &input, &single_out);
    let single_group = unique_table("single");
    let one = start(&single, &single_group, &log("single"));
    wait_until_read(&single_group, &input, &ends, &[&log("single")]);
    stop(one);

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

/// Waits until process `pid` owns a task that has committed offsets (it has read and
/// checkpointed), as `weir status --group` shows.
fn wait_until_working(group: &str, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let me = format!("/pid{pid}: tasks ");
    loop {
        let run = weir_e2e::weir(&["status", "--group", group, "--brokers", &kafka_brokers()]);
        let tasks: Vec<String> = run
            .stdout
            .lines()
            .filter_map(|l| l.split_once(&me))
            .flat_map(|(_, t)| t.split(", ").map(str::to_string).collect::<Vec<_>>())
            .collect();
        let working = run.stdout.lines().any(|l| {
            tasks.iter().any(|t| l.starts_with(&format!("  task {t} ")))
                && l.contains("committed")
                && !l.contains("committed 0 ")
                && !l.contains("nothing committed")
        });
        if working {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} got no work:\n{}",
            run.stdout
        );
        std::thread::sleep(Duration::from_millis(300));
    }
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
