//! Seed 003 end to end: the session-report component through `weir run`, checked against
//! an independent batch computation, as the seed asks (a real-time report is only
//! trusted once it agrees with a batch one).
//!
//! - On clean input (nothing late, no abnormal session) the reports must equal a plain
//!   range join and aggregation, `start_time <= event_time < end_time`, per session: the
//!   seed's SQL.
//! - On messy input (out-of-order data, data before their start, late data, overlapping
//!   sessions, duplicates and every abnormal case) the batch model also replays the host's
//!   documented merge order and watermark, to know what each record saw when it came, and
//!   applies the UDF's documented rules as of then. Every output record is compared, and
//!   every input record is accounted for.
//!
//! The sample input's documented records are the golden case
//! `tests/cases/session-report-sample`.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use weir_e2e::gen::{Rng, BASE_MS};
use weir_e2e::{read_jsonl, weir, Workdir};

const MIN: i64 = 60_000;
const WINDOW: i64 = 5 * MIN;
const LATENESS: i64 = 3 * MIN;
const MAX_SESSION: i64 = 60 * MIN;
/// Every source's `out_of_orderness` in examples/session-report/pipeline.toml.
const OUT_OF_ORDERNESS: i64 = MIN;
const PIPELINE: &str = "examples/session-report/pipeline.toml";

// ---------------------------------------------------------------------------------------
// Generated input
// ---------------------------------------------------------------------------------------

/// The three input files, each in file order. Every record carries a unique id (`pid` for
/// periods, `rid` for data) so that each can be accounted for.
struct Input {
    periods: Vec<Value>,
    states: Vec<Value>,
    behaviors: Vec<Value>,
}

/// Records with the time they are written at: each file is sorted by it, so a record
/// written long after its own time sits late in its file.
#[derive(Default)]
struct Files {
    periods: Vec<(i64, Value)>,
    states: Vec<(i64, Value)>,
    behaviors: Vec<(i64, Value)>,
    next_id: i64,
}

impl Files {
    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn start(&mut self, subject: &str, event: &str, s: i64, op: &str, org: &str, at: i64) {
        let pid = self.id();
        self.periods.push((
            at,
            json!({"pid": pid, "event_id": event, "subject_id": subject, "status": 1,
                   "start_time": s, "end_time": null, "operator": op, "org_id": org, "time": s}),
        ));
    }

    fn end(&mut self, subject: &str, event: &str, e: i64, op: &str, org: &str, at: i64) {
        let pid = self.id();
        self.periods.push((
            at,
            json!({"pid": pid, "event_id": event, "subject_id": subject, "status": 2,
                   "start_time": null, "end_time": e, "operator": op, "org_id": org, "time": e}),
        ));
    }

    fn into_input(self) -> Input {
        fn ordered(mut v: Vec<(i64, Value)>) -> Vec<Value> {
            v.sort_by_key(|(at, _)| *at); // stable: ties keep generation order
            v.into_iter().map(|(_, r)| r).collect()
        }
        Input {
            periods: ordered(self.periods),
            states: ordered(self.states),
            behaviors: ordered(self.behaviors),
        }
    }
}

