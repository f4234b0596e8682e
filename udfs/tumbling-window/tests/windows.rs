//! The tumbling window through the in-memory host, with exact expected records.

use serde_json::json;
use tumbling_window::TumblingWindow;
use weir_sdk::testing::{Emitted, TestHost};
use weir_sdk::time::parse_millis;
use weir_sdk::TimeDomain;

fn ts(text: &str) -> i64 {
    parse_millis(text).unwrap()
}

fn windows() -> TestHost<TumblingWindow> {
    TestHost::new().unwrap()
}

fn with_config(entries: &[(&str, &str)]) -> TestHost<TumblingWindow> {
    let mut builder = TestHost::builder();
    for (k, v) in entries {
        builder = builder.config(*k, *v);
    }
    builder.build().unwrap()
}

/// The JSON text of a ride; `amount` is written as is, so tests control its exact text.
fn ride_text(pu: i64, amount: &str, at: &str) -> String {
    format!(
        r#"{{"PULocationID": {pu}, "DOLocationID": 7, "trip_distance": 1.5, "total_amount": {amount}, "tpep_pickup_datetime": {}}}"#,
        ts(at)
    )
}

/// Feeds a ride keyed by its zone, as the host would.
fn ride(h: &mut TestHost<TumblingWindow>, pu: i64, amount: &str, at: &str) {
    h.process("main", pu.to_string(), ride_text(pu, amount, at), ts(at))
        .unwrap();
}

/// The row expected on `main` for the window starting at `start` (1 h windows unless
/// `last` says otherwise), keyed `start|zone`, at the window's last millisecond.
fn row(start: &str, pu: i64, trips: u64, revenue: &str, last: &str) -> Emitted {
    Emitted::new(
        json!({"window_start": start, "PULocationID": pu, "num_trips": trips, "total_revenue": revenue}),
        ts(last),
    )
    .with_key(format!("{start}|{pu}"))
}

fn event_timers(h: &TestHost<TumblingWindow>) -> Vec<(String, i64)> {
    h.pending_timers()
        .into_iter()
        .map(|(key, domain, at)| {
            assert_eq!(domain, TimeDomain::EventTime);
            (String::from_utf8(key).unwrap(), at)
        })
        .collect()
}

#[test]
fn rides_fall_into_epoch_aligned_windows() {
    let mut h = windows();
    ride(&mut h, 132, "10.00", "2025-11-01 10:00:00.000");
    ride(&mut h, 132, "1.00", "2025-11-01 10:59:59.999");
    ride(&mut h, 132, "2.00", "2025-11-01 11:00:00.000");
    ride(&mut h, 79, "3.00", "2025-11-01 10:30:00.000");
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![
            // Same timer time: keys take turns in their tie order (the FNV-1a hash of
            // the key bytes), as in the engine: "79" before "132".
            row(
                "2025-11-01 10:00:00",
                79,
                1,
                "3.00",
                "2025-11-01 10:59:59.999"
            ),
            row(
                "2025-11-01 10:00:00",
                132,
                2,
                "11.00",
                "2025-11-01 10:59:59.999"
            ),
            row(
                "2025-11-01 11:00:00",
                132,
                1,
                "2.00",
                "2025-11-01 11:59:59.999"
            ),
        ]
    );
    assert!(h.keys_with_state().is_empty());
    assert!(h.pending_timers().is_empty());
}

#[test]
fn windows_of_other_sizes_and_before_1970_are_aligned_to_the_epoch() {
    let mut h = with_config(&[("size", "15m")]);
    ride(&mut h, 1, "1", "2025-11-01 10:44:59.999");
    ride(&mut h, 1, "1", "2025-11-01 10:45:00.000");
    ride(&mut h, 2, "1", "1969-12-31 23:59:59.999");
    h.finish().unwrap();
    let starts: Vec<_> = h
        .outputs("main")
        .iter()
        .map(|e| (e.value["window_start"].clone(), e.timestamp))
        .collect();
    assert_eq!(
        starts,
        vec![
            (json!("1969-12-31 23:45:00"), -1),
            (json!("2025-11-01 10:30:00"), ts("2025-11-01 10:44:59.999")),
            (json!("2025-11-01 10:45:00"), ts("2025-11-01 10:59:59.999")),
        ]
    );
}

