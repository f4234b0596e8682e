//! One pipeline running inside `weir serve`: its thread, its control, its UDF versions.

use crate::refused::Refused;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use weir_cluster::steering::Steering;
use weir_control::{prepare, Prepared, VersionInfo, Versions};
use weir_pipeline::PipelineSpec;
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
        let Prepared { function, identity } = prepare(&spec, &bytes)?;
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
                    _ => {
                        let options = RunOptions {
                            progress: false,
                            stop: Some(Arc::clone(&run_control.stop)),
                            fresh: false,
                            control: Some(Arc::clone(&run_control)),
                        };
                        run_with(&run_spec, function, identity, &options)
                            .err()
                            .map(|f| f.to_string())
                    }
                };
                if let Some(failure) = failure {
                    tracing::error!("pipeline {:?} failed: {failure}", run_spec.name);
                    run_control.update(|s| {
                        s.state = RunState::Failed;
                        s.record_error(failure);
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
