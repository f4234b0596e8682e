//! Resolving the file's sections one by one: a source, the UDF, a sink, the checkpoint
//! and restart settings, sizes and durations.

use anyhow::{bail, Context as _};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_checkpoint::CheckpointSpec;
use weir_core::time::parse_duration_ms;
use weir_io::sink::kafka::KafkaTarget;
use weir_io::sink::postgres::PostgresTarget;
use weir_io::sink::upsert::UpsertSpec;
use weir_io::sink::SinkTarget;
use weir_io::source::kafka::{KafkaSourceSpec, Startup};
use weir_io::source::SourceLocation;

use crate::file::*;
use crate::spec::*;

pub(crate) fn checkpoint_spec(
    entry: Option<&CheckpointEntry>,
    name: &str,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<CheckpointSpec> {
    let dir = match entry.and_then(|e| e.dir.as_deref()) {
        Some(dir) => resolve(dir),
        None => resolve(".weir-state").join(name),
    };
    let interval = match entry.and_then(|e| e.interval.as_deref()) {
        Some(text) => checkpoint_interval(text).context("interval")?,
        None => weir_checkpoint::DEFAULT_INTERVAL,
    };
    Ok(CheckpointSpec {
        enabled: entry.and_then(|e| e.enabled).unwrap_or(true),
        dir,
        interval,
        kafka: None,
        aligned: None,
    })
}

/// The environment variable that picks the state backend of a pipeline whose file has
/// no `[state] backend` (`memory` or `disk`): how the test suites run on both backends.
pub const STATE_BACKEND_ENV: &str = "WEIR_STATE_BACKEND";
/// The environment variable that sets the disk backend's cache where the file does not.
pub const STATE_CACHE_ENV: &str = "WEIR_STATE_CACHE";

/// `[state]`: the backend (`memory`, the default, or `disk`) and the disk backend's
/// `cache`; where the file says nothing, [`STATE_BACKEND_ENV`] and [`STATE_CACHE_ENV`].
pub(crate) fn state_backend(entry: Option<&StateEntry>) -> anyhow::Result<StateBackend> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let backend = entry
        .and_then(|e| e.backend.clone())
        .or_else(|| from_env(STATE_BACKEND_ENV));
    let cache = entry
        .and_then(|e| e.cache.clone())
        .or_else(|| from_env(STATE_CACHE_ENV));
    match backend.as_deref().unwrap_or("memory") {
        "memory" => {
            if entry.is_some_and(|e| e.cache.is_some()) {
                bail!("cache is a setting of backend = \"disk\"; the memory backend keeps every key's state in memory");
            }
            Ok(StateBackend::Memory)
        }
        "disk" => {
            let cache_bytes = match cache {
                Some(text) => parse_size(&text).context("cache")?,
                None => DEFAULT_STATE_CACHE,
            };
            Ok(StateBackend::Disk { cache_bytes })
        }
        other => bail!("backend {other:?}: give \"memory\" (the default) or \"disk\""),
    }
}

pub(crate) fn checkpoint_interval(text: &str) -> anyhow::Result<Duration> {
    let ms = parse_duration_ms(text)?;
    anyhow::ensure!(
        ms > 0,
        "must be more than zero (to turn checkpoints off, set enabled = false)"
    );
    Ok(Duration::from_millis(ms as u64))
}

