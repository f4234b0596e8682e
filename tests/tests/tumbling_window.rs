//! Seed 001 end to end: the tumbling-window component through `weir run` on
//! `examples/taxi-revenue/pipeline.toml` (upsert sink with changelog, `late` side output),
//! on generated rides with out-of-order data, rides late within and beyond the allowed
//! lateness, duplicates, exact-cent amounts in every notation and lines the host refuses.
//! Compared with a batch `GROUP BY window_start, PULocationID` and an independent model
//! of the watermark, written here. The sample rides' exact rows and a ride without a valid
//! amount are golden cases: `tests/cases/taxi-revenue-*`.

use chrono::DateTime;
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use weir_e2e::gen::Rng;
use weir_e2e::{datetime_millis, read_jsonl, weir, Workdir};

/// 2025-11-01 00:00:00 UTC, the month of the seed's taxi data.
const BASE_MS: i64 = 1_761_955_200_000;
const OUT_OF_ORDERNESS: i64 = 5_000;
const HOUR: i64 = 3_600_000;
const ZONES: [i64; 12] = [4, 13, 48, 68, 79, 132, 138, 161, 162, 230, 236, 237];

/// One input line: a ride, or a line the host refuses (no key or no timestamp).
#[derive(Clone, Debug)]
enum Line {
    Ride(Ride),
    Refused(String),
}

#[derive(Clone, Debug)]
struct Ride {
    text: String,
    pu: i64,
    ts: i64,
    /// `total_amount` as written in the line (a JSON number, or a quoted string).
    amount: String,
}

impl Line {
    fn text(&self) -> &str {
        match self {
            Line::Ride(r) => &r.text,
            Line::Refused(t) => t,
        }
    }
}

