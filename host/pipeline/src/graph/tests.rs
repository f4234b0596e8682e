//! Graphs of stages: what a file of `[[stage]]`s resolves to, and every mistake in one,
//! named.

use super::*;

const SOURCE: &str = r#"
name = "ads"

[[source]]
name = "clicks"
type = "file"
path = "clicks.jsonl"
key = "ad_id"
timestamp = "ts"
timestamp_format = "epoch_ms"
"#;

const TWO_STAGES: &str = r#"
[[stage]]
name = "per-ad"
udf = { path = "count.wasm" }
parallelism = 2
[[stage.input]]
from = "clicks"

[[stage]]
name = "per-campaign"
udf = { path = "sum.wasm", config = { top = 3 } }
[[stage.input]]
from = "per-ad"
key = "campaign_id"

[[sink]]
stage = "per-ad"
output = "main"
type = "file"
path = "per-ad.jsonl"

[[sink]]
stage = "per-campaign"
output = "main"
type = "stdout"

[checkpoint]
enabled = false
"#;

fn parse(text: &str) -> anyhow::Result<StageGraph> {
    StageGraph::parse(
        text,
        Path::new("/p/demo/pipeline.toml"),
        &Overrides::default(),
    )
}

fn error(text: &str) -> String {
    format!("{:#}", parse(text).unwrap_err())
}

#[test]
fn two_stages_resolve_into_two_runs_joined_by_an_exchange() {
    let graph = parse(&format!("{SOURCE}{TWO_STAGES}")).unwrap();
    assert_eq!(graph.name, "ads");
    let [per_ad, per_campaign] = &graph.stages[..] else {
        panic!("two stages: {graph:?}");
    };
    assert_eq!(per_ad.name, "per-ad");
    assert_eq!(per_ad.spec.name, "ads.per-ad");
    assert_eq!(per_ad.spec.parallelism, 2);
    assert_eq!(per_campaign.spec.parallelism, 1, "the pipeline's default");
    assert_eq!(per_ad.spec.sources.len(), 1);
    assert_eq!(per_ad.spec.sources[0].name, "clicks");
    assert_eq!(per_ad.spec.udf.path, PathBuf::from("/p/demo/count.wasm"));

    // Stage 1's main output goes to its file and to stage 2, through one exchange.
    let sink = &per_ad.spec.sinks[0];
    assert_eq!(sink.target, SinkTarget::File("/p/demo/per-ad.jsonl".into()));
    let [exchange] = &sink.feeds[..] else {
        panic!("one exchange: {sink:?}");
    };
    let input = &per_campaign.spec.sources[0];
    assert_eq!(input.location, SourceLocation::Stage(exchange.clone()));
    assert_eq!(
        exchange.name(),
        "stage per-ad (output main) to stage per-campaign"
    );
    assert_eq!(
        (input.name.as_str(), input.input.as_str()),
        ("per-ad", "per-ad")
    );
    assert_eq!(input.key, "campaign_id");
    assert_eq!(
        input.timestamp, "@timestamp",
        "the time the upstream gave each record"
    );
    assert_eq!(
        per_campaign.spec.udf.config,
        vec![("top".into(), "3".into())]
    );
    assert_eq!(per_campaign.spec.sinks[0].target, SinkTarget::Stdout);
    assert!(per_campaign.spec.sinks[0].feeds.is_empty());

    // Each stage has its own dead letters and state directory.
    assert_eq!(
        per_ad.spec.dead_letter,
        PathBuf::from("/p/demo/pipeline.dead-letter.per-ad.jsonl")
    );
    assert!(per_campaign
        .spec
        .checkpoint
        .dir
        .ends_with("ads/per-campaign"));
}

#[test]
fn the_stages_of_a_graph_checkpoint_in_step() {
    let text = format!("{SOURCE}{TWO_STAGES}").replace("enabled = false", "enabled = true");
    let graph = parse(&text).unwrap();
    let aligned: Vec<_> = graph
        .stages
        .iter()
        .map(|s| s.spec.checkpoint.aligned.clone().expect("in step"))
        .collect();
    assert_eq!(aligned[0].stage, 0);
    assert_eq!(aligned[1].stage, 1);
    assert!(std::sync::Arc::ptr_eq(
        &aligned[0].epochs,
        &aligned[1].epochs
    ));
    assert_eq!(aligned[0].epochs.stages(), ["per-ad", "per-campaign"]);

    let off = parse(&format!("{SOURCE}{TWO_STAGES}")).unwrap();
    assert!(off
        .stages
        .iter()
        .all(|s| s.spec.checkpoint.aligned.is_none()));
}

#[test]
fn an_output_only_stages_read_goes_nowhere_else() {
    let text = format!("{SOURCE}{TWO_STAGES}").replace(
        "[[sink]]\nstage = \"per-ad\"\noutput = \"main\"\ntype = \"file\"\npath = \"per-ad.jsonl\"\n",
        "",
    );
    let graph = parse(&text).unwrap();
    let sink = &graph.stages[0].spec.sinks[0];
    assert_eq!(
        (sink.output.as_str(), &sink.target),
        ("main", &SinkTarget::Discard)
    );
    assert_eq!(sink.feeds.len(), 1);
}

