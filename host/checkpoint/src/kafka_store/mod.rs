//! Checkpoints in a partition of a Kafka topic, so that a task's state can follow its
//! partition to another process, on another machine, after a rebalance.
//!
//! Task `p` of a pipeline keeps its checkpoints in partition `p` of the topic
//! `<group>.<pipeline>.checkpoints`. A checkpoint is written as messages keyed by its epoch, in
//! chunks of at most [`CHUNK_BYTES`] (brokers limit message sizes), each with a header
//! `weir-chunk: <attempt>/<index>/<count>`; deleting one writes a message with a header
//! `weir-deleted` and no value. The store reads the partition once, when it opens, and
//! keeps the complete checkpoints in a local copy, a file each in a folder of the state
//! directory of its own (`kafka-p<partition>-<claim>`, deleted with the store): a
//! checkpoint counts only once every chunk of one attempt has been read, so a writer
//! that crashed halfway leaves nothing usable behind. Reading and writing go a chunk at
//! a time, so a task's memory does not hold its checkpoints, however large its state.
//! Each write waits for the brokers to acknowledge every chunk (`acks=all`).
//!
//! **Fencing.** A task's store is opened *claimed* ([`KafkaBackend::open_claimed`]): it
//! writes a claim message (`weir-claim: <owner>`), reads until its claim, and tags everything
//! it writes with `weir-owner: <owner>`. A reader takes only what the latest claim's owner
//! wrote after that claim (and what was written before it): a process that froze past its
//! session timeout and wakes up after its task moved (a zombie) can still write, but its
//! checkpoints come after the new owner's claim and are ignored, so the chain cannot fork.
//!
//! **One producer per process.** Every store of a process on the same brokers writes with
//! one idempotent producer ([`warm_up`] makes it ahead of the first store). A new
//! idempotent producer cannot write until it has a producer id, and librdkafka asks for
//! one only once a broker connection is up, retrying after a fixed 500 ms: with a
//! producer per store, every task's claim waited 0.5-1 s for it.
//!
//! The partition grows with every checkpoint; deleted ones are skipped when it is read.
//! A production cluster bounds it with the topic's retention (`retention.ms` longer than
//! two checkpoint chains); see docs/scaling.md.

mod chunks;

pub use chunks::{ChunkReader, Entry};

use super::store::Backend;
use anyhow::Context as _;
use chunks::Found;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use weir_io::kafka::{client_config, drop_in_background};

/// On a claim message: who claims the partition.
const CLAIM_HEADER: &str = "weir-claim";
/// On what a claimed store writes: who wrote it.
const OWNER_HEADER: &str = "weir-owner";

/// Most bytes in one message.
pub const CHUNK_BYTES: usize = 512 << 10;
/// The longest a [`ChunkReader`]'s fetch at the partition's end waits for more. A task's
/// reader often fetches before the claim it waits for has landed, and a broker that holds
/// such a fetch for the whole wait (tansu does; Apache Kafka answers as soon as a message
/// arrives) would keep the task's start waiting librdkafka's default 500 ms. A reader
/// that follows a log (the group's UDF versions) fetches this often while nothing arrives.
const FETCH_WAIT_MS: &str = "50";
/// How long opening waits for the partition to be read, and a write for its acks.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where a task's checkpoints go (or another log kept in their chunked format: a
/// group's UDF versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaCheckpoints {
    /// The bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: String,
    /// The topic: `<group>.<pipeline>.checkpoints` for a task's checkpoints.
    pub topic: String,
    /// The partition of it: for a task's checkpoints, the task's partition number.
    pub partition: i32,
}

/// A [`Backend`] on one partition of a Kafka topic (see the module docs): checkpoints
/// are written as chunked messages and held in a local copy once read or written.
pub struct KafkaBackend {
    target: KafkaCheckpoints,
    /// The process's producer for these brokers (see the module docs).
    producer: Arc<BaseProducer>,
    /// Set for a claimed store: who writes (see the module docs).
    owner: Option<String>,
    /// Where the checkpoints it holds are kept; `None` for a store that only appends.
    copy: Option<LocalCopy>,
}

/// The checkpoints a store holds, a file each (`<epoch>.weir`) in a folder of its own.
struct LocalCopy {
    dir: PathBuf,
    held: Mutex<BTreeSet<u64>>,
}

