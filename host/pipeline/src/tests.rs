//! The pipeline file's resolution, case by case.

use crate::*;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_io::sink::kafka::KafkaTarget;
use weir_io::sink::upsert::UpsertSpec;

const GOOD: &str = r#"
name = "ad-clicks"

[[source]]
name = "clicks"
type = "file"
path = "clicks.jsonl"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "../udf.wasm"
memory_limit = "32MiB"
[udf.config]
window = "5m"
limit = 3

[[sink]]
output = "main"
type = "file"
path = "out/clicks.jsonl"
"#;

fn parse(text: &str, overrides: &Overrides) -> anyhow::Result<PipelineSpec> {
    PipelineSpec::parse(text, Path::new("/p/demo/pipeline.toml"), overrides)
}

#[test]
fn resolves_paths_and_defaults() {
    let spec = parse(GOOD, &Overrides::default()).unwrap();
    assert_eq!(spec.name, "ad-clicks");
    assert_eq!(
        spec.sources[0].location,
        SourceLocation::File("/p/demo/clicks.jsonl".into())
    );
    assert_eq!(spec.sources[0].input, "clicks");
    assert_eq!(spec.sources[0].out_of_orderness_ms, 5_000);
    assert_eq!(spec.udf.path, PathBuf::from("/p/demo/../udf.wasm"));
    assert_eq!(spec.udf.name, "udf");
    assert_eq!(spec.udf.memory_limit_bytes, 32 << 20);
    assert_eq!(spec.udf.call_timeout, DEFAULT_CALL_TIMEOUT);
    assert_eq!(
        spec.udf.config,
        vec![("limit".into(), "3".into()), ("window".into(), "5m".into())]
    );
    assert_eq!(
        spec.sinks[0].target,
        SinkTarget::File("/p/demo/out/clicks.jsonl".into())
    );
    assert_eq!(
        spec.dead_letter,
        PathBuf::from("/p/demo/pipeline.dead-letter.jsonl")
    );
}

#[test]
fn dev_section_resolves_against_the_pipeline_file() {
    let text = GOOD.replace(
            "[udf.config]",
            "[udf.dev]\nbuild = \"./build.sh\"\nwatch = [\"app.py\", \"lib\"]\ntest = \"python3 -m unittest\"\n\n[udf.config]",
        );
    let spec = parse(&text, &Overrides::default()).unwrap();
    assert_eq!(
        spec.udf.dev,
        Some(DevSpec {
            build: "./build.sh".into(),
            dir: "/p/demo/.".into(),
            watch: vec!["/p/demo/app.py".into(), "/p/demo/lib".into()],
            test: Some("python3 -m unittest".into()),
        })
    );
    let empty = GOOD.replace(
        "[udf.config]",
        "[udf.dev]\nbuild = \"make\"\nwatch = []\n\n[udf.config]",
    );
    let error = parse(&empty, &Overrides::default()).unwrap_err();
    assert!(format!("{error:#}").contains("dev.watch"), "{error:#}");
}

#[test]
fn overrides() {
    let overrides = Overrides {
        inputs: vec![("clicks".into(), "-".into())],
        outputs: vec![
            ("main".into(), "o.jsonl".into()),
            ("late".into(), "-".into()),
        ],
        config: vec![("window".into(), "1m".into())],
        ..Overrides::default()
    };
    let spec = parse(GOOD, &overrides).unwrap();
    assert_eq!(spec.sources[0].location, SourceLocation::Stdin);
    assert_eq!(spec.sinks[0].target, SinkTarget::File("o.jsonl".into()));
    assert_eq!(spec.sinks[1].target, SinkTarget::Stdout);
    assert!(spec.udf.config.contains(&("window".into(), "1m".into())));

    let bad = Overrides {
        inputs: vec![("clickz".into(), "x".into())],
        ..Overrides::default()
    };
    let err = format!("{:#}", parse(GOOD, &bad).unwrap_err());
    assert!(
        err.contains("no source \"clickz\"") && err.contains("clicks"),
        "{err}"
    );
}

