//! State backends (issue 40): the seed 000 counter over the bench's 2,000,000 clicks over
//! 10,000 ads, file -> discard, in this process: on the memory backend; on the disk
//! backend with its default cache, which the state fits; and with a 64 KiB cache, which
//! it does not (~5 times that), so keys are spilled and loaded back all along. Best of
//! three each. Records/s are the run's own figure; loads and writes are the stores' (0
//! for the memory backend).
//!
//! ```text
//! state-backend udf=change-only-counter backend=B cache_kib=C records_per_s=N memory_records_per_s=M ratio=R loads=L writes=W
//! ```
//!
//! Open orders (issue 40's goal 1, scaled down: [`SCALED_DOWN`]; at its size, 20,000,000
//! orders under 512 MiB, in the `state-backend-large` part: [`FULL_SIZE`]): the seed
//! 002 order timeout over N orders of one event each, 1 ms of event time apart, with a timeout
//! longer than the input, so every order is open (a value and a timer) until the end of
//! input fires them all; one `weir run` process each (file -> discard), on the memory
//! backend and on the disk backend with a 64 MiB (512 MiB) cache, records/s and peak
//! RSS from the summary:
//!
//! ```text
//! state-backend-open-orders orders=N backend=B cache_mib=C records_per_s=R peak_rss_mb=M
//! ```
//!
//! Checkpoints of that state (issue 40's goal 3): the disk run again with a checkpoint
//! every 2 s, stopped (SIGTERM) once its third checkpoint is on disk (at full size: every
//! 10 s, stopped once the input is read, so the whole state is checkpointed): the
//! checkpoints it took and the longest time one held processing up, and its peak RSS;
//! then the run that resumes from its last checkpoint to the end: the keys it restored
//! and the time from its start to the state restored (as it logs them), and its peak RSS.
//!
//! ```text
//! state-backend-checkpoints orders=N backend=disk cache_mib=C checkpoints=K longest_pause_ms=P peak_rss_mb=M restored_keys=R restore_ms=T restore_peak_rss_mb=S
//! ```

use crate::peak_rss_mb;
use crate::state_size::measure;
use crate::{best_of, DiscardPipeline};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::crash::newest_checkpoint;
use weir_e2e::weir_bin;
use weir_e2e::{component, datetime_millis, gen};
use weir_pipeline::{PipelineSpec, StateBackend, DEFAULT_STATE_CACHE};
use weir_run::{run, RunOptions};

/// One backend's run.
pub struct BackendRun {
    backend: &'static str,
    cache_kib: usize,
    records_per_s: f64,
    memory_records_per_s: f64,
    loads: u64,
    writes: u64,
}

impl BackendRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "state-backend udf=change-only-counter backend={} cache_kib={} records_per_s={:.0} memory_records_per_s={:.0} ratio={:.2} loads={} writes={}",
            self.backend,
            self.cache_kib,
            self.records_per_s,
            self.memory_records_per_s,
            self.records_per_s / self.memory_records_per_s,
            self.loads,
            self.writes
        )
    }
}

