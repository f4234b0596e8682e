//! A run steered from outside (`weir serve`, `weir dev`, a group's member): between two
//! runs of records it applies a UDF version queued in its [`RunControl`] and publishes
//! its [`LiveStatus`](crate::control::LiveStatus) a few times a second.

use crate::checkpointing::Checkpoints;
use crate::control::{RateTracker, RunControl, RunState, ShardStatus, SwapDone, SwapRequest};
use crate::report::RunReport;
use crate::udf::short_hash;
use std::time::{Duration, Instant};
use weir_core::identity::UdfIdentity;
use weir_core::time::timers::TimeDomain;
use weir_core::time::{wall_clock_ms, END_OF_TIME, MIN_WATERMARK};
use weir_engine::runtime::InitInfo;
use weir_engine::stage::KeyedStage;

/// How often a steered run publishes its status.
const STATUS_EVERY: Duration = Duration::from_millis(200);

/// The UDF version a run is on, and the one a swap replaced (while it may still be rolled
/// back to).
pub(crate) struct UdfVersions {
    /// The version running.
    pub current: UdfIdentity,
    /// The version the last swap replaced, kept until its probation is over.
    pub previous: Option<UdfIdentity>,
}

impl UdfVersions {
    /// A run that starts with `current`.
    pub fn new(current: UdfIdentity) -> Self {
        Self {
            current,
            previous: None,
        }
    }
}

/// When the status was last published, and what is costly to measure for it.
pub(crate) struct StatusPublisher {
    last: Instant,
    /// Summing state bytes walks every key: done at most once a second.
    state_bytes: (Instant, u64),
    rate: RateTracker,
}

impl StatusPublisher {
    /// Publishes at the first chance.
    pub fn new() -> Self {
        Self {
            last: Instant::now() - Duration::from_secs(1),
            state_bytes: (Instant::now() - Duration::from_secs(2), 0),
            rate: RateTracker::new(),
        }
    }
}

/// Applies a queued swap to every shard of `stage` ([`KeyedStage::swap`]: every shard
/// or none); `udf` follows. Called by the run between two runs of records, where no key
/// is in a call and no batch is open. Returns what the requester is told.
pub(crate) fn apply_swap(
    stage: &mut KeyedStage,
    init_info: &InitInfo,
    udf: &mut UdfVersions,
    request: SwapRequest,
) -> Result<SwapDone, String> {
    let started = Instant::now();
    stage.swap(request.function, init_info, request.probation_calls)?;
    let pause = started.elapsed();
    tracing::info!(
        "UDF {:?} version {} swapped in ({:.2} ms)",
        request.identity.name,
        short_hash(&request.identity.sha256),
        pause.as_secs_f64() * 1e3
    );
    let previous = std::mem::replace(&mut udf.current, request.identity);
    udf.previous = Some(previous);
    Ok(SwapDone { pause })
}

impl StatusPublisher {
    /// Whether a status is due (a few times a second since the last [`publish`](Self::publish)).
    pub fn due(&self) -> bool {
        self.last.elapsed() >= STATUS_EVERY
    }

    /// Writes the live figures into `control`, the run being in `state`: `report` so far,
    /// and what the shards of `stage`, `udf` and `checkpoints` say:
    /// keys, state and timers summed over the shards. Called by the run when a status is
    /// [due](Self::due), after a swap, and once when the run ends.
    pub fn publish(
        &mut self,
        control: &RunControl,
        state: RunState,
        report: RunReport,
        stage: &KeyedStage,
        udf: &UdfVersions,
        checkpoints: &Checkpoints,
    ) {
        self.last = Instant::now();
        let hosts = || stage.shards().map(|o| o.host());
        // Every shard reads every record's timestamp: their watermarks are the same.
        let watermark = stage.watermark();
        let set = watermark > MIN_WATERMARK && watermark < END_OF_TIME;
        let keys = hosts().map(|h| h.keys().len() as u64).sum();
        let state_bytes = if self.state_bytes.0.elapsed() >= Duration::from_secs(1) {
            let bytes = hosts().map(|h| h.keys().state_bytes() as u64).sum();
            self.state_bytes = (Instant::now(), bytes);
            bytes
        } else {
            self.state_bytes.1
        };
        let pending = |domain| {
            hosts()
                .map(|h| h.pending_timers(domain) as u64)
                .sum::<u64>()
        };
        let event_timers = pending(TimeDomain::EventTime);
        let processing_timers = pending(TimeDomain::ProcessingTime);
        let probation_calls_left = stage
            .shards()
            .filter_map(|o| o.probation_calls_left())
            .max();
        let shards: Vec<ShardStatus> = stage
            .shards()
            .map(|o| ShardStatus {
                processed: o.counters().elements,
                keys: o.host().keys().len() as u64,
                event_timers: o.host().pending_timers(TimeDomain::EventTime) as u64,
                processing_timers: o.host().pending_timers(TimeDomain::ProcessingTime) as u64,
            })
            .collect();
        let now = wall_clock_ms();
        let rate = &mut self.rate;
        control.update(|s| {
            s.state = state;
            s.udf = udf.current.name.clone();
            s.udf_sha256 = udf.current.sha256.clone();
            s.sources = report.sources;
            s.outputs = report.outputs;
            s.processed = report.processed;
            s.dead_letters = report.dead_letters;
            s.dead_letter_causes = report.dead_letter_causes;
            s.late = report.late;
            s.watermark = set.then_some(watermark);
            // Saturated: a watermark near the start of time must not wrap around.
            s.watermark_lag_ms = set.then(|| now.saturating_sub(watermark));
            s.keys = keys;
            s.state_bytes = state_bytes;
            s.state_store = report.state_store;
            s.event_timers = event_timers;
            s.processing_timers = processing_timers;
            s.udf_errors = report.udf_errors;
            s.udf_retries = report.udf_retries;
            s.rejected = report.rejected;
            s.probation_calls_left = probation_calls_left;
            s.shards = shards;
            s.checkpoints = checkpoints.taken;
            s.checkpoint_history.clone_from(&checkpoints.history);
            rate.observe(s, now);
        });
    }
}
