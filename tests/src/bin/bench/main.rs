//! `make bench`: Weir's headline figures in about ten minutes (see [`headline`]);
//! `make bench-full` (`weir-bench full`): every part below, the last lines as follows.
//! `make bench PART=name` (`weir-bench name`) runs one part.
//!
//! 1. Throughput: 2,000,000 clicks over 10,000 ads through the change-only counter, from
//!    a JSON-lines file to a discarding sink, (a) as the wasm component and (b) as a
//!    native Rust implementation of the same function on the same engine. Best of three.
//! 2. Memory: the order-timeout component with 1,000,000 orders open at once (the
//!    timeout is a day, so no timer fires before the end of input); the peak RSS of the
//!    `weir` process, and the bytes per open order above a one-order baseline.
//! 3. Checkpoint cost: (1) again with the wasm component, checkpoints every second into
//!    `target/bench-data/state-counter` against checkpoints off, runs alternating, best
//!    of three each; with the size of the checkpoint files seen during the run.
//! 4. Kafka -> Kafka: 500,000 clicks (the first of the same stream) read from a topic of
//!    1 and of 4 partitions (bounded source) and the counts produced to another topic,
//!    against the broker of `scripts/services.sh` (started if it is not running), in
//!    this process. Checkpoints every second, as in (3): a run takes about 4 s, so at the
//!    default 10 s interval it would take none. Best of three; producing the input is
//!    not timed; after every run the output topic is read back and must hold exactly
//!    the records the run says it emitted.
//!
//!    File -> PostgreSQL: 500,000 clicks through the counter, every count upserted into
//!    a table (see `postgres.rs`).
//! 5. Scaling out: 1, 2 and 3 `weir run --group` processes on a 6-partition topic, and
//!    the rebalance when a fourth joins (see `scale.rs`).
//! 6. Other languages: the Python and JavaScript twins of the counter and the order
//!    timeout against the Rust ones, per element and at start-up (see `languages.rs`).
//! 7. Hot keys with big state: the seed 000 counter at ~3 to ~3,000 clicks per ad and
//!    the order timeout at 1 to 100 items per order, and the Python counter at ~3 to ~300
//!    clicks per ad, records/s and peak RSS per case
//!    (see `state_size.rs`).
//!
//! The last lines are machine-readable, the very last one as it always was:
//!
//! ```text
//! scale-out processes=N records_per_s=R total_s=T joining_s=J
//! scale-out rebalance_s=S
//! state-size udf=change-only-counter per_key=300 records_per_s=N peak_rss_mb=M
//! state-size udf=python-change-only-counter per_key=300 records_per_s=N peak_rss_mb=M
//! state-size udf=python-batch-change-only-counter per_key=300 records_per_s=N peak_rss_mb=M
//! hot-key-timers timers=400000 total_ms=T ns_per_timer=N
//! udf-language lang=python udf=change-only-counter records_per_s=N us_per_element=U rust_records_per_s=M
//! udf-language lang=python-batch udf=change-only-counter records_per_s=N us_per_element=U rust_records_per_s=M
//! udf-startup lang=python udf=change-only-counter compile_ms=C cached_ms=D compile_peak_rss_mb=P cached_peak_rss_mb=Q
//! udf-memory lang=python udf=change-only-counter records=200000 peak_rss_mb=M run_s=S
//! udf-edit-loop lang=python save_to_swapped_ms=T worst_ms=W dev_start_s=S
//! checkpoint-cost interval_ms=1000 with_records_per_s=N without_records_per_s=M slowdown_pct=P
//! postgres-sink records_per_s=N emitted=E rows=R
//! kafka-to-kafka partitions=1 records_per_s=N emitted=E checkpoint_interval_ms=1000
//! kafka-to-kafka partitions=4 records_per_s=N emitted=E checkpoint_interval_ms=1000
//! change-only-counter wasm_records_per_s=N native_records_per_s=M ratio=R
//! ```
//!
//! `weir-bench full|flink|stage-graph|state-backend|state-backend-large|native|wasm|checkpoints|kafka|postgres|languages|edit-loop|scale|state-size [UDF]`
//! runs one part only. `flink` is Weir's side of the Flink comparison (see `flink.rs`):
//!
//! ```text
//! flink-compare udf=change-only-counter clicks=10000000 ads=1000 parallelism=P records_per_s=N cpu_s=C wall_s=W
//! ```
//!
//! `stage-graph` is a pipeline of two keyed stages against one stage (see `stages.rs`):
//!
//! ```text
//! stage-graph stages=2 clicks=2000000 parallelism=P records_per_s=N cpu_s=C one_stage_records_per_s=M ratio=R
//! ```
//!
//! `state-backend` is the counter on the memory and the disk state backends, and open
//! orders scaled down to 2,000,000; `state-backend-large` the open orders at issue 40's
//! size, 20,000,000 under 512 MiB (about 15 minutes); see `state_backend.rs`; both in
//! `full`:
//!
//! ```text
//! state-backend udf=change-only-counter backend=B cache_kib=C records_per_s=N memory_records_per_s=M ratio=R loads=L writes=W
//! state-backend-open-orders orders=N backend=B cache_mib=C records_per_s=R peak_rss_mb=M
//! state-backend-checkpoints orders=N backend=disk cache_mib=C checkpoints=K longest_pause_ms=P peak_rss_mb=M restored_keys=R restore_ms=T restore_peak_rss_mb=S
//! ```