pub(crate) fn resolve_source(
    entry: &SourceEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<SourceSpec> {
    let kafka_fields = [
        ("brokers", entry.brokers.is_some()),
        ("topic", entry.topic.is_some() || entry.topics.is_some()),
        ("group", entry.group.is_some()),
        ("startup", entry.startup.is_some()),
        ("bounded", entry.bounded.is_some()),
        ("connect_timeout", entry.connect_timeout.is_some()),
        ("properties", entry.properties.is_some()),
        ("repartition", entry.repartition.is_some()),
    ];
    if entry.kind != SourceKind::Kafka {
        if let Some((field, _)) = kafka_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only kafka sources take it");
        }
    }
    let location = match (entry.kind, &entry.path) {
        (SourceKind::File, Some(path)) => SourceLocation::File(resolve(path)),
        (SourceKind::File, None) => bail!("path: a file source needs a path"),
        (SourceKind::Stdin, None) => SourceLocation::Stdin,
        (SourceKind::Stdin | SourceKind::Kafka, Some(_)) => {
            bail!("path: a {:?} source takes no path", entry.kind)
        }
        (SourceKind::Kafka, None) => SourceLocation::Kafka(kafka_source(entry)?),
    };
    let out_of_orderness_ms = match &entry.out_of_orderness {
        Some(text) => parse_duration_ms(text).context("out_of_orderness")?,
        None => 0,
    };
    let idle_timeout = match (&entry.idle_timeout, entry.kind) {
        (Some(text), _) => match parse_duration_ms(text).context("idle_timeout")? {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        },
        (None, SourceKind::Kafka) => Some(DEFAULT_KAFKA_IDLE_TIMEOUT),
        (None, _) => None,
    };
    let max_record_bytes = match &entry.max_record_bytes {
        Some(text) => parse_size(text).context("max_record_bytes")?,
        None => weir_io::source::DEFAULT_MAX_RECORD_BYTES,
    };
    anyhow::ensure!(
        max_record_bytes > 0,
        "max_record_bytes: must be more than zero (default 16MiB)"
    );
    // Check the field paths now, so a bad pointer is a start-up error, not a dead letter per line.
    weir_io::source::decode::RecordDecoder::new(
        &entry.key,
        &entry.timestamp,
        entry.timestamp_format,
    )
    .map_err(|e| anyhow::anyhow!("key/timestamp: {e}"))?;
    Ok(SourceSpec {
        name: entry.name.clone(),
        input: entry.input.clone().unwrap_or_else(|| entry.name.clone()),
        location,
        key: entry.key.clone(),
        timestamp: entry.timestamp.clone(),
        timestamp_format: entry.timestamp_format,
        out_of_orderness_ms,
        idle_timeout,
        max_record_bytes,
    })
}

/// How long a Kafka partition may be quiet before it stops holding the watermark back.
pub const DEFAULT_KAFKA_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn kafka_source(entry: &SourceEntry) -> anyhow::Result<KafkaSourceSpec> {
    let brokers = entry
        .brokers
        .clone()
        .filter(|b| !b.trim().is_empty())
        .context("brokers: a kafka source needs its bootstrap brokers, e.g. \"127.0.0.1:9092\"")?;
    let mut topics: Vec<String> = entry.topic.iter().cloned().collect();
    topics.extend(entry.topics.iter().flatten().cloned());
    anyhow::ensure!(
        !topics.is_empty() && topics.iter().all(|t| !t.trim().is_empty()),
        "topic: a kafka source needs a topic (or topics = [...])"
    );
    let connect_timeout = match &entry.connect_timeout {
        Some(text) => {
            Duration::from_millis(parse_duration_ms(text).context("connect_timeout")? as u64)
        }
        None => Duration::from_secs(30),
    };
    Ok(KafkaSourceSpec {
        brokers,
        topics,
        group: entry.group.clone().unwrap_or_default(),
        startup: entry.startup.unwrap_or(Startup::Committed),
        bounded: entry.bounded.unwrap_or(false),
        connect_timeout,
        properties: kafka_properties(entry.properties.as_ref())?,
        partitions: None,
        repartition: entry.repartition.unwrap_or(false),
        via: None,
    })
}

/// librdkafka properties from the pipeline file, as strings.
pub(crate) fn kafka_properties(
    properties: Option<&BTreeMap<String, toml::Value>>,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, value) in properties.into_iter().flatten() {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                value.to_string()
            }
            _ => bail!("properties: {name:?} must be a string, number or boolean"),
        };
        if name == "bootstrap.servers" {
            bail!("properties: set the brokers field, not \"bootstrap.servers\"");
        }
        out.push((name.clone(), text));
    }
    Ok(out)
}

pub(crate) fn restart_spec(entry: Option<&RestartEntry>) -> anyhow::Result<RestartSpec> {
    let mut spec = RestartSpec::default();
    if let Some(entry) = entry {
        if let Some(attempts) = entry.attempts {
            spec.attempts = attempts;
        }
        if let Some(delay) = &entry.delay {
            spec.delay = Duration::from_millis(parse_duration_ms(delay).context("delay")? as u64);
        }
    }
    Ok(spec)
}

