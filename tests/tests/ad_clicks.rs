//! Seed 000 end to end: the change-only counter component through `weir run`, on
//! generated clicks with out-of-order data, late data and quiet gaps, compared per ad
//! with the independent model.

use serde_json::Value;
use weir_e2e::gen::{self, Click};
use weir_e2e::model::{self, ChangeOnlyCounter};
use weir_e2e::{read_jsonl, weir, Workdir};

fn run_example(work: &Workdir, clicks: &[Click], extra: &[&str]) -> (Vec<Value>, String) {
    run_pipeline(work, "examples/ad-clicks/pipeline.toml", clicks, extra)
}

fn run_pipeline(
    work: &Workdir,
    pipeline: &str,
    clicks: &[Click],
    extra: &[&str],
) -> (Vec<Value>, String) {
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    let input = work.write_jsonl("clicks.jsonl", &records);
    let output = work.path("counts.jsonl").display().to_string();
    let dead = work.path("dead.jsonl").display().to_string();
    let mut args = vec![
        "run",
        pipeline,
        "--input",
        &*Box::leak(format!("clicks={input}").into_boxed_str()),
        "--output",
        &*Box::leak(format!("main={output}").into_boxed_str()),
        "--dead-letter",
        &dead,
    ];
    args.extend_from_slice(extra);
    let run = weir(&args);
    run.assert_success();
    (read_jsonl(&output), run.stderr)
}

fn expected(clicks: &[Click], window: i64) -> std::collections::HashMap<String, Vec<Value>> {
    let records = clicks.iter().map(|c| (c.ad.clone(), c.ts, ()));
    model::event_time(&ChangeOnlyCounter { window }, records, 5_000)
}

#[test]
fn counts_match_the_model_per_ad() {
    let clicks = gen::clicks(6_000, 25, 7, 400, 4_000, 0.02, 0.003);
    let work = Workdir::new();
    let (out, stderr) = run_example(&work, &clicks, &[]);
    let expected = expected(&clicks, 300_000);
    let got = model::by_key(&out, "ad_id");
    let expected_total: usize = expected.values().map(Vec::len).sum();
    assert_eq!(out.len(), expected_total, "number of emitted records");
    for (ad, records) in &expected {
        assert_eq!(got.get(ad).unwrap_or(&vec![]), records, "records of {ad}");
    }
    // The input exercised what it is meant to: late records, drops to zero.
    assert!(
        stderr.contains("source clicks: 6000 records read"),
        "{stderr}"
    );
    let late: u64 = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("late records: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(late > 50, "expected late records in the input, got {late}");
    assert!(
        out.iter().filter(|r| r["clicks"] == 0).count() > 25,
        "counts fall back to 0 in quiet gaps"
    );
}

#[test]
fn window_comes_from_config_override() {
    let clicks = gen::clicks(2_000, 5, 11, 2_000, 3_000, 0.01, 0.01);
    let work = Workdir::new();
    let (out, _) = run_example(&work, &clicks, &["--config", "window=1m"]);
    let expected = expected(&clicks, 60_000);
    let got = model::by_key(&out, "ad_id");
    for (ad, records) in &expected {
        assert_eq!(got.get(ad).unwrap_or(&vec![]), records, "records of {ad}");
    }
}

#[test]
fn the_sample_demo_input_gives_exact_records() {
    // The README's demo: two bursts of clicks separated by a quiet gap of 20 minutes.
    let run = weir(&[
        "run",
        "examples/ad-clicks/pipeline.toml",
        "--dead-letter",
        "/dev/null",
        "-q",
    ]);
    run.assert_success();
    let out = weir_e2e::parse_jsonl(&run.stdout);
    assert_eq!(out.len(), 34);
    let ad1: Vec<(i64, &str)> = out
        .iter()
        .filter(|r| r["ad_id"] == "ad-1")
        .map(|r| {
            (
                r["clicks"].as_i64().unwrap(),
                r["updated_at"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ad1,
        vec![
            (1, "2026-11-29 10:00:00.123"),
            (2, "2026-11-29 10:00:30.500"),
            (3, "2026-11-29 10:01:10.000"),
            (4, "2026-11-29 10:01:38.000"),
            (5, "2026-11-29 10:02:00.000"),
            // 10:06:00 arrives before the watermark (10:05:55 after it) expires the first
            // clicks, so the count rises first and falls when their timers fire.
            (6, "2026-11-29 10:06:00.000"),
            (5, "2026-11-29 10:05:00.123"),
            (4, "2026-11-29 10:05:30.500"),
            (3, "2026-11-29 10:06:10.000"),
            (2, "2026-11-29 10:06:38.000"),
            (1, "2026-11-29 10:07:00.000"),
            (0, "2026-11-29 10:11:00.000"),
            (1, "2026-11-29 10:27:30.000"),
            (2, "2026-11-29 10:28:00.000"),
            (1, "2026-11-29 10:32:30.000"),
            (0, "2026-11-29 10:33:00.000"),
        ]
    );
}

#[test]
fn a_late_click_whose_window_has_passed_waits_for_the_next_advance() {
    // 10:01 arrives when the watermark is already 10:09:55: its timer (10:06) is behind
    // the watermark, so it fires at the next advance (here the end of input), not at once.
    let at = |hms: &str| gen::BASE_MS + weir_e2e::seconds_of_day(hms);
    let clicks: Vec<Click> = ["10:10:00", "10:01:00", "10:09:00"]
        .iter()
        .map(|t| Click {
            ad: "ad-1".into(),
            ts: at(t) - 10 * 3_600_000,
        })
        .collect();
    let work = Workdir::new();
    let (out, _) = run_example(&work, &clicks, &[]);
    let counts: Vec<i64> = out.iter().map(|r| r["clicks"].as_i64().unwrap()).collect();
    assert_eq!(counts, vec![1, 2, 3, 2, 1, 0]);
    assert_eq!(model::by_key(&out, "ad_id"), expected(&clicks, 300_000));
}

/// Batched calls must give exactly what one call per element and timer gives: the same
/// input through single calls (`max_batch = 0`) and through small, oddly sized batches
/// that end everywhere, including inside watermark advances.
#[test]
fn batches_of_any_size_give_the_same_records_as_single_calls() {
    let clicks = gen::clicks(3_000, 12, 23, 1_500, 4_000, 0.03, 0.01);
    let expected = expected(&clicks, 300_000);
    for max_batch in [0, 1, 7, 64] {
        let work = Workdir::new();
        let pipeline =
            weir_e2e::example_variant(&work, "ad-clicks", &format!("max_batch = {max_batch}"));
        let (out, _) = run_pipeline(&work, &pipeline, &clicks, &[]);
        let got = model::by_key(&out, "ad_id");
        assert_eq!(
            out.len(),
            expected.values().map(Vec::len).sum::<usize>(),
            "max_batch = {max_batch}"
        );
        for (ad, records) in &expected {
            assert_eq!(
                got.get(ad).unwrap_or(&vec![]),
                records,
                "records of {ad} with max_batch = {max_batch}"
            );
        }
    }
}