mod flink;
mod kafka;
mod languages;
mod parallel;
mod postgres;
mod scale;
mod stages;
mod state_backend;
mod state_dir;
mod state_size;

use serde::{Deserialize, Serialize};
use state_dir::{StateDirUse, StateDirWatch};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_checkpoint::CheckpointSpec;
use weir_core::state::{StateId, StateKind};
use weir_core::time::timers::TimeDomain;
use weir_e2e::{component, datetime_millis, gen, repo_root, weir_bin};
use weir_engine::runtime::{
    CallError, ElementRef, FiredTimer, HostServices, InitInfo, OutputId, ProcessFunction,
};
use weir_pipeline::{Overrides, PipelineSpec};
use weir_run::{run, run_with, RunOptions, RunReport};

const CLICKS: usize = 2_000_000;
const ADS: u64 = 10_000;
const OPEN_ORDERS: u64 = 1_000_000;
const RUNS: usize = 3;
/// Checkpoint interval of the checkpoint-cost and Kafka runs.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Clicks of the Kafka runs, and the partition counts of their input topics.
const KAFKA_CLICKS: usize = 500_000;
/// The Kafka runs: (partitions, parallelism).
const KAFKA_RUNS: [(i32, usize); 3] = [(1, 1), (4, 1), (4, 2)];

