//! Checkpoints: what a run needs to resume exactly where it was.
//!
//! A checkpoint is taken between records, when the sources' read-ahead has been
//! processed: every sink first makes what it was given durable (and says where it
//! stands), then the keyed state, the timers of both domains, the watermarks, the source
//! positions and the UDF's identity are written to one file ([`file`](mod@file)) in the
//! state directory ([`store`]). Restoring puts all of it back, seeks the sources to their
//! positions and cuts file sinks back to their lengths, so what was written after the
//! checkpoint is written again exactly once; idempotent sinks (PostgreSQL upserts) and
//! Kafka (id headers) take the replay as it is.
//!
//! Checkpoints are incremental: the host tracks which keys changed (`weir_engine::snapshot`), and a
//! checkpoint holds only those, chained to the one before, back to a full one. A new
//! full checkpoint starts a chain once the increments outweigh their base. Only the
//! keyed section is built while processing waits; the file is written on a background
//! thread.

#![warn(missing_docs)]

pub mod aligned;
pub mod file;
pub mod kafka_store;
mod meta;
pub mod store;

pub use file::{CheckpointFile, CheckpointHead, KeyedLater};
pub use meta::{CounterMeta, DeadLetterMeta, DeclaredState, InputMeta, Meta, OutputMeta};
pub use store::{Chain, CheckpointStore, Written};

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Checkpointing of a run (see the [crate docs](crate)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSpec {
    /// Whether checkpoints are taken and restored at all (`[checkpoint] enabled`,
    /// `--no-checkpoints`): off, a restarted run starts from scratch.
    pub enabled: bool,
    /// The state directory the checkpoint files go to (unless `kafka` is set); a run
    /// locks it while it uses it.
    pub dir: PathBuf,
    /// The time between two checkpoints of a running pipeline.
    pub interval: Duration,
    /// Set for a task of a pipeline run in a consumer group: its checkpoints go to a
    /// Kafka partition instead of `dir`, so they can follow the task to another process.
    pub kafka: Option<kafka_store::KafkaCheckpoints>,
    /// Set for a stage of a pipeline of several stages: its checkpoints are taken in
    /// step with the other stages' ([`aligned`]).
    pub aligned: Option<aligned::Aligned>,
}

impl CheckpointSpec {
    /// Where the checkpoints are, for messages.
    pub fn location(&self) -> String {
        match &self.kafka {
            Some(k) => format!("kafka topic {}[{}]", k.topic, k.partition),
            None => self.dir.display().to_string(),
        }
    }
}

/// The default time between checkpoints.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// The longest chain of increments before a full checkpoint.
const MAX_CHAIN: usize = 32;

/// When to checkpoint, and whether the next one is full or an increment.
pub struct Checkpointer {
    /// Where the checkpoints are kept: the run waits on it for the write in progress,
    /// and clears it when it completes.
    pub store: CheckpointStore,
    interval: Duration,
    next_due: Instant,
    /// The last epoch written (or restored; for a stage of several restored from its
    /// final section, the graph's epoch that section stands for).
    epoch: u64,
    /// The newest section in the store, written or restored: the next increment's parent.
    section: u64,
    /// The current chain: its full base, how many increments, their bytes, the base's.
    base: Option<u64>,
    chain_len: usize,
    chain_bytes: u64,
    base_bytes: u64,
    /// A checkpoint handed to the writer whose size is known once written.
    size_unknown: Option<u64>,
    /// The previous chain's base, kept as a fallback should the current one be damaged.
    previous_base: Option<u64>,
    /// The stage's part in its graph's checkpoints, if it is a stage of several.
    aligned: Option<aligned::Aligned>,
    /// The warning that no further checkpoint is taken was given.
    stalled: std::cell::Cell<bool>,
}

/// What the next checkpoint will be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Its epoch: one more than the last one written or restored.
    pub epoch: u64,
    /// The checkpoint it adds to, if it is an increment (`None`: a full checkpoint).
    pub parent: Option<u64>,
}

