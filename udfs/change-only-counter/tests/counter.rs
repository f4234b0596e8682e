//! The counter through the in-memory host, with exact expected records.

use change_only_counter::ChangeOnlyCounter;
use serde_json::json;
use weir_sdk::testing::{Emitted, TestHost};
use weir_sdk::time::parse_millis;

fn ts(text: &str) -> i64 {
    parse_millis(text).unwrap()
}

/// The expected record: `updated_at` is also its timestamp, and the ad its key.
fn count(ad: &str, clicks: u32, updated_at: &str) -> Emitted {
    Emitted::new(
        json!({"ad_id": ad, "clicks": clicks, "updated_at": updated_at}),
        ts(updated_at),
    )
    .with_key(ad)
}

fn click(host: &mut TestHost<ChangeOnlyCounter>, ad: &str, at: &str) {
    let value = json!({"ad_id": ad, "clicked_at": at});
    host.process("main", ad, &value, ts(at)).unwrap();
}

fn counter() -> TestHost<ChangeOnlyCounter> {
    TestHost::new().unwrap()
}

#[test]
fn count_rises_then_falls_back_to_zero_after_a_quiet_gap() {
    let mut h = counter();
    click(&mut h, "ad1", "2026-11-29 10:00:00.123");
    click(&mut h, "ad1", "2026-11-29 10:01:00.000");
    click(&mut h, "ad1", "2026-11-29 10:02:30.500");
    assert_eq!(
        h.take_outputs("main"),
        vec![
            count("ad1", 1, "2026-11-29 10:00:00.123"),
            count("ad1", 2, "2026-11-29 10:01:00.000"),
            count("ad1", 3, "2026-11-29 10:02:30.500"),
        ]
    );

    // Nothing expires before the first click is 5 minutes old.
    h.advance_watermark(ts("2026-11-29 10:05:00.122")).unwrap();
    assert!(h.take_outputs("main").is_empty());

    // The quiet gap: each click expires at its timer, down to 0 at the last one.
    h.advance_watermark(ts("2026-11-29 10:30:00.000")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![
            count("ad1", 2, "2026-11-29 10:05:00.123"),
            count("ad1", 1, "2026-11-29 10:06:00.000"),
            count("ad1", 0, "2026-11-29 10:07:30.500"),
        ]
    );
    assert!(
        !h.has_state("ad1"),
        "state is cleared once no click is held"
    );
    assert!(h.pending_timers().is_empty());

    // A new click starts again from 0.
    click(&mut h, "ad1", "2026-11-29 10:31:00.000");
    assert_eq!(
        h.take_outputs("main"),
        vec![count("ad1", 1, "2026-11-29 10:31:00.000")]
    );
}

#[test]
fn ads_are_counted_independently() {
    let mut h = counter();
    click(&mut h, "a", "2026-11-29 10:00:00.000");
    click(&mut h, "b", "2026-11-29 10:00:10.000");
    click(&mut h, "a", "2026-11-29 10:00:20.000");
    h.advance_watermark(ts("2026-11-29 10:05:10.000")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![
            count("a", 1, "2026-11-29 10:00:00.000"),
            count("b", 1, "2026-11-29 10:00:10.000"),
            count("a", 2, "2026-11-29 10:00:20.000"),
            count("a", 1, "2026-11-29 10:05:00.000"),
            count("b", 0, "2026-11-29 10:05:10.000"),
        ]
    );
    assert!(h.has_state("a"));
    assert!(!h.has_state("b"));
}

#[test]
fn clicks_in_the_same_millisecond_share_one_timer() {
    let mut h = counter();
    click(&mut h, "ad", "2026-11-29 10:00:00.000");
    click(&mut h, "ad", "2026-11-29 10:00:00.000");
    assert_eq!(h.pending_timers().len(), 1);
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![
            count("ad", 1, "2026-11-29 10:00:00.000"),
            count("ad", 2, "2026-11-29 10:00:00.000"),
            count("ad", 0, "2026-11-29 10:05:00.000"),
        ]
    );
}

#[test]
fn a_late_click_counts_until_the_next_watermark_advance() {
    let mut h = counter();
    click(&mut h, "ad", "2026-11-29 10:10:00.000");
    h.advance_watermark(ts("2026-11-29 10:12:00.000")).unwrap();
    // Already older than the window: counted now, expired at the next advance.
    click(&mut h, "ad", "2026-11-29 10:01:00.000");
    h.advance_watermark(ts("2026-11-29 10:12:00.001")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![
            count("ad", 1, "2026-11-29 10:10:00.000"),
            count("ad", 2, "2026-11-29 10:01:00.000"),
            count("ad", 1, "2026-11-29 10:06:00.000"),
        ]
    );
}

#[test]
fn the_window_is_configurable() {
    let mut h = TestHost::<ChangeOnlyCounter>::builder()
        .config("window", "90s")
        .build()
        .unwrap();
    click(&mut h, "ad", "2026-11-29 10:00:00.000");
    click(&mut h, "ad", "2026-11-29 10:01:00.000");
    h.advance_watermark(ts("2026-11-29 10:02:00.000")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![
            count("ad", 1, "2026-11-29 10:00:00.000"),
            count("ad", 2, "2026-11-29 10:01:00.000"),
            count("ad", 1, "2026-11-29 10:01:30.000"),
        ]
    );
    // Bare milliseconds work too.
    let mut h = TestHost::<ChangeOnlyCounter>::builder()
        .config("window", "1000")
        .build()
        .unwrap();
    click(&mut h, "ad", "1970-01-01 00:00:00.000");
    h.advance_watermark(1_000).unwrap();
    assert_eq!(
        h.outputs("main")[1],
        count("ad", 0, "1970-01-01 00:00:01.000")
    );
}

