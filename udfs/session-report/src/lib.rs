//! Per-session reports over three inputs (seed 003: a real-time test-drive report).
//!
//! A *session* (an `event_id` of a subject) is opened and closed by messages on input
//! `periods`; inputs `states` and `behaviors` carry the subject's data, which know only
//! their subject and event time. All three are keyed by `subject_id`, so one subject's
//! sessions and data meet in one key (Flink's `KeyedCoProcessFunction` on `subject_id`),
//! and the session key inside it is `event_id` + `subject_id`. When a session ends, one
//! report goes to `main`; abnormal sessions and period messages go to `abnormal`, and
//! data that no session took go to `unassigned`. No record is lost: a period message is
//! the start or end of a report, or in `abnormal` (a `no_end` record carries its start);
//! a data record is counted in the report of every session that took it (a `main`
//! report, or the partial report of a `no_end` record), or, if none did, it is in
//! `unassigned`, once.
//!
//! # Inputs
//!
//! - `periods`: `{"event_id", "subject_id", "status": 1|2, "start_time", "end_time",
//!   "operator", "org_id"}`. Status 1 starts the session at `start_time`, status 2 ends
//!   it at `end_time` (epoch milliseconds, JSON integers). The source's own timestamp
//!   field (for the watermark) should hold the message's time; the example's records
//!   carry `"time"`, equal to `start_time` for a start and `end_time` for an end. `event_id`
//!   is a string or a number, compared as written (`"17"` and `17` are two sessions);
//!   `operator` and `org_id` come from the start message, as any JSON (null if absent).
//! - `states`: `{"subject_id", "event_time", "signals": {"odometer", "speed", "mode"}}`.
//!   Each signal may be missing (a state without `odometer` still counts as a state, but
//!   not for `distance`; one without `speed` not for `max_speed`).
//! - `behaviors`: `{"subject_id", "event_time", "behavior_id": str, "behavior_value": i64}`
//!   (a missing or null `behavior_value` counts as 0).
//!
//! The event time of a data record is the record's timestamp as the host extracted it
//! (the source's timestamp field, `event_time`). Data carry no id, so identical data
//! records are two records. A record whose fields have the wrong type is not an error of
//! the run: a period goes to `abnormal` and a data record to `unassigned`, with reason
//! `invalid` and a `detail`. An input other than the three names stops the run at init.
//!
//! # Rules
//!
//! Every decision depends only on the record, what came before it for its subject, and
//! the watermark `W` when it is processed (`current_watermark()`, the watermark before
//! the record); timers only carry out what the watermark already decided. So the result
//! does not depend on batching or on when timers happen to fire. Below, `w` is `window`,
//! `L` is `allowed_lateness`, `M` is `max_session`, and a session's *horizon* `h` is its
//! accepted end, or `start + M` while it has none.
//!
//! **Windows.** `[s, s+w)`, `[s+w, s+2w)`, ..., the last cut at `h` (no window if
//! `h == s`). Window `[a, b)` is computed when the watermark reaches `b + L`: its records
//! go to every metric strategy (see [`metrics`]). At `h + L` (when the last window is
//! computed) the session is closed: with an end, its report goes to `main`; without,
//! it is `no_end`. Its state is then cleared.
//!
//! **Starts** (status 1), for session key `K`:
//! - `K` has a session with a start (open or closed) → `duplicate_start`; the session
//!   goes on from the first start.
//! - `K` was closed as `end_without_start` → `late_start`.
//! - An end is waiting for `K`: if `W >= end + L` it is `end_without_start` now and the
//!   start is `late_start`; otherwise the session opens and the waiting end is applied to
//!   it as below.
//! - Otherwise the session opens, open-ended.
//!
//! **Ends** (status 2):
//! - `K` has a session with a start (open or closed): if it already has an accepted end
//!   → `duplicate_end` (the first end stays); else if `end_time < start_time` →
//!   `end_before_start` (the end is rejected; the session stays open and may get a valid
//!   end); else if `W >= end_time + L` or `W >= start + M + L` → `late_end` (too late to
//!   cut the session: windows after its end may be computed already); otherwise the end
//!   is accepted. An accepted end may be more than `M` after the start: `M` bounds how
//!   long a session *waits* for its end, not how long it may be.
//! - `K` already has a waiting end or was an `end_without_start` → `duplicate_end`.
//! - Otherwise the end waits for its start until `end_time + L`; if none came, it is
//!   `end_without_start` (at once if `W >= end_time + L` already).
//!
//! `end_time == start_time` is a valid, empty session (no windows).
//!
//! **Data** (a record at event time `t`). A session takes it when `s <= t < h`, it was
//! processed before its window was due (`W < b + L` for its window `[a, b)`), and it came
//! after the session's start or was still *held* when the start came
//! (`W at the start < t + L`): data that come before their start are held for `L` of
//! event time. A record may be taken by several sessions if they overlap (an open-ended
//! session overlaps the subject's next one until its end is known); it counts in each.
//! A record that no session took goes to `unassigned`:
//! - `late`: it came when its window in a session that spans `t` was already due (that
//!   includes data after the session's report);
//! - `no_session`: no session spans `t`, or its session's start came after the record
//!   had been held for `L`, or an end cut it out of an open-ended session, or it is past
//!   `start + M` of a session that never got an end. It is emitted when the watermark has
//!   passed `t + L` (held data are swept per 10 s of event time), or at once if it came
//!   that late.
//!
//! **Time.** Everything runs in event time, as the seed's "strict event-time" variant:
//! a window or report is due when the watermark reaches it, so a quiet source (often the
//! sparse `periods` one) holds reports back until it moves or the input ends; at the end
//! of input everything pending is computed. Processing-time triggering, which the seed
//! also discusses, is not offered: it would make reports depend on replay speed.
//!
//! **Memory.** Closed session keys are remembered for `M` after their close (to recognise
//! repeated or late period messages and to tell `late` from `no_session`); after that, a
//! start with the same `event_id` opens a new session. Data are held only while a
//! session may still take them or for `L` after their event time.
//!
//! # Outputs
//!
//! - `main`, one per session with an accepted end, keyed by `event_id|subject_id`, at
//!   time `end_time + L`: `{"event_id", "subject_id", "start_time", "end_time",
//!   "duration_ms", "operator", "org_id", "distance", "max_speed", "sport_mode_used",
//!   "behavior_counts", "behavior_value_sum", "windows": [{"start", "end", "states",
//!   "behaviors", "max_speed"}]}`; times in epoch ms. `distance` is the last odometer
//!   minus the first (by event time; 0.0 with fewer than two readings), `max_speed` null
//!   without speeds, every window listed in order, empty ones included.
//! - `abnormal`: the offending period message's fields plus `"event_id"`,
//!   `"subject_id"` and `"reason"` (one of `duplicate_start`, `duplicate_end`,
//!   `end_before_start`, `end_without_start`, `late_start`, `late_end`, `invalid` with a
//!   `"detail"`, and `no_end`), keyed like the report. A `no_end` record carries the
//!   session's start message and `"report"`: the report over `[start, start + M)` in the
//!   shape above, with `"end_time": null` and `"duration_ms": null`; it is emitted at
//!   `start + M + L`.
//! - `unassigned`: the data record's fields plus `"reason"` (`late`, `no_session` or
//!   `invalid` with a `"detail"`) and `"input"` (`states` or `behaviors`), keyed by the
//!   subject. Fields of the record named like the added ones are overwritten.
//!
//! Config: `window` (default `5m`), `allowed_lateness` (default `3m`), `max_session`
//! (default `2h`).

