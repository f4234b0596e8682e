//! Running a pipeline of several keyed stages: every stage is a run of its own (its
//! sources, its `KeyedStage` and its sinks), on a thread of its own, all at once; the
//! stages hand each other records and watermarks through the exchanges of `weir-io`, so
//! a downstream stage works while its upstream reads on.
//!
//! When a stage's run returns, its ends of the exchanges are closed: a downstream stage
//! whose upstream failed fails too, and an upstream whose downstream failed stops
//! writing, each with an error naming the other stage ([`StageGone`]). The failure
//! reported is the one that was not such a consequence.
//!
//! With checkpoints on, the stages checkpoint in step (`weir_checkpoint::aligned`): every
//! stage resumes from the newest checkpoint all of them completed, and a graph that
//! completed removes every stage's checkpoints. A stop request ends the graph with a last
//! checkpoint that every stage completes: the stages that read no other stage stop
//! reading and take it, the others process up to its barriers, take theirs and stop once
//! their upstreams stopped; the next run resumes from it, reading nothing twice.

use crate::control::RunControl;
use crate::options::{RunFailure, RunOptions};
use crate::report::RunReport;
use crate::runner::run_with;
use crate::udf::load_udf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use weir_checkpoint::{aligned, CheckpointStore};
use weir_core::identity::UdfIdentity;
use weir_engine::runtime::ProcessFunction;
use weir_io::source::exchange::StageGone;
use weir_pipeline::{PipelineSpec, SourceLocation, Stage, StageGraph};

/// What each stage of a graph did, in the graph's order.
#[derive(Debug)]
pub struct GraphReport {
    /// Each stage's name and report.
    pub stages: Vec<(String, RunReport)>,
}

impl GraphReport {
    /// Every stage's summary, one after another.
    pub fn summary(&self) -> String {
        self.stages
            .iter()
            .map(|(name, report)| format!("stage {name}: {}\n", report.summary().trim_end()))
            .collect()
    }

    /// Whether some stage was stopped before its input ended.
    pub fn interrupted(&self) -> bool {
        self.stages.iter().any(|(_, r)| r.interrupted)
    }

    /// The records all stages sent to their dead letters.
    pub fn dead_letters(&self) -> u64 {
        self.stages.iter().map(|(_, r)| r.dead_letters).sum()
    }
}

/// A failed graph: the failure that was not a consequence of another stage's, the stage
/// it happened in, and every stage's figures up to then.
#[derive(Debug)]
pub struct GraphFailure {
    /// The stage that failed first (empty: the graph failed before its stages started,
    /// finding the checkpoint to resume from).
    pub stage: String,
    /// Why.
    pub failure: RunFailure,
    /// The stages that ran to an end (completed, or stopped by another's failure).
    pub report: GraphReport,
}

impl std::fmt::Display for GraphFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.stage.is_empty() {
            return write!(f, "{}", self.failure);
        }
        write!(f, "stage {:?}: {}", self.stage, self.failure)
    }
}

/// Runs every stage of `graph`, each on its own thread, until all have ended; the
/// components are loaded first, so a missing one fails before any stage starts.
pub fn run_graph(graph: &StageGraph, options: &RunOptions) -> Result<GraphReport, GraphFailure> {
    let mut loaded: Vec<(Box<dyn ProcessFunction>, UdfIdentity)> =
        Vec::with_capacity(graph.stages.len());
    for stage in &graph.stages {
        match load_udf(&stage.spec) {
            Ok((function, identity)) => loaded.push((Box::new(function), identity)),
            Err(error) => return Err(failed(&stage.name, error)),
        }
    }
    run_graph_with(graph, loaded, options, &[])
}

/// A graph that failed in `stage` (empty: before its stages started) before any stage
/// reported.
fn failed(stage: &str, error: anyhow::Error) -> GraphFailure {
    GraphFailure {
        stage: stage.to_string(),
        failure: RunFailure {
            error,
            report: None,
            command_line: false,
        },
        report: GraphReport { stages: Vec::new() },
    }
}

