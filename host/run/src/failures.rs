//! A run's `[udf] on_error` policy and what it counts: the failed calls the run went on
//! from, the retries, the rejections, and how many calls on one record or timer failed
//! in a row. `recovery` decides with it; the runner owns it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;
use weir_pipeline::OnUdfError;

/// The most retry warnings logged in one second.
const WARNINGS_PER_SECOND: u32 = 10;

/// The record or timer a failed call was on, to count its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Site {
    /// Record `number` of input `input`.
    Record {
        /// The input's index.
        input: usize,
        /// The record's number in it.
        number: u64,
    },
    /// A timer.
    Timer {
        /// Its clock.
        domain: TimeDomain,
        /// Its time.
        timestamp: Timestamp,
        /// Its key.
        key: Vec<u8>,
    },
}

/// What the run does with a failed call, as the run's `on_failure` decides.
#[derive(Debug)]
pub(crate) enum Handling {
    /// The run ends with the error.
    Fail,
    /// The record or timer goes to the dead letters with this reason.
    DeadLetter(String),
    /// The same call again (the wait is over).
    Retry,
    /// The run was asked to stop while it waited to retry (the message says what
    /// failed): the record or timer is left for the run that resumes.
    StopBeforeRetry(String),
}

/// The pipeline's `on_error` policy and the failures the run survived under it.
pub(crate) struct UdfFailures {
    pub(crate) policy: OnUdfError,
    /// Cuts a retry's wait short when the run is asked to stop.
    stop: Option<Arc<AtomicBool>>,
    /// The site of the latest failure and how many calls on it failed in a row.
    latest: Option<(Site, u32)>,
    /// The retry warnings of the present second: when it started, how many were
    /// logged in it, and how many were left out since the last one logged.
    warnings: (Instant, u32, u64),
    /// Failed calls the run survived: rolled back, dead-lettered or retried.
    pub errors: u64,
    /// Calls made again after a failure.
    pub retries: u64,
    /// Records and timers the UDF rejected.
    pub rejected: u64,
    /// Records and timers the UDF failed on that went to the dead letters
    /// (`on_error = "dead-letter"`, or after the retries).
    pub dead_lettered: u64,
    /// Records and timers that went to the dead letters because the UDF could not read
    /// their key's state.
    pub unreadable_state: u64,
}

impl UdfFailures {
    /// No failures yet, under `policy`; waits end early once `stop` is set.
    pub fn new(policy: OnUdfError, stop: Option<Arc<AtomicBool>>) -> Self {
        Self {
            policy,
            stop,
            latest: None,
            warnings: (Instant::now(), 0, 0),
            errors: 0,
            retries: 0,
            rejected: 0,
            dead_lettered: 0,
            unreadable_state: 0,
        }
    }

    /// Counts a failed call on `site`; returns how many calls on it failed in a row.
    pub(crate) fn failed_on(&mut self, site: Site) -> u32 {
        let attempts = match self.latest.take() {
            Some((latest, attempts)) if latest == site => attempts + 1,
            _ => 1,
        };
        self.latest = Some((site, attempts));
        attempts
    }

    /// Whether a retry warning may be logged now: at most [`WARNINGS_PER_SECOND`] a
    /// second, so that retries without a backoff do not flood the log. `Some(n)`: yes,
    /// with `n` left out since the last one logged.
    pub(crate) fn warning_due(&mut self) -> Option<u64> {
        let now = Instant::now();
        let (second, logged, left_out) = &mut self.warnings;
        if now.duration_since(*second) >= Duration::from_secs(1) {
            (*second, *logged) = (now, 0);
        }
        if *logged >= WARNINGS_PER_SECOND {
            *left_out += 1;
            return None;
        }
        *logged += 1;
        Some(std::mem::take(left_out))
    }

    /// Whether the run was asked to stop.
    fn stop_requested(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Sleeps `wait`, or less once the run is asked to stop; whether the wait ran its
    /// course without a stop (a retry may follow).
    pub(crate) fn wait(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if self.stop_requested() {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }
}
