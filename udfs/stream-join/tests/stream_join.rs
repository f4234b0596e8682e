//! The join through the in-memory host, with exact expected records.

use serde_json::{json, Value};
use stream_join::StreamJoin;
use weir_sdk::testing::{Emitted, TestHost};
use weir_sdk::TimeDomain;

const MIN: i64 = 60_000;
const TTL: i64 = 10 * MIN;

fn join() -> TestHost<StreamJoin> {
    TestHost::builder()
        .inputs(["left", "right"])
        .build()
        .unwrap()
}

fn record(row_id: i64, data: &str, ts: i64) -> Value {
    json!({"row_id": row_id, "row_data": data, "ts": ts})
}

/// Feeds a record keyed by its row_id, as the host would.
fn feed(h: &mut TestHost<StreamJoin>, input: &str, row_id: i64, data: &str, ts: i64) {
    h.process(input, row_id.to_string(), record(row_id, data, ts), ts)
        .unwrap();
}

fn joined(row_id: i64, data1: &str, data2: &str, ts: i64) -> Emitted {
    Emitted::new(
        json!({"row_id": row_id, "data1": data1, "data2": data2}),
        ts,
    )
    .with_key(row_id.to_string())
}

/// A record on a side output: as received, plus its input and the reason.
fn annotated(input: &str, row_id: i64, data: &str, ts: i64, reason: &str, at: i64) -> Emitted {
    let mut value = record(row_id, data, ts);
    value["input"] = input.into();
    value["reason"] = reason.into();
    Emitted::new(value, at).with_key(row_id.to_string())
}

fn waiting(input: &str) -> String {
    format!("duplicate: a {input} record for this row_id is already waiting")
}

const JOINED: &str = "duplicate: this row_id was already joined";

fn assert_clean(h: &TestHost<StreamJoin>) {
    assert!(h.keys_with_state().is_empty(), "{:?}", h.keys_with_state());
    assert!(h.pending_timers().is_empty(), "{:?}", h.pending_timers());
}

#[test]
fn left_then_right_joins_once() {
    let mut h = join();
    feed(&mut h, "left", 1, "a", 1_000);
    assert!(h.outputs("main").is_empty());
    assert_eq!(
        h.pending_timers(),
        vec![(b"1".to_vec(), TimeDomain::EventTime, 1_000 + TTL)]
    );
    feed(&mut h, "right", 1, "b", 5_000);
    assert_eq!(h.take_outputs("main"), vec![joined(1, "a", "b", 5_000)]);
    // The joined row needs no timer: its state's time-to-live runs from the join.
    assert!(h.pending_timers().is_empty(), "{:?}", h.pending_timers());
    assert!(h.has_state("1"), "kept to recognise duplicates");

    h.advance_watermark(5_000 + TTL - 1).unwrap();
    assert!(
        h.has_state("1"),
        "until the watermark reaches the join + ttl"
    );
    h.advance_watermark(5_000 + TTL).unwrap();
    assert_clean(&h);
    h.finish().unwrap();
    assert!(h.outputs("main").is_empty());
    assert!(h.outputs("duplicates").is_empty());
    assert!(h.outputs("unmatched").is_empty());
}

#[test]
fn right_then_left_joins_with_left_data_first() {
    let mut h = join();
    feed(&mut h, "right", 7, "r7", 2_000);
    feed(&mut h, "left", 7, "l7", 3_000);
    assert_eq!(h.take_outputs("main"), vec![joined(7, "l7", "r7", 3_000)]);
    h.finish().unwrap();
    assert!(h.outputs("main").is_empty());
    assert!(h.outputs("unmatched").is_empty());
    assert_clean(&h);
}