impl Checkpointer {
    /// Opens the state directory; with `fresh`, forgets what it holds. Returns the chain
    /// to restore, if any.
    pub fn open(spec: &CheckpointSpec, fresh: bool) -> anyhow::Result<(Self, Option<Chain>)> {
        let interval = spec.interval;
        let mut store = match &spec.kafka {
            Some(target) => CheckpointStore::on(std::sync::Arc::new(
                kafka_store::KafkaBackend::open_claimed(target, &spec.dir)?,
            )),
            None => CheckpointStore::open(&spec.dir)?,
        };
        if fresh {
            store.clear()?;
        }
        let chain = store.newest_good()?;
        if let Some(aligned) = &spec.aligned {
            let found = chain.as_ref().map(|c| c.newest().meta.epoch);
            anyhow::ensure!(
                found == aligned.restore,
                "{}: checkpoint {} cannot be used, so this stage cannot resume with the others; \
                 start over with --fresh (which writes every output again from the start)",
                spec.dir.display(),
                aligned.restore.unwrap_or(0)
            );
            let (epochs, stage) = (std::sync::Arc::clone(&aligned.epochs), aligned.stage);
            store.on_durable(Box::new(move |epoch| epochs.durable(stage, epoch)));
        }
        let mut this = Self {
            store,
            interval,
            next_due: Instant::now() + interval,
            epoch: 0,
            section: 0,
            base: None,
            chain_len: 0,
            chain_bytes: 0,
            base_bytes: 0,
            size_unknown: None,
            previous_base: None,
            aligned: spec.aligned.clone(),
            stalled: std::cell::Cell::new(false),
        };
        if let Some(chain) = &chain {
            let newest = chain.newest().meta.epoch;
            this.store.discard_after(newest)?;
            this.section = newest;
            this.epoch = newest.max(
                spec.aligned
                    .as_ref()
                    .and_then(|a| a.resume_epoch)
                    .unwrap_or(0),
            );
            this.base = Some(chain.files[0].meta.epoch);
            this.base_bytes = chain.sizes[0];
            this.chain_len = chain.files.len() - 1;
            this.chain_bytes = chain.sizes[1..].iter().sum();
            this.previous_base = this
                .store
                .epochs()?
                .into_iter()
                .filter(|&e| e < this.base.unwrap_or(0))
                .min();
        }
        Ok((this, chain))
    }

    /// Whether the interval has passed since the last checkpoint written (or since
    /// opening), that one is durable (one checkpoint is written at a time, and the run
    /// does not wait for it: a checkpoint whose writer takes longer than the interval
    /// delays the next, as Flink's one concurrent checkpoint does) and, for a stage of
    /// several, every stage made the last epoch durable ([`aligned`]). The run asks
    /// between records, and checkpoints once its read-ahead is processed; a stage reading
    /// other stages checkpoints at their barriers instead.
    pub fn is_due(&self) -> bool {
        if Instant::now() < self.next_due || self.store.is_writing() {
            return false;
        }
        let Some(aligned) = &self.aligned else {
            return true;
        };
        if let Some(ended) = aligned.epochs.ended() {
            if !self.stalled.replace(true) {
                tracing::warn!(
                    "stage {ended:?} has ended: stage {:?} takes no further checkpoint until the pipeline completes; after a crash it resumes from checkpoint {}",
                    aligned.epochs.stages()[aligned.stage],
                    aligned.epochs.complete()
                );
            }
            return false;
        }
        aligned.epochs.complete() >= self.epoch
    }

    /// For a stage of several whose run completed: whether it takes its final section now,
    /// waits, or ends without one ([`aligned::GraphEpochs::on_complete`]); `None` for a
    /// run of one stage.
    pub fn on_complete(&self) -> Option<aligned::OnStop> {
        let aligned = self.aligned.as_ref()?;
        Some(aligned.epochs.on_complete(aligned.stage, self.epoch))
    }

    /// A stage of several ends without a last section in step: the others learn that no
    /// epoch will complete again ([`aligned::GraphEpochs::end`]).
    pub fn ended(&self) {
        if let Some(aligned) = &self.aligned {
            aligned.epochs.end(aligned.stage);
        }
    }

    /// For a stage of several that reads no other stage, under a stop request: what it
    /// does next ([`aligned::GraphEpochs::on_stop`]); `None` for a run of one stage.
    pub fn on_stop(&self) -> Option<aligned::OnStop> {
        let aligned = self.aligned.as_ref()?;
        Some(aligned.epochs.on_stop(aligned.stage, self.epoch))
    }

    /// Whether this is a stage of several, checkpointing in step with the others
    /// ([`aligned`]).
    pub fn in_step(&self) -> bool {
        self.aligned.is_some()
    }

    /// The next checkpoint: an increment on the last one, or a full one when there is no
    /// chain yet or the increments have grown past their base.
    pub fn plan(&self) -> Planned {
        let full = self.base.is_none()
            || self.chain_len >= MAX_CHAIN
            || self.chain_bytes > self.base_bytes;
        Planned {
            epoch: self.epoch + 1,
            parent: (!full).then_some(self.section),
        }
    }