#[test]
fn a_window_fires_when_the_watermark_reaches_its_last_millisecond() {
    let mut h = windows();
    ride(&mut h, 132, "12.50", "2025-11-01 10:05:00.000");
    ride(&mut h, 132, "7.25", "2025-11-01 10:40:00.000");
    assert_eq!(
        event_timers(&h),
        vec![
            ("132".into(), ts("2025-11-01 10:59:59.999")),
            ("132".into(), ts("2025-11-01 11:59:59.999")),
        ],
        "a timer to fire and one to clean up"
    );

    h.advance_watermark(ts("2025-11-01 10:59:59.998")).unwrap();
    assert!(h.outputs("main").is_empty());
    h.advance_watermark(ts("2025-11-01 10:59:59.999")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            132,
            2,
            "19.75",
            "2025-11-01 10:59:59.999"
        )]
    );
    assert!(h.has_state("132"), "kept for late rides");
}

#[test]
fn a_late_ride_within_the_lateness_corrects_the_published_row_at_once() {
    let mut h = windows();
    ride(&mut h, 132, "12.50", "2025-11-01 10:05:00.000");
    h.advance_watermark(ts("2025-11-01 11:30:00.000")).unwrap();
    assert_eq!(h.take_outputs("main").len(), 1);

    ride(&mut h, 132, "3.10", "2025-11-01 10:59:00.000");
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            132,
            2,
            "15.60",
            "2025-11-01 10:59:59.999"
        )]
    );
    // A window that never had a ride, first seen late: published at once too.
    ride(&mut h, 79, "4.00", "2025-11-01 10:10:00.000");
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            79,
            1,
            "4.00",
            "2025-11-01 10:59:59.999"
        )]
    );
    // No second firing: only the cleanup timers are pending.
    assert_eq!(
        event_timers(&h),
        vec![
            ("79".into(), ts("2025-11-01 11:59:59.999")),
            ("132".into(), ts("2025-11-01 11:59:59.999")),
        ]
    );
    h.advance_watermark(ts("2025-11-01 11:59:59.998")).unwrap();
    assert!(h.outputs("main").is_empty());
    assert!(h.outputs("late").is_empty());
}

#[test]
fn a_ride_after_the_lateness_goes_to_late_and_is_not_counted() {
    let mut h = windows();
    ride(&mut h, 132, "12.50", "2025-11-01 10:05:00.000");
    ride(&mut h, 132, "1.00", "2025-11-01 11:05:00.000");
    h.advance_watermark(ts("2025-11-01 11:59:59.999")).unwrap();
    assert_eq!(h.take_outputs("main").len(), 2);

    let text = r#"{"PULocationID": 132, "total_amount": 9.99, "tpep_pickup_datetime": 1761991500000, "note": {"a": [1, 2]}, "reason": "mine"}"#;
    h.process("main", "132", text, ts("2025-11-01 10:05:00.000"))
        .unwrap();
    assert!(
        h.outputs("main").is_empty(),
        "not counted, nothing published"
    );
    let late = h.outputs("late");
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].key.as_deref(), Some(&b"132"[..]));
    assert_eq!(late[0].timestamp, ts("2025-11-01 10:05:00.000"));
    assert_eq!(
        late[0].value,
        json!({
            "PULocationID": 132,
            "total_amount": 9.99,
            "tpep_pickup_datetime": 1761991500000_i64,
            "note": {"a": [1, 2]},
            "reason": "too late: window 2025-11-01 10:00:00 closed at watermark 2025-11-01 11:59:59.999, now 2025-11-01 11:59:59.999"
        })
    );
    // The open window of the zone is untouched.
    ride(&mut h, 132, "2.00", "2025-11-01 11:10:00.000");
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 11:00:00",
            132,
            2,
            "3.00",
            "2025-11-01 11:59:59.999"
        )]
    );
}

