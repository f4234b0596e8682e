//! One pipeline running inside `weir serve`: its thread, its control, its UDF versions.

use crate::checkpoint::UdfIdentity;
use crate::cluster::steering::Steering;
use crate::pipeline::PipelineSpec;
use crate::run::{run_with, RunControl, RunOptions, SwapRequest};
use crate::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use crate::runtime::{HostServices, InitInfo, ProcessFunction};
use crate::time::wall_clock_ms;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A UDF version a pipeline has run: kept so it can be rolled back to.
#[derive(Clone)]
pub struct UdfVersion {
    pub number: u32,
    pub sha256: String,
    pub bytes: Arc<Vec<u8>>,
    pub deployed_at: i64,
}

/// How a version looks in the API.
#[derive(Debug, Serialize)]
pub struct VersionInfo {
    pub version: u32,
    pub sha256: String,
    pub bytes: usize,
    pub deployed_at: i64,
    pub active: bool,
}

/// Why an upload or a swap was refused: an HTTP status and a message naming the cause.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

impl Refused {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// A swap that happened.
#[derive(Debug, Serialize)]
pub struct Deployed {
    pub version: u32,
    pub sha256: String,
    /// Compiling and checking the component, before the pipeline was touched.
    pub prepare_ms: f64,
    /// How long processing waited for the swap itself.
    pub swap_pause_ms: f64,
}

pub struct Deployment {
    pub spec: PipelineSpec,
    pub control: Arc<RunControl>,
    /// Shared with the group's steering, which learns versions deployed elsewhere.
    pub versions: Arc<Mutex<Vec<UdfVersion>>>,
    /// Set when the pipeline runs as a member of a consumer group (`weir serve --group`).
    pub steering: Option<Arc<Steering>>,
    thread: Option<JoinHandle<()>>,
}

impl Deployment {
    /// Checks the pipeline's UDF and starts the pipeline on its own thread: the whole
    /// pipeline, or with `group` this process's share of its tasks.
    pub fn start(
        spec: PipelineSpec,
        group: Option<&str>,
        probation_calls: u64,
    ) -> Result<Self, Refused> {
        let bytes = Arc::new(std::fs::read(&spec.udf.path).map_err(|e| {
            Refused::new(
                400,
                format!("cannot read UDF component {}: {e}", spec.udf.path.display()),
            )
        })?);
        let Prepared { function, identity } = prepare(&spec, &bytes)?;
        let control = RunControl::new();
        control.update(|s| s.state = "starting".into());
        let versions = Arc::new(Mutex::new(vec![UdfVersion {
            number: 1,
            sha256: identity.sha256.clone(),
            bytes: Arc::clone(&bytes),
            deployed_at: wall_clock_ms(),
        }]));
        let steering = group.map(|_| {
            Steering::new(
                Arc::clone(&control),
                spec.clone(),
                probation_calls,
                Arc::clone(&versions),
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
                        let result = crate::cluster::run_steered(&run_spec, &group, steering);
                        run_control.update(|s| s.state = "stopped".into());
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
                        s.state = "failed".into();
                        s.last_error = Some(failure);
                    });
                }
            })
            .map_err(|e| Refused::new(500, format!("cannot start a thread: {e}")))?;
        Ok(Self {
            spec,
            control,
            versions,
            steering,
            thread: Some(thread),
        })
    }

    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The number of the version running now (the status says which hash is active).
    pub fn active_version(&self) -> Option<u32> {
        let active = self.control.status().udf_sha256;
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions
            .iter()
            .find(|v| v.sha256 == active)
            .map(|v| v.number)
    }

    pub fn version_info(&self) -> Vec<VersionInfo> {
        let active = self.control.status().udf_sha256;
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions
            .iter()
            .map(|v| VersionInfo {
                version: v.number,
                sha256: v.sha256.clone(),
                bytes: v.bytes.len(),
                deployed_at: v.deployed_at,
                active: v.sha256 == active,
            })
            .collect()
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

/// A component ready to run: the function, initialised, and its identity.
pub struct Prepared {
    pub function: Box<dyn ProcessFunction>,
    pub identity: UdfIdentity,
}

/// Compiles component bytes, checks them against the contract and runs `init` against a
/// scratch host, so that a component that cannot work is refused before the pipeline is
/// touched.
pub fn prepare(spec: &PipelineSpec, bytes: &[u8]) -> Result<Prepared, Refused> {
    let component = LoadedComponent::from_bytes(&spec.udf.name, bytes)
        .map_err(|e| Refused::new(400, format!("rejected: {e:#}")))?;
    // The bytes were hashed once, to look them up in the compile cache.
    let identity = UdfIdentity {
        name: spec.udf.name.clone(),
        sha256: component.sha256.clone(),
    };
    let limits = Limits {
        memory_bytes: spec.udf.memory_limit_bytes,
        call_timeout: spec.udf.call_timeout,
    };
    let mut function = WasmFunction::new(component, limits);
    let mut scratch = HostServices::new(wall_clock_ms());
    function
        .init(&mut scratch, &init_info(spec))
        .map_err(|e| Refused::new(400, format!("rejected: its init failed: {e}")))?;
    Ok(Prepared {
        function: Box::new(function),
        identity,
    })
}

/// Puts component `bytes` into a running pipeline: prepared off the processing path,
/// then swapped in between two runs of records. Waits for the swap.
pub fn swap_parts(
    spec: &PipelineSpec,
    control: &RunControl,
    running: bool,
    bytes: Arc<Vec<u8>>,
    number: u32,
    probation_calls: u64,
) -> Result<Deployed, Refused> {
    if !running {
        return Err(Refused::new(409, "the pipeline is not running"));
    }
    if control.status().state == "starting" {
        return Err(Refused::new(
            409,
            "the pipeline is still starting (opening its sources); try again when it runs",
        ));
    }
    let started = std::time::Instant::now();
    let Prepared { function, identity } = prepare(spec, &bytes)?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    let sha256 = identity.sha256.clone();
    let (done, reply) = std::sync::mpsc::channel();
    control.request_swap(SwapRequest {
        function,
        identity,
        probation_calls,
        done,
    });
    match reply.recv_timeout(crate::run::control::SWAP_WAIT) {
        Ok(Ok(swapped)) => Ok(Deployed {
            version: number,
            sha256,
            prepare_ms,
            swap_pause_ms: swapped.pause.as_secs_f64() * 1e3,
        }),
        Ok(Err(message)) => Err(Refused::new(400, message)),
        Err(_) => {
            // Withdraw it, so that it is not applied later behind the caller's back.
            drop(control.take_swap());
            Err(Refused::new(
                504,
                "the pipeline did not take the new version in time (is it stuck in a UDF call?)",
            ))
        }
    }
}

/// Deploys component `bytes` to a group pipeline: into every task running here, then
/// to the group's version log, which the other members follow.
pub fn swap_in_group(
    steering: &Steering,
    bytes: Arc<Vec<u8>>,
    number: u32,
) -> Result<Deployed, Refused> {
    let deployed = swap_tasks(steering, Arc::clone(&bytes), number)?;
    steering.publish_version(number, &bytes).map_err(|e| {
        Refused::new(
            502,
            format!("version {number} runs here, but could not be sent to the group: {e:#}"),
        )
    })?;
    Ok(deployed)
}

/// Puts component `bytes` into every task of a group pipeline running here, and makes
/// it the version the tasks this process gets later start with.
pub fn swap_tasks(
    steering: &Steering,
    bytes: Arc<Vec<u8>>,
    number: u32,
) -> Result<Deployed, Refused> {
    let (spec, probation_calls) = (&steering.spec, steering.probation_calls);
    let started = std::time::Instant::now();
    // A component that cannot work is refused before any task is touched.
    let Prepared { identity, .. } = prepare(spec, &bytes)?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    steering.set_udf(Arc::clone(&bytes), identity.sha256.clone());
    let mut pause_ms: f64 = 0.0;
    for (partition, control) in steering.task_controls() {
        // A task still restoring was started with the version before: wait until it runs.
        let deadline = std::time::Instant::now() + crate::run::control::SWAP_WAIT;
        while control.status().state == "starting" && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if control.status().state != "running" {
            continue; // stopping: it moves, and starts elsewhere or here with the new version
        }
        let deployed = swap_parts(
            spec,
            &control,
            true,
            Arc::clone(&bytes),
            number,
            probation_calls,
        )
        .map_err(|r| Refused::new(r.status, format!("task {partition}: {}", r.message)))?;
        pause_ms = pause_ms.max(deployed.swap_pause_ms);
    }
    Ok(Deployed {
        version: number,
        sha256: identity.sha256,
        prepare_ms,
        swap_pause_ms: pause_ms,
    })
}

fn init_info(spec: &PipelineSpec) -> InitInfo {
    InitInfo {
        config: spec.udf.config.clone(),
        inputs: spec.input_names(),
    }
}

pub use crate::checkpoint::sha256_hex;
