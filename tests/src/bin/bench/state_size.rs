//! Hot keys with big state: what a record costs as its key's state grows.
//!
//! - The seed 000 counter (`change-only-counter`: an ad's click times in one value state,
//!   a timer per click) on 2,000,000 clicks at ~10 ms of event time per click, over
//!   10,000, 1,000, 100 and 10 ads: about 3, 30, 300 and 3,000 clicks per ad in the
//!   5-minute window.
//! - The seed 002 order timeout (`order-timeout`: an order's items in one value state, one
//!   timer per order moved on every event) on 1,000,000 events, 1,000 orders open at a
//!   time, each closed after 1, 10 or 100 items (timeout 1 minute).
//!
//! - The Python twin of the counter (`udfs/python/change-only-counter`, its state in
//!   `weir.MarshalCodec`) on the first 100,000 of those clicks over 10,000, 1,000 and 100
//!   ads (`udf=python-change-only-counter`), and the same built with the batch export
//!   (`udf=python-batch-change-only-counter`): one call at a time, a Python UDF decodes
//!   and encodes a key's whole state on every click and timer, so its cost per record
//!   grows with the state; in a batch, once per key per batch.
//!
//! Each case is one `weir run` process (file -> discard), so the peak RSS is the case's
//! own; the figures are the ones its summary prints. One line per case:
//!
//! ```text
//! state-size udf=change-only-counter per_key=300 records_per_s=N peak_rss_mb=M
//! ```
//!
//! - State time-to-live: the `ttl-probe` test UDF puts one map entry for each of
//!   2,000,000 keys, 1 ms of event time apart, into a state with an event-time
//!   time-to-live of 10 s, and the same with a time-to-live longer than the input: with
//!   it, about 10,000 keys are live at a time and the host removes the rest on its own;
//!   without, all 2,000,000 stay.
//!
//! ```text
//! state-ttl ttl=10s keys=2000000 records_per_s=N peak_rss_mb=M
//! state-ttl ttl=none keys=2000000 records_per_s=N peak_rss_mb=M
//! ```
//!
//! - Timers of one hot key: 100,000, 200,000 and 400,000 event-time timers on one key,
//!   registered and then fired, through the engine's timer service and key table (as the
//!   operator does it, without a UDF): the time per timer must not grow with their number.
//!
//! ```text
//! hot-key-timers timers=400000 total_ms=T ns_per_timer=N
//! ```

use crate::{ensure_clicks, peak_rss_mb, DiscardPipeline};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use weir_core::state::KeyTable;
use weir_core::time::timers::{TimeDomain, TimerService};
use weir_e2e::{component, datetime_millis, gen, guest, guest_batched, weir_bin};

/// Ads per case: ~3, 30, 300 and 3,000 clicks per ad in the window.
const ADS: [(u64, u64); 4] = [(3, 10_000), (30, 1_000), (300, 100), (3_000, 10)];
/// Clicks of the Python counter's cases (the first of the 2,000,000: about 17 s at 300
/// clicks per ad), and their cases (without 3,000 clicks per ad, about 100 s).
const PYTHON_CLICKS: usize = 100_000;
const PYTHON_ADS: [(u64, u64); 3] = [(3, 10_000), (30, 1_000), (300, 100)];
const ORDER_EVENTS: u64 = 1_000_000;
const OPEN_ORDERS: u64 = 1_000;
const ITEMS_PER_ORDER: [u64; 3] = [1, 10, 100];

/// One case's figures.
pub struct StateSizeRun {
    pub udf: &'static str,
    /// About how many items a key holds: clicks per ad in the window, items per order.
    pub per_key: u64,
    pub records_per_s: f64,
    pub peak_rss_mb: f64,
}

impl StateSizeRun {
    pub fn line(&self) -> String {
        format!(
            "state-size udf={} per_key={} records_per_s={:.0} peak_rss_mb={:.1}",
            self.udf, self.per_key, self.records_per_s, self.peak_rss_mb
        )
    }
}

/// Keys (one record each) of the time-to-live case.
const TTL_KEYS: u64 = 2_000_000;

/// One time-to-live case's figures.
pub struct StateTtlRun {
    /// The time-to-live, or `none` (longer than the input).
    pub ttl: &'static str,
    pub records_per_s: f64,
    pub peak_rss_mb: f64,
}

impl StateTtlRun {
    pub fn line(&self) -> String {
        format!(
            "state-ttl ttl={} keys={TTL_KEYS} records_per_s={:.0} peak_rss_mb={:.1}",
            self.ttl, self.records_per_s, self.peak_rss_mb
        )
    }
}