/// The counter of `spec` on each backend (see the module docs).
pub fn compare(spec: &PipelineSpec) -> anyhow::Result<Vec<BackendRun>> {
    let timed = |state: StateBackend| {
        let mut spec = spec.clone();
        spec.state = state;
        best_of(|| run(&spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}")))
    };
    let memory = timed(StateBackend::Memory)?;
    let mut runs = vec![BackendRun {
        backend: "memory",
        cache_kib: 0,
        records_per_s: memory.records_per_second(),
        memory_records_per_s: memory.records_per_second(),
        loads: 0,
        writes: 0,
    }];
    for cache_bytes in [DEFAULT_STATE_CACHE, 64 << 10] {
        let disk = timed(StateBackend::Disk { cache_bytes })?;
        anyhow::ensure!(
            disk.outputs == memory.outputs,
            "the disk backend must emit what the memory backend emits"
        );
        let store = disk.state_store.unwrap_or_default();
        runs.push(BackendRun {
            backend: "disk",
            cache_kib: cache_bytes >> 10,
            records_per_s: disk.records_per_second(),
            memory_records_per_s: memory.records_per_second(),
            loads: store.loads,
            writes: store.saves,
        });
    }
    Ok(runs)
}

/// The size of an open-orders case (each order open until the end of input).
#[derive(Debug, Clone, Copy)]
pub struct OpenOrders {
    /// Orders, one event each.
    pub orders: u64,
    /// The disk backend's cache.
    pub cache_mib: usize,
    /// Between two checkpoints of the checkpointed run.
    checkpoint_interval: &'static str,
    /// Whether the checkpointed run is stopped once its input is read (else once its
    /// third checkpoint is on disk).
    stop_once_read: bool,
}

/// The open orders of `make bench`'s `state-backend` part.
pub const SCALED_DOWN: OpenOrders = OpenOrders {
    orders: 2_000_000,
    cache_mib: 64,
    checkpoint_interval: "2s",
    stop_once_read: false,
};

/// The open orders of issue 40's goals (the `state-backend-large` part, in `full`).
pub const FULL_SIZE: OpenOrders = OpenOrders {
    orders: 20_000_000,
    cache_mib: 512,
    checkpoint_interval: "10s",
    stop_once_read: true,
};

impl OpenOrders {
    /// The input file, written if it is not there yet.
    fn input(&self, data: &Path) -> anyhow::Result<std::path::PathBuf> {
        let input = data.join(format!("orders-open-{}.jsonl", self.orders));
        if !input.exists() {
            eprintln!("generating {}", input.display());
            let partial = input.with_extension("partial");
            let mut out = BufWriter::new(std::fs::File::create(&partial)?);
            for order in 0..self.orders {
                writeln!(
                    out,
                    r#"{{"orderId":{order},"item":"tea","cost":"3.50","timestamp":"{}"}}"#,
                    datetime_millis(gen::BASE_MS + order as i64)
                )?;
            }
            out.flush()?;
            std::fs::rename(&partial, &input)?;
        }
        Ok(input)
    }
}

/// One backend's run over the open orders.
pub struct OpenOrdersRun {
    orders: u64,
    backend: &'static str,
    cache_mib: usize,
    records_per_s: f64,
    peak_rss_mb: f64,
}

impl OpenOrdersRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "state-backend-open-orders orders={} backend={} cache_mib={} records_per_s={:.0} peak_rss_mb={:.1}",
            self.orders,
            self.backend, self.cache_mib, self.records_per_s, self.peak_rss_mb
        )
    }
}

/// The open orders on each backend (see the module docs).
pub fn open_orders(data: &Path, size: OpenOrders) -> anyhow::Result<Vec<OpenOrdersRun>> {
    let input = size.input(data)?;
    let mut runs = Vec::new();
    for (backend, cache_mib) in [("memory", 0), ("disk", size.cache_mib)] {
        // `cache` is a setting of the disk backend only (the memory backend refuses it).
        let cache = match backend {
            "disk" => format!("cache = \"{cache_mib}MiB\"\n"),
            _ => String::new(),
        };
        let pipeline = open_orders_pipeline(data, &input, backend, &cache)?;
        let (records_per_s, peak_rss_mb) = measure(&pipeline, data)?;
        let run = OpenOrdersRun {
            orders: size.orders,
            backend,
            cache_mib,
            records_per_s,
            peak_rss_mb,
        };
        eprintln!("  {}", run.line());
        runs.push(run);
    }
    Ok(runs)
}

/// The open-orders pipeline on `backend` (`cache`: its `cache = ...` line, or nothing).
fn open_orders_pipeline(
    data: &Path,
    input: &Path,
    backend: &str,
    cache: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let lines =
        format!("[udf.config]\ntimeout = \"1000h\"\n\n[state]\nbackend = \"{backend}\"\n{cache}");
    let name = format!("state-backend-open-orders-{backend}");
    DiscardPipeline {
        name: &name,
        source: "input",
        input,
        key: "orderId",
        timestamp: "timestamp",
        out_of_orderness: "0s",
        udf: &component("order-timeout"),
        udf_lines: &lines,
    }
    .write(data)
}

/// A checkpointed run over the open orders and its restore (see the module docs).
pub struct CheckpointsRun {
    size: OpenOrders,
    checkpoints: u64,
    longest_pause_ms: f64,
    peak_rss_mb: f64,
    restored_keys: u64,
    restore_ms: f64,
    restore_peak_rss_mb: f64,
}

