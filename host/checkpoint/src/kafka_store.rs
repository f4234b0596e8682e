//! Checkpoints in a partition of a Kafka topic, so that a task's state can follow its
//! partition to another process, on another machine, after a rebalance.
//!
//! Task `p` of a pipeline keeps its checkpoints in partition `p` of the topic
//! `<group>.<pipeline>.checkpoints`. A checkpoint is written as messages keyed by its epoch, in
//! chunks of at most [`CHUNK_BYTES`] (brokers limit message sizes), each with a header
//! `weir-chunk: <attempt>/<index>/<count>`; deleting one writes a message with a header
//! `weir-deleted` and no value. The store reads the partition once, when it opens, and
//! keeps the complete checkpoints in memory: a checkpoint counts only once every chunk
//! of one attempt has been read, so a writer that crashed halfway leaves nothing usable
//! behind. Each write waits for the brokers to acknowledge every chunk (`acks=all`).
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

use super::store::Backend;
use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use weir_io::kafka::{client_config, consumer_config, drop_in_background, Quiet};

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
/// are written as chunked messages and held in memory once read.
pub struct KafkaBackend {
    target: KafkaCheckpoints,
    /// The process's producer for these brokers (see the module docs).
    producer: Arc<BaseProducer>,
    /// Set for a claimed store: who writes (see the module docs).
    owner: Option<String>,
    /// The complete checkpoints, by epoch.
    held: Mutex<BTreeMap<u64, Vec<u8>>>,
}

impl KafkaBackend {
    /// Reads the partition to its end and keeps the checkpoints it holds. Several
    /// writers may share the partition (a log every member appends to).
    pub fn open(target: &KafkaCheckpoints) -> anyhow::Result<Self> {
        let this = Self::writer(target)?;
        let held =
            read_all(target, None).with_context(|| format!("cannot read {}", describe(target)))?;
        *this.held.lock().expect("not poisoned") = held;
        Ok(this)
    }

    /// A store that only appends (what the partition holds is not read: `epochs` and
    /// `read` know only what this store wrote). For a log others follow.
    pub fn writer(target: &KafkaCheckpoints) -> anyhow::Result<Self> {
        Self::create(target, None)
    }

    /// Claims the partition for this writer, then reads it: from now on, what an earlier
    /// writer writes there is ignored by every reader (a task's checkpoints).
    pub fn open_claimed(target: &KafkaCheckpoints) -> anyhow::Result<Self> {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let owner = format!("{}/pid{}/{nanos}", host.trim(), std::process::id());
        let this = Self::create(target, Some(owner.clone()))?;
        let headers = OwnedHeaders::new().insert(Header {
            key: CLAIM_HEADER,
            value: Some(owner.as_bytes()),
        });
        // Not waited for: the reader reads until it meets it, so the producer's start
        // and the read overlap.
        this.send("claim", &[], headers)?;
        this.producer.poll(Duration::ZERO);
        let held = read_all(target, Some(&owner))
            .with_context(|| format!("cannot read {}", describe(target)))?;
        *this.held.lock().expect("not poisoned") = held;
        Ok(this)
    }

    fn create(target: &KafkaCheckpoints, owner: Option<String>) -> anyhow::Result<Self> {
        Ok(Self {
            target: target.clone(),
            producer: producer(&target.brokers)?,
            owner,
            held: Mutex::new(BTreeMap::new()),
        })
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
            .held
            .lock()
            .expect("not poisoned")
            .keys()
            .copied()
            .collect())
    }

    fn read(&self, epoch: u64) -> anyhow::Result<Vec<u8>> {
        self.held
            .lock()
            .expect("not poisoned")
            .get(&epoch)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{}: no checkpoint {epoch}", self.describe()))
    }

    fn write(&self, epoch: u64, data: &[u8]) -> anyhow::Result<()> {
        // An attempt id tells this write's chunks from those of an earlier, broken one.
        let attempt = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let chunks: Vec<&[u8]> = if data.is_empty() {
            vec![data]
        } else {
            data.chunks(CHUNK_BYTES).collect()
        };
        for (index, chunk) in chunks.iter().enumerate() {
            let header = format!("{attempt}/{index}/{}", chunks.len());
            let headers = OwnedHeaders::new().insert(Header {
                key: "weir-chunk",
                value: Some(header.as_bytes()),
            });
            self.send(&epoch.to_string(), chunk, headers)?;
        }
        self.producer
            .flush(TIMEOUT)
            .with_context(|| format!("{}: checkpoint {epoch} not acknowledged", self.describe()))?;
        self.held
            .lock()
            .expect("not poisoned")
            .insert(epoch, data.to_vec());
        Ok(())
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
        self.held.lock().expect("not poisoned").remove(&epoch);
        Ok(())
    }
}

/// A checkpoint being put together from its chunks.
struct Partial {
    attempt: u64,
    count: usize,
    chunks: Vec<Vec<u8>>,
}

/// Reads the partition from its start to its end, or with `claim` until that claim (the
/// reader's own, just sent); returns the complete checkpoints.
fn read_all(
    target: &KafkaCheckpoints,
    claim: Option<&str>,
) -> anyhow::Result<BTreeMap<u64, Vec<u8>>> {
    let mut reader = ChunkReader::open(target)?;
    let mut held = BTreeMap::new();
    let entries = match claim {
        Some(claim) => reader.read_until_claim(claim)?,
        None => reader.read(true)?,
    };
    // A task's start need not wait for the consumer's teardown.
    drop_in_background(reader);
    for entry in entries {
        match entry {
            Entry::Complete(epoch, data) => {
                held.insert(epoch, data);
            }
            Entry::Deleted(epoch) => {
                held.remove(&epoch);
            }
        }
    }
    Ok(held)
}

