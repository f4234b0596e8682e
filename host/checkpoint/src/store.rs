//! The checkpoint store: finding the newest good checkpoint, writing in the background,
//! pruning, over a [`Backend`] that keeps the checkpoints by epoch.
//!
//! In a directory, each checkpoint is one file, `checkpoint-<epoch>.weir`, written to a
//! temporary name, synced, renamed into place and the directory synced: a crash leaves
//! either the whole file or none of it. Writing happens on a background thread, so the
//! run only waits for it at the next checkpoint. A lock file keeps two runs from sharing
//! a directory.

use super::file::{self, CheckpointHead};
use anyhow::Context as _;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A checkpoint that can be restored: its full base first, then its increments. Holds
/// each file's head; their keyed sections are read a part at a time
/// ([`read_keyed`](Self::read_keyed)).
pub struct Chain {
    /// The checkpoints' heads, oldest first: a full one, then each increment on it, up to
    /// the one restored. Never empty.
    pub files: Vec<CheckpointHead>,
    /// Bytes of each file, in the same order.
    pub sizes: Vec<u64>,
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("files", &self.files)
            .field("sizes", &self.sizes)
            .field("in", &self.backend.describe())
            .finish()
    }
}

impl Chain {
    /// The checkpoint the chain restores: its last file, whose meta holds the positions,
    /// watermarks and counters to resume at.
    pub fn newest(&self) -> &CheckpointHead {
        self.files.last().expect("a chain has a base")
    }

    /// Reads the keyed section of `files[index]` again, handing `apply` its parts in
    /// order, one at a time in memory. The file read back intact when the chain was
    /// found; a file that no longer does fails here, after the parts before the damage.
    pub fn read_keyed(
        &self,
        index: usize,
        apply: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let epoch = self.files[index].meta.epoch;
        let mut input = self.backend.open(epoch)?;
        file::read(&mut input, apply)
            .with_context(|| format!("checkpoint {epoch} in {}", self.backend.describe()))?;
        Ok(())
    }
}

/// Where checkpoint files are kept, by epoch: a local directory ([`DirBackend`]) or a
/// partition of a Kafka topic (`super::kafka_store::KafkaBackend`, for tasks that move
/// between processes).
pub trait Backend: Send + Sync {
    /// Where, for messages.
    fn describe(&self) -> String;
    /// Epochs held, oldest first.
    fn epochs(&self) -> anyhow::Result<Vec<u64>>;
    /// The bytes of checkpoint `epoch`, one of [`epochs`](Backend::epochs). Decoding
    /// (and the checksum) is the caller's.
    fn read(&self, epoch: u64) -> anyhow::Result<Vec<u8>>;
    /// Checkpoint `epoch`, one of [`epochs`](Backend::epochs), to read from its start.
    /// By default the bytes [`read`](Backend::read) returns; a backend that can read a
    /// file a little at a time does.
    fn open(&self, epoch: u64) -> anyhow::Result<Box<dyn Read + Send>> {
        Ok(Box::new(std::io::Cursor::new(self.read(epoch)?)))
    }
    /// Writes checkpoint `epoch` durably, all of it or nothing. Runs on a background thread.
    fn write(&self, epoch: u64, data: &[u8]) -> anyhow::Result<()>;
    /// Writes checkpoint `epoch` durably, all of it or nothing, its bytes being those
    /// `fill` writes (nothing, if it fails); returns their count. Runs on a background
    /// thread. By default collects them in memory and calls [`write`](Backend::write); a
    /// backend that can write a file a little at a time does.
    fn write_from(
        &self,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn Write) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let mut data = Vec::new();
        fill(&mut data)?;
        self.write(epoch, &data)?;
        Ok(data.len() as u64)
    }
    /// Removes checkpoint `epoch`, so that [`epochs`](Backend::epochs) no longer lists
    /// it; one that is not there is no error. Runs on the background thread when a write
    /// prunes older chains, else on the caller's.
    fn delete(&self, epoch: u64) -> anyhow::Result<()>;
}

/// A checkpoint the background writer made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Its epoch.
    pub epoch: u64,
    /// Its size, encoded, as the store keeps it.
    pub bytes: u64,
}

/// A run's checkpoints over a [`Backend`]: finds the chain to restore, writes one
/// checkpoint at a time on a background thread, and prunes the chains no longer needed.
pub struct CheckpointStore {
    backend: Arc<dyn Backend>,
    writing: Option<JoinHandle<anyhow::Result<Written>>>,
    /// Told each epoch the background writer made durable.
    on_durable: Option<Arc<OnDurable>>,
}

/// What writes a checkpoint's bytes on the writer's thread ([`CheckpointStore::write_later`]).
pub type Produce = Box<dyn FnOnce(&mut dyn Write) -> anyhow::Result<()> + Send>;

