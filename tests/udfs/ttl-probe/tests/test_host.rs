//! The ttl-probe UDF on the SDK's test host, fed the golden case's commands with the
//! host's watermark (the newest timestamp seen before each record, `out_of_orderness =
//! "0ms"`): the test host must expire state exactly as the engine does, so its output is
//! the case's expected file.

use serde_json::Value;
use ttl_probe::TtlProbe;
use weir_sdk::testing::TestHost;

const CASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../cases/state-ttl");

#[test]
fn the_test_host_expires_state_as_the_engine_does() {
    let commands = std::fs::read_to_string(format!("{CASE}/commands.jsonl")).unwrap();
    let expected = std::fs::read_to_string(format!("{CASE}/expected/out.jsonl")).unwrap();
    let mut host = TestHost::<TtlProbe>::builder()
        .inputs(["commands"])
        .build()
        .unwrap();
    let mut newest = i64::MIN;
    for line in commands.lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        let ts = record["ts"].as_i64().unwrap();
        let key = record["k"].as_str().unwrap().to_owned();
        if newest > i64::MIN {
            host.advance_watermark(newest).unwrap();
        }
        host.process("commands", key, line, ts).unwrap();
        newest = newest.max(ts);
    }
    host.finish().unwrap();
    let got: Vec<Value> = host.outputs("main").into_iter().map(|e| e.value).collect();
    let want: Vec<Value> = expected
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got, want);
    assert!(host.keys_with_state().is_empty(), "all expired at the end");
}

#[test]
fn an_entry_lives_until_the_watermark_reaches_its_stamp_plus_the_ttl() {
    let mut host = TestHost::<TtlProbe>::builder()
        .inputs(["commands"])
        .config("ttl", "100ms")
        .build()
        .unwrap();
    host.process("commands", "a", r#"{"op":"put","f":"x","v":"1"}"#, 1_000)
        .unwrap();
    host.advance_watermark(1_099).unwrap();
    assert_eq!(
        host.map_state_bytes("a", "fields").len(),
        1,
        "alive at 1099"
    );
    host.advance_watermark(1_100).unwrap();
    assert!(
        host.map_state_bytes("a", "fields").is_empty(),
        "gone at 1100"
    );
    assert!(!host.has_state("a"), "the key went with its last entry");
}