#[test]
fn on_error_defaults_to_fail_and_retry_takes_its_settings() {
    let spec = parse(GOOD, &Overrides::default()).unwrap();
    assert_eq!(spec.udf.on_error, OnUdfError::Fail);
    let retry = GOOD.replace(
            "memory_limit",
            "on_error = \"retry\"\nretries = 4\nretry_backoff = \"250ms\"\nafter_retries = \"dead-letter\"\nmemory_limit",
        );
    let policy = parse(&retry, &Overrides::default()).unwrap().udf.on_error;
    assert_eq!(
        policy,
        OnUdfError::Retry {
            retries: 4,
            backoff: Duration::from_millis(250),
            then: AfterRetries::DeadLetter
        }
    );
    assert_eq!(policy.backoff(1), Duration::from_millis(250));
    assert_eq!(policy.backoff(3), Duration::from_millis(1000), "doubles");
    assert_eq!(policy.backoff(40), MAX_RETRY_BACKOFF, "at most");
    let defaults = GOOD.replace("memory_limit", "on_error = \"retry\"\nmemory_limit");
    assert_eq!(
        parse(&defaults, &Overrides::default())
            .unwrap()
            .udf
            .on_error,
        OnUdfError::Retry {
            retries: DEFAULT_RETRIES,
            backoff: DEFAULT_RETRY_BACKOFF,
            then: AfterRetries::Fail
        }
    );
}

#[test]
fn mistakes_name_the_field() {
    let cases = [
        (
            GOOD.replace("out_of_orderness", "out_of_order"),
            "unknown field `out_of_order`",
        ),
        (GOOD.replace("\"5s\"", "\"5 parsecs\""), "out_of_orderness"),
        (
            GOOD.replace("\"datetime\"", "\"rfc822\""),
            "unknown variant `rfc822`",
        ),
        (GOOD.replace("32MiB", "lots"), "memory_limit"),
        (
            GOOD.replace("\"32MiB\"", "\"0\""),
            "memory_limit: 0 bytes is too little",
        ),
        (
            GOOD.replace("memory_limit", "max_emit_bytes = \"0\"\nmemory_limit"),
            "max_emit_bytes: must be more than zero",
        ),
        (
            GOOD.replace("memory_limit", "on_error = \"skip\"\nmemory_limit"),
            "on_error: \"skip\" is not a policy: use \"fail\", \"dead-letter\" or \"retry\"",
        ),
        (
            GOOD.replace("memory_limit", "retries = 5\nmemory_limit"),
            "apply only with on_error = \"retry\"",
        ),
        (
            GOOD.replace(
                "memory_limit",
                "on_error = \"retry\"\nafter_retries = \"ignore\"\nmemory_limit",
            ),
            "after_retries: \"ignore\" is not a policy",
        ),
        (
            GOOD.replace("name = \"ad-clicks\"", "name = \"../../escaped\""),
            "name: the name \"../../escaped\" holds '/'",
        ),
        (
            GOOD.replace("name = \"ad-clicks\"", "name = \"..\""),
            "starts with \".\"",
        ),
        (
            GOOD.replace("path = \"clicks.jsonl\"\n", ""),
            "a file source needs a path",
        ),
        (
            GOOD.replace("name = \"ad-clicks\"", "nme = \"ad-clicks\""),
            "unknown field `nme`",
        ),
        (
            GOOD.replace("memory_limit", "memory_limt"),
            "unknown field `memory_limt`",
        ),
        (
            GOOD.replace("key = \"ad_id\"", "key = \"/a//b\""),
            "empty segment",
        ),
        (
            GOOD.replace(
                "type = \"file\"\npath = \"out",
                "type = \"stdout\"\npath = \"out",
            ),
            "only file sinks take a path",
        ),
    ];
    for (text, expected) in cases {
        let err = format!("{:#}", parse(&text, &Overrides::default()).unwrap_err());
        assert!(err.contains(expected), "expected {expected:?} in: {err}");
    }
}

