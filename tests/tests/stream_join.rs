//! Seed 004 end to end: the stream-join component through `weir run` on two generated
//! streams (thousands of row_ids, random side order and gaps, duplicates, missing and
//! too-late partners, late and very late records), compared per row_id with an
//! independent batch model of the join, and checked to account for every input record
//! exactly once. The sample input's exact records and a record without row_data are
//! golden cases: `tests/cases/stream-join-*`.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use weir_e2e::gen::{Rng, BASE_MS};
use weir_e2e::{read_jsonl, weir, Workdir};

const PIPELINE: &str = "examples/stream-join/pipeline.toml";
/// `out_of_orderness` of both sources in the example pipeline.
const OUT_OF_ORDERNESS: i64 = 1_000;
const MIN: i64 = 60_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Left,
    Right,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

/// One input record. `data` is unique over both inputs, so outputs can be traced back.
#[derive(Clone, Debug)]
struct Rec {
    side: Side,
    row_id: i64,
    data: String,
    ts: i64,
}

impl Rec {
    fn to_json(&self) -> Value {
        json!({"row_id": self.row_id, "row_data": self.data, "ts": self.ts})
    }

    /// The record as a side output shows it.
    fn annotated(&self, reason: &str) -> Value {
        let mut value = self.to_json();
        value["input"] = self.side.name().into();
        value["reason"] = reason.into();
        value
    }
}

/// Both inputs, each in file order.
struct Inputs {
    left: Vec<Rec>,
    right: Vec<Rec>,
}

impl Inputs {
    fn len(&self) -> usize {
        self.left.len() + self.right.len()
    }
}

/// `instances` joins over `row_ids` row ids (so ids come back, both within and after
/// `ttl`), about 1.5 s apart. Each starts with a random side; its partner comes 0 to
/// ttl/2 later, or (7%) 1 to 1.33 ttl later (too late), or (10%) never. With probability
/// 12% a duplicate of a random side comes 0 to 1.3 ttl after the start, so before the
/// join, after it, or after the row expired. In each file, records are a little out of
/// order (under the 1 s bound), 3% are moved 2 to 90 s later (late), and 0.5% are moved
/// ttl to 3 ttl later (very late: their row may have expired), half of those followed
/// at once by another record of the same side and row_id. Both files end with a
/// joined pair at the same time, an hour after everything else, so that neither source
/// ends while the other still has records to merge.
fn generate(instances: usize, row_ids: u64, seed: u64, ttl: i64) -> Inputs {
    let mut rng = Rng::new(seed);
    let mut n = 0;
    let mut rec = |side: Side, row_id: i64, ts: i64| {
        n += 1;
        Rec {
            side,
            row_id,
            data: format!("{}-{n}", side.name()),
            ts,
        }
    };
    let mut all = Vec::new();
    for i in 0..instances {
        let row_id = rng.below(row_ids) as i64;
        let start = BASE_MS + i as i64 * 1_500 + rng.below(1_000) as i64;
        let first = if rng.chance(0.5) {
            Side::Left
        } else {
            Side::Right
        };
        all.push(rec(first, row_id, start));
        if !rng.chance(0.1) {
            let gap = if rng.chance(0.07) {
                ttl + rng.below(ttl as u64 / 3) as i64
            } else {
                rng.below(ttl as u64 / 2) as i64
            };
            all.push(rec(first.other(), row_id, start + gap));
        }
        if rng.chance(0.12) {
            let side = if rng.chance(0.5) {
                Side::Left
            } else {
                Side::Right
            };
            let at = start + rng.below(ttl as u64 * 13 / 10) as i64;
            all.push(rec(side, row_id, at));
        }
    }
    // The position in its file: the time it is read at, at or after its event time.
    let mut placed: Vec<(i64, Rec)> = Vec::new();
    for r in all {
        if rng.chance(0.005) {
            // Very late. Half the time a second record of the same side follows it at
            // once, before the watermark moves again: the first one's row is already
            // due to expire then.
            let at = r.ts + ttl + rng.below(2 * ttl as u64) as i64;
            if rng.chance(0.5) {
                let next = rec(r.side, r.row_id, r.ts + rng.below(1_000) as i64);
                placed.push((at, r));
                placed.push((at, next));
            } else {
                placed.push((at, r));
            }
        } else if rng.chance(0.03) {
            placed.push((r.ts + 2_000 + rng.below(88_000) as i64, r));
        } else {
            placed.push((r.ts + rng.below(800) as i64, r));
        }
    }
    placed.sort_by_key(|(at, _)| *at);
    let end = placed.last().map_or(BASE_MS, |(at, _)| *at) + 60 * MIN;
    let mut inputs = Inputs {
        left: Vec::new(),
        right: Vec::new(),
    };
    for (_, r) in placed {
        match r.side {
            Side::Left => inputs.left.push(r),
            Side::Right => inputs.right.push(r),
        }
    }
    inputs.left.push(rec(Side::Left, -1, end));
    inputs.right.push(rec(Side::Right, -1, end));
    inputs
}

