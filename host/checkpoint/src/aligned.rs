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
//! A stage whose run completes (its inputs ended, the end of input's timers fired) while
//! others still run takes a *final* section: the next epoch, once the one before is
//! complete, as a root takes one ([`GraphEpochs::on_complete`]), with its barrier after
//! the last record it sent. That section stands for the stage in every later epoch, so
//! the others checkpoint on (a bounded file stage beside a Kafka one): a restore at a
//! later epoch restores the final section, and the stage, whose sources are at their
//! end, joins the graph at that epoch ([`restore_point`]). A stage that fails, or stops
//! without its last checkpoint, while others still run ends the graph's epochs: no
//! epoch completes again, the others take no further checkpoint (with a warning), and a
//! crash then resumes from the last complete one, which stays consistent.
//!
//! Because a root waits for the previous epoch to be complete before it takes the next,
//! every stage's newest durable section is the complete epoch or the one after it, and a
//! stage never prunes the chain that holds the complete epoch (it keeps its current and
//! previous chains).

use crate::store::CheckpointStore;
use std::path::Path;
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
    /// For each stage that completed: the epoch of its final section, which stands for
    /// it in every later epoch once durable.
    finished: Vec<Option<u64>>,
    /// The first stage that ended the graph's epochs (it failed, or stopped or completed
    /// without a last section in step), if any.
    ended: Option<usize>,
}

impl Progress {
    /// The newest epoch stage `stage` counts as durable in: every epoch, once its final
    /// section is durable.
    fn durable_for(&self, stage: usize) -> u64 {
        match self.finished[stage] {
            Some(last) if self.durable[stage] >= last => u64::MAX,
            _ => self.durable[stage],
        }
    }

    /// The newest epoch every stage made durable (0: none); once every stage finished,
    /// the newest final section.
    fn complete(&self) -> u64 {
        match (0..self.durable.len()).map(|s| self.durable_for(s)).min() {
            Some(u64::MAX) => self.durable.iter().copied().max().unwrap_or(0),
            complete => complete.unwrap_or(0),
        }
    }
}

impl GraphEpochs {
    /// The epochs of a graph of `stages`, of which those at `roots` read no other
    /// stage; none durable yet.
    pub fn new(stages: Vec<String>, roots: Vec<usize>) -> Arc<Self> {
        let progress = Mutex::new(Progress {
            durable: vec![0; stages.len()],
            taken: vec![0; stages.len()],
            stop_floor: vec![None; stages.len()],
            finished: vec![None; stages.len()],
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
        let complete = progress.complete();
        let newest = progress.taken.iter().copied().max().unwrap_or(0);
        let last = progress
            .stop_floor
            .iter()
            .flatten()
            .copied()
            .fold(newest, u64::max);
        let every_root_stopping = (self.roots.iter())
            .all(|&r| progress.stop_floor[r].is_some() || progress.finished[r].is_some());
        if epoch < last && complete >= epoch {
            OnStop::Checkpoint
        } else if epoch >= last && complete >= epoch && every_root_stopping {
            OnStop::Stop
        } else {
            OnStop::Wait
        }
    }

    /// The newest epoch every stage made durable (0: none); a stage that finished counts
    /// as durable in every epoch after its final section.
    pub fn complete(&self) -> u64 {
        self.lock().complete()
    }

    /// What stage `stage`, whose run completed with its newest epoch `epoch`, does next:
    /// take its final section (the next epoch) once `epoch` is complete, as a root takes
    /// an epoch; wait until then; or stop without one once the graph's epochs ended, or
    /// when every other stage finished (the graph completes with it: no later epoch).
    /// Called by its run, between waits, after the end of input's timers fired.
    pub fn on_complete(&self, stage: usize, epoch: u64) -> OnStop {
        let progress = self.lock();
        let last_to_finish = (0..self.stages.len())
            .filter(|&s| s != stage)
            .all(|s| progress.finished[s].is_some());
        if progress.ended.is_some() || last_to_finish {
            OnStop::Stop
        } else if progress.complete() >= epoch {
            OnStop::Checkpoint
        } else {
            OnStop::Wait
        }
    }

    /// Stage `stage` wrote its final section, of epoch `epoch`: once durable, it stands
    /// for the stage in every later epoch. Called by its checkpoint writer.
    pub fn finished(&self, stage: usize, epoch: u64) {
        self.lock().finished[stage] = Some(epoch);
    }

    /// Stage `stage` takes no more checkpoints: it failed, or stopped or completed
    /// without its last section in step. Called by its run when it stops or completes
    /// so, and by the graph when it fails.
    pub fn end(&self, stage: usize) {
        self.lock().ended.get_or_insert(stage);
    }

    /// The first stage that ended the graph's epochs, by name: once one has, no epoch can
    /// complete again, and the stages still running take no more checkpoints.
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
    /// The epoch of the section the stage must restore (set by [`restore_point`];
    /// `None`: start from scratch).
    pub restore: Option<u64>,
    /// The graph's epoch the restore resumes from: `restore` itself, or a later one when
    /// the stage's restored section is its final one (it finished before that epoch).
    pub resume_epoch: Option<u64>,
}

impl std::fmt::Debug for Aligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Aligned(stage {} of {:?}, restore {:?} for epoch {:?})",
            self.stage, self.epochs.stages, self.restore, self.resume_epoch
        )
    }
}

