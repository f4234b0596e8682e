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
//!
//! Crash safety: the graph killed with SIGKILL at random moments and restarted (at
//! another parallelism each time) ends with what an uninterrupted run writes, its stages
//! checkpointing in step: stage 1's file and stage 2's file or PostgreSQL table.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};
use weir_e2e::crash::{at_parallelisms, newest_checkpoint, CrashLoop};
use weir_e2e::gen::{self, Click};
use weir_e2e::model::{self, ChangeOnlyCounter};
use weir_e2e::services::{postgres_url, unique_table};
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

/// The two-stage pipeline in `work`, stage 1 at `p1` shards and stage 2 at `p2`, writing
/// `per-ad.jsonl` and `per-campaign.jsonl`, without checkpoints.
fn graph_pipeline(work: &Workdir, p1: usize, p2: usize) -> String {
    let sink = format!(
        "type = \"file\"\npath = \"{}\"",
        work.path("per-campaign.jsonl").display()
    );
    graph_pipeline_with(work, (p1, p2), &sink, "enabled = false")
}

/// The two-stage pipeline in `work`, its stages at `(p1, p2)` shards, stage 2's output
/// going to the sink whose lines are `campaign_sink`, with `[checkpoint]` lines
/// `checkpoint`.
fn graph_pipeline_with(
    work: &Workdir,
    (p1, p2): (usize, usize),
    campaign_sink: &str,
    checkpoint: &str,
) -> String {
    let stages = weir_e2e::graphs::ad_campaigns_stages(&work.path("clicks.jsonl"), (p1, p2));
    let text = format!(
        r#"name = "campaigns"
{stages}
[[sink]]
stage = "per-ad"
output = "main"
type = "file"
path = "{per_ad}"

[[sink]]
stage = "per-campaign"
output = "main"
{campaign_sink}

[dead_letter]
path = "{dead}"

[checkpoint]
{checkpoint}
"#,
        per_ad = work.path("per-ad.jsonl").display(),
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

/// Runs `weir run` with checkpoints every 100 ms in `state`, killing it with SIGKILL at
/// random moments after the last stage wrote a checkpoint, up to `kills` times, run `i`
/// (the last one included) with the arguments `runs[i % len]` (the pipeline file first,
/// then e.g. `--parallelism N`), then runs it to completion, and checks that the
/// completed graph removed its checkpoints. Returns the kills that landed after a
/// checkpoint.
fn run_with_crashes(runs: &[Vec<String>], state: &Path, span: Duration, kills: usize) -> usize {
    let crashes = CrashLoop {
        args: &["run".to_string()],
        each_run: runs,
        state,
        watch: &state.join("per-campaign"),
        span,
        seed: kills as u64 * 31 + 7,
        kills,
    }
    .run();
    assert!(
        crashes.restored >= 1,
        "at least one kill must land after a checkpoint: {crashes:?}"
    );
    for stage in ["per-ad", "per-campaign"] {
        assert_eq!(
            newest_checkpoint(&state.join(stage)),
            None,
            "a completed graph removes {stage}'s checkpoints"
        );
    }
    crashes.restored
}

/// The files of a graph run after kills: stage 1's exactly the model's per ad, nothing
/// lost or doubled; stage 2's the sums over stage 1's file in its order (its state at the
/// restored checkpoint had seen exactly stage 1's records up to the cut).
fn assert_graph_files_after_kills(work: &Workdir, clicks: &[Click]) {
    let per_ad_expected = per_ad_model(clicks);
    let expected_counts: usize = per_ad_expected.values().map(Vec::len).sum();
    let per_ad = read_jsonl(work.path("per-ad.jsonl"));
    assert_eq!(
        per_ad.len(),
        expected_counts,
        "stage 1: nothing lost or doubled"
    );
    assert_per_key(&per_ad, "ad_id", &per_ad_expected, "stage 1 after kills");
    assert_per_key(
        &read_jsonl(work.path("per-campaign.jsonl")),
        "campaign_id",
        &campaign_model(&per_ad),
        "stage 2 after kills",
    );
}

/// Clicks for the crash tests: long enough a run for several checkpoints.
fn crash_clicks(work: &Workdir) -> Vec<Click> {
    let clicks = gen::clicks(150_000, 80, 47, 400, 4_000, 0.02, 0.003);
    work.write_jsonl(
        "clicks.jsonl",
        &clicks.iter().map(click_json).collect::<Vec<_>>(),
    );
    clicks
}

#[test]
fn a_graph_killed_at_random_moments_restores_every_stage_at_one_checkpoint() {
    let work = Workdir::new();
    let clicks = crash_clicks(&work);
    let sink = format!(
        "type = \"file\"\npath = \"{}\"",
        work.path("per-campaign.jsonl").display()
    );
    let pipeline = graph_pipeline_with(&work, (2, 2), &sink, "enabled = true");
    let started = Instant::now();
    weir(&["run", &pipeline, "-q", "--no-checkpoints"]).assert_success();
    let span = started.elapsed();

    // Restarted at another parallelism each time (every stage at it).
    let runs: Vec<Vec<String>> = at_parallelisms(&[1, 4, 2, 1, 3])
        .into_iter()
        .map(|flags| [vec![pipeline.clone()], flags].concat())
        .collect();
    run_with_crashes(&runs, &work.path("state"), span, 5);
    assert_graph_files_after_kills(&work, &clicks);
    assert!(
        std::fs::read_to_string(work.path("dead.per-ad.jsonl"))
            .unwrap_or_default()
            .is_empty(),
        "no dead letters"
    );
}

/// Rows of the PostgreSQL table of campaign sums: `campaign|updated_at|clicks|ads`.
fn campaign_rows(table: &str) -> BTreeSet<String> {
    let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls).expect("connect");
    let query = format!(
        "SELECT campaign_id, to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.MS'), clicks, ads FROM \"{table}\""
    );
    let rows = client.query(&query, &[]).expect("query the table");
    rows.iter()
        .map(|r| {
            format!(
                "{}|{}|{}|{}",
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, i64>(2),
                r.get::<_, i64>(3)
            )
        })
        .collect()
}

#[test]
fn a_graph_killed_at_random_moments_converges_on_the_same_postgres_table() {
    let work = Workdir::new();
    crash_clicks(&work);
    // Every change of a campaign's sum is a row (keyed by campaign and time), so a lost
    // or wrong record shows as a missing or different row; stage 1 at one shard hands
    // its records on in one order, so a replay upserts exactly the rows it replaces.
    let table = unique_table("campaign_sums");
    let sink = format!(
        r#"type = "postgres"
url = "{url}"
table = "{table}"
create_table = true
primary_key = ["campaign_id", "updated_at"]
columns = [
    {{ name = "campaign_id", type = "text" }},
    {{ name = "updated_at", type = "timestamp" }},
    {{ name = "clicks", type = "bigint" }},
    {{ name = "ads", type = "bigint" }},
]"#,
        url = postgres_url()
    );
    let pipeline = graph_pipeline_with(&work, (1, 2), &sink, "enabled = true");
    let started = Instant::now();
    weir(&["run", &pipeline, "-q", "--no-checkpoints"]).assert_success();
    let span = started.elapsed();
    let mut expected = BTreeMap::new();
    for sums in campaign_model(&read_jsonl(work.path("per-ad.jsonl"))).into_values() {
        for sum in sums {
            let key = (
                sum["campaign_id"].as_str().unwrap().to_string(),
                sum["updated_at"].as_str().unwrap().to_string(),
            );
            expected.insert(key, (sum["clicks"].clone(), sum["ads"].clone()));
        }
    }
    let expected: BTreeSet<String> = expected
        .into_iter()
        .map(|((campaign, at), (clicks, ads))| format!("{campaign}|{at}|{clicks}|{ads}"))
        .collect();
    assert_eq!(campaign_rows(&table), expected, "the uninterrupted run");
    assert!(expected.len() > 1_000, "{} rows", expected.len());

    let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls).expect("connect");
    client
        .batch_execute(&format!("DELETE FROM \"{table}\""))
        .expect("empty the table");
    run_with_crashes(&[vec![pipeline]], &work.path("state"), span, 4);
    assert_eq!(campaign_rows(&table), expected, "after kills");
}