impl LocalCopy {
    /// An empty folder for a copy of partition `partition` under `state_dir`, of this
    /// process (`kafka-p<partition>-<pid>-<nanos>`); the copies that processes which no
    /// longer run left there (killed) are deleted, where `/proc` says.
    fn create(state_dir: &Path, partition: i32) -> anyhow::Result<Self> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("cannot create {}", state_dir.display()))?;
        let prefix = format!("kafka-p{partition}-");
        for entry in std::fs::read_dir(state_dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('-').next());
            if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists())
                && Path::new("/proc/self").exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = state_dir.join(format!("{prefix}{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self {
            dir,
            held: Mutex::new(BTreeSet::new()),
        })
    }

    fn path(&self, epoch: u64) -> PathBuf {
        self.dir.join(format!("{epoch}.weir"))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for LocalCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl KafkaBackend {
    /// Reads the partition to its end into a local copy under `state_dir`, without
    /// claiming it (several writers may share it).
    pub fn open(target: &KafkaCheckpoints, state_dir: &Path) -> anyhow::Result<Self> {
        let this = Self {
            copy: Some(LocalCopy::create(state_dir, target.partition)?),
            ..Self::writer(target)?
        };
        this.read_copy(None)
            .with_context(|| format!("cannot read {}", describe(target)))?;
        Ok(this)
    }

    /// A store that only appends: what the partition holds is not read, and `epochs`
    /// lists nothing. For a log others follow (a group's UDF versions).
    pub fn writer(target: &KafkaCheckpoints) -> anyhow::Result<Self> {
        Ok(Self {
            target: target.clone(),
            producer: producer(&target.brokers)?,
            owner: None,
            copy: None,
        })
    }

    /// Claims the partition for this writer, then reads it into a local copy under
    /// `state_dir`: from now on, what an earlier writer writes there is ignored by every
    /// reader (a task's checkpoints).
    pub fn open_claimed(target: &KafkaCheckpoints, state_dir: &Path) -> anyhow::Result<Self> {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let owner = format!("{}/pid{}/{nanos}", host.trim(), std::process::id());
        let copy = LocalCopy::create(state_dir, target.partition)?;
        let this = Self {
            target: target.clone(),
            producer: producer(&target.brokers)?,
            owner: Some(owner.clone()),
            copy: Some(copy),
        };
        let headers = OwnedHeaders::new().insert(Header {
            key: CLAIM_HEADER,
            value: Some(owner.as_bytes()),
        });
        // Not waited for: the reader reads until it meets it, so the producer's start
        // and the read overlap.
        this.send("claim", &[], headers)?;
        this.producer.poll(Duration::ZERO);
        this.read_copy(Some(&owner))
            .with_context(|| format!("cannot read {}", describe(target)))?;
        Ok(this)
    }

    /// Reads the partition to its end, or until `claim`, into the local copy: each
    /// complete checkpoint becomes a file, a deleted one goes.
    fn read_copy(&self, claim: Option<&str>) -> anyhow::Result<()> {
        let copy = self.copy.as_ref().expect("a claimed store has a copy");
        let mut reader = ChunkReader::open_into(&self.target, &copy.dir)?;
        let found = reader.read_found(claim);
        // A task's start need not wait for the consumer's teardown.
        drop_in_background(reader);
        let mut held = copy.held();
        for entry in found? {
            match entry {
                Found::Complete(epoch, file) => {
                    let path = copy.path(epoch);
                    std::fs::rename(&file, &path)
                        .with_context(|| format!("cannot rename {}", file.display()))?;
                    held.insert(epoch);
                }
                Found::Deleted(epoch) => {
                    let _ = std::fs::remove_file(copy.path(epoch));
                    held.remove(&epoch);
                }
            }
        }
        Ok(())
    }

    /// Sends checkpoint `epoch`, `size` bytes read from `data`, as chunks, and waits
    /// for the brokers to acknowledge them.
    fn send_chunks(&self, epoch: u64, data: &mut dyn Read, size: u64) -> anyhow::Result<()> {
        // An attempt id tells this write's chunks from those of an earlier, broken one.
        let attempt = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let count = size.div_ceil(CHUNK_BYTES as u64).max(1);
        let mut chunk = Vec::with_capacity(CHUNK_BYTES.min(size as usize));
        for index in 0..count {
            chunk.clear();
            Read::take(&mut *data, CHUNK_BYTES as u64).read_to_end(&mut chunk)?;
            let header = format!("{attempt}/{index}/{count}");
            let headers = OwnedHeaders::new().insert(Header {
                key: "weir-chunk",
                value: Some(header.as_bytes()),
            });
            self.send(&epoch.to_string(), &chunk, headers)?;
            // Lets the producer hand over what it has, so its queue holds a few chunks.
            self.producer.poll(Duration::ZERO);
        }
        self.producer
            .flush(TIMEOUT)
            .with_context(|| format!("{}: checkpoint {epoch} not acknowledged", self.describe()))
    }

    fn send(&self, key: &str, value: &[u8], headers: OwnedHeaders) -> anyhow::Result<()> {
        let headers = match &self.owner {
            Some(owner) => headers.insert(Header {
                key: OWNER_HEADER,
                value: Some(owner.as_bytes()),
            }),
            None => headers,
        };
        let mut record = BaseRecord::to(&self.target.topic)
            .partition(self.target.partition)
            .key(key)
            .payload(value)
            .headers(headers);
        let started = Instant::now();
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(code), returned))
                    if code == rdkafka::types::RDKafkaErrorCode::QueueFull
                        && started.elapsed() < TIMEOUT =>
                {
                    self.producer.poll(Duration::from_millis(10));
                    record = returned;
                }
                Err((e, _)) => anyhow::bail!("{}: {e}", describe(&self.target)),
            }
        }
    }
}

