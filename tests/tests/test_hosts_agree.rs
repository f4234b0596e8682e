//! The native test hosts fire timers as the engine does. Each language's twin UDF runs on
//! the same input twice: under its SDK's `TestHost` (CPython, Node.js), driven by a script
//! next to the UDF that replays the steps the engine takes, and under `weir run` with its
//! built component (batched and one call at a time, and built with the batch export of
//! its SDK too). All must emit the same records in the same order.
//!
//! The inputs put timers of several keys at the same timestamp, so the order of
//! same-time timers ("Event time and timers" in docs/pipeline.md: timestamp, then the
//! FNV-1a 64 hash of the key, then the key's bytes) decides the output; the test checks
//! that it does, in groups where key-byte order would give another sequence.
//!
//! The engine's file sink writes each record's value only, so values are compared, in
//! order; a count carries its ad and time, an order's total its order id. The drivers are
//! `udfs/python/change-only-counter/testhost_driver.py` and
//! `udfs/js/order-timeout/testhost_driver.js`; the components come from `make guests`.

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use weir_e2e::gen::Rng;
use weir_e2e::{guest, guest_batched, read_jsonl, repo_root, weir, Workdir};

/// 2025-11-29 10:00:00 UTC, where the inputs start.
const START: i64 = 1_764_410_400_000;

/// One input record: its key as the engine extracts it, its event time, and its line.
struct Record {
    key: String,
    timestamp: i64,
    line: String,
}

/// A record the test host emitted, as its driver printed it.
struct HostRecord {
    /// The driver step (input line) whose call emitted it.
    step: u64,
    /// Emitted by a timer (a watermark step or the end of input), not by an element.
    from_timer: bool,
    key: String,
    timestamp: i64,
    value: Value,
}

/// 64-bit FNV-1a, written out here as the rule states it rather than taken from the host.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The steps the engine takes for one file source with `out_of_orderness` (ms): each
/// record, then the watermark advance it causes (the largest timestamp seen minus
/// `out_of_orderness` and 1 ms, if that is later), then the end of input. One JSON line each.
fn steps(records: &[Record], out_of_orderness: i64) -> String {
    let mut text = String::new();
    let mut watermark = i64::MIN;
    for record in records {
        let process = json!({"process": [record.key, record.line, record.timestamp]});
        text.push_str(&format!("{process}\n"));
        let candidate = record
            .timestamp
            .saturating_sub(out_of_orderness)
            .saturating_sub(1);
        if candidate > watermark {
            watermark = candidate;
            text.push_str(&format!("{}\n", json!({ "watermark": watermark })));
        }
    }
    text.push_str("{\"finish\": true}\n");
    text
}

/// Runs `udf` under `weir run` on `records` with one file source called `main`; returns
/// the main output's records, in order. `max_batch = 0` makes one call per element and
/// timer.
fn run_engine(
    work: &Workdir,
    udf: &Path,
    source: &str,
    config: &str,
    records: &[Record],
    max_batch: usize,
) -> Vec<Value> {
    let input: String = records.iter().map(|r| format!("{}\n", r.line)).collect();
    work.write("in.jsonl", &input);
    let pipeline = format!(
        r#"
name = "hosts-agree"

[[source]]
name = "main"
type = "file"
path = "in.jsonl"
{source}

[udf]
path = "{udf}"
max_batch = {max_batch}

[udf.config]
{config}

[[sink]]
output = "main"
type = "file"
path = "out.jsonl"

[dead_letter]
path = "dead.jsonl"
"#,
        udf = udf.display()
    );
    let pipeline = work.write("pipeline.toml", &pipeline);
    weir(&["run", &pipeline, "-q", "--no-checkpoints"]).assert_success();
    let dead = std::fs::read_to_string(work.path("dead.jsonl")).unwrap_or_default();
    assert_eq!(dead, "", "every input line is a record");
    read_jsonl(work.path("out.jsonl"))
}

