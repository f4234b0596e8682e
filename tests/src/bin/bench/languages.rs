//! UDFs in Python and JavaScript against their Rust twins: the cost per element, and how
//! long a run takes to start with and without the compile cache.
//!
//! - Per element: the seed 000 counter (Rust, Python) on the first 200,000 of the bench's
//!   clicks, and the seed 002 order timeout (Rust, JavaScript) on ~200,000 order events,
//!   file -> discard, in this process, best of three. The outputs of each pair must agree.
//!   The Python and JavaScript UDFs run as built by default (one call per element) and
//!   built with their SDK's batch export (`lang=python-batch`, `lang=js-batch`).
//! - Start-up: `weir run` of the seed's example pipeline on a one-record input, as a
//!   process: compiled from scratch (`--no-compile-cache`) and loaded from a warm cache;
//!   best of three wall-clock times each.

use crate::{best_of, DiscardPipeline, RUNS};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use weir_e2e::{component, datetime_millis, gen, guest, guest_batched, repo_root, weir_bin};
use weir_pipeline::PipelineSpec;
use weir_run::{run, RunOptions, RunReport};

const ELEMENTS: usize = 200_000;

/// Per-element figures of one language against Rust on the same UDF.
pub struct LanguageRun {
    pub lang: &'static str,
    pub udf: &'static str,
    pub report: RunReport,
    pub rust: RunReport,
}

impl LanguageRun {
    pub fn line(&self) -> String {
        let per_s = self.report.records_per_second();
        format!(
            "udf-language lang={} udf={} records_per_s={per_s:.0} us_per_element={:.1} rust_records_per_s={:.0}",
            self.lang,
            self.udf,
            1e6 / per_s,
            self.rust.records_per_second()
        )
    }
}

/// Start-up times of one UDF.
pub struct Startup {
    pub lang: &'static str,
    pub udf: &'static str,
    pub compiled: Duration,
    pub cached: Duration,
}

impl Startup {
    pub fn line(&self) -> String {
        format!(
            "udf-startup lang={} udf={} compile_ms={:.0} cached_ms={:.0}",
            self.lang,
            self.udf,
            self.compiled.as_secs_f64() * 1e3,
            self.cached.as_secs_f64() * 1e3
        )
    }
}

/// The per-element runs: Python against Rust on the counter, JavaScript on the orders.
pub fn per_element(data: &Path, clicks_2m: &Path) -> anyhow::Result<Vec<LanguageRun>> {
    let clicks = data.join("clicks-200k.jsonl");
    if !clicks.exists() {
        let text = std::fs::read_to_string(clicks_2m)?;
        let head: String = text
            .lines()
            .take(ELEMENTS)
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&clicks, head)?;
    }
    let orders = data.join("orders-200k.jsonl");
    if !orders.exists() {
        let events = gen::purchases(ELEMENTS as u64 / 3, 11, 0.2, 0.05);
        let mut out = BufWriter::new(std::fs::File::create(&orders)?);
        for e in &events {
            writeln!(out, "{}", e.to_json())?;
        }
        out.flush()?;
    }
    let counter = |udf: PathBuf| {
        DiscardPipeline {
            name: "lang-counter",
            source: "in",
            input: &clicks,
            key: "ad_id",
            timestamp: "clicked_at",
            out_of_orderness: "5s",
            udf: &udf,
            udf_lines: "",
        }
        .spec(data)
    };
    let timeout = |udf: PathBuf| {
        DiscardPipeline {
            name: "lang-orders",
            source: "in",
            input: &orders,
            key: "orderId",
            timestamp: "timestamp",
            out_of_orderness: "0s",
            udf: &udf,
            udf_lines: "",
        }
        .spec(data)
    };
    let pairs = [
        (
            "python",
            "change-only-counter",
            counter(guest("python", "change-only-counter"))?,
            counter(component("change-only-counter"))?,
        ),
        (
            "js",
            "order-timeout",
            timeout(guest("js", "order-timeout"))?,
            timeout(component("order-timeout"))?,
        ),
        (
            "python-batch",
            "change-only-counter",
            counter(guest_batched("python", "change-only-counter"))?,
            counter(component("change-only-counter"))?,
        ),
        (
            "js-batch",
            "order-timeout",
            timeout(guest_batched("js", "order-timeout"))?,
            timeout(component("order-timeout"))?,
        ),
    ];
    let mut runs = Vec::new();
    for (lang, udf, spec, rust_spec) in pairs {
        let once = |spec: &PipelineSpec| {
            run(spec, &RunOptions::default()).map_err(|f| anyhow::anyhow!("{f}"))
        };
        let report = best_of(|| once(&spec))?;
        let rust = best_of(|| once(&rust_spec))?;
        anyhow::ensure!(
            report.outputs == rust.outputs,
            "{lang} {udf} and its Rust twin disagree: {:?} vs {:?}",
            report.outputs,
            rust.outputs
        );
        runs.push(LanguageRun {
            lang,
            udf,
            report,
            rust,
        });
    }
    Ok(runs)
}