/// `subjects` subjects with `sessions` sessions each, and their data. `messy` adds
/// delayed starts (data before their start), late data, overlapping sessions, duplicate
/// messages, every abnormal kind of session and invalid records; without it the input is
/// clean: every session has one start and one end, and no record is late. Every event
/// time is a multiple of `grid_ms`: a coarse grid makes ties and exact boundaries common
/// (data at a session's start or end, watermarks exactly at a window's due time).
fn generate(seed: u64, subjects: usize, sessions: usize, messy: bool, grid_ms: i64) -> Input {
    let grid = |t: i64| t - t.rem_euclid(grid_ms);
    const BEHAVIORS: [&str; 5] = ["horn", "ac_on", "lane_assist", "wiper", "seat_heat"];
    let mut rng = Rng::new(seed);
    let mut f = Files::default();
    for n in 0..subjects {
        let subject = format!("car-{n}");
        let org = format!("org-{}", n % 2);
        let mut cursor = BASE_MS + rng.below(600_000) as i64;
        for i in 0..sessions {
            let event = format!("{subject}-trip-{i}");
            let op = format!("op-{}", rng.below(4));
            let s = grid(if messy && i > 0 && rng.chance(0.06) {
                cursor - MIN - rng.below(120_000) as i64 // overlaps the previous session
            } else {
                cursor + 30_000 + rng.below(900_000) as i64
            });
            let kind = if messy { rng.below(100) } else { 0 };
            let e = if (90..93).contains(&kind) {
                s // an empty session
            } else {
                grid(s + 2 * MIN + rng.below(38 * MIN as u64) as i64)
            };
            cursor = cursor.max(e);
            let start_at = if messy && rng.chance(0.25) {
                s + 20_000 + rng.below(280_000) as i64 // data before their start
            } else {
                s + rng.below(5_000) as i64
            };
            let end_at = e + rng.below(20_000) as i64;
            let (mut has_start, mut has_end) = (true, true);
            match kind {
                55..=62 => has_end = false,   // no_end
                63..=69 => has_start = false, // end_without_start
                70..=76 => {
                    // end_before_start, then a valid end
                    let bad = grid(s - MIN - rng.below(9 * MIN as u64) as i64);
                    let at = if rng.chance(0.5) {
                        bad
                    } else {
                        start_at + 1_000
                    };
                    f.end(&subject, &event, bad, &op, &org, at);
                }
                77..=83 => {
                    // late_end: the only end comes long after end + lateness
                    has_end = false;
                    let at = e + LATENESS + 5 * MIN + rng.below(7 * MIN as u64) as i64;
                    f.end(&subject, &event, e, &op, &org, at);
                }
                84..=89 => {
                    // late_start: the start comes after its end has given up on it
                    has_start = false;
                    let at = e + LATENESS + 5 * MIN + rng.below(5 * MIN as u64) as i64;
                    f.start(&subject, &event, s, &op, &org, at);
                }
                _ => {}
            }
            if has_start {
                f.start(&subject, &event, s, &op, &org, start_at);
                if messy && rng.chance(0.12) {
                    let at = start_at + MIN + rng.below(9 * MIN as u64) as i64;
                    f.start(&subject, &event, s, &op, &org, at);
                }
            }
            if has_end {
                f.end(&subject, &event, e, &op, &org, end_at);
                if messy && rng.chance(0.12) {
                    let at = end_at + 30_000 + rng.below(10 * MIN as u64) as i64;
                    f.end(&subject, &event, e, &op, &org, at);
                }
            }
        }
        if messy {
            let pid = f.id();
            let t = cursor - rng.below(3_600_000) as i64;
            f.periods.push((
                t,
                json!({"pid": pid, "event_id": format!("{subject}-bad"), "subject_id": subject,
                       "status": 3, "time": t}),
            ));
        }

        // Data over the whole timeline: during sessions, between them and after them.
        let until = cursor + 15 * MIN;
        let mut odometer = 1_000.0 * (n as f64 + 1.0);
        let mut t = BASE_MS;
        while t < until {
            t = grid(t + 10_000 + rng.below(30_000) as i64);
            let speed = rng.below(1_300) as f64 / 10.0;
            odometer += speed * 0.01;
            let mode = match rng.below(10) {
                0 => "sport",
                1..=4 => "comfort",
                _ => "eco",
            };
            let rid = f.id();
            let mut record = json!({"rid": rid, "subject_id": subject, "event_time": t,
                "signals": {"odometer": (odometer * 1_000.0).round() / 1_000.0, "speed": speed, "mode": mode}});
            if messy && rng.chance(0.004) {
                record["signals"]["speed"] = json!("fast");
            }
            let at = written_at(&mut rng, t, messy);
            f.states.push((at, record));
        }
        let mut t = BASE_MS;
        while t < until {
            t = grid(t + 20_000 + rng.below(130_000) as i64);
            let rid = f.id();
            let id = BEHAVIORS[rng.below(BEHAVIORS.len() as u64) as usize];
            let mut record = json!({"rid": rid, "subject_id": subject, "event_time": t,
                "behavior_id": id, "behavior_value": rng.below(5) as i64 - 1});
            if messy && rng.chance(0.01) {
                record.as_object_mut().unwrap().remove("behavior_id");
            }
            let at = written_at(&mut rng, t, messy);
            f.behaviors.push((at, record));
        }
    }
    f.into_input()
}

