//! # Weir control: the lifecycle of a UDF version
//!
//! How a new component gets into a running pipeline, used alike by `weir dev`, the
//! admin API of `weir serve` and the members of a group:
//!
//! 1. [`prepare`]: compile the bytes (through the compile cache), check them against the
//!    WIT contract and run `init` against a scratch host, off the processing path. A
//!    component that cannot work is refused here, before the pipeline is touched.
//! 2. [`swap_into`]: hand the prepared function to the run through its
//!    [`RunControl`]; the run swaps it in between two batches of records, keeping state
//!    and timers, and puts it on probation for [`DEFAULT_PROBATION_CALLS`] calls, after
//!    which the old version is let go (a failure within them rolls back to it).
//! 3. [`Versions`]: the numbered versions a pipeline has run, to roll back to.
//!
//! Errors are typed ([`Refusal`]); the admin API maps them to HTTP statuses.

#![warn(missing_docs)]

use serde::Serialize;
use std::sync::{Arc, Mutex};
use weir_core::identity::UdfIdentity;
use weir_core::time::wall_clock_ms;
use weir_engine::runtime::wasm::{LoadedComponent, WasmFunction};
use weir_engine::runtime::{HostServices, InitInfo, ProcessFunction};
use weir_pipeline::PipelineSpec;
use weir_run::{RunControl, RunState, SwapRequest, SWAP_WAIT};

/// The default number of calls a new UDF version is on probation for.
pub const DEFAULT_PROBATION_CALLS: u64 = 100;

/// A UDF version a pipeline has run: kept so it can be rolled back to.
#[derive(Clone)]
pub struct UdfVersion {
    /// 1 for the version the pipeline started with, then one more per new component.
    pub number: u32,
    /// The SHA-256 of the component, in hex.
    pub sha256: String,
    /// The component itself.
    pub bytes: Arc<Vec<u8>>,
    /// When it was first deployed, in ms since the epoch.
    pub deployed_at: i64,
}

/// How a version looks in the API.
#[derive(Debug, Serialize)]
pub struct VersionInfo {
    /// Its number.
    pub version: u32,
    /// The SHA-256 of its component.
    pub sha256: String,
    /// The size of its component.
    pub bytes: usize,
    /// When it was first deployed, in ms since the epoch.
    pub deployed_at: i64,
    /// Whether it is the version running now.
    pub active: bool,
}

/// The versions a pipeline has run, numbered in the order they were first deployed;
/// shared between whoever deploys (the admin API) and whoever learns of versions
/// deployed elsewhere (a group's steering).
#[derive(Clone, Default)]
pub struct Versions(Arc<Mutex<Vec<UdfVersion>>>);

impl Versions {
    /// The list of `versions` kept from an earlier run of the server (its registry),
    /// sorted by number.
    pub fn restored(mut versions: Vec<UdfVersion>) -> Self {
        versions.sort_by_key(|v| v.number);
        Self(Arc::new(Mutex::new(versions)))
    }