#[test]
fn state_and_timers_are_dropped_at_window_end_plus_lateness() {
    let mut h = with_config(&[("allowed_lateness", "10m")]);
    ride(&mut h, 132, "1.00", "2025-11-01 10:05:00.000");
    h.advance_watermark(ts("2025-11-01 11:09:59.998")).unwrap();
    assert_eq!(h.take_outputs("main").len(), 1);
    assert!(h.has_state("132"));
    ride(&mut h, 132, "1.00", "2025-11-01 10:06:00.000");
    assert_eq!(h.take_outputs("main")[0].value["num_trips"], 2);

    h.advance_watermark(ts("2025-11-01 11:09:59.999")).unwrap();
    assert!(!h.has_state("132"));
    assert!(h.pending_timers().is_empty());
    assert!(h.outputs("main").is_empty(), "cleanup emits nothing");

    ride(&mut h, 132, "1.00", "2025-11-01 10:07:00.000");
    assert!(h.outputs("main").is_empty());
    assert_eq!(h.outputs("late").len(), 1);
    assert!(!h.has_state("132"));
}

#[test]
fn a_timer_can_fire_one_window_and_drop_the_one_before() {
    // With the default 1 h lateness, 11:59:59.999 is the last instant of [11:00, 12:00)
    // and the close of [10:00, 11:00).
    let mut h = windows();
    ride(&mut h, 161, "1.00", "2025-11-01 10:30:00.000");
    ride(&mut h, 161, "2.00", "2025-11-01 11:30:00.000");
    h.advance_watermark(ts("2025-11-01 11:59:59.999")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![
            row(
                "2025-11-01 10:00:00",
                161,
                1,
                "1.00",
                "2025-11-01 10:59:59.999"
            ),
            row(
                "2025-11-01 11:00:00",
                161,
                1,
                "2.00",
                "2025-11-01 11:59:59.999"
            ),
        ]
    );
    assert_eq!(
        event_timers(&h),
        vec![("161".into(), ts("2025-11-01 12:59:59.999"))]
    );
    // [10:00, 11:00) is closed, [11:00, 12:00) still takes late rides.
    ride(&mut h, 161, "5.00", "2025-11-01 10:59:00.000");
    ride(&mut h, 161, "5.00", "2025-11-01 11:59:00.000");
    assert_eq!(h.outputs("late").len(), 1);
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 11:00:00",
            161,
            2,
            "7.00",
            "2025-11-01 11:59:59.999"
        )]
    );
    h.finish().unwrap();
    assert!(h.outputs("main").is_empty());
    assert!(h.keys_with_state().is_empty());
}

#[test]
fn zero_lateness_fires_and_drops_in_one_timer() {
    let mut h = with_config(&[("allowed_lateness", "0s"), ("size", "1m")]);
    ride(&mut h, 4, "1.00", "2025-11-01 10:00:10.000");
    assert_eq!(
        event_timers(&h),
        vec![("4".into(), ts("2025-11-01 10:00:59.999"))]
    );
    h.advance_watermark(ts("2025-11-01 10:00:59.999")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            4,
            1,
            "1.00",
            "2025-11-01 10:00:59.999"
        )]
    );
    assert!(!h.has_state("4"));
    ride(&mut h, 4, "1.00", "2025-11-01 10:00:59.999");
    assert_eq!(h.outputs("late").len(), 1);
    assert!(h.outputs("main").is_empty());
}