/// When a data record at `t` is written: within 40 s, or (messy, 3%) 4 to 20 minutes late.
fn written_at(rng: &mut Rng, t: i64, messy: bool) -> i64 {
    if messy && rng.chance(0.03) {
        t + 4 * MIN + rng.below(16 * MIN as u64) as i64
    } else {
        t + rng.below(40_000) as i64
    }
}

// ---------------------------------------------------------------------------------------
// Running the pipeline
// ---------------------------------------------------------------------------------------

struct Outputs {
    main: Vec<Value>,
    abnormal: Vec<Value>,
    unassigned: Vec<Value>,
}

fn run(work: &Workdir, pipeline: &str, input: &Input) -> Outputs {
    let periods = work.write_jsonl("periods.jsonl", &input.periods);
    let states = work.write_jsonl("states.jsonl", &input.states);
    let behaviors = work.write_jsonl("behaviors.jsonl", &input.behaviors);
    let out = |name: &str| work.path(name).display().to_string();
    let (main, abnormal, unassigned, dead) = (
        out("main.jsonl"),
        out("abnormal.jsonl"),
        out("unassigned.jsonl"),
        out("dead.jsonl"),
    );
    let args: Vec<String> = vec![
        "run".into(),
        pipeline.into(),
        "-q".into(),
        "--input".into(),
        format!("periods={periods}"),
        "--input".into(),
        format!("states={states}"),
        "--input".into(),
        format!("behaviors={behaviors}"),
        "--output".into(),
        format!("main={main}"),
        "--output".into(),
        format!("abnormal={abnormal}"),
        "--output".into(),
        format!("unassigned={unassigned}"),
        "--dead-letter".into(),
        dead.clone(),
        "--config".into(),
        "window=5m".into(),
        "--config".into(),
        "allowed_lateness=3m".into(),
        "--config".into(),
        "max_session=1h".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    weir(&args).assert_success();
    assert!(read_jsonl(&dead).is_empty(), "no dead letters");
    Outputs {
        main: read_jsonl(&main),
        abnormal: read_jsonl(&abnormal),
        unassigned: read_jsonl(&unassigned),
    }
}

// ---------------------------------------------------------------------------------------
// The batch model
// ---------------------------------------------------------------------------------------

const PERIODS: usize = 0;
const STATES: usize = 1;

/// A record as the UDF saw it: its place in the merged order and the watermark then.
struct Arrival<'a> {
    index: usize,
    source: usize,
    record: &'a Value,
    time: i64,
    watermark: i64,
}

fn record_time(source: usize, record: &Value) -> i64 {
    let field = if source == PERIODS {
        "time"
    } else {
        "event_time"
    };
    record[field].as_i64().expect("epoch ms")
}

/// The host's merge of the three files (docs/pipeline.md): the source whose next record
/// has the smallest timestamp goes next, ties in pipeline order; each record sees the
/// watermark from before it; a source's watermark is its largest timestamp minus its
/// out-of-orderness; the pipeline's is the minimum over sources that have not ended,
/// and a source ends right after its last record.
fn merge(input: &Input) -> Vec<Arrival<'_>> {
    let files = [&input.periods, &input.states, &input.behaviors];
    let mut next = [0usize; 3];
    let mut source_wm = [i64::MIN; 3];
    let mut watermark = i64::MIN;
    let mut out = Vec::new();
    loop {
        let pick = (0..3)
            .filter(|&i| next[i] < files[i].len())
            .min_by_key(|&i| (record_time(i, &files[i][next[i]]), i));
        let Some(source) = pick else { break };
        let record = &files[source][next[source]];
        let time = record_time(source, record);
        out.push(Arrival {
            index: out.len(),
            source,
            record,
            time,
            watermark,
        });
        next[source] += 1;
        source_wm[source] = source_wm[source].max(time - OUT_OF_ORDERNESS - 1);
        let combined = (0..3)
            .filter(|&i| next[i] < files[i].len())
            .map(|i| source_wm[i])
            .min()
            .unwrap_or(i64::MAX);
        watermark = watermark.max(combined);
    }
    out
}