    /// The list with one version, number 1: the component a pipeline starts with.
    pub fn starting_with(bytes: Arc<Vec<u8>>, sha256: String) -> Self {
        let this = Self::default();
        this.insert(1, bytes, sha256);
        this
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<UdfVersion>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of the version with this hash, and `true`, if it is known; else the
    /// number a new version gets (one past the highest), and `false`.
    pub fn number_for(&self, sha256: &str) -> (u32, bool) {
        let versions = self.lock();
        match versions.iter().find(|v| v.sha256 == sha256) {
            Some(found) => (found.number, true),
            None => (
                versions.iter().map(|v| v.number).max().unwrap_or(0) + 1,
                false,
            ),
        }
    }

    /// Records version `number` (deployed now), unless its hash is known already; says
    /// whether it was new.
    pub fn insert(&self, number: u32, bytes: Arc<Vec<u8>>, sha256: String) -> bool {
        let mut versions = self.lock();
        if versions.iter().any(|v| v.sha256 == sha256) {
            return false;
        }
        versions.push(UdfVersion {
            number,
            sha256,
            bytes,
            deployed_at: wall_clock_ms(),
        });
        true
    }

    /// Forgets the versions whose number `kept` refuses (their components with them):
    /// the server keeps in memory the versions its registry keeps on disk.
    pub fn retain(&self, kept: impl Fn(u32) -> bool) {
        self.lock().retain(|v| kept(v.number));
    }

    /// The version recorded last.
    pub fn last(&self) -> Option<UdfVersion> {
        self.lock().last().cloned()
    }

    /// The version with this hash, if known.
    pub fn with_sha256(&self, sha256: &str) -> Option<UdfVersion> {
        self.lock().iter().find(|v| v.sha256 == sha256).cloned()
    }

    /// The number of the version with this hash, if known.
    pub fn number_of(&self, sha256: &str) -> Option<u32> {
        self.lock()
            .iter()
            .find(|v| v.sha256 == sha256)
            .map(|v| v.number)
    }

    /// The highest-numbered version below `number`: what a rollback from it goes to.
    pub fn before(&self, number: u32) -> Option<UdfVersion> {
        self.lock()
            .iter()
            .filter(|v| v.number < number)
            .max_by_key(|v| v.number)
            .cloned()
    }

    /// Every version as the API shows it, the one whose hash is `active_sha256` marked
    /// active.
    pub fn info(&self, active_sha256: &str) -> Vec<VersionInfo> {
        self.lock()
            .iter()
            .map(|v| VersionInfo {
                version: v.number,
                sha256: v.sha256.clone(),
                bytes: v.bytes.len(),
                deployed_at: v.deployed_at,
                active: v.sha256 == active_sha256,
            })
            .collect()
    }
}

/// Why a component or a swap was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The component cannot work: it does not compile, does not match the contract,
    /// its `init` fails, or the run refused it (an output it declares has no sink).
    Rejected(String),
    /// The pipeline cannot take a version now: it is not running, or still starting.
    NotReady(String),
    /// The pipeline did not take the version in time (stuck in a UDF call?).
    TimedOut(String),
    /// The version runs here but could not be handed on (to a group's version log).
    NotPublished(String),
    /// Something the host could not do (read a file, start a thread).
    Failed(String),
}