/// The time-to-live cases: 10 s, and one longer than the input.
pub fn ttl_cases(data: &Path) -> anyhow::Result<Vec<StateTtlRun>> {
    let input = data.join("ttl-keys-2m.jsonl");
    if !input.exists() {
        eprintln!("generating {}", input.display());
        let mut out = BufWriter::new(std::fs::File::create(&input)?);
        for key in 0..TTL_KEYS {
            writeln!(
                out,
                r#"{{"k":"key-{key}","op":"put","f":"seen","v":"1","at":"{}"}}"#,
                datetime_millis(gen::BASE_MS + key as i64)
            )?;
        }
        out.flush()?;
    }
    let mut runs = Vec::new();
    for (ttl, config) in [("10s", "10s"), ("none", "1000h")] {
        let pipeline = pipeline(
            data,
            &format!("state-ttl-{ttl}"),
            &input,
            ("k", "at", "0s"),
            &component("ttl-probe"),
            &format!("[udf.config]\nttl = \"{config}\"\n"),
        )?;
        let (records_per_s, peak_rss_mb) = measure(&pipeline, data)?;
        let run = StateTtlRun {
            ttl,
            records_per_s,
            peak_rss_mb,
        };
        eprintln!("  {}", run.line());
        runs.push(run);
    }
    Ok(runs)
}

/// Runs every case; `only` picks one UDF's cases (`change-only-counter`, `order-timeout`).
pub fn matrix(data: &Path, only: Option<&str>) -> anyhow::Result<Vec<StateSizeRun>> {
    let mut runs = Vec::new();
    if only.is_none_or(|u| u == "change-only-counter") {
        for (per_key, ads) in ADS {
            let input = data.join(format!("clicks-2m-{ads}ads.jsonl"));
            ensure_clicks(&input, ads)?;
            let pipeline = pipeline(
                data,
                &format!("state-clicks-{per_key}"),
                &input,
                ("ad_id", "clicked_at", "5s"),
                &component("change-only-counter"),
                "",
            )?;
            runs.push(run_case("change-only-counter", per_key, &pipeline, data)?);
        }
    }
    if only.is_none_or(|u| u == "python-change-only-counter") {
        for (per_key, ads) in PYTHON_ADS {
            let all = data.join(format!("clicks-2m-{ads}ads.jsonl"));
            ensure_clicks(&all, ads)?;
            let input = data.join(format!("clicks-100k-{ads}ads.jsonl"));
            ensure_head(&all, &input, PYTHON_CLICKS)?;
            let udfs = [
                (
                    "python",
                    "python-change-only-counter",
                    guest("python", "change-only-counter"),
                ),
                (
                    "python-batch",
                    "python-batch-change-only-counter",
                    guest_batched("python", "change-only-counter"),
                ),
            ];
            for (lang, name, udf) in udfs {
                let pipeline = pipeline(
                    data,
                    &format!("state-clicks-{lang}-{per_key}"),
                    &input,
                    ("ad_id", "clicked_at", "5s"),
                    &udf,
                    "",
                )?;
                runs.push(run_case(name, per_key, &pipeline, data)?);
            }
        }
    }
    if only.is_none_or(|u| u == "order-timeout") {
        for items in ITEMS_PER_ORDER {
            let input = data.join(format!("orders-1m-{items}items.jsonl"));
            ensure_orders(&input, items)?;
            let pipeline = pipeline(
                data,
                &format!("state-orders-{items}"),
                &input,
                ("orderId", "timestamp", "0s"),
                &component("order-timeout"),
                "[udf.config]\ntimeout = \"1m\"\n",
            )?;
            runs.push(run_case("order-timeout", items, &pipeline, data)?);
        }
    }
    Ok(runs)
}

/// A file -> discard pipeline of one case, written to `<data>/<name>.toml`.
fn pipeline(
    data: &Path,
    name: &str,
    input: &Path,
    (key, timestamp, out_of_orderness): (&str, &str, &str),
    udf: &Path,
    udf_lines: &str,
) -> anyhow::Result<PathBuf> {
    DiscardPipeline {
        name,
        source: "input",
        input,
        key,
        timestamp,
        out_of_orderness,
        udf,
        udf_lines,
    }
    .write(data)
}

/// Writes the first `lines` lines of `all` to `head`, unless it exists.
fn ensure_head(all: &Path, head: &Path, lines: usize) -> anyhow::Result<()> {
    if head.exists() {
        return Ok(());
    }
    let mut out = BufWriter::new(std::fs::File::create(head)?);
    for line in BufReader::new(std::fs::File::open(all)?)
        .lines()
        .take(lines)
    {
        writeln!(out, "{}", line?)?;
    }
    out.flush()?;
    Ok(())
}

fn run_case(
    udf: &'static str,
    per_key: u64,
    pipeline: &Path,
    data: &Path,
) -> anyhow::Result<StateSizeRun> {
    let (records_per_s, peak_rss_mb) = measure(pipeline, data)?;
    let run = StateSizeRun {
        udf,
        per_key,
        records_per_s,
        peak_rss_mb,
    };
    eprintln!("  {}", run.line());
    Ok(run)
}