/// What a store tells when a checkpoint it wrote is durable (its epoch).
pub type OnDurable = dyn Fn(u64) + Send + Sync;

impl CheckpointStore {
    /// Opens (creating) a checkpoint directory and locks it for this run.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self::on(Arc::new(DirBackend::open(dir)?)))
    }

    /// A store on another backend.
    pub fn on(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            writing: None,
            on_durable: None,
        }
    }

    /// Has `tell` called with each epoch once it is durable, on the writer's thread
    /// (a stage of a graph tells the graph's epochs, [`crate::aligned`]).
    pub fn on_durable(&mut self, tell: Box<OnDurable>) {
        self.on_durable = Some(Arc::from(tell));
    }

    /// Epochs of the checkpoints present, oldest first.
    pub fn epochs(&self) -> anyhow::Result<Vec<u64>> {
        self.backend.epochs()
    }

    /// The newest checkpoint whose whole chain reads back intact. A damaged file is
    /// reported and skipped for the checkpoint before it; it is never loaded. `None`
    /// when there is no checkpoint; an error when there are some but none is intact, since
    /// starting from scratch would write every output again behind the user's back.
    pub fn newest_good(&self) -> anyhow::Result<Option<Chain>> {
        let epochs = self.epochs()?;
        let mut last_error = None;
        for &epoch in epochs.iter().rev() {
            match self.load_chain(epoch) {
                Ok(chain) => return Ok(Some(chain)),
                Err(e) => {
                    tracing::warn!(
                        "checkpoint {epoch} in {} cannot be used ({e:#}); trying the one before",
                        self.backend.describe()
                    );
                    last_error = Some(e);
                }
            }
        }
        match last_error {
            None => Ok(None),
            Some(e) => Err(e.context(format!(
                "none of the {} checkpoints in {} can be used, so there is nothing to resume from; \
                 start over with --fresh (which writes every output again from the start)",
                epochs.len(),
                self.backend.describe()
            ))),
        }
    }

    /// Whether checkpoint `epoch` reads back intact and is a stage's final section
    /// ([`Meta::finished`](crate::Meta::finished)); a damaged one is not.
    pub fn is_final(&self, epoch: u64) -> bool {
        self.read_through(epoch)
            .is_ok_and(|(head, _)| head.meta.finished)
    }

    /// Reads checkpoint `epoch` through, checking it, without keeping its keyed section:
    /// its head and size.
    fn read_through(&self, epoch: u64) -> anyhow::Result<(CheckpointHead, u64)> {
        let mut input = self.backend.open(epoch)?;
        file::read(&mut input, &mut |_| Ok(()))
            .with_context(|| format!("checkpoint {epoch} in {}", self.backend.describe()))
    }

    fn load_chain(&self, epoch: u64) -> anyhow::Result<Chain> {
        let mut files = Vec::new();
        let mut sizes = Vec::new();
        let mut next = Some(epoch);
        while let Some(epoch) = next {
            let (head, size) = self.read_through(epoch)?;
            anyhow::ensure!(
                head.meta.epoch == epoch,
                "checkpoint {epoch} in {} says it is checkpoint {}",
                self.backend.describe(),
                head.meta.epoch
            );
            next = head.meta.parent;
            sizes.push(size);
            files.push(head);
        }
        files.reverse();
        sizes.reverse();
        Ok(Chain {
            files,
            sizes,
            backend: Arc::clone(&self.backend),
        })
    }

    /// Starts writing checkpoint `epoch` in the background; then deletes the ones
    /// before `keep_from` (older chains). Waits for the previous write first.
    #[cfg(test)]
    pub(crate) fn write(
        &mut self,
        epoch: u64,
        data: Vec<u8>,
        keep_from: u64,
    ) -> anyhow::Result<()> {
        self.write_later(
            epoch,
            Box::new(move |out: &mut dyn Write| Ok(out.write_all(&data)?)),
            keep_from,
        )
    }

    /// Starts writing checkpoint `epoch` in the background, its bytes being those
    /// `produce` writes on the writer's thread as it makes them (a checkpoint reading a
    /// snapshot of the state store); then deletes the ones before `keep_from` (older
    /// chains). Waits for the previous write first: call [`wait`](Self::wait) before to
    /// learn what it wrote.
    pub fn write_later(
        &mut self,
        epoch: u64,
        produce: Produce,
        keep_from: u64,
    ) -> anyhow::Result<()> {
        self.wait()?;
        let backend = Arc::clone(&self.backend);
        let on_durable = self.on_durable.clone();
        let handle = std::thread::Builder::new()
            .name("weir-checkpoint".into())
            .spawn(move || {
                let mut produce = Some(produce);
                let bytes = backend.write_from(epoch, &mut |out| {
                    let produce = produce.take().expect("a backend writes a checkpoint once");
                    produce(out)
                })?;
                if let Some(tell) = on_durable {
                    tell(epoch);
                }
                for old in backend.epochs()? {
                    if old < keep_from {
                        backend.delete(old)?;
                    }
                }
                Ok(Written { epoch, bytes })
            })?;
        self.writing = Some(handle);
        Ok(())
    }

    /// Whether a checkpoint is still being written in the background.
    pub fn is_writing(&self) -> bool {
        self.writing
            .as_ref()
            .is_some_and(|handle| !handle.is_finished())
    }

    /// Waits for the write in progress; returns what it made durable, if any.
    pub fn wait(&mut self) -> anyhow::Result<Option<Written>> {
        match self.writing.take() {
            None => Ok(None),
            Some(handle) => match handle.join() {
                Ok(result) => result.map(Some).with_context(|| {
                    format!("cannot write a checkpoint to {}", self.backend.describe())
                }),
                Err(_) => anyhow::bail!("the checkpoint writer panicked"),
            },
        }
    }

    /// Deletes checkpoints after `epoch`: after restoring `epoch`, newer files (one was
    /// damaged) belong to a history that did not happen, and must not be chained onto.
    pub fn discard_after(&self, epoch: u64) -> anyhow::Result<()> {
        for e in self.epochs()? {
            if e > epoch {
                self.backend.delete(e)?;
            }
        }
        Ok(())
    }

    /// Deletes every checkpoint (a run that completed, or `--fresh`).
    pub fn clear(&mut self) -> anyhow::Result<()> {
        self.wait()?;
        for e in self.epochs()? {
            self.backend.delete(e)?;
        }
        Ok(())
    }
}