#[test]
fn rows_are_independent() {
    let mut h = join();
    feed(&mut h, "left", 1, "l1", 1_000);
    feed(&mut h, "left", 2, "l2", 1_100);
    feed(&mut h, "right", 2, "r2", 1_200);
    feed(&mut h, "right", 3, "r3", 1_300);
    feed(&mut h, "right", 1, "r1", 1_400);
    feed(&mut h, "left", 3, "l3", 1_500);
    assert_eq!(
        h.outputs("main"),
        vec![
            joined(2, "l2", "r2", 1_200),
            joined(1, "l1", "r1", 1_400),
            joined(3, "l3", "r3", 1_500),
        ]
    );
}

#[test]
fn a_duplicate_while_waiting_goes_to_duplicates() {
    let mut h = join();
    feed(&mut h, "left", 4, "first", 1_000);
    feed(&mut h, "left", 4, "second", 2_000);
    assert_eq!(
        h.take_outputs("duplicates"),
        vec![annotated(
            "left",
            4,
            "second",
            2_000,
            &waiting("left"),
            2_000
        )]
    );
    // The partner joins with the record that was waiting.
    feed(&mut h, "right", 4, "r", 3_000);
    assert_eq!(h.take_outputs("main"), vec![joined(4, "first", "r", 3_000)]);
    h.finish().unwrap();
    assert!(h.outputs("unmatched").is_empty());
    assert_clean(&h);
}

#[test]
fn duplicates_after_the_join_go_to_duplicates_from_either_side() {
    let mut h = join();
    feed(&mut h, "right", 5, "r", 1_000);
    feed(&mut h, "left", 5, "l", 2_000);
    feed(&mut h, "right", 5, "r again", 3_000);
    feed(&mut h, "left", 5, "l again", 4_000);
    // Still within ttl of the first record, even long after the join.
    feed(&mut h, "left", 5, "l late", 1_000 + TTL - 1);
    assert_eq!(h.outputs("main"), vec![joined(5, "l", "r", 2_000)]);
    assert_eq!(
        h.take_outputs("duplicates"),
        vec![
            annotated("right", 5, "r again", 3_000, JOINED, 3_000),
            annotated("left", 5, "l again", 4_000, JOINED, 4_000),
            annotated(
                "left",
                5,
                "l late",
                1_000 + TTL - 1,
                JOINED,
                1_000 + TTL - 1
            ),
        ]
    );
    h.finish().unwrap();
    assert!(h.outputs("unmatched").is_empty());
    assert_clean(&h);
}

#[test]
fn an_unmatched_left_row_expires_one_ttl_after_it_arrived() {
    let mut h = join();
    feed(&mut h, "left", 8, "lonely", 1_000);
    h.advance_watermark(1_000 + TTL - 1).unwrap();
    assert!(h.outputs("unmatched").is_empty());
    h.advance_watermark(1_000 + TTL).unwrap();
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "left",
            8,
            "lonely",
            1_000,
            "no right record within 10m",
            1_000 + TTL
        )]
    );
    assert_clean(&h);
}

#[test]
fn an_unmatched_right_row_expires_one_ttl_after_it_arrived() {
    let mut h = join();
    feed(&mut h, "right", 9, "lonely", 1_000);
    // A duplicate does not move the expiry.
    feed(&mut h, "right", 9, "again", 100_000);
    h.advance_watermark(1_000 + TTL).unwrap();
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "right",
            9,
            "lonely",
            1_000,
            "no left record within 10m",
            1_000 + TTL
        )]
    );
    assert_eq!(
        h.take_outputs("duplicates"),
        vec![annotated(
            "right",
            9,
            "again",
            100_000,
            &waiting("right"),
            100_000
        )]
    );
    assert_clean(&h);
}

#[test]
fn end_of_input_expires_every_waiting_row() {
    let mut h = join();
    feed(&mut h, "left", 1, "l1", 1_000);
    feed(&mut h, "right", 2, "r2", 2_000);
    feed(&mut h, "left", 3, "l3", 3_000);
    feed(&mut h, "right", 3, "r3", 4_000);
    h.finish().unwrap();
    assert_eq!(
        h.outputs("unmatched"),
        vec![
            annotated(
                "left",
                1,
                "l1",
                1_000,
                "no right record within 10m",
                1_000 + TTL
            ),
            annotated(
                "right",
                2,
                "r2",
                2_000,
                "no left record within 10m",
                2_000 + TTL
            ),
        ]
    );
    assert_eq!(h.outputs("main"), vec![joined(3, "l3", "r3", 4_000)]);
    assert_clean(&h);
}

