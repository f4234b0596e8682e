//! Seed 002 end to end: the order-timeout component through `weir run`, in event time
//! against the independent model, and in processing time. The sample orders' exact totals
//! are golden cases: `tests/cases/orders-sample`, `tests/cases/orders-processing-time`.

use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;
use weir_e2e::gen::{self, Purchase};
use weir_e2e::model::{self, OrderEvent, OrderTimeout};
use weir_e2e::{read_jsonl, weir, Workdir};

fn cost(p: &Purchase) -> Decimal {
    match &p.cost {
        Value::String(s) => Decimal::from_str(s).unwrap(),
        other => Decimal::from_str(&other.to_string()).unwrap(),
    }
}

fn run(work: &Workdir, events: &[Purchase], extra: &[String]) -> Vec<Value> {
    run_pipeline(work, "examples/orders/pipeline.toml", events, extra)
}

fn run_pipeline(
    work: &Workdir,
    pipeline: &str,
    events: &[Purchase],
    extra: &[String],
) -> Vec<Value> {
    let records: Vec<Value> = events.iter().map(Purchase::to_json).collect();
    let input = work.write_jsonl("orders.jsonl", &records);
    let output = work.path("totals.jsonl").display().to_string();
    let dead = work.path("dead.jsonl").display().to_string();
    let mut args: Vec<String> = ["run", pipeline, "-q", "--dead-letter", &dead]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend([
        "--input".into(),
        format!("orders={input}"),
        "--output".into(),
        format!("main={output}"),
    ]);
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    weir(&args).assert_success();
    read_jsonl(&output)
}

fn expected_aggregates(events: &[Purchase]) -> std::collections::HashMap<String, Vec<Value>> {
    let records = events.iter().map(|e| {
        let input = OrderEvent {
            order: Value::from(e.order),
            item: e.item.clone(),
            cost: cost(e),
        };
        (e.order.to_string(), e.ts, input)
    });
    model::event_time(&OrderTimeout { timeout: 1_000 }, records, 0)
}

fn assert_matches_model(
    out: &[Value],
    expected: &std::collections::HashMap<String, Vec<Value>>,
    what: &str,
) {
    let got = model::by_key(out, "orderId");
    let expected_total: usize = expected.values().map(Vec::len).sum();
    assert_eq!(out.len(), expected_total, "{what}");
    for (order, aggregates) in expected {
        assert_eq!(
            got.get(order).unwrap_or(&vec![]),
            aggregates,
            "order {order}, {what}"
        );
    }
}

#[test]
fn event_time_aggregates_match_the_model_per_order() {
    let events = gen::purchases(2_500, 3, 0.08, 0.05);
    let work = Workdir::new();
    let out = run(&work, &events, &[]);
    let expected = expected_aggregates(&events);
    let total: usize = expected.values().map(Vec::len).sum();
    assert!(total > 2_500, "some orders time out and start again");
    assert_matches_model(&out, &expected, "default batches");
}

/// Each event deletes its order's timer and sets a new one, often while the old timer is
/// already in the same batch as due: single calls and any batch size must agree.
#[test]
fn timers_deleted_inside_a_batch_never_fire() {
    let events = gen::purchases(600, 9, 0.1, 0.1);
    let expected = expected_aggregates(&events);
    for max_batch in [0, 1, 5, 33] {
        let work = Workdir::new();
        let variant = format!("max_batch = {max_batch}");
        let pipeline = weir_e2e::example_variant(&work, "orders", &variant);
        let out = run_pipeline(&work, &pipeline, &events, &[]);
        assert_matches_model(&out, &expected, &variant);
    }
}

#[test]
fn processing_time_emits_each_order_once_at_end_of_input() {
    // The whole file is read far faster than the 5 s timeout, so every order's timer is
    // still pending when the input ends, and fires then with all the order's events.
    let events = gen::purchases(400, 5, 0.2, 0.05);
    let work = Workdir::new();
    let out = run(
        &work,
        &events,
        &[
            "--config".into(),
            "time=processing".into(),
            "--config".into(),
            "timeout=5s".into(),
        ],
    );
    let all: Vec<(Value, String, Decimal)> = events
        .iter()
        .map(|e| (Value::from(e.order), e.item.clone(), cost(e)))
        .collect();
    let expected = model::orders_all_at_once(&all);
    let got: std::collections::BTreeMap<String, Value> = out
        .iter()
        .map(|r| (r["orderId"].to_string(), r.clone()))
        .collect();
    assert_eq!(out.len(), expected.len(), "one aggregate per order");
    assert_eq!(got, expected);
}

/// Processing-time timers fire while the input is idle: with stdin still open, an
/// order's aggregate appears in the output once its timeout has passed on the wall clock.
#[test]
fn processing_time_timers_fire_while_stdin_is_idle() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let work = Workdir::new();
    let output = work.path("totals.jsonl");
    let mut child = Command::new(weir_e2e::weir_bin())
        .current_dir(weir_e2e::repo_root())
        .args([
            "run",
            "examples/orders/pipeline.toml",
            "-q",
            "--input",
            "orders=-",
            "--no-checkpoints",
        ])
        .arg("--output")
        .arg(format!("main={}", output.display()))
        .arg("--dead-letter")
        .arg(work.path("dead.jsonl"))
        .args(["--config", "time=processing", "--config", "timeout=300ms"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"orderId": 7, "item": "tea", "cost": "3.50", "timestamp": "2026-11-29 10:00:00"}}"#
    )
    .unwrap();
    writeln!(
        stdin,
        r#"{{"orderId": 7, "item": "jam", "cost": "0.25", "timestamp": "2026-11-29 10:00:00"}}"#
    )
    .unwrap();
    stdin.flush().unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let text = std::fs::read_to_string(&output).unwrap_or_default();
        if !text.is_empty() {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the timer did not fire while stdin stayed open"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "weir is still running: the input has not ended"
    );
    assert_eq!(
        weir_e2e::parse_jsonl(&first),
        vec![serde_json::json!({"orderId": 7, "total": "3.75", "items": ["tea", "jam"]})]
    );

    writeln!(
        stdin,
        r#"{{"orderId": 8, "item": "cake", "cost": "4.00", "timestamp": "2026-11-29 10:00:05"}}"#
    )
    .unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success());
    let all = read_jsonl(&output);
    assert_eq!(
        all.len(),
        2,
        "the pending order fires at end of input: {all:?}"
    );
    assert_eq!(all[1]["orderId"], 8);
}