mod input;
pub mod metrics;
mod state;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use weir_sdk::prelude::*;

use input::{
    json_value, key_text, parse_period, parse_sample, raw_event_id, raw_object, Input, Period,
};
use metrics::{BehaviorSample, StateSample, WindowData, STRATEGIES};
use state::{
    bucket_cleanup_at, bucket_first_due, bucket_of, Closed, Datum, Params, PendingEnd, Sample,
    Session, Subject,
};

#[derive(Deserialize)]
struct Config {
    #[serde(default = "five_minutes")]
    window: Duration,
    #[serde(default = "three_minutes")]
    allowed_lateness: Duration,
    #[serde(default = "two_hours")]
    max_session: Duration,
}

fn five_minutes() -> Duration {
    Duration::from_mins(5)
}

fn three_minutes() -> Duration {
    Duration::from_mins(3)
}

fn two_hours() -> Duration {
    Duration::from_hours(2)
}

/// The process function; see the crate docs.
pub struct SessionReport {
    p: Params,
    /// The kind of each connected input, by input index.
    inputs: Vec<Input>,
    subject: ValueState<Subject>,
    /// Data buckets by id (see `state::BUCKET_MS`), records in arrival order.
    data: MapState<i64, Vec<Datum>>,
    /// Per session (`event_id` JSON text): each strategy's encoded accumulator by name.
    metrics: MapState<String, Vec<(String, Vec<u8>)>>,
    main: Output<Value>,
    abnormal: Output<Value>,
    unassigned: Output<Value>,
}