/// Runs a pipeline (once on its first line, to fill the compile cache, then whole):
/// its records/s and peak RSS, as its summary prints them.
pub(crate) fn measure(pipeline: &Path, data: &Path) -> anyhow::Result<(f64, f64)> {
    // A run on the input's first line first, so that the component is in the compile
    // cache: the peak RSS is then the run's own, not the compiler's.
    let toml = std::fs::read_to_string(pipeline)?;
    let input = toml
        .lines()
        .find_map(|l| l.strip_prefix("path = \"")?.strip_suffix('"'))
        .ok_or_else(|| anyhow::anyhow!("{} names no input", pipeline.display()))?;
    let mut line = String::new();
    BufReader::new(std::fs::File::open(input)?).read_line(&mut line)?;
    let first = data.join("state-size.first-line.jsonl");
    std::fs::write(&first, line)?;
    let warm = Command::new(weir_bin())
        .arg("run")
        .arg(pipeline)
        .arg("--no-checkpoints")
        .arg("--quiet")
        .arg("--input")
        .arg(format!("input={}", first.display()))
        .arg("--dead-letter")
        .arg(data.join("state-size.dead-letter.jsonl"))
        .status()?;
    anyhow::ensure!(
        warm.success(),
        "weir run {} on one line failed",
        pipeline.display()
    );
    let output = Command::new(weir_bin())
        .arg("run")
        .arg(pipeline)
        .arg("--no-checkpoints")
        .arg("--dead-letter")
        .arg(data.join("state-size.dead-letter.jsonl"))
        .output()?;
    let summary = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "weir run {} failed:\n{summary}",
        pipeline.display()
    );
    let records_per_s = summary
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(" s (")?;
            rest.strip_suffix(" records/s)")?.parse().ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no records/s in the summary:\n{summary}"))?;
    Ok((records_per_s, peak_rss_mb(&summary)?))
}

/// Order events 1 ms apart; each goes to one of the `OPEN_ORDERS` open orders at random,
/// and an order that has had `items` events is replaced by a new one.
fn ensure_orders(path: &Path, items: u64) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    eprintln!("generating {}", path.display());
    const ITEMS: [&str; 4] = ["tea", "coffee", "cake", "juice"];
    let mut rng = gen::Rng::new(7);
    let mut open: Vec<(u64, u64)> = (0..OPEN_ORDERS).map(|o| (o, 0)).collect();
    let mut next_order = OPEN_ORDERS;
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for event in 0..ORDER_EVENTS {
        let slot = rng.below(OPEN_ORDERS) as usize;
        let (order, count) = &mut open[slot];
        writeln!(
            out,
            r#"{{"orderId":{order},"item":"{}","cost":"{}.{:02}","timestamp":"{}"}}"#,
            ITEMS[rng.below(4) as usize],
            1 + rng.below(9),
            rng.below(100),
            datetime_millis(gen::BASE_MS + event as i64)
        )?;
        *count += 1;
        if *count == items {
            open[slot] = (next_order, 0);
            next_order += 1;
        }
    }
    out.flush()?;
    Ok(())
}

/// Registering and firing `n` event-time timers of one key.
pub struct HotKeyTimers {
    pub timers: i64,
    pub total: std::time::Duration,
}

impl HotKeyTimers {
    pub fn line(&self) -> String {
        format!(
            "hot-key-timers timers={} total_ms={:.0} ns_per_timer={:.0}",
            self.timers,
            self.total.as_secs_f64() * 1e3,
            self.total.as_secs_f64() * 1e9 / self.timers as f64
        )
    }
}

/// 100,000, 200,000 and 400,000 timers on one key, as the engine keeps them: in the timer
/// service, and on the key (so that a checkpoint can save the key whole).
pub fn hot_key_timers() -> Vec<HotKeyTimers> {
    [100_000, 200_000, 400_000]
        .into_iter()
        .map(|n| {
            let started = Instant::now();
            let mut keys = KeyTable::new();
            let mut timers = TimerService::new(0);
            let key = keys.intern(b"hot");
            let tie = keys.entry(key).tie_order();
            for at in 0..n {
                if timers.register(TimeDomain::EventTime, key, tie, at) {
                    keys.timer_added(key, TimeDomain::EventTime, at);
                }
            }
            let mut fired = 0;
            while let Some((at, id)) = timers.pop_event_due(n) {
                keys.timer_removed(id, TimeDomain::EventTime, at);
                fired += 1;
            }
            assert_eq!(fired, n, "every timer fires once");
            keys.release_if_unused(key);
            assert!(keys.is_empty(), "the key goes once its timers have fired");
            HotKeyTimers {
                timers: n,
                total: started.elapsed(),
            }
        })
        .collect()
}
