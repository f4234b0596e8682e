//! The batch path of the Python and JavaScript SDKs (`weir:udf/batch`, built with
//! `WEIR_GUEST_BATCH=1`), end to end with real components: a failure in the middle of a
//! batch (an error, a trap, a state-decode error, for an element or a timer) takes back
//! the whole batch, the host runs its entries again one call at a time, and the run
//! emits exactly the records, and dead-letters exactly the calls, that one call per
//! entry does.
//!
//! The UDFs are `tests/udfs/python/misbehaving` and `tests/udfs/js/misbehaving` (the same
//! behaviour in both languages); the expected records come from a model of them below,
//! written from their documentation, not from either SDK.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use weir_e2e::{guest_batched, read_jsonl, weir, Workdir};

/// 2025-11-29 10:00:00 UTC.
const START: i64 = 1_764_410_400_000;
/// Every fifth record registers a timer this long after it: it falls due at the next
/// record, inside the batch that registered it, which ends the batch there; so batches
/// hold about five records, and the failures fall at every place in them.
const TIMER_AFTER: i64 = 1;

/// The input: sixty records of keys a, b and c, 10 ms apart, every fifth with a timer,
/// with failures in the middle.
fn records() -> Vec<Value> {
    let fails: HashMap<usize, &str> = [
        (7, "error"),
        (13, "trap"),
        (20, "poison"),
        (29, "reset"),
        (40, "error"),
        (45, "trap"),
        (52, "poison"),
    ]
    .into_iter()
    .collect();
    (0..60)
        .map(|i| {
            let key = ["a", "b", "c"][i % 3];
            let mut record = json!({"k": key, "t": START + 10 * i as i64, "i": i});
            if i % 5 == 0 {
                record["timer"] = json!(true);
            }
            if let Some(fail) = fails.get(&i) {
                record["fail"] = json!(fail);
            }
            record
        })
        .collect()
}

/// What one key holds: its count, or the bytes a poison record stored.
#[derive(Clone, Copy, PartialEq)]
enum Count {
    Absent,
    N(u64),
    Poisoned,
}