impl SessionReport {
    fn session_key(ctx: &Context, event_id: &str) -> String {
        format!(
            "{}|{}",
            key_text(event_id),
            String::from_utf8_lossy(ctx.current_key())
        )
    }

    /// Emits a period message to `abnormal` with `reason` and extra fields.
    fn emit_abnormal(
        &self,
        ctx: &Context,
        event_id: Option<&str>,
        reason: &str,
        raw: &str,
        extra: Vec<(&str, Value)>,
        at: Option<i64>,
    ) -> Result<()> {
        let mut record = raw_object(raw);
        let subject = record
            .get("subject_id")
            .cloned()
            .unwrap_or_else(|| String::from_utf8_lossy(ctx.current_key()).into());
        record.insert("event_id".into(), event_id.map_or(Value::Null, json_value));
        record.insert("subject_id".into(), subject);
        record.insert("reason".into(), reason.into());
        for (k, v) in extra {
            record.insert(k.into(), v);
        }
        let key = match event_id {
            Some(id) => Self::session_key(ctx, id),
            None => String::from_utf8_lossy(ctx.current_key()).into_owned(),
        };
        let mut out = Record::new(Value::Object(record)).with_key(&key);
        if let Some(at) = at {
            out = out.with_timestamp(at);
        }
        self.abnormal.emit_record(out)
    }

    fn emit_unassigned(
        &self,
        ctx: &Context,
        input: &str,
        reason: &str,
        raw: &str,
        detail: Option<String>,
    ) -> Result<()> {
        let mut record = raw_object(raw);
        record.insert("reason".into(), reason.into());
        record.insert("input".into(), input.into());
        if let Some(detail) = detail {
            record.insert("detail".into(), detail.into());
        }
        self.unassigned
            .emit_record(Record::new(Value::Object(record)).with_key(ctx.current_key()))
    }

    fn remember(&self, ctx: &Context, subject: &mut Subject, closed: Closed) {
        ctx.register_event_timer(closed.expires);
        subject.closed.push(closed);
    }

    fn on_period(&self, ctx: &Context, subject: &mut Subject, el: &Element, wm: i64) -> Result<()> {
        let raw = String::from_utf8_lossy(el.value());
        let period = match parse_period(el) {
            Ok(period) => period,
            Err(detail) => {
                let event_id = raw_event_id(el);
                return self.emit_abnormal(
                    ctx,
                    event_id.as_deref(),
                    "invalid",
                    &raw,
                    vec![("detail", detail.into())],
                    None,
                );
            }
        };
        let seq = subject.next_seq();
        match period {
            Period::Start {
                event_id,
                start,
                operator,
                org_id,
            } => {
                let session = Session {
                    subject_id: raw_object(&raw)
                        .get("subject_id")
                        .map_or_else(|| "null".to_owned(), Value::to_string),
                    event_id,
                    start,
                    end: None,
                    operator,
                    org_id,
                    start_raw: raw.into_owned(),
                    start_seq: seq,
                    start_wm: wm,
                    computed: 0,
                };
                self.on_start(ctx, subject, session, wm)
            }
            Period::End { event_id, end } => self.on_end(ctx, subject, event_id, end, &raw, wm),
        }
    }

