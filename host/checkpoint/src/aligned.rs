//! Checkpoints of a pipeline of several stages, taken in step: one epoch over all
//! stages, each stage writing its own section (a checkpoint file in its own state
//! directory, numbered by the epoch).
//!
//! The stages that read no other stage (the *roots*) take epoch `n` on their cadence,
//! once every stage has made epoch `n - 1` durable; taking it puts a barrier into each
//! exchange they feed, right after the records the cut covers. A downstream stage takes
//! epoch `n` when each of its exchange inputs has delivered that barrier (it reads no
//! further on an input past a barrier until then), so no record is in flight at the cut:
//! those before the barrier are in the downstream's state, those after it are emitted
//! again by the upstream after a restore. An epoch is *complete* once every stage made
//! its section durable; a restart restores every stage at the newest complete epoch and
//! deletes the sections written after it ([`restore_point`]).
//!
//! A stop request (Ctrl-C, SIGTERM, `weir serve` stopping the pipeline) ends with a last
//! complete epoch, as Flink's stop-with-savepoint does: the roots stop reading and each
//! takes checkpoints until every root took the same newest one and every stage made it
//! durable ([`GraphEpochs::on_stop`]); a downstream stage goes on under the stop,
//! processing up to its upstreams' barriers and checkpointing there, until each upstream
//! has stopped (`Polled::Stopped` of `weir-io`'s exchanges). Nothing read before the stop
//! is left to read again, so a source that cannot be read again (stdin, a pipe) loses
//! nothing.
//!
//! Once a stage's run completes (its inputs ended), fails, or stops without its last
//! checkpoint while others still run, no epoch completes again: the others take no
//! further checkpoint (with a warning), and a crash then resumes from the last complete
//! one, which stays consistent. (A final section of a completed stage that later epochs
//! could count on is not written yet.)
//!
//! Because a root waits for the previous epoch to be complete before it takes the next,
//! every stage's newest durable section is the complete epoch or the one after it, and a
//! stage never prunes the chain that holds the complete epoch (it keeps its current and
//! previous chains).

use crate::store::CheckpointStore;
use crate::CheckpointSpec;
use std::sync::{Arc, Mutex};

/// The epochs of one graph's stages, shared by their runs.
#[derive(Debug)]
pub struct GraphEpochs {
    /// Each stage's name, in the graph's order, for messages.
    stages: Vec<String>,
    /// The stages that read no other stage, by index.
    roots: Vec<usize>,
    progress: Mutex<Progress>,
}

#[derive(Debug)]
struct Progress {
    /// Each stage's newest durable epoch (0: none yet).
    durable: Vec<u64>,
    /// Each stage's newest epoch written, durable or not (0: none yet).
    taken: Vec<u64>,
    /// For each root under a stop request: the epoch it takes at least before it stops
    /// (one more than its newest when the stop reached it).
    stop_floor: Vec<Option<u64>>,
    /// The first stage whose run completed, if any.
    ended: Option<usize>,
}