#[test]
fn stages_run_after_the_stages_they_read_whatever_the_file_order() {
    let text = format!("{SOURCE}{TWO_STAGES}");
    let (first, second) = text.split_at(text.find("[[stage]]\nname = \"per-campaign\"").unwrap());
    let sinks = second.find("[[sink]]").unwrap();
    let swapped = format!(
        "{SOURCE}{}{}{}",
        &second[..sinks],
        &first[SOURCE.len()..],
        &second[sinks..]
    );
    let graph = parse(&swapped).unwrap();
    let names: Vec<&str> = graph.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["per-ad", "per-campaign"]);
}

#[test]
fn a_single_udf_file_is_a_graph_of_one_stage() {
    let graph = parse(&format!(
        "{SOURCE}[udf]\npath = \"u.wasm\"\n[[sink]]\noutput = \"main\"\ntype = \"stdout\"\n"
    ))
    .unwrap();
    assert!(graph.is_single());
    assert_eq!(graph.stages[0].spec.name, "ads");
    assert_eq!(
        graph.stages[0].spec.dead_letter,
        PathBuf::from("/p/demo/pipeline.dead-letter.jsonl")
    );
}

#[test]
fn every_mistake_in_a_graph_is_named() {
    let both = format!("{SOURCE}{TWO_STAGES}[udf]\npath = \"u.wasm\"\n");
    assert!(error(&both).contains("either [udf]"), "{}", error(&both));

    let cases = [
        (
            ("from = \"per-ad\"", "from = \"per-add\""),
            "[[stage]] \"per-campaign\" reads \"per-add\", which is neither a source ([\"clicks\"]) nor a stage ([\"per-ad\", \"per-campaign\"])",
        ),
        (
            ("key = \"campaign_id\"\n", ""),
            "[[stage]] \"per-campaign\": [[stage.input]] #1 (from \"per-ad\"): an input from stage \"per-ad\" needs a key",
        ),
        (
            (
                "from = \"clicks\"",
                "from = \"clicks\"\n[[stage.input]]\nfrom = \"per-campaign\"\nkey = \"@key\"",
            ),
            "the stages form a cycle: per-campaign -> per-ad -> per-campaign",
        ),
        (
            ("name = \"per-campaign\"", "name = \"per-ad\""),
            "two stages are named \"per-ad\"",
        ),
        (
            ("name = \"per-campaign\"", "name = \"clicks\""),
            "\"clicks\" names both a stage and a source",
        ),
        (
            ("stage = \"per-campaign\"", "stage = \"top\""),
            "[[sink]] for output \"main\": there is no stage \"top\"",
        ),
        (
            ("stage = \"per-campaign\"\n", ""),
            "[[sink]] for output \"main\": name the stage whose output it takes",
        ),
        (
            ("parallelism = 2", "parallelism = 0"),
            "[[stage]] \"per-ad\": parallelism: 0 shards",
        ),
    ];
    for ((from, to), expected) in cases {
        let text = format!("{SOURCE}{TWO_STAGES}").replacen(from, to, 1);
        let message = error(&text);
        assert!(message.contains(expected), "{from} -> {to}:\n{message}");
    }

    // A stage nothing reads and no sink takes.
    let text = format!("{SOURCE}{TWO_STAGES}").replace("type = \"stdout\"", "type = \"stdout\"\n[[stage]]\nname = \"lost\"\nudf = { path = \"u.wasm\" }\n[[stage.input]]\nfrom = \"per-ad\"\nkey = \"@key\"\n");
    assert!(
        error(&text).contains("[[stage]] \"lost\": nothing takes its output"),
        "{}",
        error(&text)
    );
    // A source nobody reads, and one read twice.
    let extra = SOURCE
        .replace("name = \"ads\"\n", "")
        .replace("\"clicks\"", "\"views\"");
    let text = format!("{SOURCE}{extra}{TWO_STAGES}");
    assert!(
        error(&text).contains("source \"views\" is read by no stage"),
        "{}",
        error(&text)
    );
    let text = format!("{SOURCE}{TWO_STAGES}")
        .replace(
            "from = \"per-ad\"\n",
            "from = \"per-ad\"\nkey = \"@key\"\n[[stage.input]]\nfrom = \"clicks\"\n",
        )
        .replacen("key = \"@key\"\n", "", 1);
    assert!(
        error(&text)
            .contains("source \"clicks\" is read by stages \"per-ad\" and \"per-campaign\""),
        "{}",
        error(&text)
    );
    // Flags that name no stage.
    let overrides = Overrides {
        udf: Some("x.wasm".into()),
        ..Overrides::default()
    };
    let message = format!(
        "{:#}",
        StageGraph::parse(
            &format!("{SOURCE}{TWO_STAGES}"),
            Path::new("/p/pipeline.toml"),
            &overrides
        )
        .unwrap_err()
    );
    assert!(message.contains("--udf names no stage"), "{message}");
    // The one-stage loader points at `weir run`.
    let message = format!(
        "{:#}",
        PipelineSpec::parse(
            &format!("{SOURCE}{TWO_STAGES}"),
            Path::new("/p/pipeline.toml"),
            &Overrides::default()
        )
        .unwrap_err()
    );
    assert!(
        message
            .contains("this pipeline has 2 stages ([[stage]]): only `weir run`, `weir dev` and `weir serve` run"),
        "{message}"
    );
}