/// Makes the process's checkpoint producer for `brokers` now, so that it has its
/// producer id by the time the first store writes. Called by a group member as it joins.
pub fn warm_up(brokers: &str) -> anyhow::Result<()> {
    producer(brokers).map(drop)
}

/// The process's checkpoint producer for `brokers`, made on first use and kept for the
/// process's life. Its writes are acknowledged by every in-sync replica and never
/// duplicated or reordered by a retry (`acks=all`, idempotence); a store waits for its
/// own writes by flushing it, which also waits for other stores' writes in flight.
fn producer(brokers: &str) -> anyhow::Result<Arc<BaseProducer>> {
    static PRODUCERS: OnceLock<Mutex<HashMap<String, Arc<BaseProducer>>>> = OnceLock::new();
    let mut producers = PRODUCERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(producer) = producers.get(brokers) {
        return Ok(Arc::clone(producer));
    }
    let producer: BaseProducer = client_config(brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.max.bytes", (CHUNK_BYTES + (64 << 10)).to_string())
        .create()
        .with_context(|| format!("kafka brokers {brokers}: cannot create a checkpoint producer"))?;
    let producer = Arc::new(producer);
    producers.insert(brokers.to_string(), Arc::clone(&producer));
    Ok(producer)
}

fn describe(target: &KafkaCheckpoints) -> String {
    format!(
        "kafka topic {}[{}] on {}",
        target.topic, target.partition, target.brokers
    )
}

impl Backend for KafkaBackend {
    fn describe(&self) -> String {
        describe(&self.target)
    }

    fn epochs(&self) -> anyhow::Result<Vec<u64>> {
        Ok(self
            .copy
            .as_ref()
            .map(|copy| copy.held().iter().copied().collect())
            .unwrap_or_default())
    }

    fn read(&self, epoch: u64) -> anyhow::Result<Vec<u8>> {
        let mut data = Vec::new();
        self.open(epoch)?.read_to_end(&mut data)?;
        Ok(data)
    }

    fn open(&self, epoch: u64) -> anyhow::Result<Box<dyn Read + Send>> {
        let no_such = || anyhow::anyhow!("{}: no checkpoint {epoch}", self.describe());
        let copy = self.copy.as_ref().ok_or_else(no_such)?;
        if !copy.held().contains(&epoch) {
            return Err(no_such());
        }
        let path = copy.path(epoch);
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Box::new(std::io::BufReader::with_capacity(1 << 16, file)))
    }

    fn write(&self, epoch: u64, data: &[u8]) -> anyhow::Result<()> {
        self.write_from(epoch, &mut |out| Ok(out.write_all(data)?))
            .map(drop)
    }

    fn write_from(
        &self,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn Write) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let Some(copy) = &self.copy else {
            let mut data = Vec::new();
            fill(&mut data)?;
            self.send_chunks(epoch, &mut &data[..], data.len() as u64)?;
            return Ok(data.len() as u64);
        };
        // Into the local copy first (a chunk at a time in memory), then sent from it.
        let tmp = copy.dir.join(format!("{epoch}.tmp"));
        let written = (|| {
            let file = std::fs::File::create(&tmp)?;
            let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
            fill(&mut out)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            let size = file.metadata()?.len();
            drop(file);
            let mut data = std::io::BufReader::new(std::fs::File::open(&tmp)?);
            self.send_chunks(epoch, &mut data, size)?;
            std::fs::rename(&tmp, copy.path(epoch))?;
            anyhow::Ok(size)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        let size = written.with_context(|| {
            format!(
                "{}: cannot write checkpoint {epoch} (local copy {})",
                self.describe(),
                tmp.display()
            )
        })?;
        copy.held().insert(epoch);
        Ok(size)
    }

    fn delete(&self, epoch: u64) -> anyhow::Result<()> {
        let headers = OwnedHeaders::new().insert(Header {
            key: "weir-deleted",
            value: Some(b"1".as_slice()),
        });
        self.send(&epoch.to_string(), &[], headers)?;
        self.producer
            .flush(TIMEOUT)
            .with_context(|| format!("{}: deletion not acknowledged", self.describe()))?;
        if let Some(copy) = &self.copy {
            copy.held().remove(&epoch);
            let _ = std::fs::remove_file(copy.path(epoch));
        }
        Ok(())
    }
}
