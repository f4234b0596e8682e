//! A run's `[udf] on_error` policy and what it counts: the failed calls the run went on
//! from, the retries, the rejections, and how many calls on one record or timer failed
//! in a row. `recovery` decides with it; the runner owns it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;
use weir_pipeline::OnUdfError;

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
}

/// The pipeline's `on_error` policy and the failures the run survived under it.
pub(crate) struct UdfFailures {
    pub(crate) policy: OnUdfError,
    /// Cuts a retry's wait short when the run is asked to stop.
    stop: Option<Arc<AtomicBool>>,
    /// The site of the latest failure and how many calls on it failed in a row.
    latest: Option<(Site, u32)>,
    /// Failed calls the run survived: rolled back, dead-lettered or retried.
    pub errors: u64,
    /// Calls made again after a failure.
    pub retries: u64,
    /// Records and timers the UDF rejected.
    pub rejected: u64,
}

impl UdfFailures {
    /// No failures yet, under `policy`; waits end early once `stop` is set.
    pub fn new(policy: OnUdfError, stop: Option<Arc<AtomicBool>>) -> Self {
        Self {
            policy,
            stop,
            latest: None,
            errors: 0,
            retries: 0,
            rejected: 0,
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

    /// Sleeps `wait`, or less once the run is asked to stop.
    pub(crate) fn wait(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
        }
    }
}
