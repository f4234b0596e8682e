//! The session report through the in-memory host: the main flow, held and late data,
//! overlapping sessions, and every abnormal case, with exact expected records.

use serde_json::{json, Value};
use session_report::SessionReport;
use weir_sdk::testing::{Emitted, TestHost};

/// 2026-11-29 10:00:00 UTC.
const T0: i64 = 1_795_946_400_000;

/// `T0` plus minutes and seconds.
fn at(min: i64, sec: i64) -> i64 {
    T0 + (min * 60 + sec) * 1_000
}

fn host() -> TestHost<SessionReport> {
    TestHost::builder()
        .inputs(["periods", "states", "behaviors"])
        .build()
        .unwrap()
}

fn host_with(config: &[(&str, &str)]) -> TestHost<SessionReport> {
    let mut b = TestHost::builder().inputs(["periods", "states", "behaviors"]);
    for (k, v) in config {
        b = b.config(*k, *v);
    }
    b.build().unwrap()
}

fn start_msg(subject: &str, event: &str, s: i64) -> Value {
    json!({"event_id": event, "subject_id": subject, "status": 1, "start_time": s,
           "end_time": null, "operator": "op-7", "org_id": 42, "time": s})
}

fn end_msg(subject: &str, event: &str, e: i64) -> Value {
    json!({"event_id": event, "subject_id": subject, "status": 2, "start_time": null,
           "end_time": e, "time": e})
}

fn start(h: &mut TestHost<SessionReport>, subject: &str, event: &str, s: i64) {
    h.process("periods", subject, start_msg(subject, event, s), s)
        .unwrap();
}

fn end(h: &mut TestHost<SessionReport>, subject: &str, event: &str, e: i64) {
    h.process("periods", subject, end_msg(subject, event, e), e)
        .unwrap();
}

fn state_msg(subject: &str, t: i64, odometer: f64, speed: f64, mode: &str) -> Value {
    json!({"subject_id": subject, "event_time": t,
           "signals": {"odometer": odometer, "speed": speed, "mode": mode}})
}

fn state(h: &mut TestHost<SessionReport>, subject: &str, t: i64, odo: f64, speed: f64, mode: &str) {
    h.process(
        "states",
        subject,
        state_msg(subject, t, odo, speed, mode),
        t,
    )
    .unwrap();
}

fn behavior_msg(subject: &str, t: i64, id: &str, value: i64) -> Value {
    json!({"subject_id": subject, "event_time": t, "behavior_id": id, "behavior_value": value})
}

fn behavior(h: &mut TestHost<SessionReport>, subject: &str, t: i64, id: &str, value: i64) {
    h.process("behaviors", subject, behavior_msg(subject, t, id, value), t)
        .unwrap();
}

/// `raw` with the fields the UDF adds to an abnormal record.
fn abnormal(raw: Value, reason: &str) -> Value {
    let mut v = raw;
    v["reason"] = reason.into();
    v
}

fn unassigned(raw: Value, input: &str, reason: &str) -> Value {
    let mut v = raw;
    v["reason"] = reason.into();
    v["input"] = input.into();
    v
}

fn values(emitted: Vec<Emitted>) -> Vec<Value> {
    emitted.into_iter().map(|e| e.value).collect()
}

fn window(start: i64, end: i64, states: u64, behaviors: u64, max_speed: Value) -> Value {
    json!({"start": start, "end": end, "states": states, "behaviors": behaviors,
           "max_speed": max_speed})
}