#[test]
fn state_of_a_joined_row_is_cleared_after_ttl_and_a_new_join_starts() {
    let mut h = join();
    feed(&mut h, "left", 6, "l", 0);
    feed(&mut h, "right", 6, "r", 1_000);
    h.advance_watermark(1_000 + TTL).unwrap();
    assert_clean(&h);
    assert!(
        h.outputs("unmatched").is_empty(),
        "a joined row is not unmatched"
    );

    // The same row_id later is a new join, not a duplicate.
    feed(&mut h, "right", 6, "r2", TTL + 5_000);
    assert!(h.outputs("duplicates").is_empty());
    assert_eq!(
        h.pending_timers(),
        vec![(b"6".to_vec(), TimeDomain::EventTime, 2 * TTL + 5_000)]
    );
    feed(&mut h, "left", 6, "l2", TTL + 9_000);
    assert_eq!(
        h.outputs("main"),
        vec![
            joined(6, "l", "r", 1_000),
            joined(6, "l2", "r2", TTL + 9_000)
        ]
    );
    h.finish().unwrap();
    assert!(h.outputs("duplicates").is_empty());
    assert!(h.outputs("unmatched").is_empty());
    assert_clean(&h);
}

#[test]
fn a_partner_at_or_after_the_expiry_does_not_join_even_before_the_timer_fires() {
    let mut h = join();
    feed(&mut h, "left", 2, "l", 0);
    // The watermark has not reached 10m yet (out-of-order bound), but this record's own
    // time is past the row's ttl: the left row is unmatched, this one starts a new row.
    feed(&mut h, "right", 2, "r", TTL);
    assert!(h.outputs("main").is_empty());
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "left",
            2,
            "l",
            0,
            "no right record within 10m",
            TTL
        )]
    );
    assert_eq!(
        h.pending_timers(),
        vec![(b"2".to_vec(), TimeDomain::EventTime, 2 * TTL)],
        "the old timer is deleted"
    );
    feed(&mut h, "left", 2, "l2", TTL + 1);
    assert_eq!(h.outputs("main"), vec![joined(2, "l2", "r", TTL + 1)]);

    // A joined row is kept until the watermark reaches the join + ttl, whatever the time
    // of the record that comes: l3, at 2 * ttl, is a duplicate.
    feed(&mut h, "left", 2, "l3", 2 * TTL);
    assert_eq!(
        h.take_outputs("duplicates"),
        vec![annotated("left", 2, "l3", 2 * TTL, JOINED, 2 * TTL)]
    );
    h.advance_watermark(2 * TTL + 1).unwrap();
    assert!(!h.has_state("2"), "gone once the watermark reached it");
    feed(&mut h, "left", 2, "l3", 2 * TTL);
    h.finish().unwrap();
    assert_eq!(
        h.outputs("unmatched"),
        vec![annotated(
            "left",
            2,
            "l3",
            2 * TTL,
            "no right record within 10m",
            3 * TTL
        )]
    );
    assert_clean(&h);
}

#[test]
fn late_records_are_processed_normally() {
    let mut h = join();
    h.advance_watermark(100_000).unwrap();
    // Both late for the watermark, but within ttl of each other.
    feed(&mut h, "left", 1, "l", 50_000);
    feed(&mut h, "right", 1, "r", 40_000);
    assert_eq!(h.take_outputs("main"), vec![joined(1, "l", "r", 40_000)]);
    // A late duplicate.
    feed(&mut h, "right", 1, "r2", 60_000);
    assert_eq!(
        h.take_outputs("duplicates"),
        vec![annotated("right", 1, "r2", 60_000, JOINED, 60_000)]
    );
    h.finish().unwrap();
    assert!(h.outputs("unmatched").is_empty());
    assert_clean(&h);
}