fn main() -> anyhow::Result<()> {
    let data = repo_root().join("target/bench-data");
    std::fs::create_dir_all(&data)?;
    // Compiled components are kept with the bench's data, as the start-up runs keep them.
    weir_engine::runtime::wasm::precompiled::configure(Some(data.join("compile-cache/components")));

    let clicks = data.join("clicks-2m-10ms.jsonl");
    ensure_clicks(&clicks, ADS)?;
    let spec = counter_pipeline(&data, &clicks)?;
    // `weir-bench PART`: one part only (`full`: all of them).
    let Some(only) = std::env::args().nth(1) else {
        return headline(&data, &clicks, &spec);
    };
    {
        let report = match only.as_str() {
            "full" => return full(&data, &clicks, &spec),
            "flink" => {
                for r in flink::compare(&data)? {
                    println!("{}", r.line());
                }
                return Ok(());
            }
            "stage-graph" => {
                for r in stages::compare(&data)? {
                    println!("{}", r.line());
                }
                return Ok(());
            }
            "state-backend" => {
                for r in state_backend::compare(&spec)? {
                    println!("{}", r.line());
                }
                let size = state_backend::SCALED_DOWN;
                for r in state_backend::open_orders(&data, size)? {
                    println!("{}", r.line());
                }
                println!("{}", state_backend::checkpoints(&data, size)?.line());
                return Ok(());
            }
            "state-backend-large" => {
                let size = state_backend::FULL_SIZE;
                for r in state_backend::open_orders(&data, size)? {
                    println!("{}", r.line());
                }
                println!("{}", state_backend::checkpoints(&data, size)?.line());
                return Ok(());
            }
            "checkpoints" => {
                let cost = checkpoint_cost(&data, &spec)?;
                println!("{}", cost.line());
                return Ok(());
            }
            "kafka" => {
                for r in kafka_throughput(&data)? {
                    println!("{}", kafka_line(&r));
                }
                return Ok(());
            }
            "scale" => {
                let (runs, rebalance) = scale::scale_out(&data)?;
                for r in &runs {
                    println!("{}", r.line());
                }
                println!("scale-out rebalance_s={:.1}", rebalance.as_secs_f64());
                return Ok(());
            }
            "state-size" => {
                for t in state_size::hot_key_timers() {
                    println!("{}", t.line());
                }
                let udf = std::env::args().nth(2);
                for r in state_size::matrix(&data, udf.as_deref())? {
                    println!("{}", r.line());
                }
                if udf.is_none_or(|u| u == "ttl-probe") {
                    for r in state_size::ttl_cases(&data)? {
                        println!("{}", r.line());
                    }
                }
                return Ok(());
            }
            "postgres" => {
                println!("{}", postgres::throughput(&data, &clicks, RUNS)?.line());
                return Ok(());
            }
            "parallel" => {
                let runs = parallel::speedup(&spec)?;
                let base = runs[0].report.records_per_second();
                for r in &runs {
                    println!("{}", r.line(base));
                }
                return Ok(());
            }
            "languages" => {
                for r in languages::per_element(&data, &clicks)? {
                    println!("{}", r.line());
                }
                for s in languages::startup(&data)? {
                    println!("{}", s.line());
                    println!("{}", s.memory_line());
                }
                println!("{}", languages::python_edit_loop(&data)?.line());
                return Ok(());
            }
            "edit-loop" => {
                println!("{}", languages::python_edit_loop(&data)?.line());
                return Ok(());
            }
            "native" => run_with(
                &spec,
                Box::new(NativeChangeOnlyCounter::default()),
                native_identity(),
                &RunOptions::default(),
            ),
            "wasm" => run(&spec, &RunOptions::default()),
            other => {
                anyhow::bail!(
                    "unknown part {other:?}: weir-bench [full|flink|stage-graph|state-backend|state-backend-large|native|wasm|checkpoints|kafka|postgres|languages|parallel|scale|state-size [UDF]]"
                )
            }
        }
        .map_err(|f| anyhow::anyhow!("{f}"))?;
        println!("{only}: {:.0} records/s", report.records_per_second());
        Ok(())
    }
}