/// Seed 001's hourly revenue per zone, then per hour the top 3 zones
/// (`examples/taxi-top-zones`), stages at `(p1, p2)` shards, over `rides.jsonl`.
fn top_zones_pipeline(work: &Workdir, (p1, p2): (usize, usize)) -> String {
    let text = format!(
        r#"
name = "top-zones"

[[source]]
name = "rides"
type = "file"
path = "{rides}"
key = "PULocationID"
timestamp = "tpep_pickup_datetime"
timestamp_format = "epoch_ms"
out_of_orderness = "5s"

[[stage]]
name = "hourly"
parallelism = {p1}
udf = {{ path = "{windows}", config = {{ size = "1h", allowed_lateness = "1h" }} }}
[[stage.input]]
from = "rides"

[[stage]]
name = "top"
parallelism = {p2}
udf = {{ path = "{top}", config = {{ top = "3", retain = "1h" }} }}
[[stage.input]]
from = "hourly"
key = "window_start"

[[sink]]
stage = "hourly"
output = "main"
type = "file"
path = "{hourly}"

[[sink]]
stage = "hourly"
output = "late"
type = "file"
path = "{late}"

[[sink]]
stage = "top"
output = "main"
type = "file"
path = "{ranks}"

[checkpoint]
enabled = false
"#,
        rides = work.path("rides.jsonl").display(),
        windows = component("tumbling-window").display(),
        top = component("top-zones").display(),
        hourly = work.path("hourly.jsonl").display(),
        late = work.path("late.jsonl").display(),
        ranks = work.path("ranks.jsonl").display(),
    );
    work.write("top-zones.toml", &text)
}