    /// Hands a checkpoint to the background writer; returns its size in bytes (encoded,
    /// as the store keeps it).
    pub fn write(&mut self, file: CheckpointFile) -> anyhow::Result<u64> {
        let size = file.encoded_len()?;
        let meta = file.meta.clone();
        let produce = move |out: &mut dyn std::io::Write| file.write_to(out, None).map(|_| ());
        self.hand_over(&meta, Some(size), Box::new(produce))?;
        Ok(size)
    }

    /// Hands a checkpoint to the background writer, whose keyed section ends with the
    /// parts `keyed_later` makes on the writer's thread (a full checkpoint's keys read
    /// from a snapshot of the state store), so the run does not wait for them. Its size
    /// is known once it is durable ([`wait`](Self::wait)).
    pub fn write_later(
        &mut self,
        file: CheckpointFile,
        keyed_later: KeyedLater,
    ) -> anyhow::Result<()> {
        let meta = file.meta.clone();
        let produce =
            move |out: &mut dyn std::io::Write| file.write_to(out, Some(keyed_later)).map(|_| ());
        self.hand_over(&meta, None, Box::new(produce))
    }

    /// Waits for the checkpoint being written; returns what it made durable, if any.
    /// The run calls this before the next checkpoint and when it stops.
    pub fn wait(&mut self) -> anyhow::Result<Option<Written>> {
        let written = self.store.wait()?;
        if let Some(written) = written {
            if self.size_unknown == Some(written.epoch) {
                self.size_unknown = None;
                match self.base == Some(written.epoch) {
                    true => self.base_bytes = written.bytes,
                    false => self.chain_bytes += written.bytes,
                }
            }
        }
        Ok(written)
    }