impl Refusal {
    /// What was refused and why, for people.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Rejected(m)
            | Refusal::NotReady(m)
            | Refusal::TimedOut(m)
            | Refusal::NotPublished(m)
            | Refusal::Failed(m) => m,
        }
    }

    /// The same refusal, its message prefixed by `context` (such as `task 3`).
    pub fn context(self, context: &str) -> Self {
        let wrap = |m: String| format!("{context}: {m}");
        match self {
            Refusal::Rejected(m) => Refusal::Rejected(wrap(m)),
            Refusal::NotReady(m) => Refusal::NotReady(wrap(m)),
            Refusal::TimedOut(m) => Refusal::TimedOut(wrap(m)),
            Refusal::NotPublished(m) => Refusal::NotPublished(wrap(m)),
            Refusal::Failed(m) => Refusal::Failed(wrap(m)),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Refusal {}

/// A swap that happened.
#[derive(Debug, Serialize)]
pub struct Deployed {
    /// The version's number.
    pub version: u32,
    /// The SHA-256 of its component.
    pub sha256: String,
    /// Compiling and checking the component, before the pipeline was touched.
    pub prepare_ms: f64,
    /// How long processing waited for the swap itself.
    pub swap_pause_ms: f64,
}

/// A component ready to run: the function, initialised, and its identity.
pub struct Prepared {
    /// The function, its `init` run against a scratch host.
    pub function: Box<dyn ProcessFunction>,
    /// Its name and hash.
    pub identity: UdfIdentity,
}

/// Compiles component bytes, checks them against the contract and runs `init` against a
/// scratch host, so that a component that cannot work is refused before the pipeline is
/// touched.
pub fn prepare(spec: &PipelineSpec, bytes: &[u8]) -> Result<Prepared, Refusal> {
    let (function, identity) = weir_run::udf_from_bytes(spec, bytes)
        .map_err(|e| Refusal::Rejected(format!("rejected: {e:#}")))?;
    prepare_function(spec, function, identity)
}

/// [`prepare`] of a component already compiled (`weir dev`'s Python development runtime
/// with a new set of sources): checked by running its `init` against a scratch host.
pub fn prepare_component(
    spec: &PipelineSpec,
    component: LoadedComponent,
) -> Result<Prepared, Refusal> {
    let identity = UdfIdentity {
        name: spec.udf.name.clone(),
        sha256: component.sha256.clone(),
    };
    let function = WasmFunction::new(component, weir_run::udf_limits(spec));
    prepare_function(spec, function, identity)
}

fn prepare_function(
    spec: &PipelineSpec,
    mut function: WasmFunction,
    identity: UdfIdentity,
) -> Result<Prepared, Refusal> {
    let mut scratch = HostServices::new(wall_clock_ms());
    function
        .init(&mut scratch, &init_info(spec))
        .map_err(|e| Refusal::Rejected(format!("rejected: its init failed: {e}")))?;
    Ok(Prepared {
        function: Box::new(function),
        identity,
    })
}

/// Puts component `bytes` (version `number`) into a running pipeline: prepared off the
/// processing path, then swapped in between two runs of records. Waits for the swap, at
/// most [`SWAP_WAIT`]. `running` says whether the run's thread is alive.
pub fn swap_into(
    spec: &PipelineSpec,
    control: &RunControl,
    running: bool,
    bytes: Arc<Vec<u8>>,
    number: u32,
    probation_calls: u64,
) -> Result<Deployed, Refusal> {
    ready(control, running)?;
    let started = std::time::Instant::now();
    let prepared = prepare(spec, &bytes)?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    swap_prepared_into(
        control,
        running,
        prepared,
        prepare_ms,
        number,
        probation_calls,
    )
}

/// Whether the pipeline can take a new version now.
fn ready(control: &RunControl, running: bool) -> Result<(), Refusal> {
    if !running {
        return Err(Refusal::NotReady("the pipeline is not running".into()));
    }
    if control.status().state == RunState::Starting {
        return Err(Refusal::NotReady(
            "the pipeline is still starting (opening its sources); try again when it runs".into(),
        ));
    }
    Ok(())
}

/// [`swap_into`] of a version prepared already (with [`prepare_component`]), which took
/// `prepare_ms` to prepare.
pub fn swap_prepared_into(
    control: &RunControl,
    running: bool,
    prepared: Prepared,
    prepare_ms: f64,
    number: u32,
    probation_calls: u64,
) -> Result<Deployed, Refusal> {
    ready(control, running)?;
    let Prepared { function, identity } = prepared;
    let sha256 = identity.sha256.clone();
    let (done, reply) = std::sync::mpsc::channel();
    control.request_swap(SwapRequest {
        function,
        identity,
        probation_calls,
        done,
    });
    match reply.recv_timeout(SWAP_WAIT) {
        Ok(Ok(swapped)) => Ok(Deployed {
            version: number,
            sha256,
            prepare_ms,
            swap_pause_ms: swapped.pause.as_secs_f64() * 1e3,
        }),
        Ok(Err(message)) => Err(Refusal::Rejected(message)),
        Err(_) => {
            // Withdraw it, so that it is not applied later behind the caller's back.
            drop(control.take_swap());
            Err(Refusal::TimedOut(
                "the pipeline did not take the new version in time (is it stuck in a UDF call?)"
                    .into(),
            ))
        }
    }
}

/// What the UDF of `spec` learns at start-up: its config and the names of its inputs.
pub fn init_info(spec: &PipelineSpec) -> InitInfo {
    InitInfo {
        config: spec.udf.config.clone(),
        inputs: spec.input_names(),
    }
}