/// Start-up of each language's UDF on a one-record input, compiled and cached.
pub fn startup(data: &Path) -> anyhow::Result<Vec<Startup>> {
    let click = data.join("one-click.jsonl");
    std::fs::write(
        &click,
        format!(
            "{{\"ad_id\":\"ad-1\",\"clicked_at\":\"{}\"}}\n",
            datetime_millis(gen::BASE_MS)
        ),
    )?;
    let order = data.join("one-order.jsonl");
    std::fs::write(
        &order,
        format!(
            "{{\"orderId\":1,\"item\":\"tea\",\"cost\":\"3.50\",\"timestamp\":\"{}\"}}\n",
            datetime_millis(gen::BASE_MS)
        ),
    )?;
    let cases = [
        (
            "rust",
            "change-only-counter",
            component("change-only-counter"),
            "ad-clicks",
            "clicks",
            &click,
        ),
        (
            "python",
            "change-only-counter",
            guest("python", "change-only-counter"),
            "ad-clicks",
            "clicks",
            &click,
        ),
        (
            "rust",
            "order-timeout",
            component("order-timeout"),
            "orders",
            "orders",
            &order,
        ),
        (
            "js",
            "order-timeout",
            guest("js", "order-timeout"),
            "orders",
            "orders",
            &order,
        ),
    ];
    let cache = data.join("compile-cache");
    let mut startups = Vec::new();
    for (lang, udf, wasm, example, source, input) in cases {
        let pipeline = repo_root().join(format!("examples/{example}/pipeline.toml"));
        let time_run = |no_cache: bool| -> anyhow::Result<Duration> {
            let mut command = Command::new(weir_bin());
            command.arg("run");
            if no_cache {
                command.arg("--no-compile-cache");
            }
            let started = Instant::now();
            let output = command
                .args(["-q", "--no-checkpoints", "--udf"])
                .arg(&wasm)
                .arg(&pipeline)
                .arg("--input")
                .arg(format!("{source}={}", input.display()))
                .args(["--output", "main=/dev/null", "--dead-letter", "/dev/null"])
                .env("WEIR_CACHE_DIR", &cache)
                .output()?;
            let took = started.elapsed();
            anyhow::ensure!(
                output.status.success(),
                "weir run failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            Ok(took)
        };
        let best = |no_cache: bool| -> anyhow::Result<Duration> {
            (0..RUNS)
                .map(|_| time_run(no_cache))
                .try_fold(Duration::MAX, |best, t| Ok(best.min(t?)))
        };
        let compiled = best(true)?;
        time_run(false)?; // warms the cache
        let cached = best(false)?;
        startups.push(Startup {
            lang,
            udf,
            compiled,
            cached,
        });
    }
    Ok(startups)
}