impl PartialEq for Aligned {
    fn eq(&self, other: &Self) -> bool {
        self.stage == other.stage
            && Arc::ptr_eq(&self.epochs, &other.epochs)
            && self.restore == other.restore
            && self.resume_epoch == other.resume_epoch
    }
}

impl Eq for Aligned {}

/// Finds the newest epoch every stage of a graph holds a section of (a stage whose newest
/// section is its final one counting as holding every later epoch), deletes the
/// sections written after it (they belong to an epoch that did not complete) and sets
/// each stage's [`Aligned::restore`] (that epoch, or the final section standing for it)
/// and [`Aligned::resume_epoch`] (`None` for all when some stage holds no section: the
/// graph starts from scratch, and the other stages' sections are deleted). Called once
/// before the stages' runs start, with every stage's state directory and its part in
/// the graph's checkpoints. With `fresh`, deletes everything.
pub fn restore_point(
    stages: &mut [(&Path, &mut Aligned)],
    fresh: bool,
) -> anyhow::Result<Option<u64>> {
    let mut stores = Vec::with_capacity(stages.len());
    for (dir, _) in stages.iter() {
        stores.push(CheckpointStore::open(dir)?);
    }
    // Each stage's newest section, and whether it is the stage's final one.
    let mut newest = Vec::with_capacity(stores.len());
    for store in &mut stores {
        if fresh {
            store.clear()?;
        }
        let last = store.epochs()?.last().copied();
        newest.push(last.map(|epoch| (epoch, store.is_final(epoch))));
    }
    let point = if newest.iter().any(Option::is_none) {
        None
    } else {
        let held = newest.iter().flatten();
        let running = held
            .clone()
            .filter(|(_, last)| !last)
            .map(|&(e, _)| e)
            .min();
        // Once every stage finished, the newest final section is the graph's epoch.
        running.or_else(|| held.map(|&(e, _)| e).max())
    };
    for ((store, (dir, aligned)), newest) in stores.iter_mut().zip(stages.iter_mut()).zip(newest) {
        let restore = match (point, newest) {
            (Some(point), Some((epoch, true))) if epoch <= point => Some(epoch),
            (point, _) => point,
        };
        match restore {
            Some(epoch) => store.discard_after(epoch)?,
            None => store.clear()?,
        }
        let newest = newest.map(|(epoch, _)| epoch);
        if newest.is_some() && newest != restore {
            tracing::warn!(
                "{}: its checkpoint {} was not completed by every stage; restoring {}",
                dir.display(),
                newest.unwrap_or(0),
                point.map_or_else(
                    || "nothing (the pipeline starts over)".into(),
                    |e| format!("checkpoint {e}")
                )
            );
        }
        aligned.restore = restore;
        aligned.resume_epoch = point;
        aligned.epochs.durable(aligned.stage, point.unwrap_or(0));
    }
    Ok(point)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A stage's state directory and its part in the graph's checkpoints.
    pub(crate) struct Stage {
        pub(crate) dir: PathBuf,
        pub(crate) aligned: Option<Aligned>,
    }

    pub(crate) fn spec(dir: &Path, stage: usize, epochs: &Arc<GraphEpochs>) -> Stage {
        Stage {
            dir: dir.to_path_buf(),
            aligned: Some(Aligned {
                stage,
                epochs: Arc::clone(epochs),
                restore: None,
                resume_epoch: None,
            }),
        }
    }

    /// [`restore_point`] over `stages`.
    pub(crate) fn restore(stages: &mut [Stage], fresh: bool) -> anyhow::Result<Option<u64>> {
        let mut parts: Vec<(&Path, &mut Aligned)> = stages
            .iter_mut()
            .map(|s| (s.dir.as_path(), s.aligned.as_mut().expect("set by spec")))
            .collect();
        restore_point(&mut parts, fresh)
    }

    /// Writes empty sections of `epochs` into `dir`.
    fn sections(dir: &Path, epochs: &[u64]) {
        let mut store = CheckpointStore::open(dir).unwrap();
        for &epoch in epochs {
            store.write(epoch, b"section".to_vec(), 1).unwrap();
            store.wait().unwrap();
        }
    }

    /// Writes a section of `epoch` into `dir` (its final one with `finished`).
    pub(crate) fn section(dir: &Path, epoch: u64, finished: bool) {
        let file = crate::CheckpointFile {
            meta: crate::Meta {
                finished,
                ..crate::tests::meta(epoch, None)
            },
            sinks: vec![],
            keyed: vec![],
        };
        let mut store = CheckpointStore::open(dir).unwrap();
        store.write(epoch, file.encode().unwrap(), 1).unwrap();
        store.wait().unwrap();
    }

    pub(crate) fn held(dir: &Path) -> Vec<u64> {
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
        assert_eq!(restore(&mut specs, false).unwrap(), Some(2));
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
        assert_eq!(restore(&mut specs, false).unwrap(), None);
        assert!(held(&a).is_empty());
        assert!(specs
            .iter()
            .all(|s| s.aligned.as_ref().unwrap().restore.is_none()));

        sections(&a, &[1, 2]);
        sections(&b, &[1, 2]);
        assert_eq!(restore(&mut specs, true).unwrap(), None, "--fresh");
        assert!(held(&a).is_empty() && held(&b).is_empty());
    }
}