/// Runs a test host driver (`program args...` from the repository root) on `steps`;
/// returns what it printed, one record per line.
fn run_test_host(
    work: &Workdir,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    steps: &str,
) -> Vec<HostRecord> {
    let steps_file = work.path("steps.jsonl");
    std::fs::write(&steps_file, steps).expect("write the steps");
    let output = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo_root())
        .stdin(std::fs::File::open(&steps_file).expect("open the steps"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {program} (the test host runs on it): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
    stdout
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("the driver printed a line that is not JSON ({e}): {line}")
            });
            HostRecord {
                step: record["step"].as_u64().expect("step"),
                from_timer: record["from"] == "timer",
                key: record["key"].as_str().expect("a text key").to_owned(),
                timestamp: record["timestamp"].as_i64().expect("timestamp"),
                value: record["value"].clone(),
            }
        })
        .collect()
}

/// Requires the engine's records to be the test host's, one for one and in order.
fn assert_same_records(engine: &[Value], host: &[HostRecord], what: &str) {
    let first_difference = engine
        .iter()
        .zip(host)
        .position(|(e, h)| *e != h.value)
        .or((engine.len() != host.len()).then(|| engine.len().min(host.len())));
    if let Some(i) = first_difference {
        let around = |n: usize| i.saturating_sub(3)..(i + 3).min(n);
        let engine_part: Vec<String> = engine[around(engine.len())]
            .iter()
            .map(Value::to_string)
            .collect();
        let host_part: Vec<String> = host[around(host.len())]
            .iter()
            .map(|h| h.value.to_string())
            .collect();
        panic!(
            "{what}: the engine emitted {} records, the test host {}; they differ at record {i}\n\
             engine (from record {}):\n  {}\ntest host:\n  {}",
            engine.len(),
            host.len(),
            i.saturating_sub(3),
            engine_part.join("\n  "),
            host_part.join("\n  "),
        );
    }
}

/// Checks that the timers of one step due at the same time fired in the engine's order
/// (each UDF here emits at most one record per timer and registers none while firing),
/// and returns how many such groups of two or more keys that order puts out of key-byte
/// order: where a host firing them in byte order would have emitted another sequence.
fn same_time_groups_out_of_byte_order(host: &[HostRecord]) -> usize {
    let mut reordered = 0;
    let same_group = |a: &HostRecord, b: &HostRecord| {
        a.from_timer && b.from_timer && a.step == b.step && a.timestamp == b.timestamp
    };
    for group in host.chunk_by(same_group) {
        if group.len() < 2 || !group[0].from_timer {
            continue;
        }
        let rule = |r: &HostRecord| (fnv1a_64(r.key.as_bytes()), r.key.as_bytes().to_vec());
        let keys: Vec<&str> = group.iter().map(|r| r.key.as_str()).collect();
        assert!(
            group.windows(2).all(|w| rule(&w[0]) < rule(&w[1])),
            "timers due at {} fired for keys {keys:?}, not in (hash, bytes) order",
            group[0].timestamp
        );
        if !keys.windows(2).all(|w| w[0] < w[1]) {
            reordered += 1;
        }
    }
    reordered
}

/// Clicks on twelve ads, many of them in bursts of several ads in one millisecond (so
/// their expiry timers are due together), some out of order or late, with gaps after
/// which many timers fire in one watermark advance.
fn clicks(seed: u64) -> Vec<Record> {
    let ads: Vec<String> = (1..=12).map(|i| format!("ad-{i}")).collect();
    let mut rng = Rng::new(seed);
    let mut records = Vec::new();
    let mut t = START;
    let mut click = |ad: &str, ts: i64| {
        records.push(Record {
            key: ad.to_owned(),
            timestamp: ts,
            line: json!({"ad_id": ad, "clicked_at": ts}).to_string(),
        });
    };
    for _ in 0..400 {
        match rng.below(10) {
            0..=3 => {
                for _ in 0..2 + rng.below(5) {
                    click(&ads[rng.below(12) as usize], t);
                }
            }
            // Out of order: within the 5 s of allowed out-of-orderness, or late.
            4 => click(&ads[rng.below(12) as usize], t - rng.below(9_000) as i64),
            _ => click(&ads[rng.below(12) as usize], t),
        }
        t += match rng.below(25) {
            0 => 300_000 + rng.below(900_000) as i64,
            1..=4 => 0,
            _ => rng.below(40_000) as i64,
        };
    }
    records
}

