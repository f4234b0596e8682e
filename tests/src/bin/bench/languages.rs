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
//!   best of three wall-clock times each, with that run's peak RSS; and the peak RSS of
//!   the same pipeline over the per-element input, from the warm cache.
//! - The Python edit loop: `weir dev` of a new Python project, and the time from saving
//!   app.py to the new version swapped in (through the development runtime).

use crate::{best_of, DiscardPipeline, RUNS};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use weir_e2e::{
    component, datetime_millis, gen, guest, guest_batched, new_project, repo_root, wait_for,
    weir_bin, StderrLog,
};
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

/// Start-up times of one UDF, with the peak RSS of each kind of start, and the peak RSS
/// of a whole run over the per-element input.
pub struct Startup {
    pub lang: &'static str,
    pub udf: &'static str,
    pub compiled: Measured,
    pub cached: Measured,
    /// `weir run` of the same pipeline on the per-element input (~200,000 records), with
    /// the component from the warm cache.
    pub full_run: Measured,
}

/// The wall-clock time and peak RSS of one `weir run` process.
#[derive(Clone, Copy)]
pub struct Measured {
    pub took: Duration,
    pub peak_rss_mb: f64,
}

impl Startup {
    pub fn line(&self) -> String {
        format!(
            "udf-startup lang={} udf={} compile_ms={:.0} cached_ms={:.0} compile_peak_rss_mb={:.0} cached_peak_rss_mb={:.0}",
            self.lang,
            self.udf,
            self.compiled.took.as_secs_f64() * 1e3,
            self.cached.took.as_secs_f64() * 1e3,
            self.compiled.peak_rss_mb,
            self.cached.peak_rss_mb
        )
    }

    /// The peak RSS of a whole run, from the warm cache.
    pub fn memory_line(&self) -> String {
        format!(
            "udf-memory lang={} udf={} records={ELEMENTS} peak_rss_mb={:.0} run_s={:.2}",
            self.lang,
            self.udf,
            self.full_run.peak_rss_mb,
            self.full_run.took.as_secs_f64()
        )
    }
}

/// Runs `command` (a `weir run` without `-q`) as a process to its end: its wall-clock
/// time and the peak RSS its summary reports (the kernel's high-water mark of that
/// process's own memory; `wait4`'s figure would count this process's memory at the fork).
fn measure(command: &mut Command) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let output = command.stdin(std::process::Stdio::null()).output()?;
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "weir run failed: {stderr}");
    let peak_rss_mb = stderr
        .lines()
        .find_map(|line| line.trim().strip_prefix("peak memory (RSS): "))
        .and_then(|rest| rest.strip_suffix(" MB"))
        .and_then(|mb| mb.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no peak memory in the summary of weir run: {stderr}"))?;
    Ok(Measured { took, peak_rss_mb })
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
    // The per-element inputs, which `per_element` writes.
    let clicks = data.join("clicks-200k.jsonl");
    let orders = data.join("orders-200k.jsonl");
    anyhow::ensure!(
        clicks.exists() && orders.exists(),
        "languages::startup needs the inputs of languages::per_element"
    );
    let cases = [
        (
            "rust",
            "change-only-counter",
            component("change-only-counter"),
            "ad-clicks",
            "clicks",
            (&click, &clicks),
        ),
        (
            "python",
            "change-only-counter",
            guest("python", "change-only-counter"),
            "ad-clicks",
            "clicks",
            (&click, &clicks),
        ),
        (
            "rust",
            "order-timeout",
            component("order-timeout"),
            "orders",
            "orders",
            (&order, &orders),
        ),
        (
            "js",
            "order-timeout",
            guest("js", "order-timeout"),
            "orders",
            "orders",
            (&order, &orders),
        ),
    ];
    let cache = data.join("compile-cache");
    let mut startups = Vec::new();
    for (lang, udf, wasm, example, source, (one, full)) in cases {
        let pipeline = repo_root().join(format!("examples/{example}/pipeline.toml"));
        let time_run = |no_cache: bool, input: &Path| -> anyhow::Result<Measured> {
            let mut command = Command::new(weir_bin());
            command.arg("run");
            if no_cache {
                command.arg("--no-compile-cache");
            }
            command
                .args(["--no-checkpoints", "--udf"])
                .arg(&wasm)
                .arg(&pipeline)
                .arg("--input")
                .arg(format!("{source}={}", input.display()))
                .args(["--output", "main=/dev/null", "--dead-letter", "/dev/null"])
                .env("WEIR_CACHE_DIR", &cache);
            measure(&mut command)
        };
        // The fastest of [`RUNS`], with that run's peak RSS.
        let best = |no_cache: bool| -> anyhow::Result<Measured> {
            let runs = (0..RUNS)
                .map(|_| time_run(no_cache, one))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(runs.into_iter().min_by_key(|m| m.took).expect("RUNS > 0"))
        };
        let compiled = best(true)?;
        time_run(false, one)?; // warms the cache
        let cached = best(false)?;
        let full_run = time_run(false, full)?;
        startups.push(Startup {
            lang,
            udf,
            compiled,
            cached,
            full_run,
        });
    }
    Ok(startups)
}