/// A session with a valid start, as the model resolves it.
#[derive(Clone, Debug)]
struct ModelSession {
    subject: String,
    event_id: String,
    start: i64,
    /// Arrival index and watermark of its start.
    index: usize,
    start_wm: i64,
    end: Option<i64>,
    start_record: Value,
}

impl ModelSession {
    fn horizon(&self) -> i64 {
        self.end.unwrap_or(self.start + MAX_SESSION)
    }

    fn windows(&self) -> Vec<(i64, i64)> {
        let h = self.horizon();
        let mut out = Vec::new();
        let mut a = self.start;
        while a < h {
            out.push((a, (a + WINDOW).min(h)));
            a += WINDOW;
        }
        out
    }

    /// The documented rule: inside `[start, horizon)`, processed before its window was
    /// due, and after the start or still held (`t + lateness`) when the start came.
    fn takes(&self, d: &Arrival) -> bool {
        let h = self.horizon();
        if d.time < self.start || d.time >= h {
            return false;
        }
        let k = (d.time - self.start) / WINDOW;
        let window_end = (self.start + (k + 1) * WINDOW).min(h);
        d.watermark < window_end + LATENESS
            && (d.index > self.index || self.start_wm < d.time + LATENESS)
    }
}

/// Resolves every period message: the sessions with a valid start, and the abnormal
/// records `(message, reason)`. One fold per session key over its messages in arrival
/// order, with the watermark each one saw.
fn resolve_periods<'a>(
    arrivals: &[Arrival<'a>],
) -> (Vec<ModelSession>, Vec<(&'a Value, &'static str)>) {
    let mut by_key: BTreeMap<(String, String), Vec<&Arrival>> = BTreeMap::new();
    let mut abnormal = Vec::new();
    for a in arrivals.iter().filter(|a| a.source == PERIODS) {
        let status = a.record["status"].as_i64();
        if status != Some(1) && status != Some(2) {
            abnormal.push((a.record, "invalid"));
            continue;
        }
        let key = (
            a.record["subject_id"].as_str().unwrap().to_owned(),
            a.record["event_id"].as_str().unwrap().to_owned(),
        );
        by_key.entry(key).or_default().push(a);
    }
    let mut sessions = Vec::new();
    for ((subject, event_id), messages) in by_key {
        let mut session: Option<ModelSession> = None;
        let mut waiting_end: Option<(i64, &Value)> = None;
        let mut end_without_start = false;
        // The end rules for a key that has a start.
        let apply_end = |s: &mut ModelSession, e: i64, wm: i64| -> Option<&'static str> {
            if s.end.is_some() {
                Some("duplicate_end")
            } else if e < s.start {
                Some("end_before_start")
            } else if wm >= e + LATENESS || wm >= s.start + MAX_SESSION + LATENESS {
                Some("late_end")
            } else {
                s.end = Some(e);
                None
            }
        };
        for m in messages {
            let wm = m.watermark;
            if m.record["status"] == 1 {
                let start = m.record["start_time"].as_i64().unwrap();
                if session.is_some() {
                    abnormal.push((m.record, "duplicate_start"));
                } else if end_without_start {
                    abnormal.push((m.record, "late_start"));
                } else if let Some((e, end_record)) = waiting_end.take() {
                    if wm >= e + LATENESS {
                        end_without_start = true;
                        abnormal.push((end_record, "end_without_start"));
                        abnormal.push((m.record, "late_start"));
                    } else {
                        let mut s = new_session(&subject, &event_id, start, m);
                        if let Some(reason) = apply_end(&mut s, e, wm) {
                            abnormal.push((end_record, reason));
                        }
                        session = Some(s);
                    }
                } else {
                    session = Some(new_session(&subject, &event_id, start, m));
                }
            } else {
                let e = m.record["end_time"].as_i64().unwrap();
                if let Some(s) = &mut session {
                    if let Some(reason) = apply_end(s, e, wm) {
                        abnormal.push((m.record, reason));
                    }
                } else if end_without_start || waiting_end.is_some() {
                    abnormal.push((m.record, "duplicate_end"));
                } else if wm >= e + LATENESS {
                    end_without_start = true;
                    abnormal.push((m.record, "end_without_start"));
                } else {
                    waiting_end = Some((e, m.record));
                }
            }
        }
        if let Some((_, end_record)) = waiting_end {
            abnormal.push((end_record, "end_without_start"));
        }
        sessions.extend(session);
    }
    (sessions, abnormal)
}

