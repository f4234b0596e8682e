//! Steering a pipeline that runs in a group from `weir serve --group`.
//!
//! `weir serve` steers a pipeline through one [`RunControl`]; in a group the pipeline is
//! the tasks this process was given, each a run with a control of its own. [`Steering`]
//! stands between the two: the server's control shows the tasks' statuses summed (and
//! which tasks run here), its stop flag stops the member, and a deployed UDF version is
//! swapped into every task here and kept as the version the tasks this process gets
//! later start with.

use crate::run::control::RateTracker;
use crate::run::{LiveStatus, RunControl};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub struct Steering {
    /// What `weir serve` reads and sets: the summed status, and the stop flag.
    pub control: Arc<RunControl>,
    /// The component tasks start with: the pipeline's, or the last one deployed.
    udf: Mutex<Arc<Vec<u8>>>,
    /// The running tasks' own controls, by partition.
    tasks: Mutex<BTreeMap<i32, Arc<RunControl>>>,
    rate: Mutex<RateTracker>,
}

impl Steering {
    pub fn new(udf: Arc<Vec<u8>>, control: Arc<RunControl>) -> Arc<Self> {
        Arc::new(Self {
            control,
            udf: Mutex::new(udf),
            tasks: Mutex::new(BTreeMap::new()),
            rate: Mutex::new(RateTracker::new()),
        })
    }

    /// The component a task starting now runs.
    pub fn udf(&self) -> Arc<Vec<u8>> {
        Arc::clone(&self.udf.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `bytes` the component tasks start with from now on.
    pub fn set_udf(&self, bytes: Arc<Vec<u8>>) {
        *self.udf.lock().unwrap_or_else(|e| e.into_inner()) = bytes;
    }

    /// The controls of the tasks running here, by partition.
    pub fn task_controls(&self) -> Vec<(i32, Arc<RunControl>)> {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.iter().map(|(&p, c)| (p, Arc::clone(c))).collect()
    }

    pub(super) fn add_task(&self, partition: i32, control: Arc<RunControl>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.insert(partition, control);
    }

    pub(super) fn remove_task(&self, partition: i32) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.remove(&partition);
    }

    /// Publishes the tasks' statuses, summed, as the pipeline's.
    pub(super) fn publish(&self) {
        let tasks = self.task_controls();
        let statuses: Vec<LiveStatus> = tasks.iter().map(|(_, c)| c.status()).collect();
        let mut sum = summed(&statuses);
        sum.tasks = Some(tasks.iter().map(|(p, _)| *p).collect());
        let previous = self.control.status();
        sum.history = previous.history;
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        rate.observe(&mut sum, crate::time::wall_clock_ms());
        self.control.update(|s| *s = sum);
    }
}

/// The statuses of several tasks as one pipeline's.
fn summed(statuses: &[LiveStatus]) -> LiveStatus {
    let mut sum = LiveStatus {
        state: if statuses.iter().any(|s| s.state == "running") {
            "running"
        } else if statuses.is_empty() {
            "waiting for tasks"
        } else {
            "starting"
        }
        .into(),
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
        sum.event_timers += status.event_timers;
        sum.processing_timers += status.processing_timers;
        sum.udf_errors += status.udf_errors;
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
    }
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
            state: "running".into(),
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
        assert_eq!(summed(&[]).state, "waiting for tasks");
    }
}
