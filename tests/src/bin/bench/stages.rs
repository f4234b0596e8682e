//! Pipelines of several stages (issue 39): the graph of `examples/ad-campaigns` (seed
//! 000's change-only count per ad carrying its campaign, then per campaign the sum of its
//! ads' counts) over 2,000,000 generated clicks over 1,000 ads in 50 campaigns, file ->
//! discard, every stage at parallelism 1 and then 2, against the one-stage counter
//! (without `carry`) over the same file at the same parallelism. Records/s are clicks
//! per second of wall clock, start-up included; CPU is the process's.
//!
//! ```text
//! stage-graph stages=2 clicks=2000000 parallelism=P records_per_s=N cpu_s=C one_stage_records_per_s=M ratio=R
//! ```

use crate::parallel::cpu_seconds;
use crate::DiscardPipeline;
use std::io::Write as _;
use std::path::Path;
use weir_e2e::gen;
use weir_e2e::{component, datetime_millis};
use weir_pipeline::{Overrides, StageGraph};
use weir_run::{run, run_graph, RunOptions};

/// The clicks of the comparison.
const CLICKS: usize = 2_000_000;
/// The ads they are over.
const ADS: u64 = 1_000;
/// The campaigns the ads are in: ad `ad-n` is in `c-(n % 50)`.
const CAMPAIGNS: u64 = 50;

/// One parallelism of the comparison.
pub struct StageGraphRun {
    parallelism: usize,
    records_per_s: f64,
    cpu_s: f64,
    one_stage_records_per_s: f64,
}

impl StageGraphRun {
    /// The machine-readable line.
    pub fn line(&self) -> String {
        format!(
            "stage-graph stages=2 clicks={CLICKS} parallelism={} records_per_s={:.0} cpu_s={:.2} one_stage_records_per_s={:.0} ratio={:.2}",
            self.parallelism,
            self.records_per_s,
            self.cpu_s,
            self.one_stage_records_per_s,
            self.records_per_s / self.one_stage_records_per_s
        )
    }
}

/// Writes the clicks with their campaigns, once.
fn ensure_clicks(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    crate::generate(path, |out| {
        for c in gen::clicks(CLICKS, ADS, 39, 10, 4_000, 0.001, 0.0) {
            let n: u64 = c.ad.trim_start_matches("ad-").parse()?;
            writeln!(
                out,
                r#"{{"ad_id":"{}","campaign_id":"c-{}","clicked_at":"{}"}}"#,
                c.ad,
                n % CAMPAIGNS,
                datetime_millis(c.ts)
            )?;
        }
        Ok(())
    })
}

/// The two-stage graph over `clicks`, written to `<data>/stage-graph.toml`.
fn graph(data: &Path, clicks: &Path, parallelism: usize) -> anyhow::Result<StageGraph> {
    let stages = weir_e2e::graphs::ad_campaigns_stages(clicks, (parallelism, parallelism));
    let text = format!(
        r#"name = "stage-graph"
{stages}
[[sink]]
stage = "per-campaign"
output = "main"
type = "discard"
"#
    );
    let path = data.join("stage-graph.toml");
    std::fs::write(&path, text)?;
    let overrides = Overrides {
        dead_letter: Some(data.join("stage-graph.dead-letter.jsonl")),
        no_checkpoints: true,
        ..Overrides::default()
    };
    StageGraph::load(&path, &overrides)
}

/// Runs the graph and the one-stage counter at parallelism 1 and 2.
pub fn compare(data: &Path) -> anyhow::Result<Vec<StageGraphRun>> {
    let clicks = data.join("clicks-2m-campaigns.jsonl");
    ensure_clicks(&clicks)?;
    let one_stage = DiscardPipeline {
        name: "stage-graph-one-stage",
        source: "clicks",
        input: &clicks,
        key: "ad_id",
        timestamp: "clicked_at",
        out_of_orderness: "5s",
        udf: &component("change-only-counter"),
        udf_lines: "[udf.config]\nwindow = \"5m\"\n",
    }
    .spec(data)?;
    let mut runs = Vec::new();
    for parallelism in [1, 2] {
        let mut spec = one_stage.clone();
        spec.parallelism = parallelism;
        let single = run(&spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
        let graph = graph(data, &clicks, parallelism)?;
        let before = cpu_seconds();
        let started = std::time::Instant::now();
        let report =
            run_graph(&graph, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
        let wall = started.elapsed().as_secs_f64();
        let cpu_s = cpu_seconds() - before;
        let (_, first) = &report.stages[0];
        anyhow::ensure!(
            first.outputs == single.outputs,
            "stage per-ad emitted {:?}, the one-stage counter {:?}",
            first.outputs,
            single.outputs
        );
        runs.push(StageGraphRun {
            parallelism,
            records_per_s: CLICKS as f64 / wall,
            cpu_s,
            one_stage_records_per_s: single.records_per_second(),
        });
    }
    Ok(runs)
}