/// The counter as the wasm component and as its native twin, best of [`RUNS`] each,
/// printed for people; checks that both emit the same.
fn wasm_and_native(spec: &PipelineSpec) -> anyhow::Result<(RunReport, RunReport)> {
    let wasm = best_of(|| run(spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}")))?;
    let native = best_of(|| {
        run_with(
            spec,
            Box::new(NativeChangeOnlyCounter::default()),
            native_identity(),
            &RunOptions::default(),
        )
        .map_err(|f| anyhow::anyhow!("{f}"))
    })?;
    println!(
        "change-only counter, {CLICKS} clicks over {ADS} ads, file -> discard, best of {RUNS}:"
    );
    for (name, report) in [("wasm", &wasm), ("native", &native)] {
        println!(
            "  {name:6}: {:>10.0} records/s ({:.3} s, {} emitted, {} timers fired)",
            report.records_per_second(),
            report.elapsed.as_secs_f64(),
            report.outputs[0].1,
            report.event_timers
        );
    }
    assert_eq!(
        wasm.outputs, native.outputs,
        "the wasm and native counters must agree"
    );
    Ok((wasm, native))
}

/// The line that has always come last.
fn counter_line(wasm: &RunReport, native: &RunReport) -> String {
    let (w, n) = (wasm.records_per_second(), native.records_per_second());
    format!(
        "change-only-counter wasm_records_per_s={w:.0} native_records_per_s={n:.0} ratio={:.3}",
        w / n
    )
}

/// `make bench`: the headline figures in about ten minutes on two cores: the counter
/// against its native twin, Weir's side of the Flink comparison, the seed 000 counter
/// with small and big state per ad, the Python and JavaScript UDFs per element, and the
/// cost of checkpoints. Their lines are the same as in [`full`], which adds the rest
/// (Kafka, PostgreSQL, scale-out, every state size and language, start-up, memory).
fn headline(data: &Path, clicks: &Path, spec: &PipelineSpec) -> anyhow::Result<()> {
    let started = Instant::now();
    let (wasm, native) = wasm_and_native(spec)?;
    let flink = flink::compare(data)?;
    let state_sizes = state_size::matrix(data, Some("change-only-counter"))?;
    let language_runs = languages::per_element(data, clicks)?;
    let cost = checkpoint_cost(data, spec)?;
    let graphs = stages::compare(data)?;
    println!();
    for r in &flink {
        println!("{}", r.line());
    }
    for r in &graphs {
        println!("{}", r.line());
    }
    for r in &state_sizes {
        println!("{}", r.line());
    }
    for r in &language_runs {
        println!("{}", r.line());
    }
    println!("{}", cost.line());
    println!(
        "bench-headline total_s={:.0}",
        started.elapsed().as_secs_f64()
    );
    println!("{}", counter_line(&wasm, &native));
    Ok(())
}

/// `make bench-full`: every part.
fn full(data: &Path, clicks: &Path, spec: &PipelineSpec) -> anyhow::Result<()> {
    let (data, clicks, spec) = (data.to_path_buf(), clicks.to_path_buf(), spec.clone());
    let (wasm, native) = wasm_and_native(&spec)?;

    let (peak, baseline) = order_memory(&data)?;
    println!("order-timeout, {OPEN_ORDERS} orders open at once (timeout 1d):");
    println!(
        "  peak RSS {:.1} MB, one-order baseline {:.1} MB",
        peak as f64 / 1e6,
        baseline as f64 / 1e6
    );
    println!(
        "  {:.0} bytes per open order (state + one timer + key)",
        (peak - baseline) as f64 / OPEN_ORDERS as f64
    );

    let cost = checkpoint_cost(&data, &spec)?;
    anyhow::ensure!(
        cost.with.outputs == wasm.outputs,
        "checkpoints must not change what the counter emits"
    );
    let parallel_runs = parallel::speedup(&spec)?;
    let kafka = kafka_throughput(&data)?;
    let postgres_run = postgres::throughput(&data, &clicks, RUNS)?;
    let (scale_runs, rebalance) = scale::scale_out(&data)?;
    let language_runs = languages::per_element(&data, &clicks)?;
    let startups = languages::startup(&data)?;
    let edit_loop = languages::python_edit_loop(&data)?;
    let state_sizes = state_size::matrix(&data, None)?;
    let state_ttls = state_size::ttl_cases(&data)?;
    let hot_key_timers = state_size::hot_key_timers();
    let graphs = stages::compare(&data)?;
    let backends = state_backend::compare(&spec)?;
    let mut open_orders = state_backend::open_orders(&data, state_backend::SCALED_DOWN)?;
    let mut backend_checkpoints = vec![state_backend::checkpoints(
        &data,
        state_backend::SCALED_DOWN,
    )?];
    open_orders.extend(state_backend::open_orders(&data, state_backend::FULL_SIZE)?);
    backend_checkpoints.push(state_backend::checkpoints(&data, state_backend::FULL_SIZE)?);

    println!();
    for r in &graphs {
        println!("{}", r.line());
    }
    for r in &backends {
        println!("{}", r.line());
    }
    for r in &open_orders {
        println!("{}", r.line());
    }
    for r in &backend_checkpoints {
        println!("{}", r.line());
    }
    for r in &scale_runs {
        println!("{}", r.line());
    }
    println!("scale-out rebalance_s={:.1}", rebalance.as_secs_f64());
    for r in &state_sizes {
        println!("{}", r.line());
    }
    for r in &state_ttls {
        println!("{}", r.line());
    }
    for t in &hot_key_timers {
        println!("{}", t.line());
    }
    for r in &language_runs {
        println!("{}", r.line());
    }
    for s in &startups {
        println!("{}", s.line());
    }
    for s in &startups {
        println!("{}", s.memory_line());
    }
    println!("{}", edit_loop.line());
    println!("{}", cost.line());
    let base = parallel_runs[0].report.records_per_second();
    for r in &parallel_runs {
        println!("{}", r.line(base));
    }
    println!("{}", postgres_run.line());
    for r in &kafka {
        println!("{}", kafka_line(r));
    }
    let flink = flink::compare(&data)?;
    for r in &flink {
        println!("{}", r.line());
    }
    println!("{}", counter_line(&wasm, &native));
    Ok(())
}

/// The file -> discard counter with checkpoints and without.
struct CheckpointCost {
    with: RunReport,
    without: RunReport,
    /// The checkpoint files of the fastest run with checkpoints.
    state: StateDirUse,
}

impl CheckpointCost {
    /// How much longer the run takes with checkpoints, in percent.
    fn slowdown_pct(&self) -> f64 {
        (self.with.elapsed.as_secs_f64() / self.without.elapsed.as_secs_f64() - 1.0) * 100.0
    }

    fn line(&self) -> String {
        format!(
            "checkpoint-cost interval_ms={} with_records_per_s={:.0} without_records_per_s={:.0} slowdown_pct={:.1}",
            CHECKPOINT_INTERVAL.as_millis(),
            self.with.records_per_second(),
            self.without.records_per_second(),
            self.slowdown_pct()
        )
    }
}

/// Runs the wasm counter with checkpoints every [`CHECKPOINT_INTERVAL`] and without,
/// alternating so that a drift in the machine's speed hits both alike; best of [`RUNS`].
fn checkpoint_cost(data: &Path, spec: &PipelineSpec) -> anyhow::Result<CheckpointCost> {
    let dir = data.join("state-counter");
    let mut checkpointed = spec.clone();
    checkpointed.checkpoint = CheckpointSpec {
        enabled: true,
        dir: dir.clone(),
        interval: CHECKPOINT_INTERVAL,
        kafka: None,
        aligned: None,
    };
    let fresh = RunOptions {
        fresh: true,
        ..RunOptions::default()
    };
    let mut without: Option<RunReport> = None;
    let mut with: Option<(RunReport, StateDirUse)> = None;
    for _ in 0..RUNS {
        let report = run(spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
        if without.as_ref().is_none_or(|b| report.elapsed < b.elapsed) {
            without = Some(report);
        }
        state_dir::clear(&dir)?;
        let watch = StateDirWatch::start(&dir);
        let report = run(&checkpointed, &fresh).map_err(|f| anyhow::anyhow!("{f}"));
        let state = watch.finish();
        let report = report?;
        if with
            .as_ref()
            .is_none_or(|(b, _)| report.elapsed < b.elapsed)
        {
            with = Some((report, state));
        }
    }
    let (without, (with, state)) = (
        without.expect("at least one run"),
        with.expect("at least one run"),
    );
    anyhow::ensure!(
        with.outputs == without.outputs,
        "checkpoints must not change what the counter emits"
    );
    let cost = CheckpointCost {
        with,
        without,
        state,
    };
    println!(
        "checkpoint cost, the same file -> discard wasm run, best of {RUNS} each (alternating):"
    );
    println!(
        "  without checkpoints      : {:>10.0} records/s ({:.3} s)",
        cost.without.records_per_second(),
        cost.without.elapsed.as_secs_f64()
    );
    println!(
        "  checkpoints every {:>4} ms: {:>10.0} records/s ({:.3} s), slowdown {:.1}% (elapsed time)",
        CHECKPOINT_INTERVAL.as_millis(),
        cost.with.records_per_second(),
        cost.with.elapsed.as_secs_f64(),
        cost.slowdown_pct(),
    );
    println!(
        "  {}: {}",
        dir.strip_prefix(repo_root()).unwrap_or(&dir).display(),
        describe_state(&cost.state)
    );
    Ok(cost)
}

/// The counter from a Kafka topic to another, for each of [`KAFKA_RUNS`].
fn kafka_throughput(data: &Path) -> anyhow::Result<Vec<kafka::KafkaRun>> {
    let brokers = weir_e2e::services::kafka_brokers();
    kafka::delete_leftover_topics(&brokers)?;
    // The same stream as the file runs (the first 500,000 of its clicks).
    let clicks = gen::clicks(KAFKA_CLICKS, ADS, 42, 20, 4_000, 0.001, 0.0);
    let mut runs = Vec::new();
    for (partitions, parallelism) in KAFKA_RUNS {
        runs.push(kafka::kafka_to_kafka(
            data,
            &brokers,
            &clicks,
            partitions,
            parallelism,
            CHECKPOINT_INTERVAL,
            RUNS,
        )?);
    }
    println!(
        "change-only counter, {KAFKA_CLICKS} clicks over {ADS} ads, kafka -> kafka ({brokers}), \
         bounded source, checkpoints every {} ms, best of {RUNS}:",
        CHECKPOINT_INTERVAL.as_millis()
    );
    for r in &runs {
        let emitted = r.report.outputs[0].1;
        println!(
            "  {} partition(s), parallelism {}: {:>10.0} records/s ({:.3} s, {emitted} emitted, {} read back from the output topic; \
             producing the input took {:.2} s)",
            r.partitions,
            r.parallelism,
            r.report.records_per_second(),
            r.report.elapsed.as_secs_f64(),
            r.in_topic,
            r.produce_secs
        );
        println!("    state dir: {}", describe_state(&r.state));
    }
    Ok(runs)
}

/// The checkpoints a run wrote, as seen by a [`StateDirWatch`].
fn describe_state(state: &StateDirUse) -> String {
    format!(
        "{} checkpoint(s), largest file {:.2} MB, at most {:.2} MB of checkpoint files at once \
         (removed when the run completed)",
        state.checkpoints,
        state.largest() as f64 / 1e6,
        state.peak_bytes as f64 / 1e6
    )
}

/// The machine-readable lines of a Kafka run: `kafka-to-kafka` (as before, for the runs
/// at parallelism 1), `kafka-to-kafka-parallel` with the shards and CPU seconds, and
/// `kafka-broker-ceiling`: the clicks over the time plain librdkafka clients took to
/// produce the input and to read the outputs back (the broker's work per click without
/// Weir, on the same cores).
fn kafka_line(r: &kafka::KafkaRun) -> String {
    let rate = r.report.records_per_second();
    let mut lines = Vec::new();
    if r.parallelism == 1 {
        lines.push(format!(
            "kafka-to-kafka partitions={} records_per_s={rate:.0} emitted={} checkpoint_interval_ms={}",
            r.partitions,
            r.report.outputs[0].1,
            CHECKPOINT_INTERVAL.as_millis()
        ));
    }
    lines.push(format!(
        "kafka-to-kafka-parallel partitions={} parallelism={} records_per_s={rate:.0} cpu_s={:.2} wall_s={:.2}",
        r.partitions,
        r.parallelism,
        r.cpu_s,
        r.report.elapsed.as_secs_f64()
    ));
    let clients_s = r.produce_secs + r.read_back_secs;
    lines.push(format!(
        "kafka-broker-ceiling partitions={} produce_input_s={:.2} read_outputs_s={:.2} records_per_s={:.0} weir_share={:.2}",
        r.partitions,
        r.produce_secs,
        r.read_back_secs,
        KAFKA_CLICKS as f64 / clients_s,
        rate / (KAFKA_CLICKS as f64 / clients_s)
    ));
    lines.join("\n")
}

fn best_of(mut f: impl FnMut() -> anyhow::Result<RunReport>) -> anyhow::Result<RunReport> {
    let mut best: Option<RunReport> = None;
    for _ in 0..RUNS {
        let report = f()?;
        if best.as_ref().is_none_or(|b| report.elapsed < b.elapsed) {
            best = Some(report);
        }
    }
    Ok(best.expect("at least one run"))
}

/// The bench's 2,000,000 clicks over `ads` ads at `path`, unless already there. About
/// 10 ms of event time per click (100 clicks/s, 5.5 hours): a 5-minute window holds
/// ~30,000 clicks, ~3 per ad over 10,000 ads.
fn ensure_clicks(path: &Path, ads: u64) -> anyhow::Result<()> {
    ensure_generated_clicks(path, CLICKS, ads, 42, 20)
}

/// Writes `n` generated clicks over `ads` ads (up to `step_ms` apart, `seed`) to `path`
/// as JSON lines, unless it exists (written beside it first, so that an interrupted
/// generation is not taken for a whole file).
fn ensure_generated_clicks(
    path: &Path,
    n: usize,
    ads: u64,
    seed: u64,
    step_ms: u64,
) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    generate(path, |out| {
        for c in gen::clicks(n, ads, seed, step_ms, 4_000, 0.001, 0.0) {
            writeln!(
                out,
                r#"{{"ad_id":"{}","clicked_at":"{}"}}"#,
                c.ad,
                datetime_millis(c.ts)
            )?;
        }
        Ok(())
    })
}

/// Writes a generated input file through `write`, under a temporary name renamed into
/// place once complete (so an interrupted run does not leave half a file to reuse).
fn generate(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    eprintln!("generating {}", path.display());
    let partial = path.with_extension("partial");
    let mut out = BufWriter::new(std::fs::File::create(&partial)?);
    write(&mut out)?;
    out.flush()?;
    drop(out);
    std::fs::rename(&partial, path)?;
    Ok(())
}

fn counter_pipeline(data: &Path, clicks: &Path) -> anyhow::Result<PipelineSpec> {
    DiscardPipeline {
        name: "counter",
        source: "clicks",
        input: clicks,
        key: "ad_id",
        timestamp: "clicked_at",
        out_of_orderness: "5s",
        udf: &component("change-only-counter"),
        udf_lines: "",
    }
    .spec(data)
}

/// A JSON-lines file -> discard pipeline without checkpoints, written to
/// `<data>/<name>.toml`, dead letters to `<data>/<name>.dead-letter.jsonl`.
struct DiscardPipeline<'a> {
    name: &'a str,
    source: &'a str,
    input: &'a Path,
    key: &'a str,
    timestamp: &'a str,
    out_of_orderness: &'a str,
    udf: &'a Path,
    /// More `[udf]` lines (a `[udf.config]` table), or nothing.
    udf_lines: &'a str,
}

