//! Pipelines of several keyed stages end to end: seed 000's change-only count per ad,
//! then per campaign the sum of its ads' current counts (the `examples/ad-campaigns`
//! graph), on generated clicks with late data and quiet gaps, at parallelism 1, 2 and 4
//! per stage. The exact output of the example's sample is the golden case
//! `tests/cases/ad-campaigns`.
//!
//! Each stage is checked against an independent model: stage 1's records per ad against
//! seed 000's model (the one the one-stage tests use), stage 2's per campaign against a
//! model of the sums replayed over stage 1's records in the order stage 1 handed them
//! on (its file sink and the exchange get them in the same order). At parallelism 1 the
//! graph's output also equals running the two stages one after another as separate
//! pipelines over files.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use weir_e2e::gen::{self, Click};
use weir_e2e::model::{self, ChangeOnlyCounter};
use weir_e2e::{component, read_jsonl, weir, Workdir};

/// How many campaigns the ads are spread over: ad `ad-n` is in campaign `c-(n % 7)`.
const CAMPAIGNS: u64 = 7;

fn campaign_of(ad: &str) -> String {
    let n: u64 = ad.trim_start_matches("ad-").parse().expect("ad-N");
    format!("c-{}", n % CAMPAIGNS)
}

fn click_json(click: &Click) -> Value {
    let mut value = click.to_json();
    value["campaign_id"] = json!(campaign_of(&click.ad));
    value
}

/// The two-stage pipeline in `work`, stage 1 at `p1` shards and stage 2 at `p2`;
/// `second` is the second stage's input table and UDF (the default: campaign sums).
fn graph_pipeline(work: &Workdir, p1: usize, p2: usize) -> String {
    let text = format!(
        r#"
name = "campaigns"

[[source]]
name = "clicks"
type = "file"
path = "{clicks}"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[[stage]]
name = "per-ad"
parallelism = {p1}
udf = {{ path = "{counter}", config = {{ window = "5m", carry = "campaign_id" }} }}
[[stage.input]]
from = "clicks"

[[stage]]
name = "per-campaign"
parallelism = {p2}
udf = {{ path = "{totals}" }}
[[stage.input]]
from = "per-ad"
key = "campaign_id"

[[sink]]
stage = "per-ad"
output = "main"
type = "file"
path = "{per_ad}"

[[sink]]
stage = "per-campaign"
output = "main"
type = "file"
path = "{per_campaign}"

[dead_letter]
path = "{dead}"

[checkpoint]
enabled = false
"#,
        clicks = work.path("clicks.jsonl").display(),
        counter = component("change-only-counter").display(),
        totals = component("campaign-totals").display(),
        per_ad = work.path("per-ad.jsonl").display(),
        per_campaign = work.path("per-campaign.jsonl").display(),
        dead = work.path("dead.jsonl").display(),
    );
    work.write("graph.toml", &text)
}

/// The campaign sums over the per-ad counts, in the order given: the model of stage 2.
fn campaign_model(counts: &[Value]) -> HashMap<String, Vec<Value>> {
    let mut ads: HashMap<String, BTreeMap<String, u64>> = HashMap::new();
    let mut emitted: HashMap<String, u64> = HashMap::new();
    let mut out: HashMap<String, Vec<Value>> = HashMap::new();
    for count in counts {
        let campaign = count["campaign_id"]
            .as_str()
            .expect("campaign_id")
            .to_string();
        let ad = count["ad_id"].as_str().expect("ad_id").to_string();
        let clicks = count["clicks"].as_u64().expect("clicks");
        let of_campaign = ads.entry(campaign.clone()).or_default();
        if clicks == 0 {
            of_campaign.remove(&ad);
        } else {
            of_campaign.insert(ad, clicks);
        }
        let sum: u64 = of_campaign.values().sum();
        let last = emitted.entry(campaign.clone()).or_insert(0);
        if sum != *last {
            *last = sum;
            out.entry(campaign.clone()).or_default().push(json!({
                "campaign_id": campaign,
                "clicks": sum,
                "ads": of_campaign.len(),
                "updated_at": count["updated_at"],
            }));
        }
    }
    out
}

fn per_ad_model(clicks: &[Click]) -> HashMap<String, Vec<Value>> {
    let records = clicks.iter().map(|c| (c.ad.clone(), c.ts, ()));
    let mut expected = model::event_time(&ChangeOnlyCounter { window: 300_000 }, records, 5_000);
    // The counts carry the campaign of their ad.
    for (ad, counts) in &mut expected {
        for count in counts {
            count["campaign_id"] = json!(campaign_of(ad));
        }
    }
    expected
}

