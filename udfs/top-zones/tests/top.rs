//! The top zones through the in-memory host, with exact expected records.

use serde_json::json;
use top_zones::TopZones;
use weir_sdk::testing::{Emitted, TestHost};

const HOUR: &str = "2026-11-01 10:00:00";
/// The hour's last instant: the event time of its rows.
const LAST: i64 = 1_761_994_799_999;

fn row(host: &mut TestHost<TopZones>, zone: i64, trips: u64, revenue: &str) {
    let value = json!({"window_start": HOUR, "PULocationID": zone, "num_trips": trips, "total_revenue": revenue});
    host.process("main", HOUR, &value, LAST).unwrap();
}

fn rank(rank: usize, zone: i64, revenue: &str, trips: u64) -> Emitted {
    Emitted::new(
        json!({"window_start": HOUR, "rank": rank, "PULocationID": zone, "total_revenue": revenue, "num_trips": trips}),
        LAST,
    )
    .with_key(format!("{HOUR}|{rank}"))
}

#[test]
fn ranks_are_emitted_when_their_zone_or_totals_change() {
    let mut h = TestHost::<TopZones>::builder()
        .config("top", "2")
        .build()
        .unwrap();
    row(&mut h, 132, 2, "40.00");
    row(&mut h, 79, 1, "12.60");
    // A third zone below the top 2: nothing changes.
    row(&mut h, 161, 1, "10.00");
    // A late ride lifts zone 161 above 79: rank 2 changes, rank 1 does not.
    row(&mut h, 161, 2, "30.00");
    // Another lifts 79 above everyone: both ranks change.
    row(&mut h, 79, 2, "50.00");
    // A tie on revenue goes to the lower zone id.
    row(&mut h, 161, 3, "50.00");
    assert_eq!(
        h.take_outputs("main"),
        vec![
            rank(1, 132, "40.00", 2),
            rank(2, 79, "12.60", 1),
            rank(2, 161, "30.00", 2),
            rank(1, 79, "50.00", 2),
            rank(2, 132, "40.00", 2),
            rank(2, 161, "50.00", 3),
        ]
    );
}

#[test]
fn a_window_is_dropped_once_its_corrections_are_over() {
    let mut h = TestHost::<TopZones>::new().unwrap();
    row(&mut h, 132, 1, "10.00");
    h.advance_watermark(LAST + 3_599_999).unwrap();
    assert!(h.has_state(HOUR), "corrections may still come");
    h.advance_watermark(LAST + 3_600_000).unwrap();
    assert!(!h.has_state(HOUR), "retain (1h) after the window's end");
}

#[test]
fn a_revenue_that_is_not_a_decimal_fails_naming_it() {
    let mut h = TestHost::<TopZones>::new().unwrap();
    let value =
        json!({"window_start": HOUR, "PULocationID": 1, "num_trips": 1, "total_revenue": "1.234"});
    let error = h.process("main", HOUR, &value, LAST).unwrap_err();
    assert!(
        format!("{error:#}").contains("total_revenue \"1.234\""),
        "{error:#}"
    );
}