impl DiscardPipeline<'_> {
    /// Writes the pipeline file; returns its path.
    fn write(&self, data: &Path) -> anyhow::Result<PathBuf> {
        let toml = format!(
            r#"
[[source]]
name = "{source}"
type = "file"
path = "{input}"
key = "{key}"
timestamp = "{timestamp}"
timestamp_format = "datetime"
out_of_orderness = "{out_of_orderness}"

[udf]
path = "{udf}"
{udf_lines}
[[sink]]
output = "main"
type = "discard"
"#,
            source = self.source,
            input = self.input.display(),
            key = self.key,
            timestamp = self.timestamp,
            out_of_orderness = self.out_of_orderness,
            udf = self.udf.display(),
            udf_lines = self.udf_lines,
        );
        let path = data.join(format!("{}.toml", self.name));
        std::fs::write(&path, toml)?;
        Ok(path)
    }

    /// Writes the pipeline file and loads it.
    fn spec(&self, data: &Path) -> anyhow::Result<PipelineSpec> {
        let path = self.write(data)?;
        let overrides = Overrides {
            dead_letter: Some(data.join(format!("{}.dead-letter.jsonl", self.name))),
            no_checkpoints: true,
            ..Overrides::default()
        };
        PipelineSpec::load(&path, &overrides)
    }
}