/// What the run should produce, per row_id in emission order, and how many records are
/// late for the watermark.
#[derive(Debug, Default)]
struct Expected {
    main: BTreeMap<i64, Vec<Value>>,
    duplicates: BTreeMap<i64, Vec<Value>>,
    unmatched: BTreeMap<i64, Vec<Value>>,
    late: usize,
    /// How often each case came up, to check that the input covers them.
    cases: BTreeMap<&'static str, usize>,
}

enum ModelRow {
    /// `since` is the watermark when the row started.
    Waiting {
        expires: i64,
        since: i64,
        rec: Rec,
    },
    Joined {
        expires: i64,
        since: i64,
    },
}

impl ModelRow {
    fn expires(&self) -> i64 {
        match self {
            ModelRow::Waiting { expires, .. } | ModelRow::Joined { expires, .. } => *expires,
        }
    }

    fn since(&self) -> i64 {
        match self {
            ModelRow::Waiting { since, .. } | ModelRow::Joined { since, .. } => *since,
        }
    }
}

/// The join as a batch computation over the two files. It merges them as the host does
/// (by the timestamp of each file's next record, ties to `left`), tracks the watermark
/// (the smaller of the two files' largest timestamp minus the bound), and runs the rules
/// of the spec per row_id: a waiting row expires at its first record's time + ttl, which a
/// record notices when its own time is at or past that, or when the watermark before it
/// has reached it; a joined row is kept (by the state's time-to-live) until the watermark
/// before a record has reached the join's time (the joining record's, or the watermark
/// then if later) + ttl.
fn model(inputs: &Inputs, ttl: i64, ttl_text: &str) -> Expected {
    let mut out = Expected::default();
    let mut rows: HashMap<i64, ModelRow> = HashMap::new();
    let mut max_ts: [Option<i64>; 2] = [None, None];
    let (mut l, mut r) = (0, 0);
    let waiting_reason = |side: Side| {
        format!(
            "duplicate: a {} record for this row_id is already waiting",
            side.name()
        )
    };
    let joined_reason = "duplicate: this row_id was already joined";
    let unmatched_reason =
        |side: Side| format!("no {} record within {ttl_text}", side.other().name());
    fn count(out: &mut Expected, case: &'static str) {
        *out.cases.entry(case).or_default() += 1;
    }
    fn unmatched(out: &mut Expected, rec: &Rec, reason: String) {
        out.unmatched
            .entry(rec.row_id)
            .or_default()
            .push(rec.annotated(&reason));
    }
    loop {
        let rec = match (inputs.left.get(l), inputs.right.get(r)) {
            (Some(a), Some(b)) if a.ts <= b.ts => a,
            (Some(_), Some(b)) => b,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        let index = match rec.side {
            Side::Left => {
                l += 1;
                0
            }
            Side::Right => {
                r += 1;
                1
            }
        };
        // Neither file ends before the final pair, and once one has, the other's
        // watermark is the smaller anyway: the minimum is the host's watermark throughout.
        let watermark = match max_ts {
            [Some(a), Some(b)] => a.min(b) - OUT_OF_ORDERNESS - 1,
            _ => i64::MIN,
        };
        if rec.ts <= watermark {
            out.late += 1;
        }

        if let Some(row) = rows.get(&rec.row_id) {
            let expired = match row {
                ModelRow::Waiting { expires, .. } => rec.ts >= *expires || *expires <= watermark,
                ModelRow::Joined { expires, .. } => *expires <= watermark,
            };
            if expired {
                if rec.ts < row.expires() {
                    count(
                        &mut out,
                        "row expired by the watermark before a late record",
                    );
                    if row.since() == watermark {
                        // Its timer is due but cannot have fired: no advance since.
                        count(
                            &mut out,
                            "row started behind the watermark, expired at once",
                        );
                    }
                }
                if let Some(ModelRow::Waiting { rec: waiting, .. }) = rows.remove(&rec.row_id) {
                    unmatched(&mut out, &waiting, unmatched_reason(waiting.side));
                    count(&mut out, "unmatched");
                }
            }
        }
        match rows.get(&rec.row_id) {
            None => {
                if out.main.contains_key(&rec.row_id) {
                    count(&mut out, "row_id again after its join expired");
                }
                rows.insert(
                    rec.row_id,
                    ModelRow::Waiting {
                        expires: rec.ts + ttl,
                        since: watermark,
                        rec: rec.clone(),
                    },
                );
            }
            Some(ModelRow::Waiting { rec: waiting, .. }) if waiting.side == rec.side => {
                out.duplicates
                    .entry(rec.row_id)
                    .or_default()
                    .push(rec.annotated(&waiting_reason(rec.side)));
                count(&mut out, "duplicate while waiting");
            }
            Some(ModelRow::Waiting { rec: waiting, .. }) => {
                let (left, right) = match rec.side {
                    Side::Left => (rec, waiting),
                    Side::Right => (waiting, rec),
                };
                out.main
                    .entry(rec.row_id)
                    .or_default()
                    .push(json!({"row_id": rec.row_id, "data1": left.data, "data2": right.data}));
                count(
                    &mut out,
                    match waiting.side {
                        Side::Left => "joined, left first",
                        Side::Right => "joined, right first",
                    },
                );
                if rec.ts <= watermark {
                    count(&mut out, "joined by a late record");
                }
                let expires = rec.ts.max(watermark) + ttl;
                rows.insert(
                    rec.row_id,
                    ModelRow::Joined {
                        expires,
                        since: watermark,
                    },
                );
            }
            Some(ModelRow::Joined { .. }) => {
                out.duplicates
                    .entry(rec.row_id)
                    .or_default()
                    .push(rec.annotated(joined_reason));
                count(&mut out, "duplicate after the join");
            }
        }
        max_ts[index] = Some(max_ts[index].map_or(rec.ts, |m| m.max(rec.ts)));
    }
    // End of input: every timer fires.
    let mut left_over: Vec<(i64, ModelRow)> = rows.into_iter().collect();
    left_over.sort_by_key(|(row_id, row)| (row.expires(), *row_id));
    for (_, row) in left_over {
        if let ModelRow::Waiting { rec, .. } = row {
            let side = rec.side;
            unmatched(&mut out, &rec, unmatched_reason(side));
            count(&mut out, "unmatched");
            count(
                &mut out,
                match side {
                    Side::Left => "unmatched at end, left",
                    Side::Right => "unmatched at end, right",
                },
            );
        }
    }
    out
}

/// What one run wrote.
struct Outputs {
    main: Vec<Value>,
    duplicates: Vec<Value>,
    unmatched: Vec<Value>,
    dead: Vec<Value>,
    stderr: String,
}

fn run(work: &Workdir, pipeline: &str, inputs: &Inputs, extra: &[&str]) -> Outputs {
    let json = |recs: &[Rec]| recs.iter().map(Rec::to_json).collect::<Vec<_>>();
    let left = work.write_jsonl("left.jsonl", &json(&inputs.left));
    let right = work.write_jsonl("right.jsonl", &json(&inputs.right));
    let path = |name: &str| work.path(name).display().to_string();
    let args: Vec<String> = [
        "run".to_owned(),
        pipeline.to_owned(),
        "--input".into(),
        format!("left={left}"),
        "--input".into(),
        format!("right={right}"),
        "--output".into(),
        format!("main={}", path("main.jsonl")),
        "--output".into(),
        format!("duplicates={}", path("duplicates.jsonl")),
        "--output".into(),
        format!("unmatched={}", path("unmatched.jsonl")),
        "--dead-letter".into(),
        path("dead.jsonl"),
    ]
    .into_iter()
    .chain(extra.iter().map(|s| s.to_string()))
    .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let finished = weir(&args);
    finished.assert_success();
    Outputs {
        main: read_jsonl(path("main.jsonl")),
        duplicates: read_jsonl(path("duplicates.jsonl")),
        unmatched: read_jsonl(path("unmatched.jsonl")),
        dead: read_jsonl(path("dead.jsonl")),
        stderr: finished.stderr,
    }
}

/// Records grouped by their `row_id`, in output order.
fn by_row_id(records: &[Value]) -> BTreeMap<i64, Vec<Value>> {
    let mut grouped: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
    for record in records {
        let row_id = record["row_id"].as_i64().expect("an integer row_id");
        grouped.entry(row_id).or_default().push(record.clone());
    }
    grouped
}

fn assert_same(what: &str, got: &[Value], expected: &BTreeMap<i64, Vec<Value>>) {
    let got = by_row_id(got);
    let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: row_ids missing {missing:?}, unexpected {extra:?}"
    );
    for (row_id, records) in expected {
        assert_eq!(&got[row_id], records, "{what}, row_id {row_id}");
    }
}