    fn on_start(
        &self,
        ctx: &Context,
        subject: &mut Subject,
        mut session: Session,
        wm: i64,
    ) -> Result<()> {
        let id = session.event_id.clone();
        let raw = session.start_raw.clone();
        if subject.sessions.iter().any(|s| s.event_id == id) {
            return self.emit_abnormal(ctx, Some(&id), "duplicate_start", &raw, vec![], None);
        }
        if let Some(closed) = subject.closed.iter().find(|c| c.event_id == id) {
            let reason = if closed.start.is_some() {
                "duplicate_start"
            } else {
                "late_start"
            };
            return self.emit_abnormal(ctx, Some(&id), reason, &raw, vec![], None);
        }
        let waiting = subject.pending_ends.iter().position(|e| e.event_id == id);
        let waiting = waiting.map(|i| subject.pending_ends.remove(i));
        if let Some(end) = &waiting {
            if wm >= end.end.saturating_add(self.p.lateness) {
                self.end_without_start(ctx, subject, end)?;
                return self.emit_abnormal(ctx, Some(&id), "late_start", &raw, vec![], None);
            }
        }
        if let Some(end) = waiting {
            self.apply_end(ctx, &mut session, end.end, &end.raw, wm)?;
        }
        ctx.register_event_timer(session.next_due(&self.p));
        subject.sessions.push(session);
        Ok(())
    }

    /// Applies an end message to a session that has a start (see the crate docs).
    fn apply_end(
        &self,
        ctx: &Context,
        session: &mut Session,
        end: i64,
        raw: &str,
        wm: i64,
    ) -> Result<()> {
        let reason = if session.end.is_some() {
            "duplicate_end"
        } else if end < session.start {
            "end_before_start"
        } else if !session.alive(wm, &self.p) || wm >= end.saturating_add(self.p.lateness) {
            "late_end"
        } else {
            session.end = Some(end);
            ctx.register_event_timer(session.next_due(&self.p));
            return Ok(());
        };
        self.emit_abnormal(ctx, Some(&session.event_id), reason, raw, vec![], None)
    }

    fn on_end(
        &self,
        ctx: &Context,
        subject: &mut Subject,
        event_id: String,
        end: i64,
        raw: &str,
        wm: i64,
    ) -> Result<()> {
        if let Some(session) = subject.sessions.iter_mut().find(|s| s.event_id == event_id) {
            return self.apply_end(ctx, session, end, raw, wm);
        }
        if let Some(closed) = subject.closed.iter().find(|c| c.event_id == event_id) {
            let reason = match closed.start {
                Some(_) if closed.end.is_some() => "duplicate_end",
                Some(start) if end < start => "end_before_start",
                Some(_) => "late_end",
                None => "duplicate_end",
            };
            return self.emit_abnormal(ctx, Some(&event_id), reason, raw, vec![], None);
        }
        if subject.pending_ends.iter().any(|e| e.event_id == event_id) {
            return self.emit_abnormal(ctx, Some(&event_id), "duplicate_end", raw, vec![], None);
        }
        let pending = PendingEnd {
            event_id,
            end,
            raw: raw.to_owned(),
        };
        let due = end.saturating_add(self.p.lateness);
        if wm >= due {
            return self.end_without_start(ctx, subject, &pending);
        }
        ctx.register_event_timer(due);
        subject.pending_ends.push(pending);
        Ok(())
    }

    fn end_without_start(
        &self,
        ctx: &Context,
        subject: &mut Subject,
        end: &PendingEnd,
    ) -> Result<()> {
        let closed_at = end.end.saturating_add(self.p.lateness);
        self.emit_abnormal(
            ctx,
            Some(&end.event_id),
            "end_without_start",
            &end.raw,
            vec![],
            None,
        )?;
        let closed = Closed {
            event_id: end.event_id.clone(),
            start: None,
            end: Some(end.end),
            expires: closed_at.saturating_add(self.p.max_session),
        };
        self.remember(ctx, subject, closed);
        Ok(())
    }

    fn on_data(
        &self,
        ctx: &Context,
        subject: &mut Subject,
        el: &Element,
        input: Input,
        wm: i64,
    ) -> Result<()> {
        let raw = String::from_utf8_lossy(el.value());
        let sample = match parse_sample(input, el) {
            Ok(sample) => sample,
            Err(detail) => {
                return self.emit_unassigned(ctx, el.input(), "invalid", &raw, Some(detail));
            }
        };
        let datum = Datum {
            seq: subject.next_seq(),
            time: el.timestamp(),
            wm,
            used: false,
            sample,
            raw: raw.into_owned(),
        };
        let taken = subject
            .sessions
            .iter()
            .any(|s| s.alive(wm, &self.p) && s.takes(&datum, &self.p));
        if !taken && wm >= datum.time.saturating_add(self.p.lateness) {
            // Too late to be held for a start that is yet to come.
            let reason = if subject.covers(datum.time, &self.p) {
                "late"
            } else {
                "no_session"
            };
            return self.emit_unassigned(ctx, datum.sample.input(), reason, &datum.raw, None);
        }
        let bucket = bucket_of(datum.time);
        let mut held = self.data.get(&bucket)?.unwrap_or_default();
        held.push(datum);
        self.data.put(&bucket, &held)?;
        if let Err(i) = subject.buckets.binary_search(&bucket) {
            subject.buckets.insert(i, bucket);
            ctx.register_event_timer(bucket_cleanup_at(bucket, &self.p));
        }
        Ok(())
    }