#[test]
fn revenue_is_summed_exactly_in_cents_rounded_per_ride() {
    let mut h = windows();
    // 0.1 + 0.2 is 0.30, not 0.30000000000000004.
    ride(&mut h, 1, "0.1", "2025-11-01 10:00:00.000");
    ride(&mut h, 1, "0.2", "2025-11-01 10:00:01.000");
    // Each ride is rounded half away from zero, then summed: 1.01 + 1.01, not 2.01.
    ride(&mut h, 2, "1.005", "2025-11-01 10:00:00.000");
    ride(&mut h, 2, "1.005", "2025-11-01 10:00:01.000");
    // 2.675 is 2.67499999... as an f64; the text is exact.
    ride(&mut h, 3, "2.675", "2025-11-01 10:00:00.000");
    // Refunds are negative; a string amount is read the same way.
    ride(&mut h, 4, "-5.80", "2025-11-01 10:00:00.000");
    ride(&mut h, 4, "\"3.333\"", "2025-11-01 10:00:01.000");
    ride(&mut h, 5, "-0.004", "2025-11-01 10:00:00.000");
    ride(&mut h, 6, "1.2e1", "2025-11-01 10:00:00.000");
    h.finish().unwrap();
    let revenue: Vec<(i64, String)> = h
        .outputs("main")
        .iter()
        .map(|e| {
            (
                e.value["PULocationID"].as_i64().unwrap(),
                e.value["total_revenue"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // One window: its six timers fire in the keys' tie order.
    let expected = [
        (5, "0.00"),
        (4, "-2.47"),
        (6, "12.00"),
        (1, "0.30"),
        (3, "2.68"),
        (2, "2.02"),
    ];
    assert_eq!(
        revenue,
        expected
            .iter()
            .map(|(pu, r)| (*pu, r.to_string()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn malformed_rides_are_errors_naming_the_field_and_change_nothing() {
    let mut h = windows();
    ride(&mut h, 132, "1.00", "2025-11-01 10:00:00.000");
    let at = ts("2025-11-01 10:01:00.000");
    for (text, message) in [
        (
            r#"{"PULocationID": 132}"#,
            "field `total_amount` is missing or null",
        ),
        (
            r#"{"PULocationID": 132, "total_amount": null}"#,
            "field `total_amount` is missing or null",
        ),
        (
            r#"{"PULocationID": 132, "total_amount": "12,50"}"#,
            "field `total_amount`: \"12,50\" is not a decimal number",
        ),
        (
            r#"{"PULocationID": 132, "total_amount": true}"#,
            "field `total_amount`: true is not a decimal number",
        ),
        (
            r#"{"PULocationID": 132, "total_amount": 1e30}"#,
            "field `total_amount`: 1e30 is too large",
        ),
        (
            r#"{"PULocationID": "132", "total_amount": 1}"#,
            "field `PULocationID`: \"132\" is not an integer",
        ),
    ] {
        let err = h.process("main", "132", text, at).unwrap_err();
        assert_eq!(format!("{err:#}"), message, "{text}");
    }
    // Also when the ride would be too late: a malformed ride is an error either way.
    h.advance_watermark(ts("2025-11-01 13:00:00.000")).unwrap();
    let err = h
        .process("main", "132", r#"{"PULocationID": 132}"#, at)
        .unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        "field `total_amount` is missing or null"
    );
    assert!(h.outputs("late").is_empty());
    assert_eq!(
        h.outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            132,
            1,
            "1.00",
            "2025-11-01 10:59:59.999"
        )]
    );
}

#[test]
fn config_is_checked() {
    for (size, ok) in [("1h", true), ("1s", true), ("0s", false), ("1500ms", false)] {
        let built = TestHost::<TumblingWindow>::builder()
            .config("size", size)
            .build();
        match built {
            Ok(_) => assert!(ok, "{size}"),
            Err(err) => {
                assert!(!ok, "{size}: {err:#}");
                assert!(
                    format!("{err:#}").contains("config `size` must be a whole number of seconds"),
                    "{err:#}"
                );
            }
        }
    }
    let err = TestHost::<TumblingWindow>::builder()
        .config("allowed_lateness", "soon")
        .build()
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("allowed_lateness"), "{err:#}");
}

#[test]
fn a_fresh_instance_continues_from_host_state() {
    let mut h = windows();
    ride(&mut h, 9, "1.00", "2025-11-01 10:00:00.000");
    h.reinit().unwrap();
    ride(&mut h, 9, "2.00", "2025-11-01 10:30:00.000");
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![row(
            "2025-11-01 10:00:00",
            9,
            2,
            "3.00",
            "2025-11-01 10:59:59.999"
        )]
    );
}

#[test]
fn rides_at_the_ends_of_time_are_errors_not_panics() {
    let mut h = windows();
    let text = r#"{"PULocationID": 1, "total_amount": 1}"#;
    let err = h.process("main", "1", text, i64::MAX).unwrap_err();
    assert!(format!("{err:#}").contains("out of the range of timestamps"));
    let err = h.process("main", "1", text, i64::MIN).unwrap_err();
    assert!(format!("{err:#}").contains("out of the range of timestamps"));
    assert!(h.keys_with_state().is_empty());
}
