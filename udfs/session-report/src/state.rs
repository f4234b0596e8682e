//! The keyed state of one subject and the rules that decide, from it and the watermark,
//! where a record goes. Pure functions: the process function in `lib.rs` applies them.

use serde::{Deserialize, Serialize};

/// Data are held in buckets of this much event time (one map entry each), so that a
/// record costs one small read and write and a window reads only its own buckets.
pub(crate) const BUCKET_MS: i64 = 10_000;

/// The configuration, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub window: i64,
    pub lateness: i64,
    pub max_session: i64,
}

/// Everything about one subject except the data buckets and the metric accumulators.
#[derive(Serialize, Deserialize, Default, Debug)]
pub(crate) struct Subject {
    /// Arrival counter of the subject's records (periods and data alike).
    pub seq: u64,
    /// Sessions that have a start and are not reported yet, in order of their start's arrival.
    pub sessions: Vec<Session>,
    /// End messages waiting for their start.
    pub pending_ends: Vec<PendingEnd>,
    /// Sessions already reported (or given up), remembered to recognise repeats.
    pub closed: Vec<Closed>,
    /// Ids of the data buckets that hold records, ascending.
    pub buckets: Vec<i64>,
}

impl Subject {
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
            && self.pending_ends.is_empty()
            && self.closed.is_empty()
            && self.buckets.is_empty()
    }

    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Whether some session (open, or closed and remembered) spans event time `t`.
    pub fn covers(&self, t: i64, p: &Params) -> bool {
        self.sessions.iter().any(|s| s.covers(t, p)) || self.closed.iter().any(|c| c.covers(t, p))
    }
}

/// A session with a start, not reported yet.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct Session {
    /// `event_id` as JSON text (`"trip-1"` or `17`).
    pub event_id: String,
    /// `subject_id` of the start message, as JSON text.
    pub subject_id: String,
    pub start: i64,
    /// The accepted end, if one came.
    pub end: Option<i64>,
    /// `operator` and `org_id` of the start message, as JSON text (`null` if absent).
    pub operator: String,
    pub org_id: String,
    /// The start message as it came, for the `no_end` record.
    pub start_raw: String,
    /// Arrival number and watermark of the start message.
    pub start_seq: u64,
    pub start_wm: i64,
    /// How many of its windows have been computed.
    pub computed: u64,
}

impl Session {
    /// Where the session stops: its end, or `start + max_session` while it has none.
    pub fn horizon(&self, p: &Params) -> i64 {
        self.end
            .unwrap_or_else(|| self.start.saturating_add(p.max_session))
    }

    /// Whether a record processed at watermark `wm` can still change the session: its
    /// report is due at `horizon + allowed_lateness`.
    pub fn alive(&self, wm: i64, p: &Params) -> bool {
        wm < self.horizon(p).saturating_add(p.lateness)
    }

    /// Whether event time `t` is inside the session as known now (`[start, horizon)`).
    pub fn covers(&self, t: i64, p: &Params) -> bool {
        self.start <= t && t < self.horizon(p)
    }

    pub fn window_count(&self, p: &Params) -> u64 {
        let span = self.horizon(p).saturating_sub(self.start);
        if span <= 0 {
            0
        } else {
            ((span - 1) / p.window + 1) as u64
        }
    }

    /// Window `k`: `[start + k*window, start + (k+1)*window)`, cut at the horizon.
    pub fn window(&self, k: u64, p: &Params) -> (i64, i64) {
        let a = self
            .start
            .saturating_add((k as i64).saturating_mul(p.window));
        (a, a.saturating_add(p.window).min(self.horizon(p)))
    }

    /// When the next window (or, after the last, the report) is due.
    pub fn next_due(&self, p: &Params) -> i64 {
        let at = if self.computed < self.window_count(p) {
            self.window(self.computed, p).1
        } else {
            self.horizon(p)
        };
        at.saturating_add(p.lateness)
    }

    /// Whether the session takes datum `d` into its not yet computed window. The rule:
    /// - `start <= t < end` (no end yet: any `t >= start`, the window cut at
    ///   `start + max_session` if `t` is before it);
    /// - the record was processed before its window was due: `wm < window end + lateness`;
    /// - it came after the start, or was still held when the start came:
    ///   `start watermark < t + lateness`.
    pub fn takes(&self, d: &Datum, p: &Params) -> bool {
        let t = d.time;
        if t < self.start || self.end.is_some_and(|e| t >= e) {
            return false;
        }
        let k = ((t - self.start) / p.window) as u64;
        if k < self.computed {
            return false;
        }
        let limit = match self.end {
            Some(e) => e,
            None if t < self.start.saturating_add(p.max_session) => {
                self.start.saturating_add(p.max_session)
            }
            None => i64::MAX,
        };
        let a = self
            .start
            .saturating_add((k as i64).saturating_mul(p.window));
        let window_end = a.saturating_add(p.window).min(limit);
        if d.wm >= window_end.saturating_add(p.lateness) {
            return false;
        }
        d.seq > self.start_seq || self.start_wm < t.saturating_add(p.lateness)
    }
}

