//! Steering a pipeline that runs in a group from `weir serve --group`.
//!
//! `weir serve` steers a pipeline through one [`RunControl`]; in a group the pipeline is
//! the tasks this process was given, each a run with a control of its own. [`Steering`]
//! stands between the two: the server's control shows the tasks' statuses summed (and
//! which tasks run here), and its stop flag stops the member.
//!
//! **One version for the whole group.** A UDF version deployed to any member is swapped
//! into that member's tasks and then written to the group's version log, the topic
//! `<group>.<pipeline>.udf` (one partition, chunked like the checkpoints). Every member
//! follows the log: a version that appears there is swapped into its tasks too, and is the
//! version the tasks it gets later start with. A member that joins reads the log first,
//! so its tasks start with the group's current version, not the one its file names.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_checkpoint::kafka_store::{ChunkReader, Entry, KafkaBackend, KafkaCheckpoints};
use weir_checkpoint::store::Backend as _;
use weir_control::{prepare, swap_into, Deployed, Prepared, Refusal, Versions};
use weir_core::identity::sha256_hex;
use weir_pipeline::PipelineSpec;
use weir_run::{
    LiveStatus, RateTracker, RunControl, RunState, TaskStatus, KEPT_IN_STATUS, SWAP_WAIT,
};

/// How often a member looks for versions deployed elsewhere in the group.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// A pipeline run in a group, as `weir serve` steers it: the tasks running here behind
/// one control, and the UDF version they start with (see the module docs). Shared by the
/// member's loop, which adds and removes tasks, publishes their status and follows the
/// version log, and the admin API, which deploys.
pub struct Steering {
    /// What `weir serve` reads and sets: the summed status, and the stop flag.
    pub control: Arc<RunControl>,
    /// The pipeline as this server runs it, and the probation of a swap.
    pub spec: PipelineSpec,
    /// Calls a version swapped into a task must pass before the one it replaced is let
    /// go (a failure within them rolls the task back).
    pub probation_calls: u64,
    /// The UDF versions known here, shared with the admin API.
    pub versions: Versions,
    /// The component tasks start with (the pipeline's, or the last one deployed), and
    /// its hash.
    udf: Mutex<(Arc<Vec<u8>>, String)>,
    /// The running tasks' own controls, by partition.
    tasks: Mutex<BTreeMap<i32, Arc<RunControl>>>,
    rate: Mutex<RateTracker>,
    /// The group's version log, once the member has joined.
    log: Mutex<Option<VersionLog>>,
}

struct VersionLog {
    target: KafkaCheckpoints,
    reader: ChunkReader,
    /// Opened at the first publication (it does not read: the reader has).
    writer: Option<KafkaBackend>,
    last_read: Instant,
}

impl Steering {
    /// Steers through `control`; tasks start with the last of `versions` (the
    /// pipeline's component, to begin with).
    pub fn new(
        control: Arc<RunControl>,
        spec: PipelineSpec,
        probation_calls: u64,
        versions: Versions,
    ) -> Arc<Self> {
        let first = versions.last().expect("a pipeline has a UDF version");
        let udf = (first.bytes, first.sha256);
        Arc::new(Self {
            control,
            spec,
            probation_calls,
            versions,
            udf: Mutex::new(udf),
            tasks: Mutex::new(BTreeMap::new()),
            rate: Mutex::new(RateTracker::new()),
            log: Mutex::new(None),
        })
    }

    /// The component a task starting now runs.
    pub fn udf(&self) -> Arc<Vec<u8>> {
        Arc::clone(&self.udf.lock().unwrap_or_else(|e| e.into_inner()).0)
    }

    /// Makes `bytes` (whose hash is `sha256`) the component tasks start with from now on.
    pub fn set_udf(&self, bytes: Arc<Vec<u8>>, sha256: String) {
        *self.udf.lock().unwrap_or_else(|e| e.into_inner()) = (bytes, sha256);
    }

    /// The controls of the tasks running here, by partition.
    pub fn task_controls(&self) -> Vec<(i32, Arc<RunControl>)> {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.iter().map(|(&p, c)| (p, Arc::clone(c))).collect()
    }

    /// Counts the task of `partition`, steered through `control`, as running here: its
    /// status joins the sum and a swap goes into it. Called as the task starts.
    pub(super) fn add_task(&self, partition: i32, control: Arc<RunControl>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.insert(partition, control);
    }