/// The model of stage 2: per window, stage 1's rows replayed in the order given, each
/// replacing its zone's totals, and every rank of the top 3 (revenue descending, then
/// zone id) whose zone or totals changed.
fn top_zones_model(rows: &[Value]) -> HashMap<String, Vec<Value>> {
    /// A zone's revenue in cents and trips.
    type Totals = (i64, u64);
    /// A window's zones, and the ranks last emitted.
    type Window = (BTreeMap<i64, Totals>, Vec<(i64, Totals)>);
    let mut windows: HashMap<String, Window> = HashMap::new();
    let mut out: HashMap<String, Vec<Value>> = HashMap::new();
    for row in rows {
        let window = row["window_start"]
            .as_str()
            .expect("window_start")
            .to_string();
        let zone = row["PULocationID"].as_i64().expect("zone");
        let revenue = row["total_revenue"].as_str().expect("revenue");
        let cents: i64 = revenue.replace('.', "").parse().expect("2 places");
        let trips = row["num_trips"].as_u64().expect("trips");
        let (zones, shown) = windows.entry(window.clone()).or_default();
        zones.insert(zone, (cents, trips));
        let mut ranking: Vec<(i64, Totals)> = zones.iter().map(|(&z, &t)| (z, t)).collect();
        ranking.sort_by_key(|&(zone, (cents, _))| (-cents, zone));
        ranking.truncate(3);
        for (index, &(zone, (cents, trips))) in ranking.iter().enumerate() {
            if shown.get(index) != Some(&(zone, (cents, trips))) {
                out.entry(window.clone()).or_default().push(json!({
                    "window_start": window,
                    "rank": index + 1,
                    "PULocationID": zone,
                    "total_revenue": format!("{}{}.{:02}", if cents < 0 { "-" } else { "" }, cents.abs() / 100, cents.abs() % 100),
                    "num_trips": trips,
                }));
            }
        }
        *shown = ranking;
    }
    out
}

#[test]
fn the_top_zones_per_hour_follow_every_correction_at_parallelism_1_2_and_4() {
    let rides = gen::rides(20_000, 53);
    for (p1, p2) in [(1, 1), (2, 2), (4, 1)] {
        let what = format!("stage parallelism {p1} and {p2}");
        let work = Workdir::new();
        work.write_jsonl("rides.jsonl", &rides);
        weir(&["run", &top_zones_pipeline(&work, (p1, p2))]).assert_success();
        let hourly = read_jsonl(work.path("hourly.jsonl"));
        let expected = top_zones_model(&hourly);
        let changes: usize = expected.values().map(Vec::len).sum();
        assert!(
            hourly.len() > 200 && changes > hourly.len() / 4,
            "{what}: {} windows rows, {changes} rank changes",
            hourly.len()
        );
        let corrected = expected.values().filter(|ranks| ranks.len() > 3).count();
        assert!(
            corrected > 10,
            "{what}: late rides change rankings: {corrected}"
        );
        assert_per_key(
            &read_jsonl(work.path("ranks.jsonl")),
            "window_start",
            &expected,
            &what,
        );
    }
}

