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
//! Open orders (issue 40's goal 1, scaled down): the seed 002 order timeout over
//! `OPEN_ORDERS` orders of one event each, 1 ms of event time apart, with a timeout
//! longer than the input, so every order is open (a value and a timer) until the end of
//! input fires them all; one `weir run` process each (file -> discard), on the memory
//! backend and on the disk backend with a 64 MiB cache, records/s and peak RSS from the
//! summary:
//!
//! ```text
//! state-backend-open-orders orders=N backend=B cache_mib=C records_per_s=R peak_rss_mb=M
//! ```

use crate::state_size::measure;
use crate::{best_of, DiscardPipeline};
use std::io::{BufWriter, Write};
use std::path::Path;
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

/// Orders of the open-orders case (each open until the end of input).
pub const OPEN_ORDERS: u64 = 2_000_000;

/// One backend's run over the open orders.
pub struct OpenOrdersRun {
    backend: &'static str,
    cache_mib: usize,
    records_per_s: f64,
    peak_rss_mb: f64,
}

impl OpenOrdersRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "state-backend-open-orders orders={OPEN_ORDERS} backend={} cache_mib={} records_per_s={:.0} peak_rss_mb={:.1}",
            self.backend, self.cache_mib, self.records_per_s, self.peak_rss_mb
        )
    }
}

/// The open orders on each backend (see the module docs).
pub fn open_orders(data: &Path) -> anyhow::Result<Vec<OpenOrdersRun>> {
    let input = data.join(format!("orders-open-{OPEN_ORDERS}.jsonl"));
    if !input.exists() {
        eprintln!("generating {}", input.display());
        let mut out = BufWriter::new(std::fs::File::create(&input)?);
        for order in 0..OPEN_ORDERS {
            writeln!(
                out,
                r#"{{"orderId":{order},"item":"tea","cost":"3.50","timestamp":"{}"}}"#,
                datetime_millis(gen::BASE_MS + order as i64)
            )?;
        }
        out.flush()?;
    }
    let mut runs = Vec::new();
    for (backend, cache_mib) in [("memory", 0), ("disk", 64)] {
        // `cache` is a setting of the disk backend only (the memory backend refuses it).
        let cache = match backend {
            "disk" => format!("cache = \"{cache_mib}MiB\"\n"),
            _ => String::new(),
        };
        let lines = format!(
            "[udf.config]\ntimeout = \"1000h\"\n\n[state]\nbackend = \"{backend}\"\n{cache}"
        );
        let name = format!("state-backend-open-orders-{backend}");
        let pipeline = DiscardPipeline {
            name: &name,
            source: "input",
            input: &input,
            key: "orderId",
            timestamp: "timestamp",
            out_of_orderness: "0s",
            udf: &component("order-timeout"),
            udf_lines: &lines,
        }
        .write(data)?;
        let (records_per_s, peak_rss_mb) = measure(&pipeline, data)?;
        let run = OpenOrdersRun {
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