    /// Forgets the task of `partition`: it is being stopped (its partition was revoked,
    /// the member leaves, or the task failed).
    pub(super) fn remove_task(&self, partition: i32) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.remove(&partition);
    }

    /// Publishes the tasks' statuses, summed, as the pipeline's.
    pub(super) fn publish_status(&self) {
        let tasks = self.task_controls();
        let statuses: Vec<LiveStatus> = tasks.iter().map(|(_, c)| c.status()).collect();
        let mut sum = summed(&statuses);
        sum.tasks = Some(tasks.iter().map(|(p, _)| *p).collect());
        sum.task_status = Some(
            tasks
                .iter()
                .zip(&statuses)
                .map(|((task, _), s)| TaskStatus {
                    task: *task,
                    state: s.state,
                    processed: s.processed,
                    records_per_second: s.records_per_second,
                    watermark: s.watermark,
                    watermark_lag_ms: s.watermark_lag_ms,
                    checkpoints: s.checkpoints,
                    last_error: s.last_error.clone(),
                })
                .collect(),
        );
        let previous = self.control.status();
        sum.history = previous.history;
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        rate.observe(&mut sum, weir_core::time::wall_clock_ms());
        self.control.update(|s| *s = sum);
    }

    /// Reads the group's version log (`topic` on `brokers`, which must exist) to its end:
    /// its versions become known here, and the last one is what tasks start with.
    pub(super) fn open_log(&self, brokers: &str, topic: &str) -> anyhow::Result<()> {
        let target = KafkaCheckpoints {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            partition: 0,
        };
        let mut reader = ChunkReader::open(&target)?;
        let entries = reader.read(true)?;
        if let Some((number, bytes, sha256)) = self.learn(entries) {
            tracing::info!("the group runs UDF version {number}: tasks start with it");
            self.set_udf(bytes, sha256);
        }
        *self.log.lock().unwrap_or_else(|e| e.into_inner()) = Some(VersionLog {
            target,
            reader,
            writer: None,
            last_read: Instant::now(),
        });
        Ok(())
    }

    /// Writes version `number` to the group's version log, for the other members.
    pub fn publish_version(&self, number: u32, bytes: &[u8]) -> anyhow::Result<()> {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let Some(log) = log.as_mut() else {
            anyhow::bail!("the member has not joined its group yet");
        };
        if log.writer.is_none() {
            log.writer = Some(KafkaBackend::writer(&log.target)?);
        }
        log.writer
            .as_ref()
            .expect("opened")
            .write(u64::from(number), bytes)
    }

    /// Looks for versions deployed by other members (at most every [`FOLLOW_EVERY`]);
    /// one that differs from what the tasks run is swapped into them on a thread of its own.
    pub(super) fn follow(self: &Arc<Self>) {
        let entries = {
            let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            let Some(log) = log.as_mut() else { return };
            if log.last_read.elapsed() < FOLLOW_EVERY {
                return;
            }
            log.last_read = Instant::now();
            match log.reader.read(false) {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!("cannot read the group's UDF versions: {e:#}");
                    return;
                }
            }
        };
        let Some((number, bytes, sha256)) = self.learn(entries) else {
            return;
        };
        tracing::info!("UDF version {number} was deployed in the group: swapping it in");
        self.set_udf(Arc::clone(&bytes), sha256);
        let steering = Arc::clone(self);
        let _ = std::thread::Builder::new()
            .name("weir-follow-udf".into())
            .spawn(move || match steering.swap_tasks(bytes, number) {
                Ok(_) => tracing::info!("UDF version {number} runs in every task here"),
                Err(e) => tracing::error!("UDF version {number}: {e}"),
            });
    }

    /// Deploys component `bytes` as version `number` to the group pipeline: into every
    /// task running here, then to the group's version log, which the other members
    /// follow.
    pub fn deploy(&self, bytes: Arc<Vec<u8>>, number: u32) -> Result<Deployed, Refusal> {
        let deployed = self.swap_tasks(Arc::clone(&bytes), number)?;
        self.publish_version(number, &bytes).map_err(|e| {
            Refusal::NotPublished(format!(
                "version {number} runs here, but could not be sent to the group: {e:#}"
            ))
        })?;
        Ok(deployed)
    }

    /// Puts component `bytes` into every task of a group pipeline running here, and makes
    /// it the version the tasks this process gets later start with.
    pub fn swap_tasks(&self, bytes: Arc<Vec<u8>>, number: u32) -> Result<Deployed, Refusal> {
        let (spec, probation_calls) = (&self.spec, self.probation_calls);
        let started = std::time::Instant::now();
        // A component that cannot work is refused before any task is touched.
        let Prepared { identity, .. } = prepare(spec, &bytes)?;
        let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
        self.set_udf(Arc::clone(&bytes), identity.sha256.clone());
        let mut pause_ms: f64 = 0.0;
        for (partition, control) in self.task_controls() {
            // A task still restoring was started with the version before: wait until it runs.
            let deadline = std::time::Instant::now() + SWAP_WAIT;
            while control.status().state == RunState::Starting
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if control.status().state != RunState::Running {
                continue; // stopping: it moves, and starts elsewhere or here with the new version
            }
            let deployed = swap_into(
                spec,
                &control,
                true,
                Arc::clone(&bytes),
                number,
                probation_calls,
            )
            .map_err(|r| r.context(&format!("task {partition}")))?;
            pause_ms = pause_ms.max(deployed.swap_pause_ms);
        }
        Ok(Deployed {
            version: number,
            sha256: identity.sha256,
            prepare_ms,
            swap_pause_ms: pause_ms,
        })
    }

    /// Makes the versions in `entries` known here; returns the last one (number, bytes,
    /// hash) if the tasks do not run it.
    fn learn(&self, entries: Vec<Entry>) -> Option<(u32, Arc<Vec<u8>>, String)> {
        let mut last = None;
        for entry in entries {
            let Entry::Complete(number, bytes) = entry else {
                continue;
            };
            let number = u32::try_from(number).unwrap_or(u32::MAX);
            let bytes = Arc::new(bytes);
            let sha = sha256_hex(&bytes);
            self.versions
                .insert(number, Arc::clone(&bytes), sha.clone());
            last = Some((number, bytes, sha));
        }
        let (number, bytes, sha) = last?;
        let running = self.udf.lock().unwrap_or_else(|e| e.into_inner()).1.clone();
        (sha != running).then_some((number, bytes, sha))
    }
}

