//! One pipeline running inside `weir serve`: its thread, its control, its UDF versions.

use crate::refused::Refused;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_cluster::steering::Steering;
use weir_control::{prepare, Prepared, VersionInfo, Versions};
use weir_pipeline::{PipelineSpec, SourceLocation};
use weir_run::{run_with, RunControl, RunOptions, RunState};

/// A pipeline `weir serve` runs: started from its file, steered through the API.
pub struct Deployment {
    /// The pipeline, as its file gives it.
    pub spec: PipelineSpec,
    /// Its run's control: status, stop, swaps.
    pub control: Arc<RunControl>,
    /// Shared with the group's steering, which learns versions deployed elsewhere.
    pub versions: Versions,
    /// Set when the pipeline runs as a member of a consumer group (`weir serve --group`).
    pub steering: Option<Arc<Steering>>,
    /// Held by a deploy or a rollback from choosing its version number until the swap
    /// is answered: swaps of one pipeline take turns, so two never get the same number.
    pub swapping: Arc<Mutex<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Runs the pipeline; after a failure starts it again from its last checkpoint, with
/// the version that was running, as its `[restart]` strategy allows (a stop request ends
/// the wait). Returns the failure that ended it for good, if one did.
fn run_restarting(
    spec: &PipelineSpec,
    first: Prepared,
    control: &Arc<RunControl>,
    versions: &Versions,
) -> Option<String> {
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(&control.stop)),
        fresh: false,
        control: Some(Arc::clone(control)),
    };
    let mut next = Some(first);
    let mut restarts = 0;
    loop {
        let Prepared { function, identity } = next.take()?;
        let failure = run_with(spec, function, identity, &options)
            .err()?
            .to_string();
        let stopping = || control.stop.load(Ordering::Relaxed);
        if restarts >= spec.restart.attempts || stopping() {
            return Some(failure);
        }
        restarts += 1;
        tracing::warn!(
            "pipeline {:?} failed: {failure}; restarting it from its last checkpoint in {} ms ({restarts} of {} restarts)",
            spec.name,
            spec.restart.delay.as_millis(),
            spec.restart.attempts
        );
        // What a source that cannot be read again delivered after the last checkpoint
        // is not read again by the restart: say so, and how much, rather than lose it in
        // silence.
        let loss = lost_by_restart(spec, &control.status());
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
        let until = Instant::now() + spec.restart.delay;
        while Instant::now() < until && !stopping() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if stopping() {
            control.update(|s| s.state = RunState::Stopped);
            return None;
        }
        // The version that was running when it failed (a swap may have replaced the
        // one the deployment started with).
        let running = control.status().udf_sha256;
        let Some(version) = versions.with_sha256(&running).or_else(|| versions.last()) else {
            return Some(failure);
        };
        match prepare(spec, &version.bytes) {
            Ok(prepared) => next = Some(prepared),
            Err(refusal) => {
                return Some(format!(
                    "{failure}; the restart failed: {}",
                    refusal.message()
                ))
            }
        }
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
    /// Checks the UDF component `bytes` (one of `versions`, the pipeline's known
    /// versions) and starts the pipeline with it on its own thread: the whole pipeline,
    /// or with `group` this process's share of its tasks.
    pub fn start(
        spec: PipelineSpec,
        bytes: Arc<Vec<u8>>,
        versions: Versions,
        group: Option<&str>,
        probation_calls: u64,
    ) -> Result<Self, Refused> {
        let prepared = prepare(&spec, &bytes)?;
        let control = RunControl::new();
        control.update(|s| s.state = RunState::Starting);
        let steering = group.map(|_| {
            Steering::new(
                Arc::clone(&control),
                spec.clone(),
                probation_calls,
                versions.clone(),
            )
        });
        let run_spec = spec.clone();
        let run_control = Arc::clone(&control);
        let run_steering = steering.clone();
        let run_versions = versions.clone();
        let group = group.map(str::to_string);
        let thread = std::thread::Builder::new()
            .name(format!("weir-{}", spec.name))
            .spawn(move || {
                let failure = match (group, run_steering) {
                    (Some(group), Some(steering)) => {
                        let result = weir_cluster::run_steered(&run_spec, &group, steering);
                        run_control.update(|s| s.state = RunState::Stopped);
                        result.err().map(|e| format!("{e:#}"))
                    }
                    _ => run_restarting(&run_spec, prepared, &run_control, &run_versions),
                };
                if let Some(failure) = failure {
                    tracing::error!("pipeline {:?} failed: {failure}", run_spec.name);
                    run_control.update(|s| {
                        s.state = RunState::Failed;
                        // A run records its own error; a group's steering may not have.
                        if s.last_error.as_deref() != Some(failure.as_str()) {
                            s.record_error(failure);
                        }
                    });
                }
            })
            .map_err(|e| Refused::new(500, format!("cannot start a thread: {e}")))?;
        Ok(Self {
            spec,
            control,
            versions,
            steering,
            swapping: Arc::default(),
            thread: Some(thread),
        })
    }

    /// A pipeline of the registry that cannot be started (its component is missing or
    /// damaged, or refused): shown as `failed`, with `reason`, by the API, the console
    /// and `/metrics`, until it is deployed again or deleted.
    pub fn failed(spec: PipelineSpec, versions: Versions, reason: String) -> Self {
        let control = RunControl::new();
        control.update(|s| {
            s.state = RunState::Failed;
            s.udf = spec.udf.name.clone();
            s.record_error(reason);
        });
        Self {
            spec,
            control,
            versions,
            steering: None,
            swapping: Arc::default(),
            thread: None,
        }
    }

    /// Whether the pipeline's thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The number of the version running now (the status says which hash is active).
    pub fn active_version(&self) -> Option<u32> {
        self.versions.number_of(&self.control.status().udf_sha256)
    }

    /// Every version this pipeline has run, the active one marked.
    pub fn version_info(&self) -> Vec<VersionInfo> {
        self.versions.info(&self.control.status().udf_sha256)
    }

    /// Asks the pipeline to stop gracefully (it finishes what it read and checkpoints);
    /// returns its thread, to be joined without holding any lock.
    pub fn request_stop(&mut self) -> Option<JoinHandle<()>> {
        self.control
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take()
    }

    /// Stops the pipeline and waits for it.
    pub fn stop(&mut self) {
        if let Some(thread) = self.request_stop() {
            let _ = thread.join();
        }
    }
}
