//! Scaling out on a consumer group (`weir run --group`): 300,000 order events on a
//! 6-partition topic through the order timeout (timeout 1 day, so every order stays open:
//! 50,000 per task), output to Kafka, checkpoints every 2 s. For 1, 2 and 3 processes: the
//! time from starting them until the tasks have committed every offset, and how much of it
//! was joining the group (until the first task started). Then a fourth process joins the
//! three: the time until a task starts in it (a rebalance).
//!
//! On 2 cores more processes cannot go faster; the figures show the cost of the group.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use weir_e2e::kafka::{committed_offsets, create_topic};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, datetime_millis, gen, spawn_group_member, weir_bin};

const EVENTS: u64 = 300_000;
const PARTITIONS: i32 = 6;

pub struct ScaleRun {
    pub processes: usize,
    /// The source went through a repartition topic (`repartition = true`).
    pub repartition: bool,
    pub total: Duration,
    pub joining: Duration,
}

impl ScaleRun {
    pub fn line(&self) -> String {
        format!(
            "scale-out processes={}{} records_per_s={:.0} total_s={:.1} joining_s={:.1}",
            self.processes,
            if self.repartition { " repartition" } else { "" },
            EVENTS as f64 / self.total.as_secs_f64(),
            self.total.as_secs_f64(),
            self.joining.as_secs_f64()
        )
    }
}

/// The runs for 1, 2 and 3 processes, and the rebalance time of a fourth; then 3
/// processes again with the source re-keyed through a repartition topic.
pub fn scale_out(data: &Path) -> anyhow::Result<(Vec<ScaleRun>, Duration)> {
    let input = unique_table("bench_orders");
    create_topic(&input, PARTITIONS);
    // `weir produce` batches (the tests' helper sends one record per batch, which is
    // too slow for this many), keyed by orderId.
    let file = data.join("scale-orders.jsonl");
    let mut text = String::new();
    for i in 0..EVENTS {
        let ts = datetime_millis(gen::BASE_MS + i as i64);
        text.push_str(&format!(
            "{{\"orderId\":{i},\"item\":\"tea\",\"cost\":\"3.50\",\"timestamp\":\"{ts}\"}}\n"
        ));
    }
    std::fs::write(&file, text)?;
    let status = Command::new(weir_bin())
        .arg("produce")
        .arg(&file)
        .args([
            "--brokers",
            &kafka_brokers(),
            "--topic",
            &input,
            "--key",
            "orderId",
        ])
        .status()?;
    anyhow::ensure!(status.success(), "weir produce failed");
    let mut runs = Vec::new();
    let mut rebalance = Duration::ZERO;
    for (processes, repartition) in [(1, false), (2, false), (3, false), (3, true)] {
        let output = unique_table("bench_totals");
        create_topic(&output, 1);
        let pipeline = pipeline(data, &input, &output, repartition)?;
        let group = unique_table("bench_group");
        let started = Instant::now();
        let logs: Vec<_> = (0..processes)
            .map(|i| data.join(format!("scale-{processes}-{i}.log")))
            .collect();
        let mut children: Vec<Child> = logs
            .iter()
            .map(|log| spawn_group_member(&pipeline, &group, log))
            .collect();
        let joining = wait_for_line(&logs, "starting", started)?;
        wait_committed(&group, &input)?;
        let total = if repartition {
            repartition_read(&group, started)?
        } else {
            started.elapsed()
        };
        runs.push(ScaleRun {
            processes,
            repartition,
            total,
            joining,
        });
        if processes == 3 && !repartition {
            let log = data.join("scale-fourth.log");
            let joined = Instant::now();
            children.push(spawn_group_member(&pipeline, &group, &log));
            rebalance = wait_for_line(std::slice::from_ref(&log), "starting", joined)?;
        }
        for child in &children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for mut child in children {
            let _ = child.wait();
        }
    }
    Ok((runs, rebalance))
}

fn pipeline(data: &Path, input: &str, output: &str, repartition: bool) -> anyhow::Result<String> {
    let text = format!(
        r#"
name = "bench-scale"

[[source]]
name = "orders"
type = "kafka"
brokers = "{brokers}"
topic = "{input}"
startup = "earliest"
key = "orderId"
timestamp = "timestamp"
timestamp_format = "datetime"
repartition = {repartition}

[udf]
path = "{udf}"

[udf.config]
timeout = "1d"

[checkpoint]
interval = "2s"

[[sink]]
output = "main"
type = "kafka"
brokers = "{brokers}"
topic = "{output}"
"#,
        brokers = kafka_brokers(),
        udf = component("order-timeout").display()
    );
    let path = data.join(format!("{output}.toml"));
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

/// How long after `since` a line containing `text` first appeared in any of `logs`.
fn wait_for_line(
    logs: &[std::path::PathBuf],
    text: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    while since.elapsed() < Duration::from_secs(120) {
        if logs.iter().any(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .contains(text)
        }) {
            return Ok(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("no {text:?} in {logs:?} within 2 minutes")
}

/// Waits until the tasks have committed every event.
fn wait_committed(group: &str, input: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done: i64 = committed_offsets(&format!("{group}.offsets"), input)
            .values()
            .sum();
        if done as u64 == EVENTS {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {done} of {EVENTS} committed in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// With a repartition topic the source's offsets are committed by the repartitioners;
/// the tasks are done once their commits on the repartition topic stop moving (they
/// commit at each checkpoint, every 2 s): the time of their last move.
fn repartition_read(group: &str, started: Instant) -> anyhow::Result<Duration> {
    let topic = format!("{group}.bench-scale.repartition-orders");
    let mut last = (0i64, started.elapsed());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done: i64 = committed_offsets(&format!("{group}.offsets"), &topic)
            .values()
            .sum();
        if done > last.0 {
            last = (done, started.elapsed());
        } else if started.elapsed() > last.1 + Duration::from_secs(6) {
            anyhow::ensure!(done as u64 >= EVENTS, "only {done} of {EVENTS} read");
            return Ok(last.1);
        }
        anyhow::ensure!(Instant::now() < deadline, "not done in 5 minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
}