/// The checkpoint identity of the native function (its runs take no checkpoints).
fn native_identity() -> weir_core::identity::UdfIdentity {
    weir_core::identity::UdfIdentity {
        name: "native-change-only-counter".into(),
        sha256: String::new(),
    }
}

/// Peak RSS of `weir run` with a million open orders, and with one.
fn order_memory(data: &Path) -> anyhow::Result<(u64, u64)> {
    let many = data.join("orders-1m.jsonl");
    if !many.exists() {
        eprintln!("generating {}", many.display());
        let mut out = BufWriter::new(std::fs::File::create(&many)?);
        for order in 0..OPEN_ORDERS {
            let ts = datetime_millis(gen::BASE_MS + order as i64);
            writeln!(
                out,
                r#"{{"orderId":{order},"item":"tea","cost":"3.50","timestamp":"{ts}"}}"#
            )?;
        }
        out.flush()?;
    }
    let one = data.join("orders-1.jsonl");
    std::fs::write(
        &one,
        format!(
            "{{\"orderId\":1,\"item\":\"tea\",\"cost\":\"3.50\",\"timestamp\":\"{}\"}}\n",
            datetime_millis(gen::BASE_MS)
        ),
    )?;
    let baseline = peak_rss_of_run(data, &one)?;
    let peak = peak_rss_of_run(data, &many)?;
    Ok((peak, baseline))
}