#[test]
fn a_graph_killed_at_random_moments_restores_each_stage_at_a_parallelism_of_its_own() {
    let work = Workdir::new();
    let clicks = crash_clicks(&work);
    let sink = format!(
        "type = \"file\"\npath = \"{}\"",
        work.path("per-campaign.jsonl").display()
    );
    // The same pipeline (same name and stages) at other shards per stage, run after run:
    // each stage restores its own state at its new parallelism.
    let mut runs = Vec::new();
    for (p1, p2) in [(2, 1), (1, 3), (4, 2), (1, 1), (3, 4)] {
        let pipeline = graph_pipeline_with(&work, (p1, p2), &sink, "enabled = true");
        let copy = work.path(&format!("graph-{p1}-{p2}.toml"));
        std::fs::copy(&pipeline, &copy).unwrap();
        runs.push(vec![copy.display().to_string()]);
    }
    let started = Instant::now();
    weir(&["run", runs[0][0].as_str(), "-q", "--no-checkpoints"]).assert_success();
    let span = started.elapsed();
    run_with_crashes(&runs, &work.path("state"), span, 4);
    assert_graph_files_after_kills(&work, &clicks);
}

/// A new version of stage 2 swapped in under load, as `weir dev` steers a graph (a
/// control per stage, `weir_run::run_graph_with`): both stages at two shards, 400,000
/// records over 50 keys, the swap asked for once stage 2 is under way. Every stage keeps
/// its state: stage 1 counts each key on to its end, unswapped; stage 2 counts each of
/// stage 1's records of a key exactly once, the old version up to the swap and the new
/// one on from the count the old one left (the versioned test UDFs keep one `count`).
#[test]
fn a_swap_of_stage_2_under_load_keeps_the_state_of_both_stages() {
    use weir_engine::runtime::ProcessFunction;
    use weir_pipeline::{Overrides, StageGraph};
    use weir_run::{RunControl, RunOptions, SwapRequest};

    const KEYS: u64 = 50;
    const RECORDS: u64 = 400_000;
    let work = Workdir::new();
    let events: Vec<Value> = (0..RECORDS)
        .map(|i| json!({"key": format!("k{}", i % KEYS), "seq": i, "ts": 1_000_000 + i}))
        .collect();
    work.write_jsonl("events.jsonl", &events);
    let v1 = component("versioned-udf-v1").display().to_string();
    let text = weir_e2e::graphs::two_stage_pipeline("swap-under-load", &v1, &v1, 2);
    let pipeline = work.write("graph.toml", &text);
    let overrides = Overrides {
        no_checkpoints: true,
        ..Overrides::default()
    };
    let graph = StageGraph::load(Path::new(&pipeline), &overrides).expect("the graph loads");
    let functions: Vec<(Box<dyn ProcessFunction>, _)> = graph
        .stages
        .iter()
        .map(|stage| {
            let (function, identity) = weir_run::load_udf(&stage.spec).expect("v1 loads");
            (Box::new(function) as Box<dyn ProcessFunction>, identity)
        })
        .collect();
    let controls = [RunControl::new(), RunControl::new()];
    let options = RunOptions::default();
    std::thread::scope(|scope| {
        let run = scope.spawn(|| weir_run::run_graph_with(&graph, functions, &options, &controls));
        weir_e2e::wait_for("stage 2 under way", Duration::from_secs(60), || {
            controls[1].status().processed > 20_000
        });
        let v2 = std::fs::read(component("versioned-udf-v2")).unwrap();
        let (function, identity) =
            weir_run::udf_from_bytes(&graph.stages[1].spec, &v2).expect("v2 loads");
        let (done, reply) = std::sync::mpsc::channel();
        controls[1].request_swap(SwapRequest {
            function: Box::new(function),
            identity,
            probation_calls: 0,
            done,
        });
        reply
            .recv_timeout(Duration::from_secs(30))
            .expect("the swap is answered")
            .expect("stage 2 takes the new version");
        run.join().unwrap().expect("the graph completes");
    });

    let first = read_jsonl(work.path("first.jsonl"));
    let second = read_jsonl(work.path("second.jsonl"));
    let mut first_of: HashMap<String, usize> = HashMap::new();
    for record in &first {
        assert_eq!(record["v"], 1, "stage 1 runs the old version throughout");
        *first_of
            .entry(record["key"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    // Stage 1's counts per key: 1 to the key's records, in order, despite the swap.
    let mut counted: HashMap<String, Vec<u64>> = HashMap::new();
    for record in first.iter().filter(|r| r.get("count").is_some()) {
        let key = record["key"].as_str().unwrap().to_string();
        counted
            .entry(key)
            .or_default()
            .push(record["count"].as_u64().unwrap());
    }
    assert_eq!(counted.len() as u64, KEYS);
    for counts in counted.values() {
        assert_eq!(*counts, (1..=RECORDS / KEYS).collect::<Vec<_>>());
    }
    // Stage 2's numbers per key: each of stage 1's records of the key once, in order; the
    // version switches once, from the old to the new.
    let mut numbers: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for record in second.iter().filter(|r| r.get("timer").is_none()) {
        let n = record.get("count").or_else(|| record.get("total"));
        numbers
            .entry(record["key"].as_str().unwrap().to_string())
            .or_default()
            .push((
                record["v"].as_u64().unwrap(),
                n.and_then(Value::as_u64).unwrap(),
            ));
    }
    let (mut old, mut new) = (0, 0);
    for (key, got) in &numbers {
        let ns: Vec<u64> = got.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            ns,
            (1..=first_of[key] as u64).collect::<Vec<_>>(),
            "stage 2 counts key {key}'s records from stage 1 once each, across the swap"
        );
        let switched = got.iter().position(|(v, _)| *v == 2).unwrap_or(got.len());
        assert!(
            got[..switched].iter().all(|(v, _)| *v == 1)
                && got[switched..].iter().all(|(v, _)| *v == 2),
            "key {key}: the old version, then the new one"
        );
        old += switched;
        new += got.len() - switched;
    }
    assert!(
        old > 0 && new > 0,
        "the swap landed mid-run: {old} records by the old version, {new} by the new"
    );
}

/// A graph of two roots (stages `a` and `b`, each the versioned counter over a file of
/// its own) feeding one co-process stage `c` (the counter over both, by key), stopped
/// with SIGTERM mid-run and run again: the stop ends with one last checkpoint that both
/// roots take at the same epoch and `c` completes, so the second run resumes from it
/// (there is no other: the interval is an hour) and the files end as an uninterrupted
/// run's: `a` and `b` exactly, `c` counting each of their records of a key once.
#[test]
fn a_graph_of_two_roots_stopped_mid_run_resumes_from_the_checkpoint_both_took() {
    const KEYS: u64 = 40;
    const RECORDS: u64 = 200_000;
    let work = Workdir::new();
    for (file, offset) in [("x.jsonl", 0), ("y.jsonl", 3)] {
        let events: Vec<Value> = (0..RECORDS)
            .map(|i| json!({"key": format!("k{}", i % KEYS), "seq": i, "ts": 1_000_000 + 7 * i + offset}))
            .collect();
        work.write_jsonl(file, &events);
    }
    let text = two_roots_graph(
        "two-roots",
        [
            ("x", "type = \"file\"\npath = \"x.jsonl\""),
            ("y", "type = \"file\"\npath = \"y.jsonl\""),
        ],
    );
    let pipeline = work.write("graph.toml", &text);
    weir(&["run", &pipeline, "-q", "--no-checkpoints"]).assert_success();
    let expected: Vec<Vec<Value>> = ["a", "b"]
        .iter()
        .map(|s| read_jsonl(work.path(&format!("{s}.jsonl"))))
        .collect();
    for stage in ["a", "b", "c"] {
        std::fs::remove_file(work.path(&format!("{stage}.jsonl"))).unwrap();
    }

    let state = work.path("state");
    let state_dir = state.display().to_string();
    let args = [
        "run",
        &pipeline,
        "--state-dir",
        &state_dir,
        "--checkpoint-interval",
        "1h",
    ];
    let mut child = std::process::Command::new(weir_e2e::weir_bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weir");
    let log = weir_e2e::StderrLog::capture(&mut child);
    weir_e2e::wait_for("c under way", Duration::from_secs(60), || {
        std::fs::metadata(work.path("c.jsonl")).is_ok_and(|m| m.len() > 100_000)
    });
    // SAFETY: kill(2) on the pid of a child that has not been waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let log = log.finish();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("stopped before"),
        "the stop came mid-run: {log}"
    );
    for stage in ["a", "b", "c"] {
        assert!(
            newest_checkpoint(&state.join(stage)).is_some(),
            "stage {stage} took the last checkpoint: {log}"
        );
    }

    let resumed = weir(&args);
    resumed.assert_success();
    assert!(
        resumed.stderr.contains("resuming from checkpoint 1"),
        "every stage resumes from the stop's checkpoint: {}",
        resumed.stderr
    );
    for (stage, expected) in ["a", "b"].iter().zip(&expected) {
        assert_eq!(
            &read_jsonl(work.path(&format!("{stage}.jsonl"))),
            expected,
            "stage {stage}: what the uninterrupted run wrote"
        );
    }
    assert_c_counts_each_record_once(&expected, &work);
}

/// `weir` with `args`, `lines` written to its stdin, then stdin closed; its stderr.
fn weir_fed(args: &[&str], lines: &[String]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(weir_e2e::weir_bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The epoch of the newest checkpoint in `dir` (0: none).
fn newest_epoch(dir: &Path) -> u64 {
    newest_checkpoint(dir).map_or(0, |name| {
        name.trim_start_matches("checkpoint-")
            .trim_end_matches(".weir")
            .parse()
            .unwrap()
    })
}

/// A graph of a bounded root `a` (a file of 60 records) and a live root `b` (stdin),
/// both feeding the co-process stage `c`: once `a` completed, its final checkpoint
/// stands for it, so `b` and `c` checkpoint on. Stopped with SIGTERM after more records
/// came on stdin, the graph ends with a last checkpoint every stage completed (no
/// "takes no further checkpoint"), and the second run resumes from it, past `a`'s
/// final section: `a` writes nothing again, `b` lost no line of stdin (which cannot be
/// read again), and `c` counts each of `a`'s and `b`'s records of a key once.
#[test]
fn a_stage_that_completed_leaves_the_others_checkpointing_and_stopping_in_step() {
    const KEYS: u64 = 6;
    let work = Workdir::new();
    let bounded: Vec<Value> = (0..60)
        .map(|i| json!({"key": format!("k{}", i % KEYS), "seq": i, "ts": 1_000_000 + 100 * i}))
        .collect();
    work.write_jsonl("x.jsonl", &bounded);
    let live = |range: std::ops::Range<u64>| -> Vec<String> {
        range
            .map(|i| {
                json!({"key": format!("k{}", i % KEYS), "seq": 1000 + i, "ts": 1_000_000 + 5_000 * i})
                    .to_string()
            })
            .collect()
    };
    let text = two_roots_graph(
        "bounded-and-live",
        [
            ("x", "type = \"file\"\npath = \"x.jsonl\""),
            ("y", "type = \"stdin\""),
        ],
    );
    let pipeline = work.write("graph.toml", &text);
    weir_fed(&["run", &pipeline, "-q", "--no-checkpoints"], &live(0..300));
    let expected: Vec<Vec<Value>> = ["a", "b"]
        .iter()
        .map(|s| read_jsonl(work.path(&format!("{s}.jsonl"))))
        .collect();
    for stage in ["a", "b", "c"] {
        std::fs::remove_file(work.path(&format!("{stage}.jsonl"))).unwrap();
    }

    let state = work.path("state");
    let state_dir = state.display().to_string();
    let args = [
        "run",
        &pipeline,
        "--state-dir",
        &state_dir,
        "--checkpoint-interval",
        "100ms",
    ];
    let mut child = std::process::Command::new(weir_e2e::weir_bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weir");
    let log = weir_e2e::StderrLog::capture(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let send = |stdin: &mut std::process::ChildStdin, lines: &[String]| {
        use std::io::Write as _;
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
        stdin.flush().unwrap();
    };
    send(&mut stdin, &live(0..100));
    let said = "completed: its final checkpoint ";
    weir_e2e::wait_for("a's final checkpoint", Duration::from_secs(60), || {
        log.text().contains(said)
    });
    let text = log.text();
    let after = &text[text.find(said).unwrap() + said.len()..];
    let a_final: u64 = after.split_whitespace().next().unwrap().parse().unwrap();
    // The log says so when the section goes to the writer: wait for the file.
    weir_e2e::wait_for("a's final checkpoint file", Duration::from_secs(60), || {
        newest_epoch(&state.join("a")) == a_final
    });
    send(&mut stdin, &live(100..200));
    let b_sent_all = || {
        read_jsonl_so_far(&work.path("b.jsonl"))
            .iter()
            .any(|r| r["seq"] == 1199)
    };
    weir_e2e::wait_for(
        "b to process what was sent",
        Duration::from_secs(60),
        b_sent_all,
    );
    weir_e2e::wait_for("b and c to checkpoint on", Duration::from_secs(60), || {
        newest_epoch(&state.join("c")) > a_final + 1
    });
    // SAFETY: kill(2) on the pid of a child that has not been waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    drop(stdin);
    let log = log.finish();
    assert!(status.success(), "{log}");
    assert!(!log.contains("no further checkpoint"), "{log}");
    let last = newest_epoch(&state.join("b"));
    assert_eq!(newest_epoch(&state.join("c")), last, "{log}");
    assert_eq!(newest_epoch(&state.join("a")), a_final, "{log}");

    let resumed = weir_fed(&args, &live(200..300));
    assert!(
        resumed.contains(&format!("resuming from checkpoint {last}")),
        "b and c resume from the stop's checkpoint, after a's final one ({a_final}): {resumed}"
    );
    for (stage, expected) in ["a", "b"].iter().zip(&expected) {
        assert_eq!(
            &read_jsonl(work.path(&format!("{stage}.jsonl"))),
            expected,
            "stage {stage}: what the uninterrupted run wrote"
        );
    }
    assert_c_counts_each_record_once(&expected, &work);
}

/// The JSON lines a sink wrote so far (none before it created its file).
fn read_jsonl_so_far(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .map(|text| weir_e2e::parse_jsonl(&text))
        .unwrap_or_default()
}

/// The text of a graph `name` of two roots `a` and `b` (the versioned counter v1, keyed by
/// `key`) over the sources `x` and `y` (`type` and location as given, records
/// `{"key", "seq", "ts"}` with `ts` in epoch ms), feeding the co-process stage `c` (the
/// same counter over both, by key); each stage writes `<stage>.jsonl`.
fn two_roots_graph(name: &str, sources: [(&str, &str); 2]) -> String {
    let v1 = component("versioned-udf-v1").display().to_string();
    let mut text = format!("name = \"{name}\"\n");
    for (source, location) in sources {
        text += &format!(
            "[[source]]\nname = \"{source}\"\n{location}\nkey = \"key\"\ntimestamp = \"ts\"\ntimestamp_format = \"epoch_ms\"\n\n"
        );
    }
    for (stage, from) in [("a", "x"), ("b", "y")] {
        text += &format!(
            "[[stage]]\nname = \"{stage}\"\nudf = {{ path = \"{v1}\" }}\n[[stage.input]]\nfrom = \"{from}\"\n\n"
        );
    }
    text += &format!("[[stage]]\nname = \"c\"\nudf = {{ path = \"{v1}\" }}\n");
    for from in ["a", "b"] {
        text += &format!("[[stage.input]]\nfrom = \"{from}\"\nkey = \"key\"\n");
    }
    for stage in ["a", "b", "c"] {
        text += &format!(
            "\n[[sink]]\nstage = \"{stage}\"\noutput = \"main\"\ntype = \"file\"\npath = \"{stage}.jsonl\"\n"
        );
    }
    text
}

/// Stage `c` of [`two_roots_graph`] counted each record `a` and `b` wrote (`expected`, the
/// uninterrupted run's) once per key: its counts of a key are 1, 2, ... up to that key's
/// records, in `c.jsonl` in `work`.
fn assert_c_counts_each_record_once(expected: &[Vec<Value>], work: &Workdir) {
    let mut of_key: HashMap<String, u64> = HashMap::new();
    for record in expected.iter().flatten() {
        *of_key
            .entry(record["key"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let mut counts: HashMap<String, Vec<u64>> = HashMap::new();
    for record in read_jsonl(work.path("c.jsonl")) {
        if let Some(count) = record.get("count") {
            let key = record["key"].as_str().unwrap().to_string();
            counts.entry(key).or_default().push(count.as_u64().unwrap());
        }
    }
    assert_eq!(counts.len(), of_key.len());
    for (key, got) in &counts {
        assert_eq!(
            *got,
            (1..=of_key[key]).collect::<Vec<_>>(),
            "stage c counts each of a's and b's records of key {key} once"
        );
    }
}