impl CheckpointsRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "state-backend-checkpoints orders={} backend=disk cache_mib={} checkpoints={} longest_pause_ms={:.1} peak_rss_mb={:.1} restored_keys={} restore_ms={:.0} restore_peak_rss_mb={:.1}",
            self.size.orders,
            self.size.cache_mib,
            self.checkpoints,
            self.longest_pause_ms,
            self.peak_rss_mb,
            self.restored_keys,
            self.restore_ms,
            self.restore_peak_rss_mb
        )
    }
}

/// The open orders on the disk backend with checkpoints, stopped after the third (or
/// once the input is read), then resumed to the end (see the module docs).
pub fn checkpoints(data: &Path, size: OpenOrders) -> anyhow::Result<CheckpointsRun> {
    let input = size.input(data)?;
    let input_bytes = std::fs::metadata(&input)?.len();
    let cache = format!("cache = \"{}MiB\"\n", size.cache_mib);
    let pipeline = open_orders_pipeline(data, &input, "disk", &cache)?;
    let state_dir = data.join("state-backend-checkpoints.state");
    let _ = std::fs::remove_dir_all(&state_dir);
    let run = |log: &Path| -> anyhow::Result<std::process::Child> {
        Ok(Command::new(weir_bin())
            .arg("run")
            .arg(&pipeline)
            .arg("--state-dir")
            .arg(&state_dir)
            .args(["--checkpoint-interval", size.checkpoint_interval])
            .arg("--dead-letter")
            .arg(data.join("state-backend-checkpoints.dead-letter.jsonl"))
            .env("WEIR_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()?)
    };
    // The first run, stopped once its third checkpoint is on disk.
    let first_log = data.join("state-backend-checkpoints.first.log");
    let mut first = run(&first_log)?;
    let limit = Instant::now() + Duration::from_secs(3_600);
    loop {
        let due = match size.stop_once_read {
            true => read_to(first.id(), &input) == Some(input_bytes),
            false => newest_checkpoint(&state_dir)
                .and_then(|name| {
                    let epoch = name.strip_prefix("checkpoint-")?.strip_suffix(".weir")?;
                    epoch.parse::<u64>().ok()
                })
                .is_some_and(|epoch| epoch >= 3),
        };
        if due || first.try_wait()?.is_some() || Instant::now() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    first.wait()?;
    let summary = std::fs::read_to_string(&first_log)?;
    let (checkpoints, longest_pause_ms) = summary
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("checkpoints: ")?;
            let (taken, pause) = rest.split_once(" taken, longest pause ")?;
            Some((
                taken.parse().ok()?,
                pause.strip_suffix(" ms")?.parse().ok()?,
            ))
        })
        .ok_or_else(|| anyhow::anyhow!("no checkpoints in the summary:\n{summary}"))?;
    anyhow::ensure!(
        summary.contains("stopped"),
        "the checkpointed run ended before it was stopped:\n{summary}"
    );
    let first_peak_rss_mb = peak_rss_mb(&summary)?;
    // The run that resumes, to the end.
    let second_log = data.join("state-backend-checkpoints.second.log");
    let status = run(&second_log)?.wait()?;
    let summary = std::fs::read_to_string(&second_log)?;
    anyhow::ensure!(status.success(), "the resumed run failed:\n{summary}");
    let (restored_keys, restore_ms) = summary
        .lines()
        .find_map(|l| {
            let rest = l.split_once("restored checkpoint ")?.1;
            let (keys, ms) = rest.split_once(": ")?.1.split_once(" keys in ")?;
            Some((keys.parse().ok()?, ms.split_once(" ms")?.0.parse().ok()?))
        })
        .ok_or_else(|| anyhow::anyhow!("no restore in the log:\n{summary}"))?;
    let run = CheckpointsRun {
        size,
        checkpoints,
        longest_pause_ms,
        peak_rss_mb: first_peak_rss_mb,
        restored_keys,
        restore_ms,
        restore_peak_rss_mb: peak_rss_mb(&summary)?,
    };
    eprintln!("  {}", run.line());
    Ok(run)
}

/// How far process `pid` has read `path` (its file position, from Linux's
/// `/proc/<pid>/fdinfo`), if it has it open.
fn read_to(pid: u32, path: &Path) -> Option<u64> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let fd = fds
        .flatten()
        .find(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))?;
    let info = std::fs::read_to_string(format!(
        "/proc/{pid}/fdinfo/{}",
        fd.file_name().to_string_lossy()
    ))
    .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|pos| pos.trim().parse().ok())
}