    /// Computes window `k` of `session`: takes its records and runs every strategy.
    fn compute_window(&self, subject: &Subject, session: &Session, k: u64) -> Result<()> {
        let (a, b) = session.window(k, &self.p);
        let (first, last) = (bucket_of(a), bucket_of(b - 1));
        let mut taken: Vec<Datum> = Vec::new();
        for &bucket in subject
            .buckets
            .iter()
            .filter(|&&id| first <= id && id <= last)
        {
            let Some(mut held) = self.data.get(&bucket)? else {
                continue;
            };
            let mut changed = false;
            for d in &mut held {
                if a <= d.time && d.time < b && session.takes(d, &self.p) {
                    taken.push(d.clone());
                    changed |= !d.used;
                    d.used = true;
                }
            }
            if changed {
                self.data.put(&bucket, &held)?;
            }
        }
        taken.sort_by_key(|d| (d.time, d.seq));
        let mut window = WindowData {
            start: a,
            end: b,
            states: Vec::new(),
            behaviors: Vec::new(),
        };
        for d in &taken {
            match &d.sample {
                Sample::State {
                    odometer,
                    speed,
                    mode,
                } => window.states.push(StateSample {
                    time: d.time,
                    odometer: *odometer,
                    speed: *speed,
                    mode: mode.as_deref(),
                }),
                Sample::Behavior { id, value } => window.behaviors.push(BehaviorSample {
                    time: d.time,
                    id,
                    value: *value,
                }),
            }
        }
        let mut accs = self.metrics.get(&session.event_id)?.unwrap_or_default();
        for strategy in STRATEGIES {
            let slot = accs.iter().position(|(name, _)| name == strategy.name());
            let old = slot.map(|i| accs[i].1.as_slice());
            let new = strategy.process_encoded(&window, old)?;
            match slot {
                Some(i) => accs[i].1 = new,
                None => accs.push((strategy.name().to_owned(), new)),
            }
        }
        self.metrics.put(&session.event_id, &accs)
    }

    /// The report of a session from its strategies' accumulators.
    fn report(&self, session: &Session) -> Result<Value> {
        let mut report = Map::new();
        report.insert("event_id".into(), json_value(&session.event_id));
        report.insert("subject_id".into(), json_value(&session.subject_id));
        report.insert("start_time".into(), session.start.into());
        report.insert("end_time".into(), json!(session.end));
        report.insert(
            "duration_ms".into(),
            json!(session.end.map(|e| e - session.start)),
        );
        report.insert("operator".into(), json_value(&session.operator));
        report.insert("org_id".into(), json_value(&session.org_id));
        let accs = self.metrics.get(&session.event_id)?.unwrap_or_default();
        for strategy in STRATEGIES {
            let acc = accs
                .iter()
                .find(|(name, _)| name == strategy.name())
                .map(|(_, acc)| acc.as_slice());
            strategy.report_encoded(acc, &mut report)?;
        }
        Ok(Value::Object(report))
    }

    /// Emits a session whose last window is computed, and forgets all but its key.
    fn close(&self, ctx: &Context, subject: &mut Subject, session: &Session) -> Result<()> {
        let horizon = session.horizon(&self.p);
        let at = horizon.saturating_add(self.p.lateness);
        let report = self.report(session)?;
        if session.end.is_some() {
            let key = Self::session_key(ctx, &session.event_id);
            self.main
                .emit_record(Record::new(report).with_key(&key).with_timestamp(at))?;
        } else {
            self.emit_abnormal(
                ctx,
                Some(&session.event_id),
                "no_end",
                &session.start_raw,
                vec![("report", report)],
                Some(at),
            )?;
        }
        self.metrics.remove(&session.event_id)?;
        let closed = Closed {
            event_id: session.event_id.clone(),
            start: Some(session.start),
            end: session.end,
            expires: at.saturating_add(self.p.max_session),
        };
        self.remember(ctx, subject, closed);
        Ok(())
    }

