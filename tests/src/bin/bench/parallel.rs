//! The keyed shards' speed-up: the change-only counter, file -> discard, at parallelism
//! 1, 2 and 4, each with the CPU time the process used, and at 8, 16 and 64 shards on
//! the same cores: a simulation of a larger machine's per-record costs (what every shard
//! pays for the records of the others, and what the run's one reading thread pays),
//! since more shards than cores cannot be faster.

use crate::RUNS;
use weir_pipeline::PipelineSpec;
use weir_run::{run, RunOptions, RunReport};

/// The parallelisms measured.
pub const PARALLELISMS: [usize; 6] = [1, 2, 4, 8, 16, 64];

/// One parallelism's best run.
pub struct ParallelRun {
    /// The number of shards.
    pub parallelism: usize,
    /// The fastest run's report.
    pub report: RunReport,
    /// The CPU seconds (user and system, all threads) of that run.
    pub cpu_s: f64,
    /// The CPU seconds of the run's own thread (reading, decoding, merging, waiting
    /// for the shards): what one thread does for every shard.
    pub run_thread_cpu_s: f64,
}

impl ParallelRun {
    /// The machine-readable line; `base` is parallelism 1's rate.
    pub fn line(&self, base: f64) -> String {
        let rate = self.report.records_per_second();
        format!(
            "parallel-file-discard parallelism={} records_per_s={rate:.0} cpu_s={:.2} wall_s={:.2} speedup={:.2} run_thread_cpu_s={:.2}",
            self.parallelism,
            self.cpu_s,
            self.report.elapsed.as_secs_f64(),
            rate / base,
            self.run_thread_cpu_s
        )
    }
}

/// CPU seconds this process has used so far, over all its threads.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// CPU seconds the calling thread has used so far.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: clock_gettime only writes into the struct it is given.
    let time = unsafe {
        let mut time = std::mem::zeroed::<libc::timespec>();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time);
        time
    };
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

/// Runs `spec` (the counter, file -> discard) at each of [`PARALLELISMS`], alternating
/// between them run by run so that a drift in the machine's speed hits all alike; keeps
/// each one's fastest of [`RUNS`]. Checks that every parallelism emits as many records.
pub fn speedup(spec: &PipelineSpec) -> anyhow::Result<Vec<ParallelRun>> {
    let mut best: Vec<Option<ParallelRun>> = PARALLELISMS.iter().map(|_| None).collect();
    for _ in 0..RUNS {
        for (slot, &parallelism) in best.iter_mut().zip(&PARALLELISMS) {
            let mut spec = spec.clone();
            spec.parallelism = parallelism;
            let before = cpu_seconds();
            let thread_before = thread_cpu_seconds();
            // The run is driven on this thread.
            let report = run(&spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
            let run_thread_cpu_s = thread_cpu_seconds() - thread_before;
            let cpu_s = cpu_seconds() - before;
            if slot
                .as_ref()
                .is_none_or(|b| report.elapsed < b.report.elapsed)
            {
                *slot = Some(ParallelRun {
                    parallelism,
                    report,
                    cpu_s,
                    run_thread_cpu_s,
                });
            }
        }
    }
    let runs: Vec<ParallelRun> = best.into_iter().flatten().collect();
    for r in &runs[1..] {
        anyhow::ensure!(
            r.report.outputs == runs[0].report.outputs
                && r.report.event_timers == runs[0].report.event_timers,
            "parallelism {} emitted {:?} and fired {} timers, parallelism 1 {:?} and {}",
            r.parallelism,
            r.report.outputs,
            r.report.event_timers,
            runs[0].report.outputs,
            runs[0].report.event_timers
        );
    }
    Ok(runs)
}
