//! Steering a running pipeline from outside (`weir serve`, `weir dev`): stopping it,
//! swapping its UDF for a new version, and reading its live status.
//!
//! The runner looks at its [`RunControl`] between two runs of records, so a swap never
//! lands in the middle of a key's element or timer, and publishes a [`LiveStatus`] a few
//! times a second.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use weir_core::identity::UdfIdentity;
use weir_core::time::Timestamp;
use weir_engine::runtime::ProcessFunction;

/// How long a swap request may wait for the pipeline to pick it up.
pub const SWAP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A new UDF version for a running pipeline, compiled and checked already.
pub struct SwapRequest {
    /// The new version, not initialised: its `init` runs against the live host when
    /// the run swaps it in.
    pub function: Box<dyn ProcessFunction>,
    /// The new version's name and SHA-256: what the status and later checkpoints name
    /// once it is swapped in.
    pub identity: UdfIdentity,
    /// Calls the new version must pass before the old one is dropped; a failure before
    /// then rolls back to the old version (0: no probation).
    pub probation_calls: u64,
    /// Told when the swap has happened (or why it could not).
    pub done: mpsc::Sender<Result<SwapDone, String>>,
}

/// A swap that happened: how long processing waited for it.
#[derive(Debug, Clone, Copy)]
pub struct SwapDone {
    /// How long the run stopped processing for the swap (the new version's `init` and
    /// the swap itself).
    pub pause: std::time::Duration,
}

/// Shared between a running pipeline and whoever steers it.
#[derive(Default)]
pub struct RunControl {
    /// Set to stop the run gracefully (as SIGTERM does).
    pub stop: Arc<AtomicBool>,
    swap: Mutex<Option<SwapRequest>>,
    status: Mutex<LiveStatus>,
}

impl std::fmt::Debug for RunControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControl").finish_non_exhaustive()
    }
}