/// `total_amount` in one of the notations the UDF takes, for `cents` cents (plus a
/// thousandth with three decimals, to exercise rounding).
fn amount_text(rng: &mut Rng, cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let (whole, frac) = (cents.abs() / 100, cents.abs() % 100);
    match rng.below(10) {
        0 => format!("{sign}{whole}.{frac:02}{}", rng.below(10)), // 3 places: .xx5 ties
        1 => format!("\"{sign}{whole}.{frac:02}\""),              // a string
        2 => format!("{cents}e-2"),                               // an exponent
        3 => format!("{sign}{whole}"),                            // an integer
        4 => format!("{sign}{whole}.{frac:02}0000000000000000001"), // beyond f64
        _ => {
            // As Python writes floats: trailing zeros dropped.
            let text = format!("{sign}{whole}.{frac:02}");
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// `n` lines of rides over `ZONES`, about `step_ms` apart on average. Rides are out of
/// order within the watermark bound; with probability `late` one is 5 s to 20 min older
/// (often still in its window, sometimes a correction), and with `very_late` 20 min to
/// 3 h older (a correction within the default hour of lateness, or beyond it). Some lines
/// repeat an earlier ride exactly, some lack the key or the timestamp, and sometimes the
/// stream goes quiet for up to 3 hours.
fn rides(n: usize, seed: u64, step_ms: u64, late: f64, very_late: f64) -> Vec<Line> {
    let mut rng = Rng::new(seed);
    let mut clock = BASE_MS + 7 * 60_000;
    let mut lines: Vec<Line> = Vec::with_capacity(n);
    while lines.len() < n {
        clock += rng.below(2 * step_ms + 1) as i64;
        if rng.chance(0.01) {
            clock += (HOUR / 2) + rng.below(3 * HOUR as u64) as i64;
        }
        if !lines.is_empty() && rng.chance(0.01) {
            let earlier = lines.len() - 1 - rng.below(lines.len().min(20) as u64) as usize;
            lines.push(lines[earlier].clone());
            continue;
        }
        let mut ts = clock - rng.below(4_001) as i64;
        if rng.chance(late) {
            ts -= 5_000 + rng.below(1_195_000) as i64;
        } else if rng.chance(very_late) {
            ts -= 1_200_000 + rng.below(3 * HOUR as u64 - 1_200_000) as i64;
        }
        // Near a 10-minute boundary B, often exactly B - 1 (a window's last instant, or
        // its close), B, or B + 5 s - 1 (the watermark lands on B - 1): the edge cases of
        // "fires when watermark >= end - 1" and "accepted while end - 1 + lateness > wm".
        let boundary = (ts + 300_000).div_euclid(600_000) * 600_000;
        if (ts - boundary).abs() < 90_000 && rng.chance(0.6) {
            ts = boundary + [-1, 0, OUT_OF_ORDERNESS - 1][rng.below(3) as usize];
        }
        let pu = ZONES[rng.below(ZONES.len() as u64) as usize];
        let dropoff = ZONES[rng.below(ZONES.len() as u64) as usize];
        let distance = format!("{}.{}", rng.below(25), rng.below(10));
        let cents = rng.below(15_000) as i64 - 300; // some refunds
        let amount = amount_text(&mut rng, cents);
        if rng.chance(0.005) {
            // The host refuses these (dead letters): no key, or no event time.
            let text = if rng.chance(0.5) {
                format!(
                    r#"{{"DOLocationID": {dropoff}, "total_amount": {amount}, "tpep_pickup_datetime": {ts}}}"#
                )
            } else {
                format!(r#"{{"PULocationID": {pu}, "total_amount": {amount}}}"#)
            };
            lines.push(Line::Refused(text));
            continue;
        }
        let text = format!(
            r#"{{"PULocationID": {pu}, "DOLocationID": {dropoff}, "trip_distance": {distance}, "total_amount": {amount}, "tpep_pickup_datetime": {ts}}}"#
        );
        lines.push(Line::Ride(Ride {
            text,
            pu,
            ts,
            amount,
        }));
    }
    lines
}

/// The exact amount in cents, rounded half away from zero, read with `rust_decimal`.
fn cents(amount: &str) -> i64 {
    let text = amount.trim_matches('"');
    let exact = if text.contains(['e', 'E']) {
        Decimal::from_scientific(text)
    } else {
        Decimal::from_str(text)
    }
    .unwrap_or_else(|e| panic!("{text}: {e}"));
    let rounded = exact.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    (rounded * Decimal::ONE_HUNDRED)
        .trunc()
        .to_string()
        .parse()
        .unwrap()
}

fn revenue_text(cents: i64) -> String {
    Decimal::new(cents, 2).to_string()
}

fn window_start_text(start: i64) -> String {
    DateTime::from_timestamp_millis(start)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// An upsert key: (window_start, PULocationID).
type WindowKey = (String, i64);

/// What the pipeline should produce, by simulating the watermark line by line.
#[derive(Debug, Default)]
struct Expected {
    /// Per window and zone: the rows emitted, in order (the firing, then corrections).
    changes: BTreeMap<WindowKey, Vec<Value>>,
    /// The rides too late for their window, as JSON, each with the reason.
    late: Vec<Value>,
    refused: usize,
}

fn row(key: &WindowKey, trips: u64, cents: i64) -> Value {
    serde_json::json!({
        "window_start": key.0,
        "PULocationID": key.1,
        "num_trips": trips,
        "total_revenue": revenue_text(cents),
    })
}

/// Flink's tumbling windows with allowed lateness, re-derived: a window `[s, e)` fires
/// once the watermark is at least `e - 1`, takes a ride while `e - 1 + lateness` is past
/// the watermark (publishing the correction if it fired already), and refuses it after.
fn model(lines: &[Line], size: i64, lateness: i64) -> Expected {
    struct Open {
        key: WindowKey,
        last: i64,
        trips: u64,
        cents: i64,
        fired: bool,
    }
    let mut expected = Expected::default();
    let mut windows: Vec<Open> = Vec::new();
    let mut max_ts: Option<i64> = None;
    for line in lines {
        let Line::Ride(ride) = line else {
            expected.refused += 1;
            continue;
        };
        let watermark = max_ts.map_or(i64::MIN, |m| m - OUT_OF_ORDERNESS - 1);
        let start = ride.ts.div_euclid(size) * size;
        let last = start + size - 1;
        let key = (window_start_text(start), ride.pu);
        if last + lateness <= watermark {
            let mut value: Value = serde_json::from_str(&ride.text).unwrap();
            value["reason"] = Value::from(format!(
                "too late: window {} closed at watermark {}, now {}",
                key.0,
                datetime_millis(last + lateness),
                datetime_millis(watermark)
            ));
            expected.late.push(value);
        } else {
            let i = match windows.iter().position(|w| w.key == key) {
                Some(i) => i,
                None => {
                    windows.push(Open {
                        key: key.clone(),
                        last,
                        trips: 0,
                        cents: 0,
                        fired: false,
                    });
                    windows.len() - 1
                }
            };
            let w = &mut windows[i];
            w.trips += 1;
            w.cents += cents(&ride.amount);
            if last <= watermark {
                w.fired = true;
                expected
                    .changes
                    .entry(key.clone())
                    .or_default()
                    .push(row(&key, w.trips, w.cents));
            }
        }
        max_ts = Some(max_ts.map_or(ride.ts, |m| m.max(ride.ts)));
        let watermark = max_ts.unwrap() - OUT_OF_ORDERNESS - 1;
        for w in windows
            .iter_mut()
            .filter(|w| !w.fired && w.last <= watermark)
        {
            w.fired = true;
            expected
                .changes
                .entry(w.key.clone())
                .or_default()
                .push(row(&w.key, w.trips, w.cents));
        }
    }
    for w in windows.iter_mut().filter(|w| !w.fired) {
        expected
            .changes
            .entry(w.key.clone())
            .or_default()
            .push(row(&w.key, w.trips, w.cents));
    }
    expected
}

/// The batch query: `SELECT window_start, PULocationID, COUNT(*), SUM(total_amount)
/// GROUP BY 1, 2` over `rides`, amounts rounded per ride.
fn group_by(rides: &[&Ride], size: i64) -> BTreeMap<WindowKey, Value> {
    let mut groups: BTreeMap<WindowKey, (u64, i64)> = BTreeMap::new();
    for ride in rides {
        let key = (window_start_text(ride.ts.div_euclid(size) * size), ride.pu);
        let group = groups.entry(key).or_default();
        group.0 += 1;
        group.1 += cents(&ride.amount);
    }
    groups
        .into_iter()
        .map(|(key, (trips, cents))| {
            let value = row(&key, trips, cents);
            (key, value)
        })
        .collect()
}

fn key_of(row: &Value) -> WindowKey {
    (
        row["window_start"].as_str().unwrap().to_string(),
        row["PULocationID"].as_i64().unwrap(),
    )
}

/// The outputs of one run.
struct Outputs {
    table: Vec<Value>,
    changelog: Vec<Value>,
    late: Vec<Value>,
    dead: Vec<Value>,
    stderr: String,
}

/// Runs a copy of the example pipeline in `work` (so the changelog, which the file
/// names relative to itself, lands there too) on `lines`.
fn run(work: &Workdir, lines: &[Line], udf_lines: &str, extra: &[&str]) -> Outputs {
    let text: String = lines.iter().map(|l| format!("{}\n", l.text())).collect();
    let input = work.write("rides.jsonl", &text);
    run_on(work, &input, udf_lines, extra)
}

fn run_on(work: &Workdir, input: &str, udf_lines: &str, extra: &[&str]) -> Outputs {
    let pipeline = weir_e2e::example_variant(work, "taxi-revenue", udf_lines);
    let table = work.path("revenue.jsonl").display().to_string();
    let late = work.path("late.jsonl").display().to_string();
    let dead = work.path("dead.jsonl").display().to_string();
    let input_arg = format!("rides={input}");
    let table_arg = format!("main={table}");
    let late_arg = format!("late={late}");
    let mut args = vec![
        "run",
        &pipeline,
        "--input",
        &input_arg,
        "--output",
        &table_arg,
        "--output",
        &late_arg,
        "--dead-letter",
        &dead,
    ];
    args.extend_from_slice(extra);
    let finished = weir(&args);
    finished.assert_success();
    Outputs {
        table: read_jsonl(&table),
        changelog: read_jsonl(work.path("out/revenue.changelog.jsonl")),
        late: read_jsonl(&late),
        dead: read_jsonl(&dead),
        stderr: finished.stderr,
    }
}

/// A multiset of JSON values, comparable whatever their order.
fn multiset(values: impl IntoIterator<Item = Value>) -> BTreeMap<String, usize> {
    let mut set = BTreeMap::new();
    for v in values {
        *set.entry(v.to_string()).or_default() += 1;
    }
    set
}

/// Checks one run against the batch query and the model.
fn check(lines: &[Line], out: &Outputs, size: i64, lateness: i64, what: &str) -> Expected {
    let expected = model(lines, size, lateness);

    // The rides in `late` are exactly those the model says are too late, with its reason.
    assert_eq!(
        multiset(out.late.iter().cloned()),
        multiset(expected.late.iter().cloned()),
        "late rides, {what}"
    );

    // The final table is the GROUP BY over every ride not in `late`.
    let mut late_left: HashMap<String, usize> = HashMap::new();
    for ride in &out.late {
        let mut ride = ride.clone();
        ride.as_object_mut().unwrap().remove("reason");
        *late_left.entry(ride.to_string()).or_default() += 1;
    }
    let mut counted: Vec<&Ride> = Vec::new();
    for line in lines {
        let Line::Ride(ride) = line else { continue };
        let value: Value = serde_json::from_str(&ride.text).unwrap();
        match late_left.get_mut(&value.to_string()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => counted.push(ride),
        }
    }
    assert!(
        late_left.values().all(|&n| n == 0),
        "late rides not in the input, {what}"
    );
    let batch = group_by(&counted, size);
    let table: BTreeMap<WindowKey, Value> =
        out.table.iter().map(|r| (key_of(r), r.clone())).collect();
    assert_eq!(table.len(), out.table.len(), "one row per key, {what}");
    assert_eq!(table, batch, "final table vs GROUP BY, {what}");

    // Every change: per key, the firing and then one correction per accepted late ride.
    let mut changes: BTreeMap<WindowKey, Vec<Value>> = BTreeMap::new();
    for r in &out.changelog {
        changes.entry(key_of(r)).or_default().push(r.clone());
    }
    assert_eq!(changes, expected.changes, "changelog per key, {what}");

    assert_eq!(out.dead.len(), expected.refused, "dead letters, {what}");
    expected
}

#[test]
fn final_table_is_the_group_by_of_the_rides_not_too_late() {
    let lines = rides(4_000, 1, 30_000, 0.05, 0.03);
    let work = Workdir::new();
    let out = run(&work, &lines, "", &[]);
    let expected = check(&lines, &out, HOUR, HOUR, "default config");

    // The input exercised what it is meant to.
    let corrections = out.changelog.len() - out.table.len();
    assert!(out.table.len() > 300, "{} rows", out.table.len());
    assert!(corrections > 40, "{corrections} corrections");
    assert!(expected.late.len() > 20, "{} too late", expected.late.len());
    assert!(expected.refused > 5, "{} refused", expected.refused);
    let rides: Vec<&Ride> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Ride(r) => Some(r),
            Line::Refused(_) => None,
        })
        .collect();
    let duplicates =
        rides.len() - multiset(rides.iter().map(|r| Value::from(r.text.clone()))).len();
    assert!(duplicates > 20, "{duplicates} duplicates");
    assert!(
        rides.iter().any(|r| cents(&r.amount) < 0) && rides.iter().any(|r| r.amount.ends_with("5")),
        "refunds and ties"
    );
    assert!(
        out.stderr.contains("source rides: 4000 records read"),
        "{}",
        out.stderr
    );
}

/// Other window sizes and lateness through `--config`, including no lateness at all,
/// with single calls and small batches: the results are the same.
#[test]
fn config_and_batch_size_do_not_change_the_semantics() {
    let lines = rides(1_500, 7, 20_000, 0.06, 0.03);
    for (size, lateness) in [("10m", "0s"), ("15m", "20m"), ("2h", "30m")] {
        for max_batch in ["", "max_batch = 0", "max_batch = 3"] {
            let work = Workdir::new();
            let size_arg = format!("size={size}");
            let lateness_arg = format!("allowed_lateness={lateness}");
            let out = run(
                &work,
                &lines,
                max_batch,
                &["--config", &size_arg, "--config", &lateness_arg],
            );
            let size_ms = weir_sdk::Duration::from_str(size).unwrap().as_millis();
            let lateness_ms = weir_sdk::Duration::from_str(lateness).unwrap().as_millis();
            let what = format!("size {size}, lateness {lateness}, {max_batch:?}");
            let expected = check(&lines, &out, size_ms, lateness_ms, &what);
            assert!(!expected.late.is_empty(), "{what}");
            if lateness == "0s" {
                assert_eq!(
                    out.changelog.len(),
                    out.table.len(),
                    "no corrections, {what}"
                );
            }
        }
    }
}
