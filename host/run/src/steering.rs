//! A run steered from outside (`weir serve`, `weir dev`, a group's member): between two
//! runs of records it applies a UDF version queued in its [`RunControl`] and publishes
//! its [`LiveStatus`](crate::LiveStatus) a few times a second.

use crate::checkpointing::Checkpoints;
use crate::report::RunReport;
use crate::{short_hash, RateTracker, RunControl, RunState, ShardStatus, SwapDone, SwapRequest};
use std::time::{Duration, Instant};
use weir_core::identity::UdfIdentity;
use weir_core::time::timers::TimeDomain;
use weir_core::time::{wall_clock_ms, END_OF_TIME, MIN_WATERMARK};
use weir_engine::operator::KeyedOperator;
use weir_engine::runtime::InitInfo;

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

/// Applies a queued swap to every shard's operator (`operators`, shard 0 first): the new
/// version's `init` against each live host, then the swap; `udf` follows. Called by the
/// run between two runs of records, where no key is in a call and no batch is open.
/// Returns what the requester is told. If a shard refuses the new version, the shards
/// that took it go back to the old one (when its probation keeps it), and the swap
/// fails.
pub(crate) fn apply_swap(
    mut operators: Vec<&mut KeyedOperator>,
    init_info: &InitInfo,
    udf: &mut UdfVersions,
    request: SwapRequest,
) -> Result<SwapDone, String> {
    let started = Instant::now();
    let mut functions = Vec::with_capacity(operators.len());
    for _ in 1..operators.len() {
        functions.push(request.function.another_instance().ok_or_else(|| {
            "the new version was not swapped in: it cannot be instantiated once per shard"
                .to_string()
        })?);
    }
    functions.insert(0, request.function);
    // Prepared in every shard, then committed in all, or in none: a shard that refuses
    // it leaves every shard with the running version, whatever the probation.
    let mut prepared = Vec::with_capacity(operators.len());
    for (shard, function) in functions.into_iter().enumerate() {
        match operators[shard].prepare_swap(function, init_info) {
            Ok(ready) => prepared.push(ready),
            Err(e) => {
                for (operator, ready) in operators.iter_mut().zip(prepared) {
                    operator.abort_swap(ready);
                }
                return Err(format!("the new version was not swapped in: {e}"));
            }
        }
    }
    for (operator, ready) in operators.iter_mut().zip(prepared) {
        operator.commit_swap(ready, request.probation_calls);
    }
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
    /// and what the shards' `operators` (shard 0 first), `udf` and `checkpoints` say:
    /// keys, state and timers summed over the shards. Called by the run when a status is
    /// [due](Self::due), after a swap, and once when the run ends.
    pub fn publish(
        &mut self,
        control: &RunControl,
        state: RunState,
        report: RunReport,
        operators: &[&KeyedOperator],
        udf: &UdfVersions,
        checkpoints: &Checkpoints,
    ) {
        self.last = Instant::now();
        let hosts = || operators.iter().map(|o| o.host());
        // Every shard reads every record's timestamp: their watermarks are the same.
        let watermark = operators[0].watermark();
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
                .map(|h| h.timers().pending(domain) as u64)
                .sum::<u64>()
        };
        let event_timers = pending(TimeDomain::EventTime);
        let processing_timers = pending(TimeDomain::ProcessingTime);
        let probation_calls_left = operators
            .iter()
            .filter_map(|o| o.probation_calls_left())
            .max();
        let shards: Vec<ShardStatus> = operators
            .iter()
            .map(|o| ShardStatus {
                processed: o.counters().elements,
                keys: o.host().keys().len() as u64,
                event_timers: o.host().timers().pending(TimeDomain::EventTime) as u64,
                processing_timers: o.host().timers().pending(TimeDomain::ProcessingTime) as u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use weir_engine::runtime::{CallError, ElementRef, FiredTimer, HostServices, ProcessFunction};

    /// A version named `name` whose instance number `refused` (0 is the first) refuses
    /// to initialise, as a shard whose `init` fails would.
    struct Version {
        name: &'static str,
        instance: usize,
        made: Arc<AtomicUsize>,
        refused: Option<usize>,
    }

    impl Version {
        fn new(name: &'static str, refused: Option<usize>) -> Box<Self> {
            Box::new(Version {
                name,
                instance: 0,
                made: Arc::new(AtomicUsize::new(1)),
                refused,
            })
        }
    }

    impl ProcessFunction for Version {
        fn name(&self) -> &str {
            self.name
        }

        fn init(&mut self, host: &mut HostServices, _info: &InitInfo) -> Result<(), CallError> {
            if self.refused == Some(self.instance) {
                return Err(CallError::Returned(format!(
                    "instance {} refuses",
                    self.instance
                )));
            }
            host.declare_output("main").map_err(CallError::Returned)?;
            Ok(())
        }

        fn process_element(
            &mut self,
            _host: &mut HostServices,
            _element: ElementRef<'_>,
        ) -> Result<(), CallError> {
            Ok(())
        }

        fn on_timer(
            &mut self,
            _host: &mut HostServices,
            _timer: FiredTimer<'_>,
        ) -> Result<(), CallError> {
            Ok(())
        }

        fn another_instance(&self) -> Option<Box<dyn ProcessFunction>> {
            Some(Box::new(Version {
                name: self.name,
                instance: self.made.fetch_add(1, Ordering::SeqCst),
                made: Arc::clone(&self.made),
                refused: self.refused,
            }))
        }
    }

    fn identity(name: &str) -> UdfIdentity {
        UdfIdentity {
            name: name.into(),
            sha256: format!("{name:0>64}"),
        }
    }

    /// Four shards on v1, and a swap to v2 that `refused` refuses.
    fn swap(
        probation_calls: u64,
        refused: Option<usize>,
    ) -> (Vec<KeyedOperator>, UdfVersions, Result<SwapDone, String>) {
        let mut shards: Vec<KeyedOperator> = (0..4)
            .map(|_| {
                let mut operator = KeyedOperator::new(Version::new("v1", None), &[0], 0);
                operator.init(&InitInfo::default()).expect("v1 starts");
                operator
            })
            .collect();
        let mut udf = UdfVersions::new(identity("v1"));
        let (done, _) = mpsc::channel();
        let request = SwapRequest {
            function: Version::new("v2", refused),
            identity: identity("v2"),
            probation_calls,
            done,
        };
        let result = apply_swap(
            shards.iter_mut().collect(),
            &InitInfo::default(),
            &mut udf,
            request,
        );
        (shards, udf, result)
    }

    #[test]
    fn a_swap_refused_by_one_shard_of_four_changes_no_shard() {
        for probation_calls in [0, 100] {
            let (shards, udf, result) = swap(probation_calls, Some(2));
            let error = result.expect_err("shard 2 refuses");
            assert!(error.contains("instance 2 refuses"), "{error}");
            let names: Vec<&str> = shards.iter().map(KeyedOperator::function_name).collect();
            assert_eq!(names, ["v1"; 4], "probation {probation_calls}");
            assert_eq!(
                udf.current.name, "v1",
                "the status names the version every shard runs"
            );
            assert!(shards.iter().all(|s| !s.in_probation()));
        }
    }

    #[test]
    fn a_swap_every_shard_takes_changes_them_all() {
        for probation_calls in [0, 100] {
            let (shards, udf, result) = swap(probation_calls, None);
            result.expect("every shard takes it");
            let names: Vec<&str> = shards.iter().map(KeyedOperator::function_name).collect();
            assert_eq!(names, ["v2"; 4]);
            assert_eq!(udf.current.name, "v2");
            assert!(shards
                .iter()
                .all(|s| s.in_probation() == (probation_calls > 0)));
        }
    }
}
