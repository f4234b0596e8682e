//! Running `weir run --group` processes in a test: starting, stopping and killing them,
//! waiting for their progress, and reading their output by record id.

use crate::kafka::{committed_offsets, produce, read_all, Outgoing};
use crate::services::kafka_brokers;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A `weir` process of a test, killed if the test ends early (a failed assertion) so
/// that it does not outlive the test.
pub struct Process(Option<Child>);

impl Process {
    /// Starts `weir run PIPELINE --group GROUP`, its log in `log`.
    pub fn start(pipeline: &str, group: &str, log: &Path) -> Self {
        Self(Some(crate::spawn_group_member(pipeline, group, log)))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// `kill -9`: no checkpoint, no goodbye to the group.
    pub fn kill(mut self) {
        let mut child = self.0.take().expect("running");
        child.kill().expect("kill -9");
        let _ = child.wait();
    }

    /// Stops the process gracefully (its tasks checkpoint) and waits for it; if it does
    /// not stop, the panic's unwinding kills it.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let exited = self.0.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.0 = None;
                assert!(status.success(), "weir exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("weir did not stop within a minute of SIGTERM");
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

/// Waits until the tasks of `group` have committed `ends` (offsets by partition) of
/// `topic`; after three minutes, panics with the processes' logs.
pub fn wait_until_committed(group: &str, topic: &str, ends: &BTreeMap<i32, i64>, logs: &[&Path]) {
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
                "group {group} committed {committed:?} of {topic}, not {ends:?}, within 3 minutes; logs:\n{}",
                tails.join("\n----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The records of `topic` by their `weir-id`, and how many repeats of an id were
/// dropped; panics if an id repeats with another record.
pub fn by_id(topic: &str) -> (BTreeMap<String, String>, usize) {
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

/// Waits until process `pid` owns a task that has committed offsets (it has read and
/// checkpointed), as `weir status --group` shows.
pub fn wait_until_working(group: &str, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let me = format!("/pid{pid}: tasks ");
    loop {
        let run = crate::weir(&["status", "--group", group, "--brokers", &kafka_brokers()]);
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

/// Produces `messages` to `input` in `slices` slices about 700 ms apart while
/// `weir run PIPELINE --group GROUP` processes come and go: `a`, `b` and `c` from the
/// start; `b` killed with `kill -9` right after slice 3 is produced, once it works (no
/// checkpoint, no goodbye to the group); `b2` started after slice 6 and `d` after slice 8.
/// `after(i)` runs after slice `i`. Each process logs to `log(name)`. Returns the
/// processes still running and the paths of every log.
pub fn come_and_go(
    pipeline: &str,
    group: &str,
    input: &str,
    messages: &[Outgoing],
    slices: usize,
    log: impl Fn(&str) -> PathBuf,
    mut after: impl FnMut(usize),
) -> (Vec<Process>, Vec<PathBuf>) {
    let a = Process::start(pipeline, group, &log("a"));
    let mut victim = Some(Process::start(pipeline, group, &log("b")));
    let mut running = vec![a, Process::start(pipeline, group, &log("c"))];
    for (i, part) in messages.chunks(messages.len().div_ceil(slices)).enumerate() {
        if i == 3 {
            wait_until_working(group, victim.as_ref().expect("b runs").id());
        }
        produce(input, part);
        if i == 3 {
            // While the slice is being read.
            std::thread::sleep(Duration::from_millis(150));
            victim.take().expect("b runs").kill();
        } else {
            std::thread::sleep(Duration::from_millis(700));
        }
        match i {
            6 => running.push(Process::start(pipeline, group, &log("b2"))),
            8 => running.push(Process::start(pipeline, group, &log("d"))),
            _ => {}
        }
        after(i);
    }
    let logs = ["a", "b", "c", "b2", "d"].map(&log).to_vec();
    (running, logs)
}

/// What a repartition topic held once read.
pub struct RepartitionRead {
    /// The end offset of each partition that got messages.
    pub ends: BTreeMap<i32, i64>,
    /// Records the repartitioners sent more than once (after a restart): the tasks drop them.
    pub resent: usize,
}

/// Waits until the tasks of `group` have read everything in `topic` (a repartition
/// topic, complete once the source is read).
pub fn wait_until_repartition_read(group: &str, topic: &str, logs: &[&Path]) -> RepartitionRead {
    let mut sent = BTreeMap::new();
    let mut origins = std::collections::HashSet::new();
    let mut resent = 0;
    for message in read_all(topic) {
        let end = sent.entry(message.partition).or_insert(0);
        *end = (*end).max(message.offset + 1);
        if let (Some(from), Some(offset)) =
            (message.header("weir-from"), message.header("weir-offset"))
        {
            if !origins.insert((from.to_string(), offset.to_string())) {
                resent += 1;
            }
        }
    }
    wait_until_committed(group, topic, &sent, logs);
    RepartitionRead { ends: sent, resent }
}