#[test]
fn a_session_is_reported_once_its_end_plus_lateness_has_passed() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    state(&mut h, "car-1", at(1, 0), 100.0, 30.0, "eco");
    behavior(&mut h, "car-1", at(2, 0), "horn", 1);
    state(&mut h, "car-1", at(4, 0), 102.5, 50.0, "sport");
    state(&mut h, "car-1", at(7, 0), 105.0, 45.0, "eco");
    behavior(&mut h, "car-1", at(8, 0), "horn", 2);
    behavior(&mut h, "car-1", at(9, 0), "wiper", 3);
    end(&mut h, "car-1", "trip-1", at(12, 0));

    h.advance_watermark(at(14, 59) + 999).unwrap();
    assert!(h.outputs("main").is_empty());
    h.advance_watermark(at(15, 0)).unwrap();
    let report = json!({
        "event_id": "trip-1", "subject_id": "car-1",
        "start_time": at(0, 0), "end_time": at(12, 0), "duration_ms": 720_000,
        "operator": "op-7", "org_id": 42,
        "distance": 5.0, "max_speed": 50.0, "sport_mode_used": true,
        "behavior_counts": {"horn": 2, "wiper": 1}, "behavior_value_sum": 6,
        "windows": [
            window(at(0, 0), at(5, 0), 2, 1, json!(50.0)),
            window(at(5, 0), at(10, 0), 1, 2, json!(45.0)),
            window(at(10, 0), at(12, 0), 0, 0, Value::Null),
        ],
    });
    assert_eq!(
        h.take_outputs("main"),
        vec![Emitted::new(report, at(15, 0)).with_key("trip-1|car-1")]
    );
    assert!(h.outputs("abnormal").is_empty());
    assert!(h.outputs("unassigned").is_empty());

    // The session key is remembered for max_session, then everything is cleared.
    assert!(h.has_state("car-1"));
    h.advance_watermark(at(15, 0) + 2 * 3_600_000).unwrap();
    assert!(h.keys_with_state().is_empty());
    assert!(h.pending_timers().is_empty());
}

#[test]
fn windows_are_anchored_at_the_start_and_empty_ones_are_listed() {
    let mut h = host_with(&[("window", "1m"), ("allowed_lateness", "10s")]);
    let s = at(3, 20);
    start(&mut h, "car-1", "trip-1", s);
    state(&mut h, "car-1", s + 5_000, 1.0, 10.0, "eco");
    state(&mut h, "car-1", s + 200_000, 2.0, 20.0, "eco");
    end(&mut h, "car-1", "trip-1", s + 210_000);
    h.finish().unwrap();
    let out = values(h.take_outputs("main"));
    assert_eq!(
        out[0]["windows"],
        json!([
            window(s, s + 60_000, 1, 0, json!(10.0)),
            window(s + 60_000, s + 120_000, 0, 0, Value::Null),
            window(s + 120_000, s + 180_000, 0, 0, Value::Null),
            window(s + 180_000, s + 210_000, 1, 0, json!(20.0)),
        ])
    );
    assert_eq!(out[0]["distance"], json!(1.0));
}

#[test]
fn data_before_the_start_are_held_for_the_allowed_lateness() {
    let mut h = host();
    // Before its start message: taken when the start comes (within 3 minutes).
    state(&mut h, "car-1", at(0, 30), 10.0, 5.0, "eco");
    behavior(&mut h, "car-1", at(0, 40), "horn", 1);
    // Before the session's start time: never taken.
    state(&mut h, "car-1", at(-1, 0), 9.0, 3.0, "eco");
    h.advance_watermark(at(1, 0)).unwrap();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    end(&mut h, "car-1", "trip-1", at(2, 0));
    h.advance_watermark(at(5, 0)).unwrap();

    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(
        report["windows"],
        json!([window(at(0, 0), at(2, 0), 1, 1, json!(5.0))])
    );
    assert_eq!(
        values(h.take_outputs("unassigned")),
        vec![unassigned(
            state_msg("car-1", at(-1, 0), 9.0, 3.0, "eco"),
            "states",
            "no_session"
        )]
    );
}

#[test]
fn held_data_expire_if_the_start_comes_too_late() {
    let mut h = host();
    state(&mut h, "car-1", at(0, 10), 10.0, 5.0, "eco");
    state(&mut h, "car-1", at(0, 50), 11.0, 6.0, "eco");
    // The first record's 3 minutes are over; the second's are not.
    h.advance_watermark(at(3, 30)).unwrap();
    assert_eq!(
        values(h.take_outputs("unassigned")),
        vec![unassigned(
            state_msg("car-1", at(0, 10), 10.0, 5.0, "eco"),
            "states",
            "no_session"
        )]
    );
    start(&mut h, "car-1", "trip-1", at(0, 0));
    end(&mut h, "car-1", "trip-1", at(4, 0));
    h.finish().unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(
        report["windows"],
        json!([window(at(0, 0), at(4, 0), 1, 0, json!(6.0))])
    );
    assert!(h.outputs("unassigned").is_empty());
}