#[test]
fn a_record_later_than_ttl_waits_until_the_next_watermark_advance() {
    let mut h = join();
    h.advance_watermark(5 * TTL).unwrap();
    // ts + ttl is already behind the watermark: its timer fires at the next advance.
    feed(&mut h, "left", 3, "very late", TTL);
    assert_eq!(
        h.pending_timers(),
        vec![(b"3".to_vec(), TimeDomain::EventTime, 2 * TTL)]
    );
    // Before that advance a partner comes: the row has expired (its timer is due), so
    // the partner does not join it but starts a row of its own.
    feed(&mut h, "right", 3, "partner", TTL + 1_000);
    assert!(h.outputs("main").is_empty());
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "left",
            3,
            "very late",
            TTL,
            "no right record within 10m",
            2 * TTL
        )]
    );
    h.advance_watermark(5 * TTL + 1).unwrap();
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "right",
            3,
            "partner",
            TTL + 1_000,
            "no left record within 10m",
            2 * TTL + 1_000
        )]
    );
    assert_clean(&h);
}

#[test]
fn after_expiry_a_late_record_of_the_old_row_starts_a_new_row() {
    let mut h = join();
    feed(&mut h, "left", 4, "l", 0);
    h.advance_watermark(TTL).unwrap();
    assert_eq!(h.take_outputs("unmatched").len(), 1);
    // Within ttl of the old row's first record, but that row is gone.
    feed(&mut h, "right", 4, "r", 1_000);
    assert!(h.outputs("main").is_empty());
    assert!(h.outputs("duplicates").is_empty());
    h.advance_watermark(TTL + 999).unwrap();
    assert!(h.outputs("unmatched").is_empty());
    h.advance_watermark(TTL + 1_000).unwrap();
    assert_eq!(
        h.take_outputs("unmatched"),
        vec![annotated(
            "right",
            4,
            "r",
            1_000,
            "no left record within 10m",
            TTL + 1_000
        )]
    );
    assert_clean(&h);
}

#[test]
fn side_outputs_keep_every_field_of_the_record() {
    let mut h = join();
    let first = json!({"row_id": 1, "row_data": "x", "ts": 5, "extra": {"a": [1, 2]}});
    let dup = json!({"row_id": 1, "row_data": "y", "ts": 6, "note": "again"});
    h.process("left", "1", &first, 5).unwrap();
    h.process("left", "1", &dup, 6).unwrap();
    h.finish().unwrap();
    assert_eq!(
        h.outputs("duplicates")[0].value,
        json!({"row_id": 1, "row_data": "y", "ts": 6, "note": "again",
               "input": "left", "reason": waiting("left")})
    );
    assert_eq!(
        h.outputs("unmatched")[0].value,
        json!({"row_id": 1, "row_data": "x", "ts": 5, "extra": {"a": [1, 2]},
               "input": "left", "reason": "no right record within 10m"})
    );
}

#[test]
fn ttl_is_configurable() {
    let mut h: TestHost<StreamJoin> = TestHost::builder()
        .inputs(["left", "right"])
        .config("ttl", "1s")
        .build()
        .unwrap();
    feed(&mut h, "left", 1, "l", 0);
    feed(&mut h, "right", 1, "r", 999);
    feed(&mut h, "left", 2, "l", 0);
    feed(&mut h, "right", 2, "r", 1_000);
    h.finish().unwrap();
    assert_eq!(h.outputs("main"), vec![joined(1, "l", "r", 999)]);
    assert_eq!(
        h.outputs("unmatched"),
        vec![
            annotated("left", 2, "l", 0, "no right record within 1s", 1_000),
            annotated("right", 2, "r", 1_000, "no left record within 1s", 2_000),
        ]
    );

    for bad in ["0", "0s"] {
        let err = TestHost::<StreamJoin>::builder()
            .inputs(["left", "right"])
            .config("ttl", bad)
            .build()
            .err()
            .expect("a zero ttl is refused");
        assert_eq!(
            err.to_string(),
            "config `ttl` must be longer than 0, got 0s"
        );
    }
    let err = TestHost::<StreamJoin>::builder()
        .inputs(["left", "right"])
        .config("ttl", "soon")
        .build()
        .err()
        .expect("a bad ttl is refused");
    assert!(err.to_string().contains("`ttl`"), "{err}");
}