    /// Drops held records that no open session may take and whose `t + L` has passed.
    fn sweep(&self, ctx: &Context, subject: &mut Subject, now: i64) -> Result<()> {
        let due: Vec<i64> = subject
            .buckets
            .iter()
            .copied()
            .filter(|&b| bucket_first_due(b, &self.p) <= now)
            .collect();
        for bucket in due {
            let mut held = self.data.get(&bucket)?.unwrap_or_default();
            let before = held.len();
            let mut dropped = Vec::new();
            held.retain(|d| {
                let keep = d.time.saturating_add(self.p.lateness) > now
                    || subject.sessions.iter().any(|s| s.takes(d, &self.p));
                if !keep && !d.used {
                    dropped.push(d.clone());
                }
                keep
            });
            if held.is_empty() {
                self.data.remove(&bucket)?;
                subject.buckets.retain(|&b| b != bucket);
            } else if held.len() != before {
                self.data.put(&bucket, &held)?;
            }
            dropped.sort_by_key(|d| (d.time, d.seq));
            for d in dropped {
                self.emit_unassigned(ctx, d.sample.input(), "no_session", &d.raw, None)?;
            }
        }
        Ok(())
    }

    fn save(&self, ctx: &Context, subject: &Subject) -> Result<()> {
        if subject.is_empty() {
            ctx.clear_all_state();
            Ok(())
        } else {
            self.subject.set(subject)
        }
    }
}

impl ProcessFunction for SessionReport {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        ensure!(
            cfg.window.as_millis() > 0,
            "config `window` must be longer than 0"
        );
        ensure!(
            cfg.max_session.as_millis() > 0,
            "config `max_session` must be longer than 0"
        );
        let inputs = ctx
            .inputs()
            .iter()
            .map(|name| match name.as_str() {
                "periods" => Ok(Input::Periods),
                "states" => Ok(Input::States),
                "behaviors" => Ok(Input::Behaviors),
                other => Err(anyhow!(
                    "unknown input `{other}`: this UDF reads `periods`, `states` and `behaviors` \
                     (set `input = ...` on each [[source]])"
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SessionReport {
            p: Params {
                window: cfg.window.as_millis(),
                lateness: cfg.allowed_lateness.as_millis(),
                max_session: cfg.max_session.as_millis(),
            },
            inputs,
            subject: ctx.value_state("subject")?,
            data: ctx.map_state("data")?,
            metrics: ctx.map_state("metrics")?,
            main: ctx.main_output()?,
            abnormal: ctx.output("abnormal")?,
            unassigned: ctx.output("unassigned")?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let input = self.inputs[el.input_index() as usize];
        let wm = ctx.current_watermark();
        let mut subject = self.subject.get()?.unwrap_or_default();
        match input {
            Input::Periods => self.on_period(ctx, &mut subject, el, wm)?,
            Input::States | Input::Behaviors => self.on_data(ctx, &mut subject, el, input, wm)?,
        }
        self.save(ctx, &subject)
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        let Some(mut subject) = self.subject.get()? else {
            return Ok(());
        };
        let now = timer.timestamp();
        let sessions = std::mem::take(&mut subject.sessions);
        let mut open = Vec::with_capacity(sessions.len());
        for mut session in sessions {
            while session.computed < session.window_count(&self.p)
                && session.next_due(&self.p) <= now
            {
                self.compute_window(&subject, &session, session.computed)?;
                session.computed += 1;
            }
            if session.computed >= session.window_count(&self.p) && session.next_due(&self.p) <= now
            {
                self.close(ctx, &mut subject, &session)?;
            } else {
                ctx.register_event_timer(session.next_due(&self.p));
                open.push(session);
            }
        }
        subject.sessions = open;

        let lateness = self.p.lateness;
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut subject.pending_ends)
            .into_iter()
            .partition(|e| e.end.saturating_add(lateness) <= now);
        subject.pending_ends = waiting;
        for end in &due {
            self.end_without_start(ctx, &mut subject, end)?;
        }

        self.sweep(ctx, &mut subject, now)?;
        subject.closed.retain(|c| c.expires > now);
        self.save(ctx, &subject)
    }
}

weir_sdk::export!(SessionReport);