#[test]
fn data_after_their_window_is_due_are_late() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    state(&mut h, "car-1", at(1, 0), 1.0, 10.0, "eco");
    h.advance_watermark(at(8, 0)).unwrap(); // window [0, 5) is due at 8:00
    state(&mut h, "car-1", at(4, 59), 2.0, 99.0, "eco"); // late
    state(&mut h, "car-1", at(5, 0), 3.0, 20.0, "eco"); // window [5, 10): in time
    end(&mut h, "car-1", "trip-1", at(9, 0));
    h.advance_watermark(at(12, 0)).unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(
        report["windows"],
        json!([
            window(at(0, 0), at(5, 0), 1, 0, json!(10.0)),
            window(at(5, 0), at(9, 0), 1, 0, json!(20.0)),
        ])
    );
    // After the report, data of the session are late too; data after it belong to none.
    behavior(&mut h, "car-1", at(8, 0), "horn", 1);
    behavior(&mut h, "car-1", at(9, 0), "horn", 1);
    assert_eq!(
        values(h.take_outputs("unassigned")),
        vec![
            unassigned(
                state_msg("car-1", at(4, 59), 2.0, 99.0, "eco"),
                "states",
                "late"
            ),
            unassigned(
                behavior_msg("car-1", at(8, 0), "horn", 1),
                "behaviors",
                "late"
            ),
            unassigned(
                behavior_msg("car-1", at(9, 0), "horn", 1),
                "behaviors",
                "no_session"
            ),
        ]
    );
}

#[test]
fn an_end_that_comes_before_its_start_waits_for_it() {
    let mut h = host();
    end(&mut h, "car-1", "trip-1", at(6, 0));
    state(&mut h, "car-1", at(1, 0), 1.0, 10.0, "eco");
    h.advance_watermark(at(2, 0)).unwrap();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    h.finish().unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(report["end_time"], json!(at(6, 0)));
    assert_eq!(report["duration_ms"], json!(360_000));
    assert_eq!(report["windows"][0]["states"], json!(1));
    assert!(h.outputs("abnormal").is_empty());
}

#[test]
fn an_end_without_start_is_abnormal_after_the_allowed_lateness() {
    let mut h = host();
    end(&mut h, "car-1", "trip-9", at(10, 0));
    h.advance_watermark(at(12, 59)).unwrap();
    end(&mut h, "car-1", "trip-9", at(10, 0)); // a repeat while it waits
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![abnormal(
            end_msg("car-1", "trip-9", at(10, 0)),
            "duplicate_end"
        )]
    );
    h.advance_watermark(at(13, 0)).unwrap();
    assert_eq!(
        h.take_outputs("abnormal"),
        vec![Emitted::new(
            abnormal(end_msg("car-1", "trip-9", at(10, 0)), "end_without_start"),
            at(13, 0)
        )
        .with_key("trip-9|car-1")]
    );
    // Its start, now, is too late; the session never opens.
    state(&mut h, "car-1", at(13, 30), 1.0, 1.0, "eco");
    start(&mut h, "car-1", "trip-9", at(5, 0));
    end(&mut h, "car-1", "trip-9", at(10, 0));
    h.finish().unwrap();
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![
            abnormal(start_msg("car-1", "trip-9", at(5, 0)), "late_start"),
            abnormal(end_msg("car-1", "trip-9", at(10, 0)), "duplicate_end"),
        ]
    );
    assert!(h.outputs("main").is_empty());
    assert_eq!(values(h.take_outputs("unassigned")).len(), 1);
}