/// The records the UDF emits and the calls that fail, as the engine runs it one call at
/// a time: each record, then the timers its watermark advance makes due (the watermark
/// is the largest timestamp so far minus 1 ms), in timestamp order; the end of input
/// fires the rest. A failed call changes nothing, its timer registration too; a failed
/// element does not move the watermark (the run goes on with the next one), and a failed
/// timer leaves the timers due after it to the next advance.
fn expected(records: &[Value]) -> (Vec<Value>, Vec<(&'static str, Value)>) {
    let mut state: HashMap<String, Count> = HashMap::new();
    let mut timers: BTreeMap<i64, String> = BTreeMap::new(); // timestamps are distinct
    let mut out = Vec::new();
    let mut failures = Vec::new();
    let count = |state: &HashMap<String, Count>, key: &str| {
        state.get(key).copied().unwrap_or(Count::Absent)
    };
    let fire = |upto: i64,
                timers: &mut BTreeMap<i64, String>,
                state: &HashMap<String, Count>,
                out: &mut Vec<Value>,
                failures: &mut Vec<(&'static str, Value)>| {
        while let Some((&at, _)) = timers.first_key_value().filter(|(&at, _)| at <= upto) {
            let key = timers.remove(&at).expect("listed");
            match count(state, &key) {
                Count::Poisoned => {
                    let timer = json!({"domain": "event-time", "key": key, "timer": at});
                    failures.push(("state-decode", timer));
                    return;
                }
                Count::Absent => out.push(json!({"key": key, "timer": at, "n": 0})),
                Count::N(n) => out.push(json!({"key": key, "timer": at, "n": n})),
            }
        }
    };
    let mut watermark = i64::MIN;
    for record in records {
        let key = record["k"].as_str().expect("key").to_owned();
        let ts = record["t"].as_i64().expect("timestamp");
        let fail = record.get("fail").and_then(Value::as_str);
        let before = count(&state, &key);
        // Whether the call succeeded, and whether it registered its timer.
        let (ok, timer) = match fail {
            Some("poison") => {
                state.insert(key.clone(), Count::Poisoned);
                out.push(json!({"key": key, "poisoned": true}));
                (true, false)
            }
            Some("reset") => {
                state.insert(key.clone(), Count::Absent);
                out.push(json!({"key": key, "reset": true}));
                (true, false)
            }
            _ => match before {
                Count::Poisoned => {
                    failures.push(("state-decode", record.clone()));
                    (false, false)
                }
                Count::Absent | Count::N(_) if matches!(fail, Some("error" | "trap")) => {
                    let kind = if fail == Some("error") {
                        "error"
                    } else {
                        "trap"
                    };
                    failures.push((kind, record.clone()));
                    (false, false)
                }
                Count::Absent | Count::N(_) => {
                    let n = match before {
                        Count::N(n) => n + 1,
                        _ => 1,
                    };
                    state.insert(key.clone(), Count::N(n));
                    out.push(json!({"key": key, "n": n, "record": record}));
                    (true, record.get("timer").is_some())
                }
            },
        };
        if !ok {
            continue;
        }
        if timer {
            timers.insert(ts + TIMER_AFTER, key);
        }
        if ts - 1 > watermark {
            watermark = ts - 1;
            fire(watermark, &mut timers, &state, &mut out, &mut failures);
        }
    }
    fire(i64::MAX, &mut timers, &state, &mut out, &mut failures);
    (out, failures)
}

/// Runs `udf` on `input` with `max_batch` (0: one call per entry); returns the main
/// output and the dead letters.
fn run(work: &Workdir, udf: &Path, input: &str, max_batch: usize) -> (Vec<Value>, Vec<Value>) {
    let pipeline = format!(
        r#"
name = "guest-batches"

[[source]]
name = "main"
type = "file"
path = "{input}"
key = "k"
timestamp = "t"
timestamp_format = "epoch_ms"
out_of_orderness = "0s"

[udf]
path = "{udf}"
max_batch = {max_batch}
on_error = "dead-letter"

[[sink]]
output = "main"
type = "file"
path = "out-{max_batch}.jsonl"

[dead_letter]
path = "dead-{max_batch}.jsonl"
"#,
        udf = udf.display()
    );
    let pipeline = work.write(&format!("pipeline-{max_batch}.toml"), &pipeline);
    weir(&["run", &pipeline, "-q", "--no-checkpoints"]).assert_success();
    let dead = work.path(&format!("dead-{max_batch}.jsonl"));
    let dead = if dead.exists() {
        read_jsonl(dead)
    } else {
        Vec::new()
    };
    (
        read_jsonl(work.path(&format!("out-{max_batch}.jsonl"))),
        dead,
    )
}

/// The checks of both languages: batched and one call at a time, the exact records and
/// one dead letter per failed call, of the kind expected.
fn failures_in_the_middle_of_batches(lang: &str) {
    let work = Workdir::new();
    let records = records();
    let input = work.write_jsonl("in.jsonl", &records);
    let (expected_out, expected_failures) = expected(&records);
    assert_eq!(expected_failures.len(), 8, "{expected_failures:?}");
    let udf = guest_batched(lang, "misbehaving");
    for max_batch in [0, 512] {
        let (out, dead) = run(&work, &udf, &input, max_batch);
        if let Some(i) =
            (0..out.len().max(expected_out.len())).find(|&i| out.get(i) != expected_out.get(i))
        {
            let show = |v: &[Value]| {
                v[i.saturating_sub(2)..(i + 3).min(v.len())]
                    .iter()
                    .map(|r| format!("\n  {r}"))
                    .collect::<String>()
            };
            panic!(
                "{lang}, max_batch = {max_batch}: {} records, {} expected; they differ at {i}:\ngot{}\nexpected{}",
                out.len(),
                expected_out.len(),
                show(&out),
                show(&expected_out)
            );
        }
        assert_eq!(
            dead.len(),
            expected_failures.len(),
            "{lang}, max_batch = {max_batch}: {dead:#?}"
        );
        for (letter, (kind, raw)) in dead.iter().zip(&expected_failures) {
            let wanted = match *kind {
                "error" => "asked to fail on",
                "trap" => {
                    "trapped: state \"n\" is a Value state and cannot be used as a List state"
                }
                _ => "cannot read the state of key",
            };
            let reason = letter["reason"].as_str().unwrap_or_default();
            let got: Value = serde_json::from_str(letter["raw"].as_str().unwrap_or("null"))
                .expect("a dead letter's raw record is JSON");
            assert!(
                reason.contains(wanted) && got == *raw,
                "{lang}, max_batch = {max_batch}: expected a {kind} dead letter of {raw} ({wanted:?}), got {letter}"
            );
        }
    }
}

#[test]
fn python_failures_in_the_middle_of_a_batch_are_replayed_exactly() {
    failures_in_the_middle_of_batches("python");
}

#[test]
fn javascript_failures_in_the_middle_of_a_batch_are_replayed_exactly() {
    failures_in_the_middle_of_batches("js");
}

/// A timer of the advance a batch stopped in (the next batch's first entries) that fails
/// must not cost the element after it. Found with these UDFs, but the fault is the
/// host's: `KeyedOperator::replay` reports such a timer's failure at `elements[start]`,
/// and the run then goes on after that element, which is never processed (nor
/// dead-lettered). Any batched UDF, Rust's too, loses it. Ignored until the host is
/// fixed.
#[test]
fn a_timer_failing_after_an_early_stop_loses_no_element() {
    let work = Workdir::new();
    let records = [
        json!({"k": "c", "t": START, "i": 0, "timer": true}),
        json!({"k": "c", "t": START + 10, "i": 1, "fail": "poison"}),
        json!({"k": "a", "t": START + 20, "i": 2}),
        json!({"k": "a", "t": START + 30, "i": 3}),
    ];
    let input = work.write_jsonl("in.jsonl", &records);
    let udf = guest_batched("js", "misbehaving");
    let (one_at_a_time, _) = run(&work, &udf, &input, 0);
    assert_eq!(one_at_a_time.len(), 4, "{one_at_a_time:#?}");
    let (batched, _) = run(&work, &udf, &input, 512);
    assert_eq!(batched, one_at_a_time);
}
