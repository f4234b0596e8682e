//! Running a pipeline of several keyed stages: every stage is a run of its own (its
//! sources, its `KeyedStage` and its sinks), on a thread of its own, all at once; the
//! stages hand each other records and watermarks through the exchanges of `weir-io`, so
//! a downstream stage works while its upstream reads on.
//!
//! When a stage's run returns, its ends of the exchanges are closed: a downstream stage
//! whose upstream failed fails too, and an upstream whose downstream failed stops
//! writing, each with an error naming the other stage ([`StageGone`]). The failure
//! reported is the one that was not such a consequence.

use crate::{load_udf, run_with, RunFailure, RunOptions, RunReport};
use weir_io::source::exchange::StageGone;
use weir_pipeline::{SourceLocation, Stage, StageGraph};

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

    /// The records all stages sent to their dead letters.
    pub fn dead_letters(&self) -> u64 {
        self.stages.iter().map(|(_, r)| r.dead_letters).sum()
    }
}

/// A failed graph: the failure that was not a consequence of another stage's, the stage
/// it happened in, and every stage's figures up to then.
#[derive(Debug)]
pub struct GraphFailure {
    /// The stage that failed first.
    pub stage: String,
    /// Why.
    pub failure: RunFailure,
    /// The stages that ran to an end (completed, or stopped by another's failure).
    pub report: GraphReport,
}

impl std::fmt::Display for GraphFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stage {:?}: {}", self.stage, self.failure)
    }
}

/// Runs every stage of `graph`, each on its own thread, until all have ended; the
/// components are loaded first, so a missing one fails before any stage starts.
pub fn run_graph(graph: &StageGraph, options: &RunOptions) -> Result<GraphReport, GraphFailure> {
    let mut loaded = Vec::with_capacity(graph.stages.len());
    for stage in &graph.stages {
        match load_udf(&stage.spec) {
            Ok(udf) => loaded.push(udf),
            Err(error) => {
                return Err(GraphFailure {
                    stage: stage.name.clone(),
                    failure: RunFailure {
                        error,
                        report: None,
                        command_line: false,
                    },
                    report: GraphReport { stages: Vec::new() },
                })
            }
        }
    }
    let results: Vec<Result<RunReport, RunFailure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = graph
            .stages
            .iter()
            .zip(loaded)
            .map(|(stage, (function, identity))| {
                std::thread::Builder::new()
                    .name(format!("stage {}", stage.name))
                    .spawn_scoped(scope, move || {
                        let result = run_with(&stage.spec, Box::new(function), identity, options);
                        close_exchanges(stage);
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

    let mut report = GraphReport { stages: Vec::new() };
    let mut first: Option<(String, RunFailure)> = None;
    let mut consequence: Option<(String, RunFailure)> = None;
    for (stage, result) in graph.stages.iter().zip(results) {
        match result {
            Ok(stage_report) => report.stages.push((stage.name.clone(), stage_report)),
            Err(mut failure) => {
                if let Some(stage_report) = failure.report.take() {
                    report.stages.push((stage.name.clone(), *stage_report));
                }
                let slot = if failure.error.chain().any(|e| e.is::<StageGone>()) {
                    &mut consequence
                } else {
                    &mut first
                };
                if slot.is_none() {
                    *slot = Some((stage.name.clone(), failure));
                }
            }
        }
    }
    match first.or(consequence) {
        None => Ok(report),
        Some((stage, failure)) => Err(GraphFailure {
            stage,
            failure,
            report,
        }),
    }
}

/// Closes `stage`'s ends of its exchanges once its run returned.
fn close_exchanges(stage: &Stage) {
    for sink in &stage.spec.sinks {
        sink.feeds.iter().for_each(|e| e.upstream_ended());
    }
    for source in &stage.spec.sources {
        if let SourceLocation::Stage(exchange) = &source.location {
            exchange.downstream_ended();
        }
    }
}