/// Checkpoints as files in a directory, `checkpoint-<epoch>.weir`, locked for one run.
pub struct DirBackend {
    dir: PathBuf,
    _lock: File,
}

impl DirBackend {
    /// Creates the directory if needed and locks it (a `lock` file in it) for as long
    /// as the backend lives. Fails if another run holds the lock.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
        let lock = File::create(dir.join("lock"))
            .with_context(|| format!("cannot create a lock in {}", dir.display()))?;
        lock.try_lock().map_err(|_| {
            anyhow::anyhow!(
                "another weir run is using the state directory {} (give this one its own with --state-dir)",
                dir.display()
            )
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    fn path(&self, epoch: u64) -> PathBuf {
        self.dir.join(format!("checkpoint-{epoch:010}.weir"))
    }
}

impl Backend for DirBackend {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn epochs(&self) -> anyhow::Result<Vec<u64>> {
        let mut epochs = Vec::new();
        for entry in std::fs::read_dir(&self.dir)
            .with_context(|| format!("cannot list {}", self.dir.display()))?
        {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(epoch) = name
                .strip_prefix("checkpoint-")
                .and_then(|n| n.strip_suffix(".weir"))
                .and_then(|n| n.parse().ok())
            {
                epochs.push(epoch);
            }
        }
        epochs.sort_unstable();
        Ok(epochs)
    }

    fn read(&self, epoch: u64) -> anyhow::Result<Vec<u8>> {
        let path = self.path(epoch);
        std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
    }

    fn open(&self, epoch: u64) -> anyhow::Result<Box<dyn Read + Send>> {
        let path = self.path(epoch);
        let file = File::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Box::new(std::io::BufReader::with_capacity(1 << 16, file)))
    }

    fn write(&self, epoch: u64, data: &[u8]) -> anyhow::Result<()> {
        self.write_from(epoch, &mut |out| Ok(out.write_all(data)?))
            .map(|_| ())
    }

    fn write_from(
        &self,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn Write) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        write_atomically(&self.dir, &self.path(epoch), fill)
    }

    fn delete(&self, epoch: u64) -> anyhow::Result<()> {
        remove(&self.path(epoch))
    }
}

/// Writes `path` through a temporary file, synced and renamed into place: all of it or
/// nothing (the temporary file is removed when `fill` or the disk fails).
fn write_atomically(
    dir: &Path,
    path: &Path,
    fill: &mut dyn FnMut(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let file =
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut out = Counting {
            inner: std::io::BufWriter::with_capacity(1 << 16, file),
            written: 0,
        };
        fill(&mut out).with_context(|| format!("cannot write {}", tmp.display()))?;
        let file = out
            .inner
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|file| file.sync_all().map(|()| file))
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        drop(file);
        anyhow::Ok(out.written)
    })();
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} into place", tmp.display()))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))?;
    Ok(written)
}

/// A writer that counts the bytes through it.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn remove(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot delete {}", path.display()))
        }
        _ => Ok(()),
    }
}