/// Runs every stage of `graph` with the UDF versions in `functions` (one per stage, in
/// the graph's order, not initialised yet), each on its own thread, until all have
/// ended. Stage `i` is steered through `controls[i]` if given (`weir dev` swaps a new
/// version into one stage while the others run, and reads each stage's status); the
/// stages stop together on `options.stop`.
pub fn run_graph_with(
    graph: &StageGraph,
    functions: Vec<(Box<dyn ProcessFunction>, UdfIdentity)>,
    options: &RunOptions,
    controls: &[Arc<RunControl>],
) -> Result<GraphReport, GraphFailure> {
    assert_eq!(functions.len(), graph.stages.len(), "a UDF per stage");
    let mut specs: Vec<PipelineSpec> = graph.stages.iter().map(|s| s.spec.clone()).collect();
    let in_step = specs
        .iter()
        .all(|s| s.checkpoint.enabled && s.checkpoint.aligned.is_some());
    if in_step {
        if specs.iter().any(|s| s.checkpoint.kafka.is_some()) {
            return Err(failed(
                "",
                anyhow::anyhow!(
                    "checkpoints of a pipeline of several stages are kept in state directories only"
                ),
            ));
        }
        let mut stages: Vec<(&std::path::Path, &mut aligned::Aligned)> = specs
            .iter_mut()
            .map(|s| {
                let checkpoint = &mut s.checkpoint;
                let aligned = checkpoint.aligned.as_mut().expect("checked above");
                (checkpoint.dir.as_path(), aligned)
            })
            .collect();
        aligned::restore_point(&mut stages, options.fresh).map_err(|e| failed("", e))?;
    }
    let stage_options: Vec<RunOptions> = (0..graph.stages.len())
        .map(|i| RunOptions {
            control: controls.get(i).cloned(),
            ..options.clone()
        })
        .collect();
    let results: Vec<Result<RunReport, RunFailure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = graph
            .stages
            .iter()
            .zip(&specs)
            .zip(functions)
            .zip(&stage_options)
            .map(|(((stage, spec), (function, identity)), options)| {
                std::thread::Builder::new()
                    .name(format!("stage {}", stage.name))
                    .spawn_scoped(scope, move || {
                        let result = run_with(spec, function, identity, options);
                        close_exchanges(stage, &result);
                        result
                    })
                    .expect("a thread for the stage")
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });

    let stopped = options
        .stop
        .as_ref()
        .is_some_and(|s| s.load(Ordering::Relaxed));
    let mut report = GraphReport { stages: Vec::new() };
    let mut first: Option<(String, RunFailure)> = None;
    let mut consequence: Option<(String, RunFailure)> = None;
    for (stage, result) in graph.stages.iter().zip(results) {
        match result {
            Ok(stage_report) => report.stages.push((stage.name.clone(), stage_report)),
            Err(mut failure) => {
                let gone = failure.error.chain().any(|e| e.is::<StageGone>());
                if let Some(mut stage_report) = failure.report.take() {
                    // Stopped while its neighbour stopped first: stopped too.
                    stage_report.interrupted |= gone && stopped;
                    report.stages.push((stage.name.clone(), *stage_report));
                }
                if gone && stopped {
                    continue;
                }
                let slot = if gone { &mut consequence } else { &mut first };
                if slot.is_none() {
                    *slot = Some((stage.name.clone(), failure));
                }
            }
        }
    }
    match first.or(consequence) {
        None if in_step && !report.interrupted() => {
            // Every stage completed: nothing to resume, and a new run starts over.
            for spec in &specs {
                CheckpointStore::open(&spec.checkpoint.dir)
                    .and_then(|mut store| store.clear())
                    .map_err(|e| GraphFailure {
                        report: GraphReport {
                            stages: report.stages.clone(),
                        },
                        ..failed("", e)
                    })?;
            }
            Ok(report)
        }
        None => Ok(report),
        Some((stage, failure)) => Err(GraphFailure {
            stage,
            failure,
            report,
        }),
    }
}

/// Closes `stage`'s ends of its exchanges once its run returned `result`: a stage
/// stopped on request leaves its downstream stages to read what it sent and stop after
/// it; one that failed leaves them to fail, and no epoch of the graph completes again.
fn close_exchanges(stage: &Stage, result: &Result<RunReport, RunFailure>) {
    let stopped = matches!(result, Ok(report) if report.interrupted);
    if result.is_err() {
        if let Some(aligned) = &stage.spec.checkpoint.aligned {
            aligned.epochs.end(aligned.stage);
        }
    }
    for sink in &stage.spec.sinks {
        for exchange in &sink.feeds {
            if stopped {
                exchange.upstream_stopped();
            } else {
                exchange.upstream_ended();
            }
        }
    }
    for source in &stage.spec.sources {
        if let SourceLocation::Stage(exchange) = &source.location {
            exchange.downstream_ended();
        }
    }
}
