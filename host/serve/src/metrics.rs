//! `/metrics`: every pipeline's live figures in Prometheus' text format.

use crate::deployment::Deployment;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Label values escaped as the text format wants them.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `/metrics` answer: every figure of each stage of each of `pipelines` in
/// Prometheus' text format, labelled with the pipeline's name and the stage's (a `[udf]`
/// pipeline's one stage is named as the pipeline), and the source, output or timer
/// domain where a figure is per one.
pub fn render(pipelines: &BTreeMap<String, Deployment>) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let all: Vec<(String, weir_run::LiveStatus, Option<u32>)> = pipelines
        .iter()
        .flat_map(|(n, d)| {
            d.stages.iter().map(move |stage| {
                (
                    format!("pipeline=\"{}\",stage=\"{}\"", label(n), label(&stage.name)),
                    stage.control.status(),
                    stage.active_version(),
                )
            })
        })
        .collect();
    let per = |f: &dyn Fn(&weir_run::LiveStatus) -> f64| -> Vec<(String, f64)> {
        all.iter().map(|(n, s, _)| (n.clone(), f(s))).collect()
    };
    family(
        "weir_records_processed_total",
        "counter",
        "Records delivered to the UDF.",
        per(&|s| s.processed as f64),
    );
    family(
        "weir_records_per_second",
        "gauge",
        "Records processed per second, over the last seconds.",
        per(&|s| s.records_per_second),
    );
    family(
        "weir_dead_letters_total",
        "counter",
        "Records refused into the dead-letter output.",
        per(&|s| s.dead_letters as f64),
    );
    family(
        "weir_dead_letters_by_cause_total",
        "counter",
        "Records and timers sent to the dead-letter output by the pipeline's present run, by cause.",
        all.iter()
            .flat_map(|(n, s, _)| {
                let c = &s.dead_letter_causes;
                [
                    ("undecodable", c.undecodable),
                    ("rejected", c.rejected),
                    ("failed", c.failed),
                    ("unreadable_state", c.unreadable_state),
                ]
                .map(|(cause, count)| (format!("{n},cause=\"{cause}\""), count as f64))
            })
            .collect(),
    );
    family(
        "weir_late_records_total",
        "counter",
        "Records at or behind the watermark when they arrived.",
        per(&|s| s.late as f64),
    );
    family(
        "weir_watermark_lag_milliseconds",
        "gauge",
        "Wall clock minus the pipeline watermark.",
        all.iter()
            .filter_map(|(n, s, _)| Some((n.clone(), s.watermark_lag_ms? as f64)))
            .collect(),
    );
    family(
        "weir_shard_records_processed_total",
        "counter",
        "Records a keyed shard's UDF processed, by shard.",
        all.iter()
            .flat_map(|(n, s, _)| {
                s.shards.iter().enumerate().map(move |(shard, status)| {
                    (format!("{n},shard=\"{shard}\""), status.processed as f64)
                })
            })
            .collect(),
    );
    family(
        "weir_keys",
        "gauge",
        "Keys with state or timers.",
        per(&|s| s.keys as f64),
    );
    family(
        "weir_state_bytes",
        "gauge",
        "Bytes of keyed state.",
        per(&|s| s.state_bytes as f64),
    );
    let store = |figure: &dyn Fn(&weir_core::state::SpillFigures) -> f64| -> Vec<(String, f64)> {
        all.iter()
            .filter_map(|(n, s, _)| Some((n.clone(), figure(s.state_store.as_ref()?))))
            .collect()
    };
    family(
        "weir_state_store_disk_bytes",
        "gauge",
        "Bytes the disk state backend's stores take on disk.",
        store(&|f| f.disk_bytes as f64),
    );
    family(
        "weir_state_store_memory_bytes",
        "gauge",
        "Bytes the disk state backend keeps in memory: key entries in its cache, and the stores' block caches and write buffers.",
        store(&|f| (f.resident_bytes as u64 + f.store_memory_bytes) as f64),
    );
    family(
        "weir_state_store_keys_on_disk",
        "gauge",
        "Keys whose state is in the disk state backend's store only.",
        store(&|f| f.keys_on_disk() as f64),
    );
    family(
        "weir_state_store_cache_hit_ratio",
        "gauge",
        "Share of the keys named by records that the disk state backend had in memory.",
        store(&|f| f.hit_ratio()),
    );
    family(
        "weir_timers_pending",
        "gauge",
        "Pending timers, by domain.",
        all.iter()
            .flat_map(|(n, s, _)| {
                [
                    (format!("{n},domain=\"event_time\""), s.event_timers as f64),
                    (
                        format!("{n},domain=\"processing_time\""),
                        s.processing_timers as f64,
                    ),
                ]
            })
            .collect(),
    );
    family(
        "weir_udf_errors_total",
        "counter",
        "Failed UDF calls the run survived: rolled a new version back, dead-lettered or retried.",
        per(&|s| s.udf_errors as f64),
    );
    family(
        "weir_udf_retries_total",
        "counter",
        "UDF calls made again after a failure ([udf] on_error = \"retry\").",
        per(&|s| s.udf_retries as f64),
    );
    family(
        "weir_rejected_total",
        "counter",
        "Records and timers the UDF rejected to the dead letters.",
        per(&|s| s.rejected as f64),
    );
    family(
        "weir_restarts_total",
        "counter",
        "Restarts after a failure ([restart]).",
        per(&|s| s.restarts as f64),
    );
    family(
        "weir_checkpoints_total",
        "counter",
        "Checkpoints taken.",
        per(&|s| s.checkpoints as f64),
    );
    family(
        "weir_source_records_read_total",
        "counter",
        "Records read, by source.",
        all.iter()
            .flat_map(|(n, s, _)| {
                s.sources.iter().map(move |(source, read)| {
                    (format!("{n},source=\"{}\"", label(source)), *read as f64)
                })
            })
            .collect(),
    );
    family(
        "weir_output_records_emitted_total",
        "counter",
        "Records emitted, by output.",
        all.iter()
            .flat_map(|(n, s, _)| {
                s.outputs.iter().map(move |(output, emitted)| {
                    (format!("{n},output=\"{}\"", label(output)), *emitted as f64)
                })
            })
            .collect(),
    );
    family(
        "weir_udf_version",
        "gauge",
        "The UDF version running (1), with its hash.",
        all.iter()
            .map(|(n, s, v)| {
                (
                    format!(
                        "{n},version=\"{}\",sha256=\"{}\"",
                        v.map(|v| v.to_string()).unwrap_or_default(),
                        s.udf_sha256
                    ),
                    1.0,
                )
            })
            .collect(),
    );
    out
}