impl RunControl {
    /// A control with no stop asked for, no swap queued and a status that says
    /// [`RunState::Starting`], to share between the run and whoever steers it.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// [`new`](Self::new), stopped through `stop`: the controls of a graph's stages
    /// share one, so that the stages stop together.
    pub fn with_stop(stop: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Self {
            stop,
            ..Self::default()
        })
    }

    /// Queues a swap; the pipeline applies it between two runs of records. A swap still
    /// waiting is replaced (and told so).
    pub fn request_swap(&self, request: SwapRequest) {
        let mut slot = self.swap.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = slot.replace(request) {
            let _ = old.done.send(Err(
                "replaced by a newer version before it was swapped in".into()
            ));
        }
    }

    /// Takes the queued swap, if any, leaving none. The run calls this between two runs
    /// of records to apply it; a requester that gave up waiting calls it to withdraw its
    /// request, so that it is not applied later.
    pub fn take_swap(&self) -> Option<SwapRequest> {
        self.swap.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A copy of the latest status.
    pub fn status(&self) -> LiveStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes the status: called by the run a few times a second, and by whoever runs
    /// it to mark it starting, stopped or failed around the run itself.
    pub fn update(&self, f: impl FnOnce(&mut LiveStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Where a run is in its life, as its status shows it (serialised as the lower-case
/// words, for the admin API, the status page and `weir status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum RunState {
    /// Opening its sources and sinks, restoring its checkpoint: not processing yet.
    #[default]
    #[serde(rename = "starting")]
    Starting,
    /// Processing records (or waiting for them).
    #[serde(rename = "running")]
    Running,
    /// A group pipeline whose process has no task (partition) yet.
    #[serde(rename = "waiting for tasks")]
    WaitingForTasks,
    /// Every input ended and the run completed.
    #[serde(rename = "finished")]
    Finished,
    /// Asked to stop; it took its last checkpoint and stopped.
    #[serde(rename = "stopped")]
    Stopped,
    /// It stopped on an error (see the status's `last_error`), and `weir serve` waits to
    /// start it again from its last checkpoint (its `[restart]` strategy).
    #[serde(rename = "restarting")]
    Restarting,
    /// It stopped on an error (see the status's `last_error`).
    #[serde(rename = "failed")]
    Failed,
}

impl RunState {
    /// The state as the status shows it: `starting`, `running`, `waiting for tasks`,
    /// `finished`, `stopped`, `restarting` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::WaitingForTasks => "waiting for tasks",
            RunState::Finished => "finished",
            RunState::Stopped => "stopped",
            RunState::Restarting => "restarting",
            RunState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a running pipeline looks like from outside.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveStatus {
    /// Where the run is in its life.
    pub state: RunState,
    /// The running UDF's name.
    pub udf: String,
    /// The SHA-256 (hex) of the running UDF version: after a swap the new one's, after
    /// a rollback the old one's again.
    pub udf_sha256: String,
    /// Per source: name, records read.
    pub sources: Vec<(String, u64)>,
    /// Per output: name, records emitted.
    pub outputs: Vec<(String, u64)>,
    /// Elements processed so far (a resumed run counts those before its checkpoint).
    pub processed: u64,
    /// Records and timers sent to the dead-letter output.
    pub dead_letters: u64,
    /// Why this run sent them, one count per cause.
    pub dead_letter_causes: crate::report::DeadLetterCauses,
    /// Elements that arrived at or below the watermark.
    pub late: u64,
    /// The pipeline's watermark; `None` before it first advances and once every input
    /// has ended.
    pub watermark: Option<Timestamp>,
    /// Wall clock minus watermark, in ms (while the watermark is set).
    pub watermark_lag_ms: Option<i64>,
    /// Live keys: those holding state or pending timers.
    pub keys: u64,
    /// Bytes of keyed state over all keys (recounted at most once a second).
    pub state_bytes: u64,
    /// With the disk state backend: what its stores hold on disk and in memory, and the
    /// cache's hits and misses, summed over the shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_store: Option<weir_core::state::SpillFigures>,
    /// Pending event-time timers.
    pub event_timers: u64,
    /// Pending processing-time timers.
    pub processing_timers: u64,
    /// Calls the version swapped in last must still pass before its probation is over;
    /// `None` when no version is on probation (it passed, or was rolled back: then
    /// `udf_sha256` names the version before it again).
    pub probation_calls_left: Option<u64>,
    /// Failed UDF calls on records and timers: those that rolled a new version back, and
    /// those the pipeline's `on_error` policy sent to the dead letters or retried (the
    /// failure that ends a run is not counted; it is in `last_error`).
    pub udf_errors: u64,
    /// Calls made again after a failure (`on_error = "retry"`).
    pub udf_retries: u64,
    /// Records and timers the UDF rejected itself (sent to the dead letters).
    pub rejected: u64,
    /// How often `weir serve` restarted the pipeline after a failure.
    pub restarts: u64,
    /// The latest error worth showing: why a new version was rolled back, or what the
    /// run failed with.
    pub last_error: Option<String>,
    /// Records per second over the last few seconds.
    pub records_per_second: f64,
    /// (unix ms, records processed) once a second, for the last ten minutes.
    pub history: VecDeque<(i64, u64)>,
    /// Checkpoints this run has taken (not counting those of earlier runs).
    pub checkpoints: u64,
    /// The last [`KEPT_IN_STATUS`] checkpoints this run took, oldest first.
    pub checkpoint_history: VecDeque<CheckpointRecord>,
    /// The last [`KEPT_IN_STATUS`] errors worth showing (rollbacks of a failing version,
    /// the failure that ended the run), oldest first, each with its whole message;
    /// `last_error` is the newest one's message.
    pub exceptions: VecDeque<ExceptionRecord>,
    /// In a group (`weir serve --group`): the tasks (partitions) running in this process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<i32>>,
    /// In a group: each task's own figures, by partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_status: Option<Vec<TaskStatus>>,
    /// Each keyed shard's own figures, by shard index (one entry at parallelism 1); the
    /// figures above are their sums.
    pub shards: Vec<ShardStatus>,
}

/// One keyed shard of a pipeline, as its status shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ShardStatus {
    /// Elements its UDF processed.
    pub processed: u64,
    /// Its live keys.
    pub keys: u64,
    /// Its pending event-time timers.
    pub event_timers: u64,
    /// Its pending processing-time timers.
    pub processing_timers: u64,
}

/// How many checkpoints and exceptions a [`LiveStatus`] keeps.
pub const KEPT_IN_STATUS: usize = 20;

/// One checkpoint a run took, as its status shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointRecord {
    /// Its epoch (number).
    pub epoch: u64,
    /// When it was cut, in ms since the epoch.
    pub at: i64,
    /// How long processing paused for it, in ms: the sinks made durable, the state
    /// encoded. The file is written in the background after that.
    pub pause_ms: f64,
    /// Its size, encoded as the store keeps it.
    pub bytes: u64,
    /// `full` (every key's state) or `incremental` (the changes since its parent).
    pub kind: &'static str,
    /// Per source: its name and the records it had delivered when the checkpoint was
    /// cut (what a restore from it has read), as [`LiveStatus::sources`] counts them.
    pub read: Vec<(String, u64)>,
}

/// An error a run met, as its status shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExceptionRecord {
    /// When, in ms since the epoch.
    pub at: i64,
    /// The whole message, newlines kept.
    pub message: String,
}

/// One task of a group pipeline, as the pipeline's status shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskStatus {
    /// The task: the partition it runs.
    pub task: i32,
    /// Where the task is in its life.
    pub state: RunState,
    /// Elements it processed.
    pub processed: u64,
    /// Records per second over the last few seconds.
    pub records_per_second: f64,
    /// Its watermark, if set.
    pub watermark: Option<Timestamp>,
    /// Wall clock minus its watermark, in ms.
    pub watermark_lag_ms: Option<i64>,
    /// Checkpoints it took.
    pub checkpoints: u64,
    /// Its newest error, if any.
    pub last_error: Option<String>,
}