fn peak_rss_of_run(data: &Path, input: &Path) -> anyhow::Result<u64> {
    let pipeline: PathBuf = repo_root().join("examples/orders/pipeline.toml");
    let started = Instant::now();
    let output = std::process::Command::new(weir_bin())
        .arg("run")
        .arg(&pipeline)
        .arg("--input")
        .arg(format!("orders={}", input.display()))
        .arg("--output")
        .arg(format!("main={}", data.join("orders-out.jsonl").display()))
        .arg("--dead-letter")
        .arg(data.join("orders.dead-letter.jsonl"))
        .arg("--config")
        .arg("timeout=1d")
        .output()?;
    let summary = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "weir run on {} failed:\n{summary}",
        input.display()
    );
    eprintln!(
        "  ran {} in {:.2} s",
        input.display(),
        started.elapsed().as_secs_f64()
    );
    Ok((peak_rss_mb(&summary)? * 1e6) as u64)
}

/// The peak RSS in MB that `weir run` reports (its VmHWM) in the summary on stderr.
fn peak_rss_mb(summary: &str) -> anyhow::Result<f64> {
    summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("peak memory (RSS): "))
        .and_then(|v| v.trim_end_matches(" MB").parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no peak memory in the summary:\n{summary}"))
}

/// The change-only counter written natively against the host services: the same state
/// layout (one value state, postcard-encoded), timers and JSON output as the component.
#[derive(Default)]
struct NativeChangeOnlyCounter {
    window: i64,
    clicks: StateId,
    main: OutputId,
}