#[test]
fn an_end_that_comes_after_its_end_plus_lateness_has_no_start_at_once() {
    let mut h = host();
    h.advance_watermark(at(20, 0)).unwrap();
    end(&mut h, "car-1", "trip-9", at(10, 0));
    start(&mut h, "car-1", "trip-9", at(2, 0));
    let reasons: Vec<Value> = values(h.take_outputs("abnormal"))
        .into_iter()
        .map(|v| v["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        vec![json!("end_without_start"), json!("late_start")]
    );
}

#[test]
fn duplicate_starts_and_ends_are_reported_and_the_first_wins() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    let repeat = start_msg("car-1", "trip-1", at(1, 0));
    h.process("periods", "car-1", repeat.clone(), at(1, 0))
        .unwrap();
    state(&mut h, "car-1", at(0, 30), 1.0, 10.0, "eco");
    end(&mut h, "car-1", "trip-1", at(4, 0));
    end(&mut h, "car-1", "trip-1", at(5, 0));
    h.advance_watermark(at(7, 0)).unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(
        (&report["start_time"], &report["end_time"]),
        (&json!(at(0, 0)), &json!(at(4, 0)))
    );
    assert_eq!(report["windows"][0]["states"], json!(1));
    // After the report, repeats are still recognised.
    start(&mut h, "car-1", "trip-1", at(0, 0));
    end(&mut h, "car-1", "trip-1", at(4, 0));
    assert_eq!(
        h.take_outputs("abnormal"),
        vec![
            Emitted::new(abnormal(repeat, "duplicate_start"), at(1, 0)).with_key("trip-1|car-1"),
            Emitted::new(
                abnormal(end_msg("car-1", "trip-1", at(5, 0)), "duplicate_end"),
                at(5, 0)
            )
            .with_key("trip-1|car-1"),
            Emitted::new(
                abnormal(start_msg("car-1", "trip-1", at(0, 0)), "duplicate_start"),
                at(0, 0)
            )
            .with_key("trip-1|car-1"),
            Emitted::new(
                abnormal(end_msg("car-1", "trip-1", at(4, 0)), "duplicate_end"),
                at(4, 0)
            )
            .with_key("trip-1|car-1"),
        ]
    );
    assert_eq!(values(h.take_outputs("main")), Vec::<Value>::new());
}

#[test]
fn an_end_before_the_start_is_rejected_and_the_session_waits_for_a_valid_one() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(10, 0));
    end(&mut h, "car-1", "trip-1", at(5, 0));
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![abnormal(
            end_msg("car-1", "trip-1", at(5, 0)),
            "end_before_start"
        )]
    );
    state(&mut h, "car-1", at(11, 0), 1.0, 10.0, "eco");
    end(&mut h, "car-1", "trip-1", at(12, 0));
    h.finish().unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(report["end_time"], json!(at(12, 0)));
    assert_eq!(report["windows"][0]["states"], json!(1));

    // The same when the bad end came first and waited.
    let mut h = host();
    end(&mut h, "car-1", "trip-2", at(5, 0));
    start(&mut h, "car-1", "trip-2", at(10, 0));
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![abnormal(
            end_msg("car-1", "trip-2", at(5, 0)),
            "end_before_start"
        )]
    );
}

#[test]
fn a_session_without_end_is_given_up_after_max_session_with_its_partial_report() {
    let mut h = host_with(&[("max_session", "12m")]);
    start(&mut h, "car-1", "trip-1", at(0, 0));
    state(&mut h, "car-1", at(1, 0), 10.0, 10.0, "eco");
    state(&mut h, "car-1", at(11, 0), 14.0, 20.0, "eco");
    state(&mut h, "car-1", at(13, 0), 15.0, 30.0, "eco"); // past max_session
    h.advance_watermark(at(14, 59)).unwrap();
    assert!(h.outputs("abnormal").is_empty());
    h.advance_watermark(at(15, 0)).unwrap();
    let mut expected = abnormal(start_msg("car-1", "trip-1", at(0, 0)), "no_end");
    expected["report"] = json!({
        "event_id": "trip-1", "subject_id": "car-1",
        "start_time": at(0, 0), "end_time": null, "duration_ms": null,
        "operator": "op-7", "org_id": 42,
        "distance": 4.0, "max_speed": 20.0, "sport_mode_used": false,
        "behavior_counts": {}, "behavior_value_sum": 0,
        "windows": [
            window(at(0, 0), at(5, 0), 1, 0, json!(10.0)),
            window(at(5, 0), at(10, 0), 0, 0, Value::Null),
            window(at(10, 0), at(12, 0), 1, 0, json!(20.0)),
        ],
    });
    assert_eq!(
        h.take_outputs("abnormal"),
        vec![Emitted::new(expected, at(15, 0)).with_key("trip-1|car-1")]
    );
    // Its end, now, is late; the record past max_session belongs to no session.
    end(&mut h, "car-1", "trip-1", at(14, 0));
    h.finish().unwrap();
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![abnormal(end_msg("car-1", "trip-1", at(14, 0)), "late_end")]
    );
    assert_eq!(
        values(h.take_outputs("unassigned")),
        vec![unassigned(
            state_msg("car-1", at(13, 0), 15.0, 30.0, "eco"),
            "states",
            "no_session"
        )]
    );
    assert!(h.keys_with_state().is_empty());
}