impl LiveStatus {
    /// Records an error worth showing: it becomes `last_error` and joins `exceptions`
    /// (keeping the last [`KEPT_IN_STATUS`]).
    pub fn record_error(&mut self, message: String) {
        self.exceptions.push_back(ExceptionRecord {
            at: weir_core::time::wall_clock_ms(),
            message: message.clone(),
        });
        while self.exceptions.len() > KEPT_IN_STATUS {
            self.exceptions.pop_front();
        }
        self.last_error = Some(message);
    }
}

/// Keeps a status's rate and history up to date.
#[derive(Default)]
pub struct RateTracker {
    last: Option<(Instant, u64)>,
    last_sample: Option<Instant>,
}

impl RateTracker {
    /// A tracker that has seen nothing yet: its first observation only sets the
    /// starting point of the rate.
    pub fn new() -> Self {
        Self {
            last: None,
            last_sample: None,
        }
    }

    /// Updates `status` from its `processed` count: `records_per_second` over the time
    /// since the last update (once at least a second has passed), and a sample
    /// `(now_ms, processed)` appended to `history` at most once a second, keeping the
    /// last 600. Called each time a status is published.
    pub fn observe(&mut self, status: &mut LiveStatus, now_ms: i64) {
        let now = Instant::now();
        if let Some((at, processed)) = self.last {
            let seconds = now.duration_since(at).as_secs_f64();
            if seconds >= 1.0 {
                status.records_per_second =
                    status.processed.saturating_sub(processed) as f64 / seconds;
                self.last = Some((now, status.processed));
            }
        } else {
            self.last = Some((now, status.processed));
        }
        if self
            .last_sample
            .is_none_or(|at| now.duration_since(at).as_secs_f64() >= 1.0)
        {
            self.last_sample = Some(now);
            status.history.push_back((now_ms, status.processed));
            while status.history.len() > 600 {
                status.history.pop_front();
            }
        }
    }
}
