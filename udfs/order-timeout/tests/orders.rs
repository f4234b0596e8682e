//! The order aggregation through the in-memory host, with exact expected records.

use order_timeout::OrderTimeout;
use serde_json::{json, Value};
use weir_sdk::testing::{Emitted, TestHost};
use weir_sdk::TimeDomain;

fn orders() -> TestHost<OrderTimeout> {
    TestHost::new().unwrap()
}

/// Feeds an event keyed by its orderId, as the host would (text of the JSON value).
fn event(host: &mut TestHost<OrderTimeout>, value: Value, ts: i64) -> weir_sdk::Result<()> {
    let key = match &value["orderId"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    host.process("main", key, &value, ts)
}

fn total(order_id: Value, total: &str, items: &[&str], ts: i64) -> Emitted {
    let key = match &order_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Emitted::new(
        json!({"orderId": order_id, "total": total, "items": items}),
        ts,
    )
    .with_key(key)
}

#[test]
fn an_order_is_emitted_one_timeout_after_its_last_event() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": 17, "item": "tea", "cost": "3.50", "timestamp": "t"}),
        1_000,
    )
    .unwrap();
    assert_eq!(
        h.pending_timers(),
        vec![(b"17".to_vec(), TimeDomain::EventTime, 2_000)]
    );
    event(
        &mut h,
        json!({"orderId": 17, "item": "cake", "cost": "8.80"}),
        1_500,
    )
    .unwrap();
    // The timer moved: only one per order.
    assert_eq!(
        h.pending_timers(),
        vec![(b"17".to_vec(), TimeDomain::EventTime, 2_500)]
    );

    h.advance_watermark(2_000).unwrap();
    assert!(h.outputs("main").is_empty());
    h.advance_watermark(2_500).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![total(json!(17), "12.30", &["tea", "cake"], 2_500)]
    );
    assert!(!h.has_state("17"));
    assert!(h.pending_timers().is_empty());

    // The same order id later starts a new aggregation.
    event(
        &mut h,
        json!({"orderId": 17, "item": "jam", "cost": 1}),
        5_000,
    )
    .unwrap();
    h.finish().unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![total(json!(17), "1.00", &["jam"], 6_000)]
    );
}

#[test]
fn totals_are_exact_decimals() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": 1, "item": "a", "cost": "0.10"}),
        0,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 1, "item": "b", "cost": "0.20"}),
        0,
    )
    .unwrap();
    // JSON numbers keep their exact text: 0.1 + 0.2 is 0.3, not 0.30000000000000004.
    event(&mut h, json!({"orderId": 2, "item": "a", "cost": 0.1}), 0).unwrap();
    event(&mut h, json!({"orderId": 2, "item": "b", "cost": 0.2}), 0).unwrap();
    // Half-up on the sum, not on each cost.
    event(
        &mut h,
        json!({"orderId": 3, "item": "a", "cost": "1.0025"}),
        0,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 3, "item": "b", "cost": "1.0025"}),
        0,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 4, "item": "a", "cost": "19.999"}),
        0,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 5, "item": "refund", "cost": "-2.345"}),
        0,
    )
    .unwrap();
    h.finish().unwrap();
    // All five timers are due at 1000: they fire in the keys' tie order (the FNV-1a
    // hash of "5", "4", "1", "3", "2" ascending), as in the engine.
    assert_eq!(
        h.outputs("main"),
        vec![
            total(json!(5), "-2.35", &["refund"], 1_000),
            total(json!(4), "20.00", &["a"], 1_000),
            total(json!(1), "0.30", &["a", "b"], 1_000),
            total(json!(3), "2.01", &["a", "b"], 1_000),
            total(json!(2), "0.30", &["a", "b"], 1_000),
        ]
    );
}

#[test]
fn the_order_id_is_echoed_as_it_came() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": "A-17", "item": "tea", "cost": "1"}),
        10,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 1e3, "item": "tea", "cost": "1"}),
        20,
    )
    .unwrap();
    h.finish().unwrap();
    let out = h.outputs("main");
    assert_eq!(out[0], total(json!("A-17"), "1.00", &["tea"], 1_010));
    assert_eq!(out[1], total(json!(1000.0), "1.00", &["tea"], 1_020));
    assert!(out[1].value["orderId"].is_f64());
}

#[test]
fn orders_interleave_and_fire_in_timer_order() {
    let mut h = TestHost::<OrderTimeout>::builder()
        .config("timeout", "500ms")
        .build()
        .unwrap();
    event(
        &mut h,
        json!({"orderId": 1, "item": "a", "cost": "1.00"}),
        100,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 2, "item": "b", "cost": "2.00"}),
        200,
    )
    .unwrap();
    event(
        &mut h,
        json!({"orderId": 1, "item": "c", "cost": "3.00"}),
        300,
    )
    .unwrap();
    h.advance_watermark(700).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![total(json!(2), "2.00", &["b"], 700)]
    );
    h.advance_watermark(800).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![total(json!(1), "4.00", &["a", "c"], 800)]
    );
    assert!(h.keys_with_state().is_empty());
}