#[test]
fn upsert_sinks() {
    let upsert = GOOD.replace(
            "path = \"out/clicks.jsonl\"",
            "path = \"out/clicks.jsonl\"\nmode = \"upsert\"\nkey = [\"ad_id\"]\nchangelog = \"changes.jsonl\"",
        );
    let spec = parse(&upsert, &Overrides::default()).unwrap();
    let expected = UpsertSpec {
        key_fields: Some(vec!["ad_id".into()]),
        changelog: Some("/p/demo/changes.jsonl".into()),
    };
    assert_eq!(spec.sinks[0].upsert, Some(expected));
    let append_with_key = GOOD.replace(
        "path = \"out/clicks.jsonl\"",
        "path = \"out/clicks.jsonl\"\nkey = [\"ad_id\"]",
    );
    let err = format!(
        "{:#}",
        parse(&append_with_key, &Overrides::default()).unwrap_err()
    );
    assert!(err.contains("only an upsert sink"), "{err}");
}

#[test]
fn kafka_sinks() {
    let sink = |lines: &str| {
        GOOD.replace(
            "type = \"file\"\npath = \"out/clicks.jsonl\"",
            &format!("type = \"kafka\"\n{lines}"),
        )
    };
    let spec = parse(
            &sink("brokers = \"b:9092\"\ntopic = \"clicks-out\"\nproperties = { \"linger.ms\" = \"5\", \"batch.num.messages\" = 100 }"),
            &Overrides::default(),
        )
        .unwrap();
    assert_eq!(
        spec.sinks[0].target,
        SinkTarget::Kafka(KafkaTarget {
            brokers: "b:9092".into(),
            topic: "clicks-out".into(),
            properties: vec![
                ("batch.num.messages".into(), "100".into()),
                ("linger.ms".into(), "5".into())
            ],
            transactional: false,
        })
    );
    assert_eq!(spec.sinks[0].upsert, None);
    let cases = [
        (sink("topic = \"t\""), "brokers: a kafka sink needs"),
        (
            sink("brokers = \"b:9092\""),
            "topic: a kafka sink needs a topic",
        ),
        (
            sink("brokers = \"b:9092\"\ntopic = \"\""),
            "topic: a kafka sink needs a topic",
        ),
        (
            sink("brokers = \"b\"\ntopic = \"t\"\nmode = \"upsert\""),
            "mode, key, changelog: a kafka sink appends",
        ),
        (
            sink("brokers = \"b\"\ntopic = \"t\"\nproperties = { \"linger.ms\" = [5] }"),
            "properties: \"linger.ms\" must be a string",
        ),
        (
            sink("brokers = \"b\"\ntopic = \"t\"\nproperties = { \"bootstrap.servers\" = \"x\" }"),
            "set the brokers field",
        ),
        (
            sink("brokers = \"b\"\ntopic = \"t\"\npath = \"x\""),
            "only file sinks take a path",
        ),
        (
            GOOD.replace("path = \"out/clicks.jsonl\"", "path = \"o\"\ntopic = \"t\""),
            "topic: only kafka sinks take it",
        ),
        (
            GOOD.replace(
                "path = \"out/clicks.jsonl\"",
                "path = \"o\"\nbrokers = \"b\"",
            ),
            "brokers: only kafka sinks take it",
        ),
        (
            sink("brokers = \"b\"\ntopic = \"t\"\ntable = \"x\""),
            "table: only postgres sinks take it",
        ),
    ];
    for (text, expected) in cases {
        let err = format!("{:#}", parse(&text, &Overrides::default()).unwrap_err());
        assert!(err.contains(expected), "expected {expected:?} in: {err}");
    }
}

#[test]
fn sizes() {
    assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
    assert_eq!(parse_size("1000").unwrap(), 1000);
    assert_eq!(parse_size("2 GB").unwrap(), 2_000_000_000);
    assert!(parse_size("MiB").is_err());
    assert!(parse_size("3 parsecs").is_err());
}