pub(crate) fn resolve_udf(
    entry: &UdfEntry,
    resolve: &impl Fn(&str) -> PathBuf,
    pipeline: &Path,
) -> anyhow::Result<UdfSpec> {
    let path = resolve(&entry.path);
    let name = entry.name.clone().unwrap_or_else(|| {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.unwrap_or_else(|| default_name(pipeline))
            .replace('_', "-")
    });
    let memory_limit_bytes = match &entry.memory_limit {
        Some(text) => parse_size(text).context("memory_limit")?,
        None => DEFAULT_MEMORY_LIMIT,
    };
    anyhow::ensure!(
        memory_limit_bytes >= MIN_MEMORY_LIMIT,
        "memory_limit: {memory_limit_bytes} bytes is too little for any UDF: give at least 1MiB (default 64MiB)"
    );
    let max_emit_bytes = match &entry.max_emit_bytes {
        Some(text) => parse_size(text).context("max_emit_bytes")?,
        None => DEFAULT_MAX_EMIT_BYTES,
    };
    anyhow::ensure!(
        max_emit_bytes > 0,
        "max_emit_bytes: must be more than zero (default 64MiB)"
    );
    let call_timeout = match &entry.call_timeout {
        Some(text) => {
            Duration::from_millis(parse_duration_ms(text).context("call_timeout")? as u64)
        }
        None => DEFAULT_CALL_TIMEOUT,
    };
    anyhow::ensure!(
        !call_timeout.is_zero(),
        "call_timeout: must be more than zero"
    );
    let state_cache_bytes = match &entry.state_cache {
        Some(text) => parse_size(text).context("state_cache")?,
        None => memory_limit_bytes / 8,
    };
    let config = entry
        .config
        .iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                    v.to_string()
                }
                other => serde_json::to_string(other).unwrap_or_default(),
            };
            (k.clone(), text)
        })
        .collect();
    Ok(UdfSpec {
        name,
        path,
        config,
        memory_limit_bytes,
        call_timeout,
        max_batch: entry.max_batch.unwrap_or(DEFAULT_MAX_BATCH),
        state_cache_bytes,
        max_emit_bytes,
        on_error: OnUdfError::parse(entry)?,
        config_from_command_line: Vec::new(),
        dev: match &entry.dev {
            Some(dev) => {
                anyhow::ensure!(!dev.watch.is_empty(), "dev.watch: list at least one path");
                Some(DevSpec {
                    build: dev.build.clone(),
                    dir: resolve("."),
                    watch: dev.watch.iter().map(|p| resolve(p)).collect(),
                    test: dev.test.clone(),
                })
            }
            None => None,
        },
    })
}

pub(crate) fn upsert_spec(
    entry: &SinkEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<Option<UpsertSpec>> {
    match entry.mode.unwrap_or_default() {
        SinkMode::Append => {
            if entry.key.is_some() || entry.changelog.is_some() {
                bail!("key, changelog: only an upsert sink (mode = \"upsert\") takes them");
            }
            Ok(None)
        }
        SinkMode::Upsert => {
            if let Some(fields) = &entry.key {
                anyhow::ensure!(!fields.is_empty(), "key: list at least one field");
                let paths: Vec<&str> = fields.iter().map(String::as_str).collect();
                weir_io::source::extract::FieldPaths::new(&paths)
                    .map_err(|e| anyhow::anyhow!("key: {e}"))?;
            }
            Ok(Some(UpsertSpec {
                key_fields: entry.key.clone(),
                changelog: entry.changelog.as_deref().map(resolve),
            }))
        }
    }
}

pub(crate) fn sink_target(
    entry: &SinkEntry,
    resolve: &impl Fn(&str) -> PathBuf,
) -> anyhow::Result<SinkTarget> {
    let postgres_fields = [
        ("url", entry.url.is_some()),
        ("table", entry.table.is_some()),
        ("primary_key", entry.primary_key.is_some()),
        ("columns", entry.columns.is_some()),
        ("create_table", entry.create_table.is_some()),
    ];
    if entry.kind != SinkKind::Postgres {
        if let Some((field, _)) = postgres_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only postgres sinks take it");
        }
    }
    let kafka_fields = [
        ("brokers", entry.brokers.is_some()),
        ("topic", entry.topic.is_some()),
        ("properties", entry.properties.is_some()),
        ("transactional", entry.transactional.is_some()),
    ];
    if entry.kind != SinkKind::Kafka {
        if let Some((field, _)) = kafka_fields.iter().find(|(_, set)| *set) {
            bail!("{field}: only kafka sinks take it");
        }
    }
    Ok(match (entry.kind, entry.path.as_deref()) {
        (SinkKind::File, Some(path)) => SinkTarget::File(resolve(path)),
        (SinkKind::File, None) => bail!("path: a file sink needs a path"),
        (SinkKind::Stdout, None) => SinkTarget::Stdout,
        (SinkKind::Discard, None) => SinkTarget::Discard,
        (SinkKind::Postgres, None) => SinkTarget::Postgres(postgres_target(entry)?),
        (SinkKind::Kafka, None) => SinkTarget::Kafka(kafka_target(entry)?),
        (_, Some(_)) => bail!("path: only file sinks take a path"),
    })
}