impl GraphEpochs {
    /// The epochs of a graph of `stages`, of which those at `roots` read no other
    /// stage; none durable yet.
    pub fn new(stages: Vec<String>, roots: Vec<usize>) -> Arc<Self> {
        let progress = Mutex::new(Progress {
            durable: vec![0; stages.len()],
            taken: vec![0; stages.len()],
            stop_floor: vec![None; stages.len()],
            ended: None,
        });
        Arc::new(Self {
            stages,
            roots,
            progress,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stage `stage` made epoch `epoch` durable. Called by its checkpoint writer once the
    /// section is written, and for every stage at the epoch a run restores.
    pub fn durable(&self, stage: usize, epoch: u64) {
        let mut progress = self.lock();
        progress.durable[stage] = progress.durable[stage].max(epoch);
        progress.taken[stage] = progress.taken[stage].max(epoch);
    }

    /// Stage `stage` wrote its section of epoch `epoch` (not durable yet). Called by its
    /// checkpoint writer when it hands the section on.
    pub fn taken(&self, stage: usize, epoch: u64) {
        let mut progress = self.lock();
        progress.taken[stage] = progress.taken[stage].max(epoch);
    }

    /// What root stage `stage` (one that reads no other stage) does next under a stop
    /// request, its newest epoch being `epoch` (it reads nothing more meanwhile). Its
    /// first call says it takes at least one more checkpoint; the graph's last epoch is
    /// the newest any root took or said it takes. A root takes checkpoints up to that
    /// epoch, each once the one before is complete, and stops once every root has said
    /// so and every stage made that epoch durable: every root stops at the same last,
    /// complete epoch. Once a stage ended no epoch completes again: it stops at once.
    /// Called by the root's run, between two loops, while it stops.
    pub fn on_stop(&self, stage: usize, epoch: u64) -> OnStop {
        let mut progress = self.lock();
        if progress.ended.is_some() {
            return OnStop::Stop;
        }
        progress.stop_floor[stage].get_or_insert(epoch + 1);
        let complete = progress.durable.iter().copied().min().unwrap_or(0);
        let newest = progress.taken.iter().copied().max().unwrap_or(0);
        let last = progress
            .stop_floor
            .iter()
            .flatten()
            .copied()
            .fold(newest, u64::max);
        let every_root_stopping = self.roots.iter().all(|&r| progress.stop_floor[r].is_some());
        if epoch < last && complete >= epoch {
            OnStop::Checkpoint
        } else if epoch >= last && complete >= epoch && every_root_stopping {
            OnStop::Stop
        } else {
            OnStop::Wait
        }
    }

    /// The newest epoch every stage made durable (0: none).
    pub fn complete(&self) -> u64 {
        self.lock().durable.iter().copied().min().unwrap_or(0)
    }

    /// Stage `stage` takes no more checkpoints: its run completed (its inputs ended),
    /// failed, or stopped without its last checkpoint. Called by its run when it
    /// completes or stops so, and by the graph when it fails.
    pub fn end(&self, stage: usize) {
        self.lock().ended.get_or_insert(stage);
    }

    /// The first stage whose run completed, by name: once one has, no epoch can complete
    /// again, and the stages still running take no more checkpoints.
    pub fn ended(&self) -> Option<&str> {
        let ended = self.lock().ended?;
        Some(&self.stages[ended])
    }

    /// The stages' names, in the graph's order.
    pub fn stages(&self) -> &[String] {
        &self.stages
    }
}

/// What a root stage does next under a stop request ([`GraphEpochs::on_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStop {
    /// Wait for the other stages to make the newest epoch durable.
    Wait,
    /// Take a checkpoint now.
    Checkpoint,
    /// Stop: the graph's newest complete epoch is the last one (or none can complete).
    Stop,
}

/// A stage's part in its graph's checkpoints (see the [module docs](self)).
#[derive(Clone)]
pub struct Aligned {
    /// The stage's index in the graph.
    pub stage: usize,
    /// The graph's epochs.
    pub epochs: Arc<GraphEpochs>,
    /// The epoch the stage must restore (set by [`restore_point`]; `None`: start from
    /// scratch).
    pub restore: Option<u64>,
}

impl std::fmt::Debug for Aligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Aligned(stage {} of {:?}, restore {:?})",
            self.stage, self.epochs.stages, self.restore
        )
    }
}

impl PartialEq for Aligned {
    fn eq(&self, other: &Self) -> bool {
        self.stage == other.stage
            && Arc::ptr_eq(&self.epochs, &other.epochs)
            && self.restore == other.restore
    }
}

impl Eq for Aligned {}