#[test]
fn a_bad_window_is_an_init_error() {
    let err = TestHost::<ChangeOnlyCounter>::builder()
        .config("window", "soon")
        .build()
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").starts_with("invalid config `window`: invalid duration \"soon\""),
        "{err:#}"
    );
    let err = TestHost::<ChangeOnlyCounter>::builder()
        .config("window", "0s")
        .build()
        .err()
        .unwrap();
    assert_eq!(
        format!("{err:#}"),
        "config `window` must be longer than 0, got 0s"
    );
}

#[test]
fn a_fresh_instance_continues_from_the_host_state() {
    let mut h = counter();
    click(&mut h, "ad", "2026-11-29 10:00:00.000");
    h.reinit().unwrap();
    click(&mut h, "ad", "2026-11-29 10:00:01.000");
    h.reinit().unwrap();
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![
            count("ad", 1, "2026-11-29 10:00:00.000"),
            count("ad", 2, "2026-11-29 10:00:01.000"),
            count("ad", 1, "2026-11-29 10:05:00.000"),
            count("ad", 0, "2026-11-29 10:05:01.000"),
        ]
    );
    assert!(h.keys_with_state().is_empty());
}

#[test]
fn pre_1970_timestamps_format_correctly() {
    let mut h = counter();
    click(&mut h, "ad", "1969-12-31 23:59:59.999");
    h.finish().unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![
            count("ad", 1, "1969-12-31 23:59:59.999"),
            count("ad", 0, "1970-01-01 00:04:59.999")
        ]
    );
}

/// The stored value of schema 0 (the UDF's first layout): the tag `fe ed 00`, then in
/// postcard the times as varints and the count last emitted.
fn schema_0_value(times: &[i64], emitted: u32) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct ClicksV0<'a> {
        times: &'a [i64],
        emitted: u32,
    }
    let mut bytes = vec![0xfe, 0xed, 0];
    bytes.extend(postcard::to_allocvec(&ClicksV0 { times, emitted }).unwrap());
    bytes
}

#[test]
fn an_ad_stored_in_the_first_layout_is_read_and_written_back_packed() {
    let mut h = counter();
    let held = [ts("2026-11-29 10:00:00.000"), ts("2026-11-29 10:01:00.000")];
    h.set_state_bytes("ad1", "clicks", schema_0_value(&held, 2));
    click(&mut h, "ad1", "2026-11-29 10:02:00.000");
    assert_eq!(
        h.take_outputs("main"),
        vec![count("ad1", 3, "2026-11-29 10:02:00.000")]
    );
    // Schema 1: the three times as one byte string of little-endian integers.
    let mut packed = vec![0xfe, 0xed, 1, 24];
    for t in held.iter().chain([&ts("2026-11-29 10:02:00.000")]) {
        packed.extend(t.to_le_bytes());
    }
    packed.push(3);
    assert_eq!(h.state_bytes("ad1", "clicks"), Some(packed));
    // The new click's timer drops every time up to its own, the migrated ones too.
    h.advance_watermark(ts("2026-11-29 10:07:00.000")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![count("ad1", 0, "2026-11-29 10:07:00.000")]
    );
}

#[test]
fn carried_fields_of_the_latest_click_go_with_every_count_of_its_ad() {
    let mut h = TestHost::<ChangeOnlyCounter>::builder()
        .config("window", "1m")
        .config("carry", "campaign_id, region")
        .build()
        .unwrap();
    let mut click = |ad: &str, campaign: &str, at: &str| {
        let value = json!({"ad_id": ad, "campaign_id": campaign, "clicked_at": at});
        h.process("main", ad, &value, ts(at)).unwrap();
    };
    click("ad1", "c1", "2026-11-29 10:00:00.000");
    click("ad1", "c2", "2026-11-29 10:00:10.000");
    h.advance_watermark(ts("2026-11-29 10:01:05.000")).unwrap();
    let with = |clicks: u32, campaign: &str, at: &str| {
        Emitted::new(
            json!({"ad_id": "ad1", "clicks": clicks, "updated_at": at, "campaign_id": campaign}),
            ts(at),
        )
        .with_key("ad1")
    };
    assert_eq!(
        h.take_outputs("main"),
        vec![
            with(1, "c1", "2026-11-29 10:00:00.000"),
            with(2, "c2", "2026-11-29 10:00:10.000"),
            // A timer's count carries the latest click's values; a field the clicks
            // lack (`region`) is not made up.
            with(1, "c2", "2026-11-29 10:01:00.000"),
        ]
    );
    h.advance_watermark(ts("2026-11-29 10:02:00.000")).unwrap();
    assert_eq!(
        h.take_outputs("main"),
        vec![with(0, "c2", "2026-11-29 10:01:10.000")]
    );
    assert!(
        !h.has_state("ad1"),
        "the carried values go with the last click"
    );
}