#[test]
fn an_end_in_time_may_make_a_session_longer_than_max_session() {
    let mut h = host_with(&[("max_session", "12m")]);
    start(&mut h, "car-1", "trip-1", at(0, 0));
    state(&mut h, "car-1", at(13, 0), 15.0, 30.0, "eco");
    h.advance_watermark(at(14, 0)).unwrap();
    end(&mut h, "car-1", "trip-1", at(16, 0));
    h.finish().unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(report["windows"].as_array().unwrap().len(), 4);
    assert_eq!(report["windows"][2]["states"], json!(1));
}

#[test]
fn an_end_after_its_end_plus_lateness_is_late_and_the_session_stays_open() {
    let mut h = host_with(&[("max_session", "30m")]);
    start(&mut h, "car-1", "trip-1", at(0, 0));
    h.advance_watermark(at(20, 0)).unwrap();
    end(&mut h, "car-1", "trip-1", at(10, 0));
    assert_eq!(
        values(h.take_outputs("abnormal")),
        vec![abnormal(end_msg("car-1", "trip-1", at(10, 0)), "late_end")]
    );
    h.finish().unwrap();
    let given_up = values(h.take_outputs("abnormal"));
    assert_eq!(given_up[0]["reason"], "no_end");
    assert_eq!(
        given_up[0]["report"]["windows"].as_array().unwrap().len(),
        6
    );
}