/// Finds the newest epoch every stage of a graph holds a section of, deletes the
/// sections written after it (they belong to an epoch that did not complete) and sets
/// it as each stage's [`Aligned::restore`] (`None` for all when some stage holds no
/// section: the graph starts from scratch, and the other stages' sections are deleted).
/// Called once before the stages' runs start, with every stage's checkpoint spec (all
/// of them [`Aligned`], in local directories). With `fresh`, deletes everything.
pub fn restore_point(specs: &mut [CheckpointSpec], fresh: bool) -> anyhow::Result<Option<u64>> {
    let mut stores = Vec::with_capacity(specs.len());
    for spec in specs.iter() {
        anyhow::ensure!(
            spec.kafka.is_none(),
            "checkpoints of a pipeline of several stages are kept in state directories only"
        );
        stores.push(CheckpointStore::open(&spec.dir)?);
    }
    let mut newest = Vec::with_capacity(stores.len());
    for store in &mut stores {
        if fresh {
            store.clear()?;
        }
        newest.push(store.epochs()?.last().copied());
    }
    let point = newest.iter().copied().min().flatten();
    for ((store, spec), newest) in stores.iter_mut().zip(specs.iter_mut()).zip(newest) {
        match point {
            Some(epoch) => store.discard_after(epoch)?,
            None => store.clear()?,
        }
        if newest.is_some() && newest != point {
            tracing::warn!(
                "{}: its checkpoint {} was not completed by every stage; restoring {}",
                spec.dir.display(),
                newest.unwrap_or(0),
                point.map_or_else(
                    || "nothing (the pipeline starts over)".into(),
                    |e| format!("checkpoint {e}")
                )
            );
        }
        let aligned = spec
            .aligned
            .as_mut()
            .expect("every stage of a graph checkpoints in step");
        aligned.restore = point;
        aligned.epochs.durable(aligned.stage, point.unwrap_or(0));
    }
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spec(dir: &Path, stage: usize, epochs: &Arc<GraphEpochs>) -> CheckpointSpec {
        CheckpointSpec {
            enabled: true,
            dir: dir.to_path_buf(),
            interval: crate::DEFAULT_INTERVAL,
            kafka: None,
            aligned: Some(Aligned {
                stage,
                epochs: Arc::clone(epochs),
                restore: None,
            }),
        }
    }

    /// Writes empty sections of `epochs` into `dir`.
    fn sections(dir: &Path, epochs: &[u64]) {
        let mut store = CheckpointStore::open(dir).unwrap();
        for &epoch in epochs {
            store.write(epoch, b"section".to_vec(), 1).unwrap();
            store.wait().unwrap();
        }
    }

    fn held(dir: &Path) -> Vec<u64> {
        CheckpointStore::open(dir).unwrap().epochs().unwrap()
    }

    #[test]
    fn every_stage_restores_the_newest_epoch_all_of_them_hold() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        sections(&a, &[1, 2, 3]);
        sections(&b, &[1, 2]);
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        let mut specs = [spec(&a, 0, &epochs), spec(&b, 1, &epochs)];
        assert_eq!(restore_point(&mut specs, false).unwrap(), Some(2));
        assert!(specs
            .iter()
            .all(|s| s.aligned.as_ref().unwrap().restore == Some(2)));
        assert_eq!(
            held(&a),
            [1, 2],
            "stage a's section of the incomplete epoch 3 is gone"
        );
        assert_eq!(held(&b), [1, 2]);
        assert_eq!(epochs.complete(), 2);
        epochs.durable(0, 3);
        assert_eq!(epochs.complete(), 2, "b has not made 3 durable");
        epochs.durable(1, 3);
        assert_eq!(epochs.complete(), 3);
    }

    #[test]
    fn a_stage_without_a_section_starts_the_graph_over() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        sections(&a, &[1]);
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        let mut specs = [spec(&a, 0, &epochs), spec(&b, 1, &epochs)];
        assert_eq!(restore_point(&mut specs, false).unwrap(), None);
        assert!(held(&a).is_empty());
        assert!(specs
            .iter()
            .all(|s| s.aligned.as_ref().unwrap().restore.is_none()));

        sections(&a, &[1, 2]);
        sections(&b, &[1, 2]);
        assert_eq!(restore_point(&mut specs, true).unwrap(), None, "--fresh");
        assert!(held(&a).is_empty() && held(&b).is_empty());
    }
}

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[test]
    fn under_a_stop_the_roots_end_at_the_same_complete_epoch() {
        // Roots a and b, downstream c; a took epoch 3 just before the stop, b only 2.
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into(), "c".into()], vec![0, 1]);
        for stage in 0..3 {
            epochs.durable(stage, 2);
        }
        epochs.taken(0, 3);
        assert_eq!(epochs.on_stop(1, 2), OnStop::Checkpoint, "b: its last one");
        epochs.taken(1, 3);
        for stage in 0..3 {
            epochs.durable(stage, 3);
        }
        assert_eq!(
            epochs.on_stop(1, 3),
            OnStop::Wait,
            "a may have read on after 3: b waits for it to say"
        );
        assert_eq!(epochs.on_stop(0, 3), OnStop::Checkpoint, "a: one more");
        assert_eq!(epochs.on_stop(1, 3), OnStop::Checkpoint, "b follows a to 4");
        for root in [0, 1] {
            epochs.taken(root, 4);
            epochs.durable(root, 4);
        }
        assert_eq!(
            epochs.on_stop(0, 4),
            OnStop::Wait,
            "c has not made 4 durable"
        );
        epochs.durable(2, 4);
        assert_eq!(epochs.on_stop(0, 4), OnStop::Stop);
        assert_eq!(epochs.on_stop(1, 4), OnStop::Stop);
    }

    #[test]
    fn under_a_stop_nothing_waits_once_a_stage_ended() {
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        epochs.durable(0, 2);
        epochs.end(1);
        assert_eq!(epochs.on_stop(0, 2), OnStop::Stop);
    }
}

#[cfg(test)]
mod due_tests {
    use super::*;
    use crate::Checkpointer;
    use std::time::Duration;

    #[test]
    fn once_a_stage_ended_the_others_take_no_further_checkpoint() {
        let root = tempfile::tempdir().unwrap();
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        let spec = |stage: usize| CheckpointSpec {
            enabled: true,
            dir: root.path().join(stage.to_string()),
            interval: Duration::ZERO,
            kafka: None,
            aligned: Some(Aligned {
                stage,
                epochs: Arc::clone(&epochs),
                restore: None,
            }),
        };
        let (a, _) = Checkpointer::open(&spec(0), false).unwrap();
        let (b, _) = Checkpointer::open(&spec(1), false).unwrap();
        assert!(a.is_due() && b.is_due(), "epoch 1 may start");
        b.ended();
        assert_eq!(epochs.ended(), Some("b"));
        assert!(!a.is_due(), "no epoch completes once b has ended");
    }
}