/// What a [`ChunkReader`] found in the partition, in the order it was written.
pub enum Entry {
    /// Every chunk of one write of this key.
    Complete(u64, Vec<u8>),
    /// A deletion of this key: what was written under it before no longer counts.
    Deleted(u64),
}

/// How far a [`ChunkReader`] reads.
#[derive(Clone, Copy)]
enum Until<'a> {
    /// The partition's end.
    End,
    /// What has arrived.
    Nothing,
    /// This owner's claim.
    Claim(&'a str),
}

/// Reads a partition written by [`KafkaBackend`], from its start: all of it at once, or
/// (following it) what arrived since the last read.
pub struct ChunkReader {
    consumer: BaseConsumer<Quiet>,
    partial: BTreeMap<u64, Partial>,
    /// The owner of the latest claim read, whose writes alone count from there on.
    claimed_by: Option<String>,
}

impl ChunkReader {
    /// A reader of `target`'s partition from its first message. Nothing is read until
    /// [`read`](Self::read) or [`read_until_claim`](Self::read_until_claim).
    pub fn open(target: &KafkaCheckpoints) -> anyhow::Result<Self> {
        let consumer: BaseConsumer<Quiet> =
            consumer_config(&target.brokers, "weir-checkpoint-reader")
                .set("enable.partition.eof", "true")
                .set("auto.offset.reset", "earliest")
                .set("fetch.wait.max.ms", FETCH_WAIT_MS)
                .set(
                    "fetch.message.max.bytes",
                    (CHUNK_BYTES + (64 << 10)).to_string(),
                )
                .create_with_context(Quiet("reading checkpoints"))?;
        // Offset 0, not `Offset::Beginning`: a logical offset assigned before the
        // partition's leader is known is looked up only after a fixed 500 ms (librdkafka),
        // which every task's start waited for. Where retention has deleted the start of
        // the partition, offset 0 is out of range and `auto.offset.reset` goes to the
        // earliest offset there is.
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&target.topic, target.partition, Offset::Offset(0))?;
        consumer.assign(&assignment)?;
        Ok(Self {
            consumer,
            partial: BTreeMap::new(),
            claimed_by: None,
        })
    }

    /// With `to_end`, reads until the partition's end (failing after a minute); else
    /// only what has arrived, without waiting.
    pub fn read(&mut self, to_end: bool) -> anyhow::Result<Vec<Entry>> {
        self.read_through(if to_end { Until::End } else { Until::Nothing })
    }

    /// Reads until the claim of `owner` (failing after a minute).
    pub fn read_until_claim(&mut self, owner: &str) -> anyhow::Result<Vec<Entry>> {
        self.read_through(Until::Claim(owner))
    }

    fn read_through(&mut self, until: Until<'_>) -> anyhow::Result<Vec<Entry>> {
        let to_end = !matches!(until, Until::Nothing);
        let mut found = Vec::new();
        let started = Instant::now();
        loop {
            anyhow::ensure!(
                started.elapsed() < TIMEOUT,
                "the partition was not read to its end within {} s",
                TIMEOUT.as_secs()
            );
            let wait = if to_end {
                Duration::from_millis(200)
            } else {
                Duration::ZERO
            };
            let Some(result) = self.consumer.poll(wait) else {
                if to_end {
                    continue;
                }
                break;
            };
            let message = match result {
                Ok(message) => message,
                Err(KafkaError::PartitionEOF(_)) if matches!(until, Until::Claim(_)) => continue,
                Err(KafkaError::PartitionEOF(_)) => break,
                Err(e) => {
                    tracing::debug!("reading checkpoints: {e}");
                    continue;
                }
            };
            if let Some(entry) = take(&mut self.partial, &mut self.claimed_by, &message) {
                found.push(entry);
            }
            if let Until::Claim(owner) = until {
                if self.claimed_by.as_deref() == Some(owner) {
                    break;
                }
            }
        }
        Ok(found)
    }
}

/// Adds one message to the entries being put together; returns what it completed.
fn take(
    partial: &mut BTreeMap<u64, Partial>,
    claimed_by: &mut Option<String>,
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> Option<Entry> {
    let header = |name: &str| {
        message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
    };
    if let Some(owner) = header(CLAIM_HEADER) {
        // A new writer: what others write from here on is a zombie's. Chunks of an
        // earlier writer's unfinished write can no longer complete.
        partial.clear();
        *claimed_by = Some(owner);
        return None;
    }
    if claimed_by.is_some() && header(OWNER_HEADER) != *claimed_by {
        return None;
    }
    let epoch = message
        .key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .and_then(|k| k.parse::<u64>().ok())?;
    if header("weir-deleted").is_some() {
        partial.remove(&epoch);
        return Some(Entry::Deleted(epoch));
    }
    let chunk = header("weir-chunk")?;
    let parts: Vec<u64> = chunk.split('/').filter_map(|n| n.parse().ok()).collect();
    let [attempt, index, count] = parts[..] else {
        return None;
    };
    let entry = partial.entry(epoch).or_insert(Partial {
        attempt,
        count: count as usize,
        chunks: Vec::new(),
    });
    if entry.attempt != attempt || index as usize != entry.chunks.len() {
        // A new attempt (or chunks out of order): start over with this one.
        *entry = Partial {
            attempt,
            count: count as usize,
            chunks: Vec::new(),
        };
        if index != 0 {
            return None;
        }
    }
    entry
        .chunks
        .push(message.payload().unwrap_or_default().to_vec());
    if entry.chunks.len() < entry.count {
        return None;
    }
    let done = partial.remove(&epoch).expect("present");
    Some(Entry::Complete(epoch, done.chunks.concat()))
}