/// The statuses of several tasks as one pipeline's.
fn summed(statuses: &[LiveStatus]) -> LiveStatus {
    let mut sum = LiveStatus {
        state: if statuses.iter().any(|s| s.state == RunState::Running) {
            RunState::Running
        } else if statuses.is_empty() {
            RunState::WaitingForTasks
        } else {
            RunState::Starting
        },
        ..LiveStatus::default()
    };
    let mut hashes: Vec<&str> = statuses
        .iter()
        .map(|s| s.udf_sha256.as_str())
        .filter(|h| !h.is_empty())
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    // Tasks on different versions (a deploy under way) show every hash.
    sum.udf_sha256 = hashes.join(",");
    for status in statuses {
        if sum.udf.is_empty() {
            sum.udf.clone_from(&status.udf);
        }
        add_named(&mut sum.sources, &status.sources);
        add_named(&mut sum.outputs, &status.outputs);
        sum.processed += status.processed;
        sum.dead_letters += status.dead_letters;
        sum.late += status.late;
        sum.keys += status.keys;
        sum.state_bytes += status.state_bytes;
        sum.state_store = match (sum.state_store, status.state_store) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        sum.event_timers += status.event_timers;
        sum.processing_timers += status.processing_timers;
        sum.udf_errors += status.udf_errors;
        // Probation is over when it is over in every task.
        if let Some(left) = status.probation_calls_left {
            sum.probation_calls_left = Some(sum.probation_calls_left.unwrap_or(0).max(left));
        }
        sum.checkpoints += status.checkpoints;
        if sum.last_error.is_none() {
            sum.last_error.clone_from(&status.last_error);
        }
        // The pipeline is as far as its slowest task.
        if let Some(watermark) = status.watermark {
            sum.watermark = Some(sum.watermark.map_or(watermark, |w| w.min(watermark)));
        }
        if let Some(lag) = status.watermark_lag_ms {
            sum.watermark_lag_ms = Some(sum.watermark_lag_ms.map_or(lag, |l| l.max(lag)));
        }
        sum.checkpoint_history
            .extend(status.checkpoint_history.iter().cloned());
        sum.exceptions.extend(status.exceptions.iter().cloned());
    }
    // The tasks' newest checkpoints and errors, in time order, as many as one task keeps.
    let newest = |len: usize| len.saturating_sub(KEPT_IN_STATUS);
    sum.checkpoint_history
        .make_contiguous()
        .sort_by_key(|c| c.at);
    sum.checkpoint_history
        .drain(..newest(sum.checkpoint_history.len()));
    sum.exceptions.make_contiguous().sort_by_key(|e| e.at);
    sum.exceptions.drain(..newest(sum.exceptions.len()));
    sum
}

fn add_named(total: &mut Vec<(String, u64)>, more: &[(String, u64)]) {
    for (name, count) in more {
        match total.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum += count,
            None => total.push((name.clone(), *count)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_add_up_and_the_slowest_watermark_is_the_pipeline_s() {
        let task = |processed, watermark, sha: &str| LiveStatus {
            state: RunState::Running,
            udf_sha256: sha.into(),
            sources: vec![("clicks".into(), processed)],
            outputs: vec![("main".into(), processed / 2)],
            processed,
            watermark: Some(watermark),
            ..LiveStatus::default()
        };
        let sum = summed(&[task(10, 500, "aa"), task(30, 200, "aa")]);
        assert_eq!(sum.processed, 40);
        assert_eq!(sum.sources, vec![("clicks".to_string(), 40)]);
        assert_eq!(sum.outputs, vec![("main".to_string(), 20)]);
        assert_eq!(sum.watermark, Some(200));
        assert_eq!(sum.udf_sha256, "aa");
        let mixed = summed(&[task(1, 1, "bb"), task(1, 1, "aa")]);
        assert_eq!(mixed.udf_sha256, "aa,bb", "a deploy under way");
        assert_eq!(summed(&[]).state, RunState::WaitingForTasks);
    }
}