#[test]
fn overlapping_sessions_each_count_the_data_they_span() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    start(&mut h, "car-1", "trip-2", at(10, 0));
    state(&mut h, "car-1", at(11, 0), 1.0, 10.0, "eco"); // in both
    state(&mut h, "car-1", at(13, 0), 2.0, 20.0, "eco"); // in trip-2 only, once trip-1 ends
    end(&mut h, "car-1", "trip-1", at(12, 0)); // cuts trip-1 (it was open-ended)
    end(&mut h, "car-1", "trip-2", at(14, 0));
    state(&mut h, "car-1", at(14, 30), 3.0, 30.0, "eco"); // in neither
    h.finish().unwrap();
    let reports = values(h.take_outputs("main"));
    assert_eq!(reports.len(), 2);
    let states = |r: &Value| -> Vec<u64> {
        r["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["states"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(reports[0]["event_id"], "trip-1");
    assert_eq!(states(&reports[0]), vec![0, 0, 1]);
    assert_eq!(reports[1]["event_id"], "trip-2");
    assert_eq!(states(&reports[1]), vec![2]);
    assert_eq!(reports[1]["distance"], json!(1.0));
    assert_eq!(
        values(h.take_outputs("unassigned")),
        vec![unassigned(
            state_msg("car-1", at(14, 30), 3.0, 30.0, "eco"),
            "states",
            "no_session"
        )]
    );
}

#[test]
fn a_subject_has_sessions_one_after_another() {
    let mut h = host();
    for (i, (s, e)) in [(0, 4), (6, 9), (20, 31)].into_iter().enumerate() {
        let id = format!("trip-{i}");
        start(&mut h, "car-1", &id, at(s, 0));
        behavior(&mut h, "car-1", at(s, 30), "horn", i as i64);
        end(&mut h, "car-1", &id, at(e, 0));
    }
    h.finish().unwrap();
    let reports = values(h.take_outputs("main"));
    let ids: Vec<&Value> = reports.iter().map(|r| &r["event_id"]).collect();
    assert_eq!(ids, vec!["trip-0", "trip-1", "trip-2"]);
    assert!(reports
        .iter()
        .all(|r| r["behavior_counts"] == json!({"horn": 1})));
    assert_eq!(reports[2]["behavior_value_sum"], json!(2));
}

#[test]
fn invalid_records_are_reported_not_fatal() {
    let mut h = host();
    let no_status = json!({"event_id": "e1", "subject_id": "car-1", "time": 5});
    let bad_status = json!({"event_id": "e1", "subject_id": "car-1", "status": 3, "time": 5});
    let no_start = json!({"event_id": "e1", "subject_id": "car-1", "status": 1, "time": 5});
    let no_id = json!({"subject_id": "car-1", "status": 1, "start_time": 5, "time": 5});
    for v in [&no_status, &bad_status, &no_start, &no_id] {
        h.process("periods", "car-1", v, 5).unwrap();
    }
    let reasons: Vec<(Value, Value, Value)> = values(h.take_outputs("abnormal"))
        .into_iter()
        .map(|v| {
            (
                v["event_id"].clone(),
                v["reason"].clone(),
                v["detail"].clone(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            (json!("e1"), json!("invalid"), json!("`status` is missing")),
            (
                json!("e1"),
                json!("invalid"),
                json!("`status` must be 1 (start) or 2 (end), not 3")
            ),
            (
                json!("e1"),
                json!("invalid"),
                json!("a start (status 1) needs `start_time`")
            ),
            (
                Value::Null,
                json!("invalid"),
                json!("`event_id` is missing")
            ),
        ]
    );
    let bad_speed = json!({"subject_id": "car-1", "event_time": 5, "signals": {"speed": "fast"}});
    let no_behavior = json!({"subject_id": "car-1", "event_time": 5, "behavior_value": 1});
    h.process("states", "car-1", &bad_speed, 5).unwrap();
    h.process("behaviors", "car-1", &no_behavior, 5).unwrap();
    let out = values(h.take_outputs("unassigned"));
    assert_eq!(out.len(), 2);
    assert_eq!(
        (&out[0]["reason"], &out[0]["input"]),
        (&json!("invalid"), &json!("states"))
    );
    assert!(
        out[0]["detail"].as_str().unwrap().contains("speed"),
        "{}",
        out[0]
    );
    assert_eq!(out[1]["detail"], "`behavior_id` is missing");
    assert!(h.keys_with_state().is_empty());
}

#[test]
fn state_survives_a_fresh_instance() {
    let mut h = host();
    start(&mut h, "car-1", "trip-1", at(0, 0));
    state(&mut h, "car-1", at(1, 0), 1.0, 10.0, "eco");
    h.advance_watermark(at(6, 0)).unwrap();
    h.reinit().unwrap();
    state(&mut h, "car-1", at(5, 30), 2.0, 20.0, "eco");
    end(&mut h, "car-1", "trip-1", at(7, 0));
    h.reinit().unwrap();
    h.finish().unwrap();
    let report = &values(h.take_outputs("main"))[0];
    assert_eq!(report["distance"], json!(1.0));
    assert_eq!(report["windows"].as_array().unwrap().len(), 2);
}

#[test]
fn numeric_event_and_subject_ids_keep_their_type() {
    let mut h = host();
    let s = json!({"event_id": 17, "subject_id": 5, "status": 1, "start_time": 0, "time": 0});
    let e = json!({"event_id": 17, "subject_id": 5, "status": 2, "end_time": 1000, "time": 1000});
    h.process("periods", "5", &s, 0).unwrap();
    h.process("periods", "5", &e, 1000).unwrap();
    h.finish().unwrap();
    let out = h.take_outputs("main");
    assert_eq!(out[0].key.as_deref(), Some(&b"17|5"[..]));
    assert_eq!(
        (
            &out[0].value["event_id"],
            &out[0].value["subject_id"],
            &out[0].value["operator"]
        ),
        (&json!(17), &json!(5), &Value::Null)
    );
}

#[test]
fn config_and_inputs_are_checked_at_init() {
    let err = |b: weir_sdk::testing::TestHostBuilder<SessionReport>| {
        format!("{:#}", b.build().err().expect("init fails"))
    };
    let b = TestHost::<SessionReport>::builder().inputs(["periods", "clicks"]);
    assert!(err(b).contains("unknown input `clicks`"));
    let b = TestHost::<SessionReport>::builder()
        .inputs(["periods"])
        .config("window", "0s");
    assert!(err(b).contains("`window` must be longer than 0"));
    let b = TestHost::<SessionReport>::builder()
        .inputs(["periods"])
        .config("allowed_lateness", "soon");
    assert!(err(b).contains("allowed_lateness"));
}