    /// Starts the background write of the checkpoint `meta` describes, whose bytes
    /// `produce` makes there; `size` if they are known now.
    fn hand_over(
        &mut self,
        meta: &Meta,
        size: Option<u64>,
        produce: store::Produce,
    ) -> anyhow::Result<()> {
        // The write in flight lands first, and its size counts before this one's.
        self.wait()?;
        let epoch = meta.epoch;
        let known = size.unwrap_or(0);
        if meta.parent.is_none() {
            self.previous_base = self.base;
            self.base = Some(epoch);
            self.base_bytes = known;
            self.chain_len = 0;
            self.chain_bytes = 0;
        } else {
            self.chain_len += 1;
            self.chain_bytes += known;
        }
        self.size_unknown = size.is_none().then_some(epoch);
        let keep_from = self.previous_base.or(self.base).unwrap_or(epoch);
        self.store.write_later(epoch, produce, keep_from)?;
        if let Some(aligned) = &self.aligned {
            aligned.epochs.taken(aligned.stage, epoch);
            if meta.finished {
                aligned.epochs.finished(aligned.stage, epoch);
            }
        }
        self.epoch = epoch;
        self.section = epoch;
        self.next_due = Instant::now() + self.interval;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weir_core::identity::UdfIdentity;
    use weir_core::output::SinkState;
    use weir_core::position::Position;

    fn in_dir(dir: &std::path::Path) -> CheckpointSpec {
        CheckpointSpec {
            enabled: true,
            dir: dir.to_path_buf(),
            interval: DEFAULT_INTERVAL,
            kafka: None,
            aligned: None,
        }
    }

    pub(crate) fn meta(epoch: u64, parent: Option<u64>) -> Meta {
        Meta {
            epoch,
            parent,
            pipeline: "p".into(),
            udf: UdfIdentity {
                name: "u".into(),
                sha256: "00".into(),
            },
            written_at: 0,
            states: vec![],
            watermark: 5,
            inputs: vec![InputMeta {
                name: "in".into(),
                position: Position::File {
                    offset: 10,
                    line: 2,
                    fingerprint: None,
                },
                watermark: 5,
                ended: false,
                read: 2,
            }],
            outputs: vec![],
            dead_letters: DeadLetterMeta {
                count: 0,
                length: Some(0),
            },
            counters: CounterMeta::default(),
            finished: false,
        }
    }

    fn write(c: &mut Checkpointer, keyed: &[u8]) -> Planned {
        let plan = c.plan();
        let file = CheckpointFile {
            meta: meta(plan.epoch, plan.parent),
            sinks: vec![SinkState {
                length: Some(3),
                data: b"t".to_vec(),
            }],
            keyed: vec![keyed.to_vec()],
        };
        c.write(file).unwrap();
        c.store.wait().unwrap();
        plan
    }

    #[test]
    fn no_checkpoint_falls_due_while_the_last_one_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let spec = CheckpointSpec {
            interval: Duration::ZERO,
            ..in_dir(dir.path())
        };
        let (mut c, _) = Checkpointer::open(&spec, false).unwrap();
        assert!(c.is_due());
        let (release, held) = std::sync::mpsc::channel::<()>();
        let plan = c.plan();
        let file = CheckpointFile {
            meta: meta(plan.epoch, plan.parent),
            sinks: vec![],
            keyed: vec![b"now".to_vec()],
        };
        let later: KeyedLater = Box::new(move |part| {
            held.recv().unwrap();
            part(b"later")
        });
        c.write_later(file, later).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!c.is_due(), "the writer is still reading the store");
        release.send(()).unwrap();
        let written = c.wait().unwrap().unwrap();
        assert_eq!(written.epoch, plan.epoch);
        assert!(c.is_due());
    }

    #[test]
    fn chains_restore_newest_skip_damaged_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, chain) = Checkpointer::open(&in_dir(dir.path()), false).unwrap();
        assert!(chain.is_none());
        assert_eq!(write(&mut c, &[1; 10_000]).parent, None);
        assert_eq!(write(&mut c, &[2; 10]).parent, Some(1));
        assert_eq!(write(&mut c, &[3; 10]).parent, Some(2));
        assert!(
            CheckpointStore::open(dir.path()).is_err(),
            "the directory is locked while a run uses it"
        );
        drop(c);

        let (c, chain) = Checkpointer::open(&in_dir(dir.path()), false).unwrap();
        let chain = chain.unwrap();
        let epochs: Vec<u64> = chain.files.iter().map(|f| f.meta.epoch).collect();
        assert_eq!(epochs, vec![1, 2, 3]);
        assert_eq!(chain.newest().sinks[0].data, b"t");
        assert_eq!(chain.newest().meta, meta(3, Some(2)));
        let mut parts = Vec::new();
        for index in 0..3 {
            chain
                .read_keyed(index, &mut |part| {
                    parts.push(part.to_vec());
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(parts, [vec![1; 10_000], vec![2; 10], vec![3; 10]]);
        // A chain reads its files from the store it was found in, locked while it lives.
        drop((c, chain));

        // Damage the newest: the one before is restored, the damaged one discarded.
        let newest = dir.path().join("checkpoint-0000000003.weir");
        let mut bytes = std::fs::read(&newest).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&newest, &bytes).unwrap();
        let (mut c, chain) = Checkpointer::open(&in_dir(dir.path()), false).unwrap();
        assert_eq!(chain.unwrap().newest().meta.epoch, 2);
        assert!(!newest.exists());
        assert_eq!(
            write(&mut c, &[4; 10]).epoch,
            3,
            "the next epoch takes its place"
        );

        // Increments that outgrow their base start a new chain; the older chain stays as a
        // fallback until a third begins.
        assert_eq!(write(&mut c, &[5; 20_000]).parent, Some(3));
        assert_eq!(write(&mut c, &[6; 10]).parent, None);
        assert_eq!(c.store.epochs().unwrap(), vec![1, 2, 3, 4, 5]);
        for _ in 0..3 {
            write(&mut c, &[7; 300]);
        }
        let epochs = c.store.epochs().unwrap();
        assert_eq!(epochs.first(), Some(&5), "{epochs:?}");

        c.store.clear().unwrap();
        assert!(c.store.epochs().unwrap().is_empty());
    }

    #[test]
    fn when_every_checkpoint_is_damaged_the_run_is_refused_not_started_over() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = Checkpointer::open(&in_dir(dir.path()), false).unwrap();
        write(&mut c, &[1; 100]);
        write(&mut c, &[2; 10]);
        drop(c);
        for epoch in [1, 2] {
            let path = dir.path().join(format!("checkpoint-000000000{epoch}.weir"));
            let mut bytes = std::fs::read(&path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
            std::fs::write(&path, &bytes).unwrap();
        }
        let err = format!(
            "{:#}",
            Checkpointer::open(&in_dir(dir.path()), false)
                .err()
                .unwrap()
        );
        assert!(
            err.contains("none of the 2 checkpoints") && err.contains("--fresh"),
            "{err}"
        );
        let (_, chain) = Checkpointer::open(&in_dir(dir.path()), true).unwrap();
        assert!(chain.is_none(), "--fresh starts over");
    }

    #[test]
    fn once_a_stage_ended_the_others_take_no_further_checkpoint() {
        let root = tempfile::tempdir().unwrap();
        let epochs = aligned::GraphEpochs::new(vec!["a".into(), "b".into()], vec![0]);
        let spec = |stage: usize| CheckpointSpec {
            enabled: true,
            dir: root.path().join(stage.to_string()),
            interval: std::time::Duration::ZERO,
            kafka: None,
            aligned: Some(aligned::Aligned {
                stage,
                epochs: std::sync::Arc::clone(&epochs),
                restore: None,
                resume_epoch: None,
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
