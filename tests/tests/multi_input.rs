//! Several sources feeding one UDF: each names the input it feeds and its own key and
//! timestamp fields; files replay merged by the timestamp of each one's next record
//! (ties in pipeline-file order); the watermark is the minimum over sources, and a source
//! that has ended no longer holds it back.

use serde_json::{json, Value};
use weir_e2e::{component, read_jsonl, weir, Workdir};

#[test]
fn sources_merge_by_timestamp_and_an_ended_source_stops_holding_the_watermark() {
    let work = Workdir::new();
    work.write_jsonl(
        "a.jsonl",
        &[
            json!({"id": "x", "t": 1000}),
            json!({"id": "y", "t": 3000}),
            json!({"id": "x", "t": 9000}),
        ],
    );
    work.write_jsonl(
        "b.jsonl",
        &[
            json!({"user": {"id": "x"}, "when": 2000}),
            json!({"user": {"id": "z"}, "when": 3000}),
        ],
    );
    let toml = format!(
        r#"
[[source]]
name = "a"
type = "file"
path = "a.jsonl"
input = "left"
key = "id"
timestamp = "t"
timestamp_format = "epoch_ms"

[[source]]
name = "b"
type = "file"
path = "b.jsonl"
input = "right"
key = "/user/id"
timestamp = "when"
timestamp_format = "epoch_ms"
out_of_orderness = "500ms"

[udf]
path = "{udf}"
[udf.config]
annotate = true

[[sink]]
output = "main"
type = "file"
path = "out.jsonl"
"#,
        udf = component("misbehaving-udf").display()
    );
    let pipeline = work.write("pipeline.toml", &toml);
    weir(&[
        "run",
        &pipeline,
        "-q",
        "--dead-letter",
        &work.path("dead.jsonl").display().to_string(),
    ])
    .assert_success();
    let out = read_jsonl(work.path("out.jsonl"));
    let seen: Vec<(String, i64, Value)> = out
        .iter()
        .map(|r| {
            (
                r["input"].as_str().unwrap().to_string(),
                r["watermark"].as_i64().unwrap(),
                r["record"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            // Nothing seen from b yet: the pipeline watermark is -inf.
            ("left".into(), i64::MIN, json!({"id": "x", "t": 1000})),
            // a has seen 1000 (watermark 1000), b nothing yet.
            (
                "right".into(),
                i64::MIN,
                json!({"user": {"id": "x"}, "when": 2000})
            ),
            // a at 1000, b at 2000 - 500: the minimum is 1000. Ties go in file order: a first.
            ("left".into(), 1000, json!({"id": "y", "t": 3000})),
            (
                "right".into(),
                1500,
                json!({"user": {"id": "z"}, "when": 3000})
            ),
            // b has ended: only a holds the watermark now (3000).
            ("left".into(), 3000, json!({"id": "x", "t": 9000})),
        ]
    );
}
