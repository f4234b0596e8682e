//! UDFs in Python and JavaScript: the same semantics as their Rust twins, run by the same
//! host. Each runs on generated input next to its twin, and the outputs and dead letters
//! must be byte-identical: built as by default (one call per element) and with the batch
//! export (`WEIR_GUEST_BATCH=1`).

use std::path::Path;
use weir_e2e::gen::{self, Click, Purchase};
use weir_e2e::{component, guest, guest_batched, weir, Workdir};

/// Runs `pipeline` with `udf` on `input` (written to source `source`); returns the main
/// output and the dead letters, as written.
fn run(
    pipeline: &str,
    source: &str,
    input: &str,
    udf: &Path,
    work: &Workdir,
    tag: &str,
) -> (String, String) {
    let output = work.path(&format!("{tag}.out.jsonl"));
    let dead = work.path(&format!("{tag}.dead.jsonl"));
    let run = weir(&[
        "run",
        pipeline,
        "-q",
        "--no-checkpoints",
        "--udf",
        udf.to_str().unwrap(),
        "--input",
        &format!("{source}={input}"),
        "--output",
        &format!("main={}", output.display()),
        "--dead-letter",
        dead.to_str().unwrap(),
    ]);
    run.assert_success();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (read(&output), read(&dead))
}

/// Input lines with some that the source must refuse, so dead letters are compared too.
fn with_bad_lines(records: Vec<String>) -> String {
    let mut text = String::new();
    for (i, line) in records.iter().enumerate() {
        text.push_str(line);
        text.push('\n');
        if i % 997 == 500 {
            text.push_str("{\"not\": \"a record of this source\"}\n");
        }
    }
    text
}

#[test]
fn python_change_only_counter_equals_the_rust_one() {
    let work = Workdir::new();
    let clicks = gen::clicks(4_000, 12, 41, 500, 4_000, 0.02, 0.004);
    let lines = clicks
        .iter()
        .map(|c| Click::to_json(c).to_string())
        .collect();
    let input = work.write("clicks.jsonl", &with_bad_lines(lines));
    let pipeline = "examples/ad-clicks/pipeline.toml";
    let rust = run(
        pipeline,
        "clicks",
        &input,
        &component("change-only-counter"),
        &work,
        "rust",
    );
    assert!(
        rust.0.lines().count() > 4_000,
        "the input makes counts rise and fall"
    );
    assert_eq!(rust.1.lines().count(), 4, "four refused lines");
    for (udf, tag) in [
        (guest("python", "change-only-counter"), "python"),
        (
            guest_batched("python", "change-only-counter"),
            "python-batch",
        ),
    ] {
        let python = run(pipeline, "clicks", &input, &udf, &work, tag);
        assert!(rust.0 == python.0, "{tag}: the outputs differ");
        assert_eq!(rust.1, python.1, "{tag}");
    }
}

#[test]
fn javascript_order_timeout_equals_the_rust_one() {
    let work = Workdir::new();
    let events = gen::purchases(1_500, 43, 0.2, 0.05);
    let mut lines: Vec<String> = events
        .iter()
        .map(|e| Purchase::to_json(e).to_string())
        .collect();
    // Poison records the UDFs reject (issue 17's "cost": "abc"): the run goes on.
    let poison = [
        r#"{"orderId":9001,"item":"tea","cost":"abc","timestamp":"2026-01-01 00:00:00"}"#,
        r#"{"orderId":9002,"item":"tea","timestamp":"2026-01-01 00:00:00"}"#,
    ];
    for (i, line) in poison.iter().enumerate() {
        lines.insert(300 + 400 * i, line.to_string());
    }
    let input = work.write("orders.jsonl", &with_bad_lines(lines));
    let pipeline = "examples/orders/pipeline.toml";
    let rust = run(
        pipeline,
        "orders",
        &input,
        &component("order-timeout"),
        &work,
        "rust",
    );
    assert!(
        rust.0.lines().count() > 1_500,
        "orders time out and start again"
    );
    for (udf, tag) in [
        (guest("js", "order-timeout"), "js"),
        (guest_batched("js", "order-timeout"), "js-batch"),
    ] {
        let js = run(pipeline, "orders", &input, &udf, &work, tag);
        assert!(rust.0 == js.0, "{tag}: the outputs differ");
        assert_eq!(rust.1, js.1, "{tag}");
    }
    let rejected: Vec<&str> = rust.1.lines().filter(|l| l.contains("rejected")).collect();
    assert_eq!(rejected.len(), 2, "{}", rust.1);
    assert!(
        rejected[0].contains(r#"field `cost`: \"abc\" is not a valid decimal"#),
        "{}",
        rejected[0]
    );
    assert!(
        rejected[1].contains("field `cost` is missing"),
        "{}",
        rejected[1]
    );
}
