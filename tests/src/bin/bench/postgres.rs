//! File -> PostgreSQL: the first [`CLICKS`] of the bench's clicks through the change-only
//! counter, every count it emits upserted into a table of its own (10,000 ads, so the
//! sink's batches of 2,000 rows are mostly distinct ads). Best of three; after each run the
//! table must hold one row per ad of the input.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use weir_e2e::services::{
    counter_counts_to_postgres, counter_pipeline_text, postgres_url, unique_table,
};
use weir_pipeline::{Overrides, PipelineSpec};
use weir_run::{run, RunOptions, RunReport};

/// Clicks of the run: a quarter of the file -> discard runs', since each becomes a row.
const CLICKS: usize = 500_000;

/// The fastest run, and the rows its table held.
pub struct PostgresRun {
    pub report: RunReport,
    pub rows: i64,
}

impl PostgresRun {
    /// The machine-readable line of `make bench`.
    pub fn line(&self) -> String {
        format!(
            "postgres-sink records_per_s={:.0} emitted={} rows={}",
            self.report.records_per_second(),
            self.report.outputs[0].1,
            self.rows
        )
    }
}

/// Runs the counter into PostgreSQL `runs` times, each into a new table; returns the
/// fastest run.
pub fn throughput(data: &Path, clicks: &Path, runs: usize) -> anyhow::Result<PostgresRun> {
    let input = data.join("clicks-500k.jsonl");
    let mut ads = HashSet::new();
    let mut out = BufWriter::new(std::fs::File::create(&input)?);
    for line in BufReader::new(std::fs::File::open(clicks)?)
        .lines()
        .take(CLICKS)
    {
        let line = line?;
        let click: serde_json::Value = serde_json::from_str(&line)?;
        ads.insert(click["ad_id"].as_str().unwrap_or_default().to_string());
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    drop(out);
    let mut best: Option<PostgresRun> = None;
    for _ in 0..runs {
        let table = unique_table("bench_click_counts");
        let path = data.join("counter-postgres.toml");
        std::fs::write(
            &path,
            counter_pipeline_text(&input, &counter_counts_to_postgres(&table)),
        )?;
        let overrides = Overrides {
            dead_letter: Some(data.join("counter-postgres.dead-letter.jsonl")),
            no_checkpoints: true,
            ..Overrides::default()
        };
        let spec = PipelineSpec::load(&path, &overrides)?;
        let report = run(&spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))?;
        let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls)?;
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])?
            .get(0);
        anyhow::ensure!(
            rows == ads.len() as i64,
            "the table holds {rows} rows, not one per ad ({})",
            ads.len()
        );
        client.batch_execute(&format!("DROP TABLE \"{table}\""))?;
        if best
            .as_ref()
            .is_none_or(|b| report.elapsed < b.report.elapsed)
        {
            best = Some(PostgresRun { report, rows });
        }
    }
    best.ok_or_else(|| anyhow::anyhow!("no run"))
}