/// How many saves the edit loop times.
const SAVES: usize = 3;

/// The Python edit loop: `weir dev` of a project as `weir new --lang python` makes it,
/// and the time from saving app.py to the new version swapped into the live run.
pub struct EditLoop {
    /// From starting `weir dev` to it watching the sources (the development runtime
    /// compiled or loaded from the cache, the run started).
    pub dev_start: Duration,
    /// The fastest of [`SAVES`] saves, from the write of app.py (seen from outside) to
    /// `weir dev` logging the swap.
    pub save_to_swapped: Duration,
    /// The slowest of them.
    pub save_to_swapped_worst: Duration,
}

impl EditLoop {
    pub fn line(&self) -> String {
        format!(
            "udf-edit-loop lang=python save_to_swapped_ms={:.0} worst_ms={:.0} dev_start_s={:.1}",
            self.save_to_swapped.as_secs_f64() * 1e3,
            self.save_to_swapped_worst.as_secs_f64() * 1e3,
            self.dev_start.as_secs_f64()
        )
    }
}

/// Times the Python edit loop (see [`EditLoop`]); every save must be swapped in through
/// the development runtime, without a build.
pub fn python_edit_loop(data: &Path) -> anyhow::Result<EditLoop> {
    let parent = data.join("edit-loop");
    if parent.exists() {
        std::fs::remove_dir_all(&parent)?;
    }
    let dir = new_project(&parent, "py-sessions", "python");
    let started = Instant::now();
    let mut child = Command::new(weir_bin())
        .args(["dev", "pipeline.toml", "--input", "events=-"])
        .current_dir(&dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("WEIR_CACHE_DIR", data.join("compile-cache"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let log = StderrLog::capture(&mut child);
    wait_for("weir dev to start", Duration::from_secs(600), || {
        log.contains("watching app.py")
    });
    let dev_start = started.elapsed();
    let app = dir.join("app.py");
    let mut saves = Vec::new();
    let mut current = "\"events\": session.events,".to_string();
    for save in 1..=SAVES {
        let text = std::fs::read_to_string(&app)?;
        anyhow::ensure!(text.matches(&current).count() == 1, "app.py changed shape");
        let next = format!("\"events\": session.events + {save},");
        let saved = Instant::now();
        std::fs::write(&app, text.replace(&current, &next))?;
        current = next;
        // Polled every 2 ms (`wait_for` polls every 20 ms, a tenth of what is timed).
        let mut swapped = None;
        while saved.elapsed() < Duration::from_secs(120) {
            if log.count("weir dev: reloaded") == save {
                swapped = Some(saved.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let took = swapped
            .ok_or_else(|| anyhow::anyhow!("save {save} was not swapped in: {}", log.text()))?;
        saves.push(took);
    }
    drop(child.stdin.take()); // the end of input: the run ends
    let status = child.wait()?;
    let text = log.finish();
    anyhow::ensure!(status.success(), "weir dev failed: {text}");
    let through_runtime = text
        .matches("Python development runtime) — build 0.00 s")
        .count();
    anyhow::ensure!(
        through_runtime == SAVES,
        "{through_runtime} of {SAVES} saves went through the development runtime: {text}"
    );
    Ok(EditLoop {
        dev_start,
        save_to_swapped: *saves.iter().min().expect("SAVES > 0"),
        save_to_swapped_worst: *saves.iter().max().expect("SAVES > 0"),
    })
}