/// Events of forty orders (numbered, a few with text ids), many in bursts of several
/// orders in one millisecond (so their timeouts are due together), some late, with
/// pauses after which many orders time out in one watermark advance.
fn purchases(seed: u64) -> Vec<Record> {
    let items = ["tea", "cake", "jam", "scone"];
    let costs = [
        json!("3.50"),
        json!("0.10"),
        json!(2),
        json!("19.999"),
        json!(0.2),
    ];
    let mut rng = Rng::new(seed);
    let mut records = Vec::new();
    let mut t = START;
    let mut event = |rng: &mut Rng, ts: i64| {
        let n = rng.below(40);
        let (id, key) = if n < 34 {
            (json!(n + 1), (n + 1).to_string())
        } else {
            (json!(format!("A-{n}")), format!("A-{n}"))
        };
        let value = json!({
            "orderId": id,
            "item": items[rng.below(4) as usize],
            "cost": costs[rng.below(5) as usize],
            "timestamp": ts,
        });
        records.push(Record {
            key,
            timestamp: ts,
            line: value.to_string(),
        });
    };
    for _ in 0..700 {
        match rng.below(10) {
            0..=3 => {
                for _ in 0..2 + rng.below(5) {
                    event(&mut rng, t);
                }
            }
            4 => {
                let late = t - rng.below(3_000) as i64;
                event(&mut rng, late);
            }
            _ => event(&mut rng, t),
        }
        t += match rng.below(20) {
            0 => 2_000 + rng.below(10_000) as i64,
            1..=3 => 0,
            _ => rng.below(700) as i64,
        };
    }
    records
}

#[test]
fn python_change_only_counter_emits_the_same_under_test_host_and_engine() {
    let work = Workdir::new();
    let records = clicks(7);
    let host = run_test_host(
        &work,
        "python3",
        &[
            "udfs/python/change-only-counter/testhost_driver.py",
            r#"{"window": "5m"}"#,
        ],
        &[
            (
                "PYTHONPATH",
                "guest-sdk/python:udfs/python/change-only-counter",
            ),
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ],
        &steps(&records, 5_000),
    );
    assert!(host.len() > 1_000, "counts rise and fall: {}", host.len());
    let reordered = same_time_groups_out_of_byte_order(&host);
    assert!(
        reordered >= 10,
        "only {reordered} groups of same-time timers where byte order differs"
    );
    let source = r#"key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "epoch_ms"
out_of_orderness = "5s""#;
    for udf in [
        guest("python", "change-only-counter"),
        guest_batched("python", "change-only-counter"),
    ] {
        for max_batch in [512, 0] {
            let engine = run_engine(&work, &udf, source, r#"window = "5m""#, &records, max_batch);
            let what = format!("{}, max_batch = {max_batch}", udf.display());
            assert_same_records(&engine, &host, &what);
        }
    }
}

#[test]
fn javascript_order_timeout_emits_the_same_under_test_host_and_engine() {
    let work = Workdir::new();
    let records = purchases(11);
    let host = run_test_host(
        &work,
        "node",
        &[
            "udfs/js/order-timeout/testhost_driver.js",
            r#"{"timeout": "1s"}"#,
        ],
        &[],
        &steps(&records, 0),
    );
    assert!(
        host.len() > 500,
        "orders time out and start again: {}",
        host.len()
    );
    let reordered = same_time_groups_out_of_byte_order(&host);
    assert!(
        reordered >= 10,
        "only {reordered} groups of same-time timers where byte order differs"
    );
    let source = r#"key = "orderId"
timestamp = "timestamp"
timestamp_format = "epoch_ms"
out_of_orderness = "0s""#;
    for udf in [
        guest("js", "order-timeout"),
        guest_batched("js", "order-timeout"),
    ] {
        for max_batch in [512, 0] {
            let engine = run_engine(
                &work,
                &udf,
                source,
                r#"timeout = "1s""#,
                &records,
                max_batch,
            );
            let what = format!("{}, max_batch = {max_batch}", udf.display());
            assert_same_records(&engine, &host, &what);
        }
    }
}