/// Every input record appears exactly once in the outputs: as one side of a joined row
/// (found by its unique `row_data`), as a duplicate or as unmatched.
fn assert_accounted_once(inputs: &Inputs, out: &Outputs) {
    let mut unused: HashMap<&str, &Rec> = inputs
        .left
        .iter()
        .chain(&inputs.right)
        .map(|r| (r.data.as_str(), r))
        .collect();
    assert_eq!(unused.len(), inputs.len(), "row_data is unique");
    let mut take = |data: &Value, side: Side, row_id: &Value, what: &str| {
        let data = data.as_str().expect("row_data is a string");
        let rec = unused
            .remove(data)
            .unwrap_or_else(|| panic!("{what} {data}: not an input record, or used twice"));
        assert_eq!(rec.side, side, "{what} {data}: side");
        assert_eq!(row_id.as_i64(), Some(rec.row_id), "{what} {data}: row_id");
        rec
    };
    for row in &out.main {
        take(&row["data1"], Side::Left, &row["row_id"], "joined data1");
        take(&row["data2"], Side::Right, &row["row_id"], "joined data2");
    }
    for (what, records) in [
        ("duplicate", &out.duplicates),
        ("unmatched", &out.unmatched),
    ] {
        for record in records {
            let side = match record["input"].as_str() {
                Some("left") => Side::Left,
                Some("right") => Side::Right,
                other => panic!("{what}: bad input {other:?}"),
            };
            let rec = take(&record["row_data"], side, &record["row_id"], what);
            assert_eq!(record["ts"], rec.ts, "{what}: the record as received");
        }
    }
    assert!(
        unused.is_empty(),
        "{} input records are in no output, e.g. {:?}",
        unused.len(),
        unused.values().next()
    );
    assert_eq!(
        2 * out.main.len() + out.duplicates.len() + out.unmatched.len(),
        inputs.len()
    );
}