#[derive(Serialize, Deserialize, Default)]
struct Clicks {
    times: Vec<i64>,
    emitted: u32,
}

#[derive(Serialize)]
struct ClickCount<'a> {
    ad_id: &'a str,
    clicks: u32,
    updated_at: String,
}

impl NativeChangeOnlyCounter {
    fn load(&self, host: &mut HostServices) -> Result<Option<Clicks>, CallError> {
        let bytes = host
            .value_get(self.clicks)
            .map_err(|e| CallError::Trapped(e.to_string()))?;
        bytes
            .map(|b| postcard::from_bytes(b).map_err(|e| CallError::Returned(e.to_string())))
            .transpose()
    }

    fn emit_if_changed(
        &self,
        host: &mut HostServices,
        key: &[u8],
        clicks: &mut Clicks,
        at: i64,
    ) -> Result<(), CallError> {
        let count = clicks.times.len() as u32;
        if count == clicks.emitted {
            return Ok(());
        }
        clicks.emitted = count;
        let ad_id = std::str::from_utf8(key).map_err(|e| CallError::Returned(e.to_string()))?;
        let record = ClickCount {
            ad_id,
            clicks: count,
            updated_at: weir_sdk::time::format_millis(at),
        };
        let value = serde_json::to_vec(&record).map_err(|e| CallError::Returned(e.to_string()))?;
        host.emit(self.main, value, Some(key.to_vec()), None)
            .map_err(|e| CallError::Trapped(e.to_string()))
    }

    fn store(&self, host: &mut HostServices, clicks: &Clicks) -> Result<(), CallError> {
        let bytes = postcard::to_extend(clicks, Vec::with_capacity(64))
            .map_err(|e| CallError::Returned(e.to_string()))?;
        host.value_set(self.clicks, bytes)
            .map_err(|e| CallError::Trapped(e.to_string()))
    }
}

impl ProcessFunction for NativeChangeOnlyCounter {
    fn name(&self) -> &str {
        "native-change-only-counter"
    }

    fn init(&mut self, host: &mut HostServices, _info: &InitInfo) -> Result<(), CallError> {
        self.window = 300_000;
        self.clicks = host
            .declare_state("clicks", StateKind::Value, None)
            .map_err(CallError::Returned)?;
        self.main = host.declare_output("main").map_err(CallError::Returned)?;
        Ok(())
    }

    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError> {
        let mut clicks = self.load(host)?.unwrap_or_default();
        clicks.times.push(element.timestamp);
        host.register_timer(TimeDomain::EventTime, element.timestamp + self.window)
            .map_err(|e| CallError::Trapped(e.to_string()))?;
        self.emit_if_changed(host, element.key, &mut clicks, element.timestamp)?;
        self.store(host, &clicks)
    }

    fn on_timer(
        &mut self,
        host: &mut HostServices,
        timer: FiredTimer<'_>,
    ) -> Result<(), CallError> {
        let Some(mut clicks) = self.load(host)? else {
            return Ok(());
        };
        let expired = timer.timestamp - self.window;
        clicks.times.retain(|&ts| ts > expired);
        self.emit_if_changed(host, timer.key, &mut clicks, timer.timestamp)?;
        if clicks.times.is_empty() {
            host.clear(self.clicks)
                .map_err(|e| CallError::Trapped(e.to_string()))
        } else {
            self.store(host, &clicks)
        }
    }
}