fn assert_per_key(got: &[Value], field: &str, expected: &HashMap<String, Vec<Value>>, what: &str) {
    let got = model::by_key(got, field);
    let empty = Vec::new();
    for (key, records) in expected {
        assert_eq!(
            got.get(key).unwrap_or(&empty),
            records,
            "{what}: records of {key}"
        );
    }
    for key in got.keys() {
        assert!(expected.contains_key(key), "{what}: unexpected key {key}");
    }
}

#[test]
fn each_stage_matches_its_model_at_parallelism_1_2_and_4() {
    let clicks = gen::clicks(20_000, 60, 41, 400, 4_000, 0.02, 0.003);
    let per_ad_expected = per_ad_model(&clicks);
    let expected_counts: usize = per_ad_expected.values().map(Vec::len).sum();
    let mut reference: Option<Vec<Value>> = None;
    for (p1, p2) in [(1, 1), (2, 1), (1, 2), (2, 2), (4, 4)] {
        let what = format!("stage parallelism {p1} and {p2}");
        let work = Workdir::new();
        work.write_jsonl(
            "clicks.jsonl",
            &clicks.iter().map(click_json).collect::<Vec<_>>(),
        );
        let pipeline = graph_pipeline(&work, p1, p2);
        let run = weir(&["run", &pipeline]);
        run.assert_success();
        let per_ad = read_jsonl(work.path("per-ad.jsonl"));
        let per_campaign = read_jsonl(work.path("per-campaign.jsonl"));
        assert_eq!(per_ad.len(), expected_counts, "{what}: stage 1's records");
        assert_per_key(&per_ad, "ad_id", &per_ad_expected, &what);
        // Stage 2 saw stage 1's records in the order its file has them.
        assert_per_key(
            &per_campaign,
            "campaign_id",
            &campaign_model(&per_ad),
            &what,
        );
        assert!(
            run.stderr
                .contains("stage per-campaign: weir: pipeline \"campaigns.per-campaign\""),
            "{what}: a summary per stage\n{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains(&format!("source per-ad: {expected_counts} records read")),
            "{what}: stage 2 read every record of stage 1\n{}",
            run.stderr
        );
        if p1 == 1 {
            // At parallelism 1 stage 1's order is the one-stage run's, so the graph's
            // output is exact, not only per key.
            match &reference {
                None => reference = Some(per_campaign),
                Some(first) if p2 == 1 => assert_eq!(&per_campaign, first, "{what}"),
                Some(_) => {}
            }
        }
    }
    let reference = reference.expect("a run at parallelism 1");
    assert!(
        reference.len() > 500,
        "the sums change often: {}",
        reference.len()
    );
    assert!(
        reference.iter().any(|r| r["clicks"] == 0),
        "campaigns drain to 0 in the quiet gaps"
    );
}

#[test]
fn at_parallelism_1_the_graph_equals_its_stages_run_one_after_another() {
    let clicks = gen::clicks(5_000, 30, 43, 400, 4_000, 0.02, 0.003);
    let work = Workdir::new();
    work.write_jsonl(
        "clicks.jsonl",
        &clicks.iter().map(click_json).collect::<Vec<_>>(),
    );
    weir(&["run", &graph_pipeline(&work, 1, 1)]).assert_success();

    // The same two UDFs as two one-stage pipelines joined by a file.
    let one = |name: &str, input: &str, key: &str, timestamp: &str, udf: &str, config: &str| {
        let text = format!(
            r#"
[[source]]
name = "in"
type = "file"
path = "{input}"
key = "{key}"
timestamp = "{timestamp}"
timestamp_format = "datetime"
out_of_orderness = "5s"
[udf]
path = "{udf}"
[udf.config]
{config}
[[sink]]
output = "main"
type = "file"
path = "{out}"
[checkpoint]
enabled = false
"#,
            input = work.path(input).display(),
            udf = component(udf).display(),
            out = work.path(&format!("{name}.jsonl")).display(),
        );
        let pipeline = work.write(&format!("{name}.toml"), &text);
        weir(&[
            "run",
            &pipeline,
            "--dead-letter",
            &work.path("dead.jsonl").display().to_string(),
        ])
        .assert_success();
        read_jsonl(work.path(&format!("{name}.jsonl")))
    };
    let first = one(
        "first",
        "clicks.jsonl",
        "ad_id",
        "clicked_at",
        "change-only-counter",
        "window = \"5m\"\ncarry = \"campaign_id\"",
    );
    assert_eq!(first, read_jsonl(work.path("per-ad.jsonl")), "stage 1");
    let second = one(
        "second",
        "first.jsonl",
        "campaign_id",
        "updated_at",
        "campaign-totals",
        "",
    );
    assert_eq!(
        second,
        read_jsonl(work.path("per-campaign.jsonl")),
        "stage 2"
    );
}
