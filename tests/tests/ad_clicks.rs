//! Seed 000 end to end: the change-only counter component through `weir run`, on
//! generated clicks with out-of-order data, late data and quiet gaps, compared per ad
//! with the independent model. The sample input's exact output (the README's demo) and a
//! late click whose timer waits for the next advance are golden cases:
//! `tests/cases/ad-clicks-demo`, `tests/cases/ad-clicks-late-timer`.

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

/// The instance keeps the ads' state between batches (`weir:udf/cached-batch`); the
/// records must be the same whether it keeps everything, drops its copies every few
/// batches (a tiny `state_cache`, so the host sends the state again), or keeps nothing.
/// Ads go quiet and come back, so their keys are released and their numbers reused.
#[test]
fn the_state_kept_between_batches_gives_the_same_records_however_often_it_is_dropped() {
    let clicks = gen::clicks(6_000, 40, 29, 300, 4_000, 0.02, 0.004);
    let expected = expected(&clicks, 300_000);
    for state_cache in ["\"64MiB\"", "\"2KiB\"", "\"0\""] {
        let work = Workdir::new();
        let pipeline = weir_e2e::example_variant(
            &work,
            "ad-clicks",
            &format!("max_batch = 16\nstate_cache = {state_cache}"),
        );
        let (out, _) = run_pipeline(&work, &pipeline, &clicks, &[]);
        let got = model::by_key(&out, "ad_id");
        assert_eq!(
            out.len(),
            expected.values().map(Vec::len).sum::<usize>(),
            "state_cache = {state_cache}"
        );
        for (ad, records) in &expected {
            assert_eq!(
                got.get(ad).unwrap_or(&vec![]),
                records,
                "records of {ad} with state_cache = {state_cache}"
            );
        }
    }
}

/// The ads whose records differ between two runs, by ad.
fn differing(
    expected: &std::collections::HashMap<String, Vec<Value>>,
    got: &std::collections::HashMap<String, Vec<Value>>,
) -> Vec<String> {
    let mut ads: Vec<String> = expected
        .keys()
        .chain(got.keys())
        .filter(|ad| expected.get(*ad) != got.get(*ad))
        .cloned()
        .collect();
    ads.sort();
    ads.dedup();
    ads
}

/// `n` generated clicks over `ads` ads, a fifth of them on four hot ads.
fn clicks_with_hot_ads(n: usize, ads: u64, seed: u64) -> Vec<Click> {
    let mut clicks = gen::clicks(n, ads, seed, 40, 4_000, 0.01, 0.0005);
    for (i, click) in clicks.iter_mut().enumerate() {
        if i % 5 == 0 {
            click.ad = format!("ad-hot-{}", i % 4);
        }
    }
    clicks
}

/// Issue 36, item 2: every parallelism gives each ad exactly the records parallelism 1
/// gives it (and the model), timers included, in batches: a timer registered in a
/// batch that another shard's click makes due fires before the ad's next click. 400,000
/// clicks with hot ads at a spread of parallelisms up to 128, and 20,000 at every
/// parallelism from 2 to 128.
#[test]
fn every_parallelism_gives_each_ad_what_parallelism_one_gives_it() {
    let work = Workdir::new();
    for (clicks, parallelisms) in [
        (
            clicks_with_hot_ads(400_000, 2_000, 36),
            vec![2, 3, 4, 5, 6, 7, 8, 13, 16, 31, 64, 100, 127, 128],
        ),
        (clicks_with_hot_ads(20_000, 300, 37), (2..=128).collect()),
    ] {
        let run = |p: usize| {
            let p = p.to_string();
            let (out, _) = run_example(&work, &clicks, &["--parallelism", &p, "--no-checkpoints"]);
            model::by_key(&out, "ad_id")
        };
        let one = run(1);
        let model = expected(&clicks, 300_000);
        assert_eq!(
            differing(&model, &one),
            Vec::<String>::new(),
            "parallelism 1 against the model"
        );
        for p in parallelisms {
            let ads = differing(&one, &run(p));
            assert!(
                ads.is_empty(),
                "parallelism {p} of {} clicks: {} ads differ from parallelism 1: {:?}",
                clicks.len(),
                ads.len(),
                &ads[..ads.len().min(10)]
            );
        }
    }
}
