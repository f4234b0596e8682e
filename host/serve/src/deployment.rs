//! One pipeline running inside `weir serve`: its thread, and per stage its control and
//! UDF versions (a `[udf]` pipeline is one stage, named as the pipeline).

use crate::refused::Refused;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_cluster::steering::Steering;
use weir_control::{prepare, Prepared, VersionInfo, Versions};
use weir_pipeline::{PipelineSpec, SourceLocation, StageGraph};
use weir_run::{run_graph_with, RunControl, RunOptions, RunState};

/// One stage of a pipeline `weir serve` runs, steered through the API on its own: its
/// UDF is swapped and rolled back with its own versions while the other stages run on.
pub struct DeployedStage {
    /// The stage's name (the pipeline's, for a `[udf]` pipeline).
    pub name: String,
    /// What the stage's run is given: its sources, UDF and sinks.
    pub spec: PipelineSpec,
    /// Its run's control: status and swaps (the stop is the pipeline's).
    pub control: Arc<RunControl>,
    /// Its versions; shared with the group's steering, which learns versions deployed
    /// elsewhere.
    pub versions: Versions,
}

impl DeployedStage {
    /// The number of the version running now (the status says which hash is active).
    pub fn active_version(&self) -> Option<u32> {
        self.versions.number_of(&self.control.status().udf_sha256)
    }

    /// Every version this stage has run, the active one marked.
    pub fn version_info(&self) -> Vec<VersionInfo> {
        self.versions.info(&self.control.status().udf_sha256)
    }
}

/// Resolves a pipeline's definition again into a graph ready to run: a restart after a
/// failure runs a graph of its own.
pub type Resolve = Box<dyn Fn() -> Result<StageGraph, Refused> + Send>;

/// A pipeline `weir serve` runs: started from its file, steered through the API.
pub struct Deployment {
    /// The pipeline's name.
    pub name: String,
    /// Its stages, in the graph's order (one for a `[udf]` pipeline).
    pub stages: Vec<DeployedStage>,
    /// Set to stop every stage gracefully, with a last checkpoint (as SIGTERM does).
    pub stop: Arc<AtomicBool>,
    /// Set when the pipeline runs as a member of a consumer group (`weir serve --group`).
    pub steering: Option<Arc<Steering>>,
    /// Held by a deploy or a rollback from choosing its version number until the swap
    /// is answered: swaps of one pipeline take turns, so two never get the same number.
    pub swapping: Arc<Mutex<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Runs the pipeline's stages; after a failure starts them again from their last
/// checkpoint, each with the version that was running, as the `[restart]` strategy
/// allows (a stop request ends the wait). Returns the failure that ended it for good,
/// if one did, with the index of the stage it happened in.
fn run_restarting(
    mut graph: StageGraph,
    again: &Resolve,
    first: Vec<Prepared>,
    stages: &[Arc<RunControl>],
    versions: &[Versions],
    stop: &Arc<AtomicBool>,
) -> Option<(usize, String)> {
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(stop)),
        fresh: false,
        control: None,
    };
    let restart = graph.stages[0].spec.restart;
    let mut next = Some(first);
    let mut restarts = 0;
    loop {
        let functions = next
            .take()?
            .into_iter()
            .map(|Prepared { function, identity }| (function, identity))
            .collect();
        let failed = run_graph_with(&graph, functions, &options, stages).err()?;
        let at = (graph.stages.iter())
            .position(|s| s.name == failed.stage)
            .unwrap_or(0);
        let failure = match graph.is_single() {
            true => failed.failure.to_string(),
            false => failed.to_string(),
        };
        let stopping = || stop.load(Ordering::Relaxed);
        if restarts >= restart.attempts || stopping() {
            return Some((at, failure));
        }
        restarts += 1;
        tracing::warn!(
            "pipeline {:?} failed: {failure}; restarting it from its last checkpoint in {} ms ({restarts} of {} restarts)",
            graph.name,
            restart.delay.as_millis(),
            restart.attempts
        );
        for (stage, control) in graph.stages.iter().zip(stages) {
            // What a source that cannot be read again delivered after the last
            // checkpoint is not read again by the restart: say so, and how much, rather
            // than lose it in silence.
            let loss = lost_by_restart(&stage.spec, &control.status());
            if let Some(loss) = &loss {
                tracing::warn!("{loss}");
            }
            // The run recorded its error already.
            control.update(|s| {
                s.state = RunState::Restarting;
                s.restarts = restarts as u64;
                if let Some(loss) = loss {
                    s.record_error(loss);
                }
            });
        }
        let until = Instant::now() + restart.delay;
        while Instant::now() < until && !stopping() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if stopping() {
            for control in stages {
                control.update(|s| s.state = RunState::Stopped);
            }
            return None;
        }
        // A graph's stages are joined by exchanges and checkpoint in step through state
        // of their own, which the run that failed closed: the restart runs a graph
        // resolved again from the definition.
        graph = match again() {
            Ok(fresh) => fresh,
            Err(refused) => {
                return Some((
                    at,
                    format!("{failure}; the restart failed: {}", refused.message),
                ))
            }
        };
        // Each stage's version that was running when it failed (a swap may have
        // replaced the one the deployment started with).
        let mut prepared = Vec::with_capacity(stages.len());
        for ((stage, control), versions) in graph.stages.iter().zip(stages).zip(versions) {
            let running = control.status().udf_sha256;
            let Some(version) = versions.with_sha256(&running).or_else(|| versions.last()) else {
                return Some((at, failure));
            };
            match prepare(&stage.spec, &version.bytes) {
                Ok(ready) => prepared.push(ready),
                Err(refusal) => {
                    return Some((
                        at,
                        format!("{failure}; the restart failed: {}", refusal.message()),
                    ))
                }
            }
        }
        next = Some(prepared);
    }
}