pub(crate) fn postgres_target(entry: &SinkEntry) -> anyhow::Result<PostgresTarget> {
    if entry.mode.is_some() || entry.key.is_some() || entry.changelog.is_some() {
        bail!("mode, key, changelog: a postgres sink always upserts, by its primary_key");
    }
    let url = entry
        .url
        .clone()
        .context("url: a postgres sink needs a connection string")?;
    let table = entry
        .table
        .clone()
        .context("table: a postgres sink needs a table")?;
    let columns = entry.columns.clone().unwrap_or_default();
    anyhow::ensure!(!columns.is_empty(), "columns: list the table's columns");
    let primary_key = entry.primary_key.clone().unwrap_or_default();
    anyhow::ensure!(
        !primary_key.is_empty(),
        "primary_key: name at least one column"
    );
    for pk in &primary_key {
        anyhow::ensure!(
            columns.iter().any(|c| &c.name == pk),
            "primary_key: {pk:?} is not one of the columns"
        );
    }
    let create_table = entry.create_table.unwrap_or(false);
    let columns: Vec<(String, String, Option<String>)> = columns
        .into_iter()
        .map(|c| {
            let field = c.field.unwrap_or_else(|| c.name.clone());
            (c.name, field, c.sql_type)
        })
        .collect();
    if create_table {
        if let Some((name, ..)) = columns.iter().find(|(_, _, ty)| ty.is_none()) {
            bail!("columns: {name:?} needs a type to create the table");
        }
    }
    let fields: Vec<&str> = columns.iter().map(|(_, f, _)| f.as_str()).collect();
    weir_io::source::extract::FieldPaths::new(&fields)
        .map_err(|e| anyhow::anyhow!("columns: {e}"))?;
    Ok(PostgresTarget {
        url,
        table,
        primary_key,
        columns,
        create_table,
    })
}

pub(crate) fn kafka_target(entry: &SinkEntry) -> anyhow::Result<KafkaTarget> {
    if entry.mode.unwrap_or_default() != SinkMode::Append
        || entry.key.is_some()
        || entry.changelog.is_some()
    {
        bail!("mode, key, changelog: a kafka sink appends every record, keyed by its key");
    }
    let brokers = entry
        .brokers
        .clone()
        .filter(|b| !b.trim().is_empty())
        .context("brokers: a kafka sink needs its bootstrap brokers, e.g. \"127.0.0.1:9092\"")?;
    let topic = entry
        .topic
        .clone()
        .filter(|t| !t.trim().is_empty())
        .context("topic: a kafka sink needs a topic")?;
    let properties = kafka_properties(entry.properties.as_ref())?;
    Ok(KafkaTarget {
        brokers,
        topic,
        properties,
        transactional: entry.transactional.unwrap_or(false),
    })
}

pub(crate) fn default_name(pipeline: &Path) -> String {
    let stem = pipeline
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if stem == "pipeline" {
        if let Some(dir) = pipeline.canonicalize().ok().and_then(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .map(|d| d.to_string_lossy().into_owned())
        }) {
            return dir;
        }
    }
    stem
}

/// Parses a size such as `64MiB`, `512KiB`, `1GiB`, `100MB` or a byte count.
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| anyhow::anyhow!("{text:?} is not a size like 64MiB"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => bail!("{text:?} is not a size like 64MiB (units: B, KiB, MiB, GiB, KB, MB, GB)"),
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| anyhow::anyhow!("size {text:?} is too large"))
}