#[cfg(test)]
mod finish_tests {
    use super::tests::*;
    use super::*;

    #[test]
    fn a_finished_stage_counts_as_durable_in_every_later_epoch() {
        let epochs = GraphEpochs::new(vec!["file".into(), "kafka".into()], vec![0, 1]);
        for stage in [0, 1] {
            epochs.durable(stage, 3);
        }
        assert_eq!(
            epochs.on_complete(0, 3),
            OnStop::Checkpoint,
            "3 is complete"
        );
        epochs.taken(0, 4);
        epochs.finished(0, 4);
        epochs.durable(1, 4);
        epochs.durable(1, 5);
        assert_eq!(epochs.complete(), 3, "the final section is not durable yet");
        epochs.durable(0, 4);
        assert_eq!(epochs.complete(), 5, "the final section stands for epoch 5");
        epochs.durable(1, 9);
        assert_eq!(epochs.complete(), 9);
        assert_eq!(
            epochs.on_stop(1, 9),
            OnStop::Checkpoint,
            "the running root takes its last one"
        );
        epochs.taken(1, 10);
        epochs.durable(1, 10);
        assert_eq!(
            epochs.on_stop(1, 10),
            OnStop::Stop,
            "the finished root does not hold the stop up"
        );
    }

    #[test]
    fn a_completed_stage_waits_for_the_epoch_before_its_final_section() {
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        epochs.durable(0, 2);
        epochs.durable(1, 1);
        assert_eq!(
            epochs.on_complete(0, 2),
            OnStop::Wait,
            "b has not made 2 durable"
        );
        epochs.durable(1, 2);
        assert_eq!(epochs.on_complete(0, 2), OnStop::Checkpoint);
        epochs.taken(0, 3);
        epochs.finished(0, 3);
        assert_eq!(
            epochs.on_complete(1, 2),
            OnStop::Stop,
            "the last stage to finish needs no final section: the graph completes"
        );
        epochs.end(1);
        assert_eq!(
            epochs.on_complete(0, 2),
            OnStop::Stop,
            "b failed: no epoch completes"
        );
    }

    #[test]
    fn a_later_epoch_restores_a_finished_stage_from_its_final_section() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        for epoch in 1..=3 {
            section(&a, epoch, epoch == 3);
        }
        for epoch in 1..=6 {
            section(&b, epoch, false);
        }
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0, 1]);
        let mut specs = [spec(&a, 0, &epochs), spec(&b, 1, &epochs)];
        assert_eq!(restore(&mut specs, false).unwrap(), Some(6));
        let aligned: Vec<_> = specs.iter().map(|s| s.aligned.clone().unwrap()).collect();
        assert_eq!(
            (aligned[0].restore, aligned[0].resume_epoch),
            (Some(3), Some(6))
        );
        assert_eq!(
            (aligned[1].restore, aligned[1].resume_epoch),
            (Some(6), Some(6))
        );
        assert_eq!(held(&a), [1, 2, 3]);
        assert_eq!(epochs.complete(), 6);

        // b behind a's final section: a restores the epoch b holds, its final one goes.
        let (c, d) = (root.path().join("c"), root.path().join("d"));
        for epoch in 1..=3 {
            section(&c, epoch, epoch == 3);
        }
        for epoch in 1..=2 {
            section(&d, epoch, false);
        }
        let epochs = GraphEpochs::new(vec!["c".into(), "d".into()], vec![0]);
        let mut specs = [spec(&c, 0, &epochs), spec(&d, 1, &epochs)];
        assert_eq!(restore(&mut specs, false).unwrap(), Some(2));
        assert_eq!(specs[0].aligned.as_ref().unwrap().restore, Some(2));
        assert_eq!(held(&c), [1, 2]);
    }

    #[test]
    fn once_every_stage_finished_each_restores_its_final_section() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        section(&a, 2, true);
        section(&b, 3, true);
        let epochs = GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        let mut specs = [spec(&a, 0, &epochs), spec(&b, 1, &epochs)];
        assert_eq!(restore(&mut specs, false).unwrap(), Some(3));
        assert_eq!(specs[0].aligned.as_ref().unwrap().restore, Some(2));
        assert_eq!(specs[1].aligned.as_ref().unwrap().restore, Some(3));
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