/// The names of `spec`'s sources that cannot be read again from a checkpoint's position:
/// stdin, and a file that is a named pipe.
fn unreplayable_sources(spec: &PipelineSpec) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt as _;
    spec.sources
        .iter()
        .filter(|source| match &source.location {
            SourceLocation::Stdin => true,
            SourceLocation::File(path) => {
                std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
            }
            _ => false,
        })
        .map(|source| source.name.clone())
        .collect()
}

/// What a restart from the last checkpoint loses of a failed run whose last status is
/// `status`: the records each source that cannot be read again delivered after that
/// checkpoint (all it delivered, without one), said for the log and the status; `None`
/// when every source can be read again.
fn lost_by_restart(spec: &PipelineSpec, status: &weir_run::LiveStatus) -> Option<String> {
    let unreplayable = unreplayable_sources(spec);
    if unreplayable.is_empty() {
        return None;
    }
    let checkpoint = status.checkpoint_history.back();
    let count = |counts: &[(String, u64)], name: &str| {
        counts
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, read)| *read)
    };
    let lost: Vec<String> = unreplayable
        .iter()
        .map(|name| {
            let since = checkpoint.map_or(0, |c| count(&c.read, name));
            let n = count(&status.sources, name).saturating_sub(since);
            format!("{n} from {name:?}")
        })
        .collect();
    let after = checkpoint.map_or("the start".to_string(), |c| {
        format!("checkpoint {}", c.epoch)
    });
    Some(format!(
        "pipeline {:?} restarts from {after}, but source(s) that cannot be read again (stdin, a named pipe) delivered records after it that the restart cannot read again: lost: {}",
        spec.name,
        lost.join(", ")
    ))
}