#[test]
fn an_unknown_input_is_refused() {
    let err = TestHost::<StreamJoin>::builder()
        .inputs(["left", "middle"])
        .build()
        .err()
        .expect("unknown input");
    assert_eq!(
        err.to_string(),
        "unknown input `middle`: stream-join joins inputs `left` and `right`"
    );
}

#[test]
fn malformed_records_are_errors_naming_the_field() {
    let mut h = join();
    let cases = [
        (
            "left",
            json!({"row_data": "x", "ts": 1}),
            "input `left`: record has no `row_id`",
        ),
        (
            "right",
            json!({"row_id": null, "row_data": "x"}),
            "input `right`: record has no `row_id`",
        ),
        (
            "left",
            json!({"row_id": 1, "ts": 1}),
            "input `left`: record has no `row_data`",
        ),
        (
            "right",
            json!({"row_id": "1", "row_data": "x"}),
            "input `right`: field `row_id` must be an integer, got \"1\"",
        ),
        (
            "right",
            json!({"row_id": 1.5, "row_data": "x"}),
            "input `right`: field `row_id` must be an integer, got 1.5",
        ),
        (
            "left",
            json!({"row_id": 1, "row_data": 7}),
            "input `left`: field `row_data` must be a string, got 7",
        ),
    ];
    for (input, value, message) in cases {
        let err = h.process(input, "1", &value, 1).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    assert_clean(&h);
}

#[test]
fn a_fresh_instance_continues_from_host_state() {
    let mut h = join();
    feed(&mut h, "left", 1, "l", 0);
    h.reinit().unwrap();
    feed(&mut h, "right", 1, "r", 10);
    h.reinit().unwrap();
    feed(&mut h, "right", 1, "r2", 20);
    h.finish().unwrap();
    assert_eq!(h.outputs("main"), vec![joined(1, "l", "r", 10)]);
    assert_eq!(
        h.outputs("duplicates"),
        vec![annotated("right", 1, "r2", 20, JOINED, 20)]
    );
}

/// Each input record ends in exactly one place, whatever the order and the watermark.
#[test]
fn every_record_is_accounted_for_once() {
    let mut h = join();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut fed = 0;
    let mut clock = 0;
    for i in 0..3_000 {
        clock += next(2_000) as i64;
        let ts = clock - next(30_000) as i64;
        let input = if next(2) == 0 { "left" } else { "right" };
        let row_id = next(200) as i64;
        feed(&mut h, input, row_id, &format!("{input}-{i}"), ts);
        fed += 1;
        if next(10) == 0 {
            h.advance_watermark(clock - 20_000).unwrap();
        }
    }
    h.finish().unwrap();
    let main = h.outputs("main");
    let mut seen: Vec<String> = main
        .iter()
        .flat_map(|e| {
            [
                e.value["data1"].as_str().unwrap().to_owned(),
                e.value["data2"].as_str().unwrap().to_owned(),
            ]
        })
        .collect();
    for output in ["duplicates", "unmatched"] {
        seen.extend(
            h.outputs(output)
                .iter()
                .map(|e| e.value["row_data"].as_str().unwrap().to_owned()),
        );
    }
    assert_eq!(seen.len(), fed);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), fed, "no record appears twice");
    assert!(main
        .iter()
        .all(|e| e.value["data1"].as_str().unwrap().starts_with("left-")
            && e.value["data2"].as_str().unwrap().starts_with("right-")));
    assert!(!main.is_empty() && !h.outputs("duplicates").is_empty());
    assert!(!h.outputs("unmatched").is_empty());
    assert_clean(&h);
}
