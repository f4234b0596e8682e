//! `weir dev` on a pipeline of several stages (`[[stage]]`s): every stage's component is
//! watched, and a new build of one is put to work in that stage alone.
//!
//! - **A live input** (stdin, Kafka, a named pipe): a new component of a stage is swapped
//!   into that stage of the running graph, between two runs of records: its state and
//!   pending timers are kept, and the other stages run on with theirs. A version the
//!   host refuses (its `init` fails, it declares an output without a sink) is printed,
//!   and the running one stays.
//! - **A bounded input** (every source a file): the graph runs to the end of its input,
//!   prints each stage's summary and keeps watching; a change of a stage's component, of
//!   an input file or of the pipeline file runs the input again from the start, with
//!   fresh state. `--once` exits after the first run.
//!
//! Stages' UDFs are not built here: build a stage's crate or project as usual (`cargo
//! build`, `weir build`) and the component it writes is put to work. (For a pipeline of
//! one stage `weir dev` also builds its project on a save: `dev.rs`.)

use crate::dev::{absolute, is_bounded, next_change, next_save, rerun_on, watch, SETTLE_WASM};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;
use weir_control::{prepare, swap_prepared_into, Prepared, DEFAULT_PROBATION_CALLS};
use weir_core::identity::sha256_hex;
use weir_pipeline::{Overrides, PipelineSpec, StageGraph};
use weir_run::{run_graph_with, GraphReport, RunControl, RunOptions};

/// Runs the graph of `pipeline` (loaded with `overrides` as `graph`) until SIGINT/SIGTERM
/// or, for a live input or with `once`, until its input ends, putting each new component
/// of a stage to work (see the module's documentation).
pub fn dev_graph(
    pipeline: &Path,
    overrides: &Overrides,
    mut graph: StageGraph,
    once: bool,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let bounded = graph.stages.iter().all(|stage| is_bounded(&stage.spec));
    let specs: Vec<PipelineSpec> = graph.stages.iter().map(|s| s.spec.clone()).collect();
    let mut watched: Vec<PathBuf> = specs.iter().map(|s| s.udf.path.clone()).collect();
    if bounded && !once {
        watched.extend(rerun_on(&specs, pipeline));
    }
    let (_watcher, changed) = watch(&absolute(&watched)?)?;
    let mut versions = StageVersions::load(&graph).map_err(|why| anyhow::anyhow!(why))?;
    eprintln!(
        "weir dev: running {:?}, a pipeline of {} stages; watching each stage's component ({}) (Ctrl-C to stop): a new build of one is swapped into that stage while the others run",
        graph.name,
        graph.stages.len(),
        graph
            .stages
            .iter()
            .map(|s| format!("{}: {}", s.name, s.spec.udf.path.display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut first = true;
    loop {
        match run_swapping(&graph, &mut versions, &changed, &stop) {
            Ok(report) => eprint!("{}", report.summary()),
            // The first run's failure is the command's; a later one waits for a fix.
            Err(e) if first || once || !bounded => return Err(e),
            Err(e) => eprintln!("error: {e:#}"),
        }
        first = false;
        if once || !bounded || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        eprintln!(
            "weir dev: the input ended; watching for changes (Ctrl-C to stop): a change runs the input again from the start, with fresh state"
        );
        loop {
            if !next_change(&changed, SETTLE_WASM, &stop) {
                return Ok(());
            }
            let reloaded = StageGraph::load(pipeline, overrides)
                .map_err(|e| format!("{e:#}"))
                .and_then(|graph| StageVersions::load(&graph).map(|v| (graph, v)));
            match reloaded {
                Ok((reloaded, loaded)) => {
                    (graph, versions) = (reloaded, loaded);
                    break;
                }
                Err(why) => eprintln!("weir dev: {why}; waiting for the next change"),
            }
        }
        eprintln!(
            "weir dev: running {:?} again from the start of its input",
            graph.name
        );
    }
}

/// Each stage's version to start with, and the SHA-256 of the one running in each.
struct StageVersions {
    /// Taken by the run that starts with them.
    first: Vec<Option<Prepared>>,
    running: Vec<String>,
}

impl StageVersions {
    /// Every stage's component, compiled and checked against its stage.
    fn load(graph: &StageGraph) -> Result<Self, String> {
        let mut first = Vec::with_capacity(graph.stages.len());
        let mut running = Vec::with_capacity(graph.stages.len());
        for stage in &graph.stages {
            let path = &stage.spec.udf.path;
            let bytes = std::fs::read(path).map_err(|e| {
                format!(
                    "stage {:?}: cannot read UDF component {}: {e}",
                    stage.name,
                    path.display()
                )
            })?;
            running.push(sha256_hex(&bytes));
            let prepared =
                prepare(&stage.spec, &bytes).map_err(|e| format!("stage {:?}: {e}", stage.name))?;
            first.push(Some(prepared));
        }
        Ok(Self { first, running })
    }
}

/// Runs `graph` once, to the end of its input or a signal, swapping each stage's new
/// component into that stage as it is written.
fn run_swapping(
    graph: &StageGraph,
    versions: &mut StageVersions,
    changed: &mpsc::Receiver<()>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<GraphReport> {
    let functions = versions
        .first
        .iter_mut()
        .map(|p| {
            let Prepared { function, identity } = p.take().expect("a version per stage");
            (function, identity)
        })
        .collect();
    let controls: Vec<Arc<RunControl>> = graph.stages.iter().map(|_| RunControl::new()).collect();
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(stop)),
        fresh: false,
        control: None,
    };
    std::thread::scope(|scope| {
        let runner = std::thread::Builder::new()
            .name("weir-dev-graph".into())
            .spawn_scoped(scope, || {
                run_graph_with(graph, functions, &options, &controls)
            })?;
        while let Some(saved) = next_save(changed, SETTLE_WASM, || !runner.is_finished()) {
            for (index, stage) in graph.stages.iter().enumerate() {
                let Ok(bytes) = std::fs::read(&stage.spec.udf.path) else {
                    continue; // being replaced: the next change reads it
                };
                let sha = sha256_hex(&bytes);
                if sha == versions.running[index] {
                    continue;
                }
                let refused = |why: &dyn std::fmt::Display| {
                    eprintln!(
                        "weir dev: stage {:?}: the new version was refused: {why}; the running version stays",
                        stage.name
                    )
                };
                let started = Instant::now();
                let prepared = match prepare(&stage.spec, &bytes) {
                    Ok(prepared) => prepared,
                    Err(e) => {
                        refused(&e);
                        continue;
                    }
                };
                let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
                let running = !runner.is_finished();
                match swap_prepared_into(
                    &controls[index],
                    running,
                    prepared,
                    prepare_ms,
                    0,
                    DEFAULT_PROBATION_CALLS,
                ) {
                    Ok(done) => {
                        versions.running[index] = sha.clone();
                        eprintln!(
                            "weir dev: stage {:?}: reloaded {} ({}) — prepare {:.0} ms, swap pause {:.2} ms, {:.0} ms from save to swapped in; the other stages ran on",
                            stage.name,
                            stage.spec.udf.name,
                            &sha[..12],
                            done.prepare_ms,
                            done.swap_pause_ms,
                            saved.elapsed().as_secs_f64() * 1e3
                        );
                    }
                    Err(e) => refused(&e),
                }
            }
        }
        runner
            .join()
            .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?
            .map_err(|failure| anyhow::anyhow!("{failure}"))
    })
}