impl Deployment {
    /// Checks each stage's UDF component in `first` (one of that stage's `versions`,
    /// in the graph's order) and starts the pipeline with them on its own thread: the
    /// whole pipeline, or with `group` this process's share of its tasks (a pipeline of
    /// one stage only). `again` resolves the definition anew for each restart.
    pub fn start(
        graph: StageGraph,
        again: Resolve,
        first: Vec<Arc<Vec<u8>>>,
        versions: Vec<Versions>,
        group: Option<&str>,
        probation_calls: u64,
    ) -> Result<Self, Refused> {
        if group.is_some() && !graph.is_single() {
            return Err(Refused::new(
                400,
                format!(
                    "pipeline {:?} has {} stages: a pipeline of several stages does not run in a consumer group yet (weir serve --group); run it without --group",
                    graph.name,
                    graph.stages.len()
                ),
            ));
        }
        let mut prepared = Vec::with_capacity(first.len());
        for (stage, bytes) in graph.stages.iter().zip(&first) {
            prepared.push(prepare(&stage.spec, bytes).map_err(|refusal| {
                let mut refused = Refused::from(refusal);
                if !graph.is_single() {
                    refused.message = format!("stage {:?}: {}", stage.name, refused.message);
                }
                refused
            })?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let controls: Vec<Arc<RunControl>> = graph
            .stages
            .iter()
            .map(|_| RunControl::with_stop(Arc::clone(&stop)))
            .collect();
        for control in &controls {
            control.update(|s| s.state = RunState::Starting);
        }
        let steering = group.map(|_| {
            Steering::new(
                Arc::clone(&controls[0]),
                graph.stages[0].spec.clone(),
                probation_calls,
                versions[0].clone(),
            )
        });
        let stages = (graph.stages.iter())
            .zip(&controls)
            .zip(&versions)
            .map(|((stage, control), versions)| DeployedStage {
                name: stage.name.clone(),
                spec: stage.spec.clone(),
                control: Arc::clone(control),
                versions: versions.clone(),
            })
            .collect();
        let name = graph.name.clone();
        let run_name = name.clone();
        let run_steering = steering.clone();
        let run_stop = Arc::clone(&stop);
        let group = group.map(str::to_string);
        let thread = std::thread::Builder::new()
            .name(format!("weir-{name}"))
            .spawn(move || {
                let failure = match (group, run_steering) {
                    (Some(group), Some(steering)) => {
                        let spec = &graph.stages[0].spec;
                        let result = weir_cluster::run_steered(spec, &group, steering);
                        controls[0].update(|s| s.state = RunState::Stopped);
                        result.err().map(|e| (0, format!("{e:#}")))
                    }
                    _ => run_restarting(graph, &again, prepared, &controls, &versions, &run_stop),
                };
                if let Some((at, failure)) = failure {
                    tracing::error!("pipeline {run_name:?} failed: {failure}");
                    for (index, control) in controls.iter().enumerate() {
                        control.update(|s| {
                            s.state = RunState::Failed;
                            // A run records its own error; a group's steering may not
                            // have.
                            if index == at && s.last_error.as_deref() != Some(failure.as_str()) {
                                s.record_error(failure.clone());
                            }
                        });
                    }
                }
            })
            .map_err(|e| Refused::new(500, format!("cannot start a thread: {e}")))?;
        Ok(Self {
            name,
            stages,
            stop,
            steering,
            swapping: Arc::default(),
            thread: Some(thread),
        })
    }

    /// A pipeline of the registry that cannot be started (a component is missing or
    /// damaged, or refused): shown as `failed`, with `reason`, by the API, the console
    /// and `/metrics`, until it is deployed again or deleted. `versions` are each
    /// stage's, in the graph's order.
    pub fn failed(graph: StageGraph, versions: Vec<Versions>, reason: String) -> Self {
        let stages = (graph.stages.into_iter())
            .zip(versions)
            .map(|(stage, versions)| {
                let control = RunControl::new();
                control.update(|s| {
                    s.state = RunState::Failed;
                    s.udf = stage.spec.udf.name.clone();
                    s.record_error(reason.clone());
                });
                DeployedStage {
                    name: stage.name,
                    spec: stage.spec,
                    control,
                    versions,
                }
            })
            .collect();
        Self {
            name: graph.name,
            stages,
            stop: Arc::default(),
            steering: None,
            swapping: Arc::default(),
            thread: None,
        }
    }

    /// Whether the pipeline's thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Whether it is a pipeline of one stage (a `[udf]` file, or one `[[stage]]`).
    pub fn is_single(&self) -> bool {
        self.stages.len() == 1
    }

    /// The pipeline's state, from its stages' (see [`Self::state_of`]).
    pub fn state(&self) -> RunState {
        let states: Vec<RunState> = (self.stages.iter())
            .map(|s| s.control.status().state)
            .collect();
        self.state_of(&states)
    }

    /// The state of this pipeline when its stages are in `states`: theirs when they
    /// agree; otherwise the first of failed, restarting, starting, running, waiting for
    /// tasks and stopped that one of them is in (finished only once all are). A stage
    /// that failed while the pipeline's thread still runs is `restarting`: the other
    /// stages are ending, then `[restart]` decides, and the pipeline is `failed` once it
    /// gave up.
    pub fn state_of(&self, states: &[RunState]) -> RunState {
        let state = Self::first_of(states);
        match state {
            RunState::Failed if self.is_running() => RunState::Restarting,
            state => state,
        }
    }

    fn first_of(states: &[RunState]) -> RunState {
        [
            RunState::Failed,
            RunState::Restarting,
            RunState::Starting,
            RunState::Running,
            RunState::WaitingForTasks,
            RunState::Stopped,
        ]
        .into_iter()
        .find(|state| states.contains(state))
        .unwrap_or(RunState::Finished)
    }

    /// The stage a call on one stage names: `name`, or with no name the pipeline's only
    /// stage. Refused (404) for a stage the pipeline does not have, and (400) without a
    /// name in a pipeline of several stages.
    pub fn stage(&self, name: Option<&str>) -> Result<&DeployedStage, Refused> {
        let names = || {
            (self.stages.iter())
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (name, self.stages.as_slice()) {
            (None, [only]) => Ok(only),
            (None, _) => Err(Refused::new(
                400,
                format!(
                    "pipeline {:?} has {} stages ({}): name the one this call is for with ?stage=NAME (`weir deploy` and `weir rollback`: --stage NAME)",
                    self.name,
                    self.stages.len(),
                    names()
                ),
            )),
            (Some(name), stages) => stages.iter().find(|s| s.name == name).ok_or_else(|| {
                Refused::new(
                    404,
                    format!(
                        "pipeline {:?} has no stage {name:?} (its stages: {})",
                        self.name,
                        names()
                    ),
                )
            }),
        }
    }

    /// Asks the pipeline to stop gracefully (every stage finishes what it read and
    /// checkpoints); returns its thread, to be joined without holding any lock.
    pub fn request_stop(&mut self) -> Option<JoinHandle<()>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()
    }

    /// Stops the pipeline and waits for it.
    pub fn stop(&mut self) {
        if let Some(thread) = self.request_stop() {
            let _ = thread.join();
        }
    }
}
