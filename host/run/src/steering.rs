//! A run steered from outside (`weir serve`, `weir dev`, a group's member): between two
//! runs of records it applies a UDF version queued in its [`RunControl`] and publishes
//! its [`LiveStatus`](crate::LiveStatus) a few times a second.

use crate::runner::Runner;
use crate::{short_hash, RateTracker, RunControl, RunOptions, RunState, SwapDone};
use std::time::{Duration, Instant};
use weir_core::time::timers::TimeDomain;
use weir_core::time::{wall_clock_ms, END_OF_TIME, MIN_WATERMARK};

/// How often a steered run publishes its status.
const STATUS_EVERY: Duration = Duration::from_millis(200);

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

impl Runner {
    /// Between two runs of records: applies a pending UDF swap, and publishes the status
    /// a few times a second.
    pub(crate) fn steer(&mut self, options: &RunOptions) {
        let Some(control) = &options.control else {
            return;
        };
        if let Some(request) = control.take_swap() {
            let started = Instant::now();
            let result = self.operator.swap_function(
                request.function,
                &self.init_info,
                request.probation_calls,
            );
            let reply = match result {
                Ok(()) => {
                    let pause = started.elapsed();
                    tracing::info!(
                        "UDF {:?} version {} swapped in ({:.2} ms)",
                        request.identity.name,
                        short_hash(&request.identity.sha256),
                        pause.as_secs_f64() * 1e3
                    );
                    let previous = std::mem::replace(&mut self.udf.current, request.identity);
                    self.udf.previous = Some(previous);
                    // The status shows the new version, and the records processed before
                    // it, before the swap is reported done.
                    self.status.last = Instant::now();
                    self.publish_status(control, RunState::Running);
                    Ok(SwapDone { pause })
                }
                Err(e) => Err(format!("the new version was not swapped in: {e}")),
            };
            let _ = request.done.send(reply);
        }
        if self.status.last.elapsed() >= STATUS_EVERY {
            self.status.last = Instant::now();
            self.publish_status(control, RunState::Running);
        }
    }

    /// Writes the live figures into `control`, the run being in `state`.
    pub(crate) fn publish_status(&mut self, control: &RunControl, state: RunState) {
        let report = self.report();
        let host = self.operator.host();
        let watermark = self.operator.watermark();
        let set = watermark > MIN_WATERMARK && watermark < END_OF_TIME;
        let keys = host.keys().len() as u64;
        let state_bytes = if self.status.state_bytes.0.elapsed() >= Duration::from_secs(1) {
            let bytes = host.keys().state_bytes() as u64;
            self.status.state_bytes = (Instant::now(), bytes);
            bytes
        } else {
            self.status.state_bytes.1
        };
        let event_timers = host.timers().pending(TimeDomain::EventTime) as u64;
        let processing_timers = host.timers().pending(TimeDomain::ProcessingTime) as u64;
        let now = wall_clock_ms();
        let rate = &mut self.status.rate;
        control.update(|s| {
            s.state = state;
            s.udf = self.udf.current.name.clone();
            s.udf_sha256 = self.udf.current.sha256.clone();
            s.sources = report.sources;
            s.outputs = report.outputs;
            s.processed = report.processed;
            s.dead_letters = report.dead_letters;
            s.late = report.late;
            s.watermark = set.then_some(watermark);
            s.watermark_lag_ms = set.then(|| now - watermark);
            s.keys = keys;
            s.state_bytes = state_bytes;
            s.event_timers = event_timers;
            s.processing_timers = processing_timers;
            s.udf_errors = self.udf.errors;
            s.checkpoints = self.checkpoints.taken;
            rate.observe(s, now);
        });
    }
}
