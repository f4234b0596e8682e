//! Weir's side of the comparison with Flink 2.3 (heap state, the same machine): the
//! seed 000 algorithm (`udfs/change-only-counter`) over 10,000,000 generated JSON-lines
//! clicks over 1,000 ads (~300 clicks per ad in the 5-minute window), file -> discard,
//! at parallelism 1 and 2, wall clock including start-up and the process's CPU seconds.
//! Flink's figures on that file are in issue 38 (2.3, MiniCluster, parallelism 2:
//! ~275,000 records/s); the goal is twice that at equal parallelism.
//!
//! ```text
//! flink-compare udf=change-only-counter clicks=10000000 ads=1000 parallelism=P records_per_s=N cpu_s=C wall_s=W
//! ```

use crate::parallel::cpu_seconds;
use crate::DiscardPipeline;
use std::path::Path;
use weir_e2e::component;
use weir_run::{run, RunOptions, RunReport};

/// The clicks of the comparison.
const CLICKS: usize = 10_000_000;
/// The ads they are over.
const ADS: u64 = 1_000;
/// The parallelisms compared.
const PARALLELISMS: [usize; 2] = [1, 2];

/// One run of the comparison.
pub struct FlinkCompareRun {
    parallelism: usize,
    report: RunReport,
    cpu_s: f64,
}

impl FlinkCompareRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "flink-compare udf=change-only-counter clicks={CLICKS} ads={ADS} parallelism={} records_per_s={:.0} cpu_s={:.2} wall_s={:.2}",
            self.parallelism,
            self.report.records_per_second(),
            self.cpu_s,
            self.report.elapsed.as_secs_f64()
        )
    }
}

/// Runs the counter over the 10,000,000 clicks (generated once into `data`) at each
/// parallelism; checks that both emit as much.
pub fn compare(data: &Path) -> anyhow::Result<Vec<FlinkCompareRun>> {
    let clicks = data.join("clicks-10m-1000ads.jsonl");
    // ~1 ms apart on average: ~300 clicks per ad in a 5-minute window.
    crate::ensure_generated_clicks(&clicks, CLICKS, ADS, 38, 2)?;
    let spec = DiscardPipeline {
        name: "flink-compare",
        source: "clicks",
        input: &clicks,
        key: "ad_id",
        timestamp: "clicked_at",
        out_of_orderness: "5s",
        udf: &component("change-only-counter"),
        udf_lines: "",
    }
    .spec(data)?;
    let mut runs: Vec<FlinkCompareRun> = Vec::new();
    for parallelism in PARALLELISMS {
        let mut spec = spec.clone();
        spec.parallelism = parallelism;
        let before = cpu_seconds();
        let report = run(&spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
        let cpu_s = cpu_seconds() - before;
        if let Some(first) = runs.first() {
            anyhow::ensure!(
                report.outputs == first.report.outputs,
                "parallelism {parallelism} emitted {:?}, parallelism 1 {:?}",
                report.outputs,
                first.report.outputs
            );
        }
        runs.push(FlinkCompareRun {
            parallelism,
            report,
            cpu_s,
        });
    }
    Ok(runs)
}