fn late_records(stderr: &str) -> usize {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("late records: "))
        .unwrap_or_else(|| panic!("no late-record count in the summary:\n{stderr}"))
        .parse()
        .expect("a count")
}

fn check(inputs: &Inputs, out: &Outputs, expected: &Expected, what: &str) {
    assert!(out.dead.is_empty(), "{what}: dead letters {:?}", out.dead);
    assert_same(&format!("{what}: main"), &out.main, &expected.main);
    assert_same(
        &format!("{what}: duplicates"),
        &out.duplicates,
        &expected.duplicates,
    );
    assert_same(
        &format!("{what}: unmatched"),
        &out.unmatched,
        &expected.unmatched,
    );
    assert_eq!(
        late_records(&out.stderr),
        expected.late,
        "{what}: late records"
    );
    assert_accounted_once(inputs, out);
}

/// Every case of the spec occurs in the generated input, several times.
fn assert_covers_every_case(expected: &Expected) {
    for case in [
        "joined, left first",
        "joined, right first",
        "joined by a late record",
        "duplicate while waiting",
        "duplicate after the join",
        "unmatched",
        "unmatched at end, left",
        "unmatched at end, right",
        "row expired by the watermark before a late record",
        "row started behind the watermark, expired at once",
        "row_id again after its join expired",
    ] {
        let n = expected.cases.get(case).copied().unwrap_or(0);
        assert!(
            n >= 3,
            "the input has {n} of `{case}`: {:?}",
            expected.cases
        );
    }
    assert!(expected.late > 100, "{} late records", expected.late);
    let unmatched_sides = |side: &str| {
        expected
            .unmatched
            .values()
            .flatten()
            .filter(|r| r["input"] == side)
            .count()
    };
    assert!(unmatched_sides("left") > 100 && unmatched_sides("right") > 100);
}

#[test]
fn generated_streams_match_the_batch_model() {
    let ttl = 10 * MIN; // the example's
    let inputs = generate(6_000, 2_500, 41, ttl);
    let expected = model(&inputs, ttl, "10m");
    assert!(inputs.len() > 12_000);
    assert!(expected.main.len() > 2_000, "thousands of row_ids join");
    assert_covers_every_case(&expected);

    let work = Workdir::new();
    let out = run(&work, PIPELINE, &inputs, &[]);
    check(&inputs, &out, &expected, "ttl 10m");
}

/// A short ttl: most rows expire while the input is still being read, many row_ids
/// start new joins, and partners often come too late.
#[test]
fn a_short_ttl_matches_the_batch_model() {
    let ttl = 30_000;
    let inputs = generate(4_000, 300, 7, ttl);
    let expected = model(&inputs, ttl, "30s");
    assert_covers_every_case(&expected);
    let work = Workdir::new();
    let out = run(&work, PIPELINE, &inputs, &["--config", "ttl=30s"]);
    check(&inputs, &out, &expected, "ttl 30s");
}

/// The host sends records and due timers in batches; any batch size, and none, must
/// give the same result.
#[test]
fn batch_sizes_do_not_change_the_result() {
    let ttl = 20_000;
    let inputs = generate(1_500, 200, 11, ttl);
    let expected = model(&inputs, ttl, "20s");
    for max_batch in [0, 1, 7, 100] {
        let work = Workdir::new();
        let variant = format!("max_batch = {max_batch}");
        let pipeline = weir_e2e::example_variant(&work, "stream-join", &variant);
        let out = run(&work, &pipeline, &inputs, &["--config", "ttl=20s"]);
        check(&inputs, &out, &expected, &variant);
    }
}