#[test]
fn processing_time_mode_follows_the_wall_clock() {
    let mut h = TestHost::<OrderTimeout>::builder()
        .config("time", "processing")
        .config("timeout", "2s")
        .processing_time(10_000)
        .build()
        .unwrap();
    event(
        &mut h,
        json!({"orderId": 9, "item": "tea", "cost": "3.50"}),
        1,
    )
    .unwrap();
    assert_eq!(
        h.pending_timers(),
        vec![(b"9".to_vec(), TimeDomain::ProcessingTime, 12_000)]
    );
    // Event time is irrelevant now.
    h.advance_watermark(1_000_000).unwrap();
    assert!(h.outputs("main").is_empty());

    h.set_processing_time(11_000).unwrap();
    event(
        &mut h,
        json!({"orderId": 9, "item": "cake", "cost": "8.80"}),
        2,
    )
    .unwrap();
    assert_eq!(
        h.pending_timers(),
        vec![(b"9".to_vec(), TimeDomain::ProcessingTime, 13_000)]
    );
    h.set_processing_time(12_999).unwrap();
    assert!(h.outputs("main").is_empty());
    h.set_processing_time(13_000).unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![total(json!(9), "12.30", &["tea", "cake"], 13_000)]
    );
    assert!(!h.has_state("9"));
}

#[test]
fn a_cost_that_is_missing_or_not_a_decimal_is_rejected_and_leaves_the_order_untouched() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": 5, "item": "tea", "cost": "1.25"}),
        0,
    )
    .unwrap();
    for value in [
        json!({"orderId": 5, "item": "x", "cost": "abc"}),
        json!({"orderId": 5, "item": "x", "cost": true}),
        json!({"orderId": 5, "item": "x"}),
    ] {
        event(&mut h, value, 10).unwrap();
    }
    let reasons: Vec<String> = h.rejected().iter().map(|r| r.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            r#"field `cost`: "abc" is not a valid decimal"#,
            "field `cost`: true is not a valid decimal",
            "field `cost` is missing",
        ]
    );
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![total(json!(5), "1.25", &["tea"], 1_000)]
    );
}

#[test]
fn bad_records_are_errors_that_leave_the_order_untouched() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": 5, "item": "tea", "cost": "1.25"}),
        0,
    )
    .unwrap();
    let cases = [
        (
            json!({"orderId": 5, "cost": "1"}),
            "field `item` is missing",
        ),
        (
            json!({"orderId": 5, "item": null, "cost": "1"}),
            "field `item` is missing",
        ),
    ];
    for (value, expected) in cases {
        let err = event(&mut h, value, 10).unwrap_err();
        assert_eq!(format!("{err:#}"), expected);
    }
    let err = event(&mut h, json!({"orderId": 5, "item": 3, "cost": "1"}), 10).unwrap_err();
    assert!(
        format!("{err:#}").contains("item: invalid type: integer `3`, expected a string"),
        "{err:#}"
    );

    assert_eq!(
        h.pending_timers(),
        vec![(b"5".to_vec(), TimeDomain::EventTime, 1_000)]
    );
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![total(json!(5), "1.25", &["tea"], 1_000)]
    );
}

#[test]
fn config_errors_fail_init() {
    let err = TestHost::<OrderTimeout>::builder()
        .config("time", "wall")
        .build()
        .err()
        .unwrap();
    assert_eq!(
        format!("{err:#}"),
        "invalid config `time`: unknown variant `wall`, expected `event` or `processing`"
    );
    let err = TestHost::<OrderTimeout>::builder()
        .config("timeout", "-1s")
        .build()
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").starts_with("invalid config `timeout`: invalid duration \"-1s\""),
        "{err:#}"
    );
    assert!(TestHost::<OrderTimeout>::builder()
        .config("time", "event")
        .build()
        .is_ok());
}

#[test]
fn a_fresh_instance_continues_from_the_host_state() {
    let mut h = orders();
    event(
        &mut h,
        json!({"orderId": 3, "item": "a", "cost": "0.10"}),
        0,
    )
    .unwrap();
    h.reinit().unwrap();
    event(
        &mut h,
        json!({"orderId": 3, "item": "b", "cost": "0.20"}),
        100,
    )
    .unwrap();
    h.reinit().unwrap();
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![total(json!(3), "0.30", &["a", "b"], 1_100)]
    );
}