/// An end message whose start has not come yet.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct PendingEnd {
    pub event_id: String,
    pub end: i64,
    pub raw: String,
}

/// A session key that is done: reported, given up as `no_end`, or an end without start.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct Closed {
    pub event_id: String,
    /// The session's start and accepted end (`None` for an end without start / no end).
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// When it is forgotten.
    pub expires: i64,
}

impl Closed {
    pub fn covers(&self, t: i64, p: &Params) -> bool {
        match self.start {
            Some(s) => s <= t && t < self.end.unwrap_or_else(|| s.saturating_add(p.max_session)),
            None => false,
        }
    }
}

/// A `states` or `behaviors` record held for the sessions that may take it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct Datum {
    /// Arrival number within the subject.
    pub seq: u64,
    /// Event time.
    pub time: i64,
    /// The watermark when it was processed.
    pub wm: i64,
    /// Whether a computed window has taken it.
    pub used: bool,
    pub sample: Sample,
    /// The record as it came, for the `unassigned` output.
    pub raw: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) enum Sample {
    State {
        odometer: Option<f64>,
        speed: Option<f64>,
        mode: Option<String>,
    },
    Behavior {
        id: String,
        value: i64,
    },
}

impl Sample {
    pub fn input(&self) -> &'static str {
        match self {
            Sample::State { .. } => "states",
            Sample::Behavior { .. } => "behaviors",
        }
    }
}

/// The bucket of event time `t`.
pub(crate) fn bucket_of(t: i64) -> i64 {
    t.div_euclid(BUCKET_MS)
}

/// The latest `t + lateness` of any record in bucket `b`: when a sweep can drop them all.
pub(crate) fn bucket_cleanup_at(b: i64, p: &Params) -> i64 {
    b.saturating_add(1)
        .saturating_mul(BUCKET_MS)
        .saturating_sub(1)
        .saturating_add(p.lateness)
}

/// The earliest `t + lateness` of any record in bucket `b`.
pub(crate) fn bucket_first_due(b: i64, p: &Params) -> i64 {
    b.saturating_mul(BUCKET_MS).saturating_add(p.lateness)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        window: 100,
        lateness: 30,
        max_session: 1_000,
    };

    fn session(start: i64, end: Option<i64>) -> Session {
        Session {
            event_id: "\"e\"".into(),
            subject_id: "\"s\"".into(),
            start,
            end,
            operator: "null".into(),
            org_id: "null".into(),
            start_raw: "{}".into(),
            start_seq: 10,
            start_wm: start - 50,
            computed: 0,
        }
    }

    fn datum(time: i64, wm: i64, seq: u64) -> Datum {
        Datum {
            seq,
            time,
            wm,
            used: false,
            sample: Sample::Behavior {
                id: "x".into(),
                value: 1,
            },
            raw: "{}".into(),
        }
    }

    #[test]
    fn windows_are_anchored_at_the_start_and_cut_at_the_end() {
        let s = session(1_050, Some(1_320));
        assert_eq!(s.window_count(&P), 3);
        assert_eq!(s.window(0, &P), (1_050, 1_150));
        assert_eq!(s.window(2, &P), (1_250, 1_320));
        assert_eq!(s.next_due(&P), 1_180);
        let open = session(0, None);
        assert_eq!(open.window_count(&P), 10);
        assert_eq!(open.horizon(&P), 1_000);
        assert_eq!(session(5, Some(5)).window_count(&P), 0);
        assert_eq!(session(5, Some(5)).next_due(&P), 35);
    }

    #[test]
    fn a_session_takes_data_until_their_window_is_due() {
        let s = session(1_000, Some(1_250));
        assert!(s.takes(&datum(1_000, 0, 11), &P));
        assert!(!s.takes(&datum(999, 0, 11), &P), "before the start");
        assert!(!s.takes(&datum(1_250, 0, 11), &P), "at the end");
        assert!(s.takes(&datum(1_099, 1_129, 11), &P));
        assert!(!s.takes(&datum(1_099, 1_130, 11), &P), "window due");
        assert!(s.takes(&datum(1_240, 1_279, 11), &P), "last window cut");
        assert!(!s.takes(&datum(1_240, 1_280, 11), &P));
    }

    #[test]
    fn data_before_the_start_count_while_held() {
        // The start came at watermark 950; data that came before it (seq < 10) count
        // while their own `t + lateness` had not passed then.
        let s = session(1_000, None);
        assert!(s.takes(&datum(1_000, 900, 3), &P));
        let mut late_start = s.clone();
        late_start.start_wm = 1_030;
        assert!(!late_start.takes(&datum(1_000, 900, 3), &P));
        assert!(late_start.takes(&datum(1_001, 900, 3), &P));
        assert!(late_start.takes(&datum(1_000, 1_029, 11), &P));
    }

    #[test]
    fn an_open_session_keeps_data_past_max_session_for_a_late_end() {
        let s = session(0, None);
        assert!(s.takes(&datum(999, 1_029, 11), &P));
        assert!(!s.takes(&datum(999, 1_030, 11), &P));
        assert!(s.takes(&datum(5_000, 2_000, 11), &P));
    }
}