fn new_session(subject: &str, event_id: &str, start: i64, m: &Arrival) -> ModelSession {
    ModelSession {
        subject: subject.to_owned(),
        event_id: event_id.to_owned(),
        start,
        index: m.index,
        start_wm: m.watermark,
        end: None,
        start_record: m.record.clone(),
    }
}

fn is_valid_data(source: usize, r: &Value) -> bool {
    if source == STATES {
        r["signals"]["speed"].is_number() || r["signals"]["speed"].is_null()
    } else {
        r["behavior_id"].is_string()
    }
}

/// The report of `session` over its `members`, computed in one pass as a batch job would.
fn batch_report(session: &ModelSession, members: &[&Value]) -> Value {
    let mut windows = Vec::new();
    for (a, b) in session.windows() {
        let inside: Vec<&&Value> = members
            .iter()
            .filter(|r| {
                let t = r["event_time"].as_i64().unwrap();
                a <= t && t < b
            })
            .collect();
        let states: Vec<&&Value> = inside
            .iter()
            .copied()
            .filter(|r| r.get("signals").is_some())
            .collect();
        let max_speed = states
            .iter()
            .map(|r| r["signals"]["speed"].as_f64().unwrap())
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
        windows.push(json!({"start": a, "end": b, "states": states.len(),
            "behaviors": inside.len() - states.len(), "max_speed": max_speed}));
    }
    let mut readings: Vec<(i64, f64)> = members
        .iter()
        .filter(|r| r.get("signals").is_some())
        .map(|r| {
            (
                r["event_time"].as_i64().unwrap(),
                r["signals"]["odometer"].as_f64().unwrap(),
            )
        })
        .collect();
    readings.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let distance = if readings.len() >= 2 {
        readings[readings.len() - 1].1 - readings[0].1
    } else {
        0.0
    };
    let speeds = members
        .iter()
        .filter_map(|r| r["signals"]["speed"].as_f64());
    let max_speed = speeds.fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
    let sport = members.iter().any(|r| r["signals"]["mode"] == "sport");
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut sum = 0i64;
    for r in members.iter().filter(|r| r.get("behavior_id").is_some()) {
        *counts
            .entry(r["behavior_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
        sum += r["behavior_value"].as_i64().unwrap();
    }
    let start = &session.start_record;
    json!({
        "event_id": session.event_id, "subject_id": session.subject,
        "start_time": session.start, "end_time": session.end,
        "duration_ms": session.end.map(|e| e - session.start),
        "operator": start["operator"], "org_id": start["org_id"],
        "distance": distance, "max_speed": max_speed, "sport_mode_used": sport,
        "behavior_counts": counts, "behavior_value_sum": sum, "windows": windows,
    })
}

/// What the pipeline must output, and the model's accounting of every data record.
struct Expected {
    main: Vec<Value>,
    abnormal: Vec<Value>,
    unassigned: Vec<Value>,
    /// Data records in at least one session.
    assigned: usize,
    /// Sum over data records of the sessions they are in.
    memberships: usize,
    /// Members that came before their session's start.
    held_and_taken: usize,
    /// Records in a session's span that came before its start and were no longer held
    /// when it came.
    held_too_long: usize,
}

fn with_fields(record: &Value, fields: &[(&str, Value)]) -> Value {
    let mut v = record.clone();
    for (k, x) in fields {
        v[*k] = x.clone();
    }
    v
}

fn expected(input: &Input) -> Expected {
    let arrivals = merge(input);
    let (sessions, period_abnormal) = resolve_periods(&arrivals);
    let mut members: Vec<Vec<&Value>> = vec![Vec::new(); sessions.len()];
    let (mut unassigned, mut assigned, mut memberships) = (Vec::new(), 0, 0);
    let (mut held_and_taken, mut held_too_long) = (0, 0);
    for d in arrivals.iter().filter(|a| a.source != PERIODS) {
        let input_name = if d.source == STATES {
            "states"
        } else {
            "behaviors"
        };
        if !is_valid_data(d.source, d.record) {
            unassigned.push(with_fields(
                d.record,
                &[("reason", "invalid".into()), ("input", input_name.into())],
            ));
            continue;
        }
        let subject = d.record["subject_id"].as_str().unwrap();
        let mut taken = false;
        for (i, s) in sessions.iter().enumerate() {
            if s.subject == subject && s.takes(d) {
                members[i].push(d.record);
                taken = true;
                memberships += 1;
                held_and_taken += usize::from(d.index < s.index);
            } else if s.subject == subject
                && d.index < s.index
                && s.start <= d.time
                && d.time < s.horizon()
                && s.start_wm >= d.time + LATENESS
            {
                held_too_long += 1;
            }
        }
        if taken {
            assigned += 1;
            continue;
        }
        let reason = if d.watermark >= d.time + LATENESS
            && sessions.iter().any(|s| {
                s.subject == subject
                    && s.index < d.index
                    && s.start <= d.time
                    && d.time < s.horizon()
            }) {
            "late"
        } else {
            "no_session"
        };
        unassigned.push(with_fields(
            d.record,
            &[("reason", reason.into()), ("input", input_name.into())],
        ));
    }
    let mut main = Vec::new();
    let mut abnormal: Vec<Value> = period_abnormal
        .into_iter()
        .map(|(r, reason)| with_fields(r, &[("reason", reason.into())]))
        .collect();
    for (s, m) in sessions.iter().zip(&members) {
        let report = batch_report(s, m);
        if s.end.is_some() {
            main.push(report);
        } else {
            abnormal.push(with_fields(
                &s.start_record,
                &[("reason", "no_end".into()), ("report", report)],
            ));
        }
    }
    Expected {
        main,
        abnormal,
        unassigned,
        assigned,
        memberships,
        held_and_taken,
        held_too_long,
    }
}

// ---------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------

/// The first difference between `got` and `want`, as a path and both values; floats are
/// equal within a relative 1e-9 (the UDF parses the JSON text, the model uses the values
/// it wrote, and a decimal text need not parse to the same last bit).
fn difference(got: &Value, want: &Value, path: &str) -> Option<String> {
    let differ = || Some(format!("{path}: got {got}, want {want}"));
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => {
            if g.is_f64() || w.is_f64() {
                let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
                let close = (g - w).abs() <= 1e-9 * g.abs().max(w.abs()).max(1.0);
                if close {
                    None
                } else {
                    differ()
                }
            } else if g == w {
                None
            } else {
                differ()
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            if g.len() != w.len() {
                return differ();
            }
            g.iter()
                .zip(w)
                .enumerate()
                .find_map(|(i, (g, w))| difference(g, w, &format!("{path}[{i}]")))
        }
        (Value::Object(g), Value::Object(w)) => {
            if g.keys().ne(w.keys()) {
                return differ();
            }
            g.iter()
                .find_map(|(k, v)| difference(v, &w[k], &format!("{path}.{k}")))
        }
        _ if got == want => None,
        _ => differ(),
    }
}

fn assert_close(got: &Value, want: &Value, what: &str) {
    if let Some(d) = difference(got, want, what) {
        panic!("{d}\n  got:  {got}\n  want: {want}");
    }
}

/// Sorts records by an id field, then by their text (for repeats of one id).
fn sorted_by(mut records: Vec<Value>, id: &str) -> Vec<Value> {
    records.sort_by_key(|r| (r[id].as_i64().unwrap_or(-1), r.to_string()));
    records
}

/// Removes `detail` from invalid records after checking that it is there.
fn without_details(records: Vec<Value>) -> Vec<Value> {
    records
        .into_iter()
        .map(|mut r| {
            if r["reason"] == "invalid" {
                let detail = r.as_object_mut().unwrap().remove("detail");
                assert!(
                    detail.is_some_and(|d| d.is_string()),
                    "invalid without detail: {r}"
                );
            }
            r
        })
        .collect()
}

fn reports_by_session(reports: &[Value]) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for r in reports {
        let key = (
            r["subject_id"].as_str().unwrap().to_owned(),
            r["event_id"].as_str().unwrap().to_owned(),
        );
        assert!(
            out.insert(key, r.clone()).is_none(),
            "one report per session: {r}"
        );
    }
    out
}

fn window_counts(report: &Value) -> usize {
    report["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["states"].as_u64().unwrap() + w["behaviors"].as_u64().unwrap()) as usize)
        .sum()
}

fn assert_matches(out: &Outputs, want: &Expected) {
    let got = reports_by_session(&out.main);
    let expected = reports_by_session(&want.main);
    assert_eq!(got.len(), expected.len(), "number of reports");
    for (key, report) in &expected {
        let got = got
            .get(key)
            .unwrap_or_else(|| panic!("no report for {key:?}"));
        assert_close(got, report, &format!("report of {key:?}"));
    }
    let got = Value::Array(sorted_by(without_details(out.abnormal.clone()), "pid"));
    let expected = Value::Array(sorted_by(want.abnormal.clone(), "pid"));
    assert_close(&got, &expected, "abnormal");
    let got = Value::Array(sorted_by(without_details(out.unassigned.clone()), "rid"));
    let expected = Value::Array(sorted_by(want.unassigned.clone(), "rid"));
    assert_close(&got, &expected, "unassigned");
}

/// Every input record is accounted for, from the outputs alone: each period message is
/// the start or end of a report or in `abnormal` (a `no_end` record carries its start);
/// each data record is in `unassigned` once, or counted in the windows of the sessions
/// the model puts it in.
fn assert_accounted(input: &Input, out: &Outputs, want: &Expected) {
    assert_eq!(
        2 * out.main.len() + out.abnormal.len(),
        input.periods.len(),
        "every period message is in a report or in abnormal"
    );
    let mut rids: Vec<i64> = out
        .unassigned
        .iter()
        .map(|r| r["rid"].as_i64().unwrap())
        .collect();
    rids.sort();
    rids.dedup();
    assert_eq!(
        rids.len(),
        out.unassigned.len(),
        "each record is unassigned at most once"
    );
    let data = input.states.len() + input.behaviors.len();
    assert_eq!(
        out.unassigned.len() + want.assigned,
        data,
        "every data record is somewhere"
    );
    let counted: usize = out.main.iter().map(window_counts).sum::<usize>()
        + out
            .abnormal
            .iter()
            .filter(|r| r["reason"] == "no_end")
            .map(|r| window_counts(&r["report"]))
            .sum::<usize>();
    assert_eq!(counted, want.memberships, "records counted in reports");
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// The seed's point: on clean input the real-time reports equal the batch SQL,
/// `JOIN ... ON b.event_time >= p.start_time AND b.event_time < p.end_time GROUP BY session`.
#[test]
fn clean_input_gives_the_reports_of_a_plain_range_join() {
    let input = generate(11, 4, 12, false, 1);
    let work = Workdir::new();
    let out = run(&work, PIPELINE, &input);

    // The range join knows nothing of arrival order or watermarks.
    let mut sessions: BTreeMap<(String, String), (i64, i64, Value)> = BTreeMap::new();
    for p in &input.periods {
        let key = (
            p["subject_id"].as_str().unwrap().to_owned(),
            p["event_id"].as_str().unwrap().to_owned(),
        );
        let entry = sessions.entry(key).or_insert((0, 0, Value::Null));
        if p["status"] == 1 {
            entry.0 = p["start_time"].as_i64().unwrap();
            entry.2 = p.clone();
        } else {
            entry.1 = p["end_time"].as_i64().unwrap();
        }
    }
    let data: Vec<&Value> = input.states.iter().chain(&input.behaviors).collect();
    let mut in_a_session = 0;
    let mut expected = Vec::new();
    for ((subject, event_id), (start, end, start_record)) in &sessions {
        let members: Vec<&Value> = data
            .iter()
            .copied()
            .filter(|d| {
                let t = d["event_time"].as_i64().unwrap();
                d["subject_id"] == subject.as_str() && *start <= t && t < *end
            })
            .collect();
        in_a_session += members.len();
        let session = ModelSession {
            subject: subject.clone(),
            event_id: event_id.clone(),
            start: *start,
            index: 0,
            start_wm: i64::MIN,
            end: Some(*end),
            start_record: start_record.clone(),
        };
        expected.push(batch_report(&session, &members));
    }
    assert_eq!(out.main.len(), 48);
    let got = reports_by_session(&out.main);
    for (key, report) in reports_by_session(&expected) {
        let got = got
            .get(&key)
            .unwrap_or_else(|| panic!("no report for {key:?}"));
        assert_close(got, &report, &format!("report of {key:?}"));
    }
    assert!(out.abnormal.is_empty(), "{:?}", out.abnormal.first());
    assert!(out.unassigned.iter().all(|r| r["reason"] == "no_session"));
    assert_eq!(out.unassigned.len() + in_a_session, data.len());
}

#[test]
fn messy_input_matches_the_batch_model_and_every_record_is_accounted_for() {
    let input = generate(3, 8, 14, true, 1);
    let work = Workdir::new();
    let out = run(&work, PIPELINE, &input);
    let want = expected(&input);
    assert_matches(&out, &want);
    assert_accounted(&input, &out, &want);

    // The input exercised every case.
    let reasons = |records: &[Value]| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in records {
            *m.entry(r["reason"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        m
    };
    let abnormal = reasons(&out.abnormal);
    for reason in [
        "duplicate_start",
        "duplicate_end",
        "end_before_start",
        "end_without_start",
        "late_start",
        "late_end",
        "no_end",
        "invalid",
    ] {
        assert!(abnormal.contains_key(reason), "no {reason} in {abnormal:?}");
    }
    let unassigned = reasons(&out.unassigned);
    for reason in ["late", "no_session", "invalid"] {
        assert!(
            unassigned.contains_key(reason),
            "no {reason} in {unassigned:?}"
        );
    }
    assert!(out.main.len() > 50, "{} reports", out.main.len());
    assert!(
        want.held_and_taken > 30,
        "data before their start were taken: {}",
        want.held_and_taken
    );
    assert!(
        want.held_too_long > 0,
        "a start came after its data had been held too long"
    );
    assert!(want.memberships > want.assigned, "some sessions overlap");
    assert!(
        out.main.iter().any(|r| r["windows"] == json!([])),
        "an empty session"
    );
}

/// Event times on a 10 s grid: data exactly at starts and ends, watermarks exactly at a
/// window's due time, ties between sources. Every boundary of the rules is hit.
#[test]
fn boundaries_and_ties_match_the_batch_model() {
    let input = generate(5, 8, 14, true, 10_000);
    let work = Workdir::new();
    let out = run(&work, PIPELINE, &input);
    let want = expected(&input);
    assert_matches(&out, &want);
    assert_accounted(&input, &out, &want);
}

/// The same messy input with other batch sizes: timers registered behind the watermark
/// and records in one batch with due timers must give the same outputs.
#[test]
fn batch_sizes_do_not_change_the_outputs() {
    let input = generate(8, 3, 10, true, 1);
    let want = expected(&input);
    for max_batch in [0, 1, 7] {
        let work = Workdir::new();
        let pipeline =
            weir_e2e::example_variant(&work, "session-report", &format!("max_batch = {max_batch}"));
        let out = run(&work, &pipeline, &input);
        assert_matches(&out, &want);
        assert_accounted(&input, &out, &want);
    }
}
