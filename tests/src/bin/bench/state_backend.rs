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

use crate::best_of;
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
