//! Bad input lines go to the dead-letter output with the reason, are counted, and the
//! run goes on; bad pipeline files are refused with an error naming the field.

use serde_json::json;
use weir_e2e::{read_jsonl, weir, Workdir};

fn echo_pipeline(work: &Workdir, input: &str) -> String {
    weir_e2e::echo_pipeline(work, input, "/user/id", "")
}

#[test]
fn malformed_lines_become_dead_letters_and_the_run_goes_on() {
    let work = Workdir::new();
    let lines = [
        r#"{"user": {"id": "u1"}, "ts": 1000, "n": 1}"#,
        r#"this is not json"#,
        r#"{"user": {}, "ts": 1001}"#,
        r#"{"user": {"id": "u2"}}"#,
        r#"{"user": {"id": "u2"}, "ts": "yesterday"}"#,
        r#"{"user": {"id": null}, "ts": 1002}"#,
        r#"[1, 2, 3]"#,
        "",
        r#"{"user": {"id": 7}, "ts": "1003", "n": 2}"#,
    ];
    let mut text = lines.join("\n");
    text.push('\n');
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"{\"user\": {\"id\": \"\xff\"}, \"ts\": 5}\n");
    std::fs::write(work.path("in.jsonl"), &bytes).unwrap();
    let pipeline = echo_pipeline(&work, "in.jsonl");

    let run = weir(&["run", &pipeline]);
    run.assert_success();
    let out = read_jsonl(work.path("out.jsonl"));
    assert_eq!(
        out,
        vec![
            json!({"user": {"id": "u1"}, "ts": 1000, "n": 1}),
            json!({"user": {"id": 7}, "ts": "1003", "n": 2})
        ]
    );

    let dead = read_jsonl(work.path("dead.jsonl"));
    let summary: Vec<(u64, &str)> = dead
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["raw"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary.iter().map(|(line, _)| *line).collect::<Vec<_>>(),
        vec![2, 3, 4, 5, 6, 7, 10],
        "blank line 8 is not a record; every other bad line is a dead letter"
    );
    assert_eq!(summary[0].1, "this is not json");
    let reasons: Vec<&str> = dead.iter().map(|d| d["reason"].as_str().unwrap()).collect();
    assert!(reasons[0].starts_with("not valid JSON"), "{}", reasons[0]);
    assert_eq!(reasons[1], r#"missing key field "/user/id""#);
    assert_eq!(reasons[2], r#"missing timestamp field "ts""#);
    assert!(
        reasons[3].starts_with(r#"timestamp field "ts": "yesterday" is not epoch milliseconds"#),
        "{}",
        reasons[3]
    );
    assert_eq!(reasons[4], r#"key field "/user/id" is null"#);
    assert!(
        reasons[5].starts_with("not a JSON object"),
        "{}",
        reasons[5]
    );
    assert!(reasons[6].starts_with("not UTF-8"), "{}", reasons[6]);
    assert!(dead
        .iter()
        .all(|d| d["source"] == "events" && d["offset"].is_u64()));
    assert!(run.stderr.contains("dead letters: 7"), "{}", run.stderr);
    assert!(
        run.stderr.contains("source events: 9 records read"),
        "{}",
        run.stderr
    );
}

#[test]
fn pipeline_file_mistakes_name_the_field() {
    let work = Workdir::new();
    work.write("in.jsonl", "");
    let good = std::fs::read_to_string(echo_pipeline(&work, "in.jsonl")).unwrap();
    let cases = [
        (
            good.replace("timestamp_format", "timestamp_fmt"),
            "unknown field `timestamp_fmt`",
        ),
        (
            good.replace("\"epoch_ms\"", "\"unix\""),
            "unknown variant `unix`",
        ),
        (
            good.replace("[udf]\n", "[udf]\ncall_timeout = \"soon\"\n"),
            "call_timeout",
        ),
        (
            good.replace("key = \"/user/id\"\n", ""),
            "missing field `key`",
        ),
        (
            good.replace("path = \"in.jsonl\"", "path = \"nowhere.jsonl\""),
            "cannot open input file",
        ),
        (
            good.replace(".wasm\"", ".wasmx\""),
            "cannot read UDF component",
        ),
        (
            good.replace("type = \"file\"\npath = \"out.jsonl\"", "type = \"kafkaa\""),
            "unknown variant `kafkaa`",
        ),
    ];
    for (text, expected) in cases {
        let path = work.write("bad.toml", &text);
        let run = weir(&["run", &path]);
        assert!(!run.success(), "{expected}: should fail");
        assert!(
            run.stderr.contains(expected),
            "expected {expected:?} in:\n{}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    let run = weir(&["run", &work.path("missing.toml").display().to_string()]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("cannot read pipeline file"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_output_without_a_sink_is_a_startup_error() {
    let work = Workdir::new();
    work.write("in.jsonl", "{\"user\": {\"id\": 1}, \"ts\": 1}\n");
    let pipeline = echo_pipeline(&work, "in.jsonl");
    let run = weir(&["run", &pipeline, "--config", "side=audit"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains("outputs with no sink in the pipeline file: audit"),
        "{}",
        run.stderr
    );
    assert!(!work.path("out.jsonl").exists() || read_jsonl(work.path("out.jsonl")).is_empty());
}
