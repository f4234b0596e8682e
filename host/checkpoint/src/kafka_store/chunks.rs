//! Reading a partition written by [`KafkaBackend`](super::KafkaBackend): its messages put
//! together into the entries they are chunks of, in memory (a group's UDF versions) or,
//! a chunk at a time, into files (a task's checkpoints, which may be large).

use super::KafkaCheckpoints;
use super::{CHUNK_BYTES, CLAIM_HEADER, FETCH_WAIT_MS, OWNER_HEADER, TIMEOUT};
use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_io::kafka::{consumer_config, Quiet};

/// What a [`ChunkReader`] found in the partition, in the order it was written.
pub enum Entry {
    /// Every chunk of one write of this key.
    Complete(u64, Vec<u8>),
    /// A deletion of this key: what was written under it before no longer counts.
    Deleted(u64),
}

/// An entry as a reader into files found it: complete in the file named, or deleted.
pub(super) enum Found {
    /// Every chunk of one write of this key, in this file.
    Complete(u64, PathBuf),
    /// A deletion of this key.
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

/// An entry being put together from its chunks.
struct Partial {
    attempt: u64,
    count: usize,
    received: usize,
    data: Assembled,
}

/// Where an entry's chunks go as they come.
enum Assembled {
    Memory(Vec<u8>),
    File(PartFile),
}

/// A file an entry's chunks are appended to; removed unless the entry completes.
struct PartFile {
    out: Option<std::io::BufWriter<std::fs::File>>,
    path: PathBuf,
}

impl PartFile {
    /// The file, flushed, once the entry is complete: it stays.
    fn keep(mut self) -> anyhow::Result<PathBuf> {
        let out = self.out.take().expect("open until kept");
        out.into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(std::mem::take(&mut self.path))
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Reads a partition written by [`KafkaBackend`](super::KafkaBackend), from its start:
/// all of it at once, or (following it) what arrived since the last read.
pub struct ChunkReader {
    consumer: BaseConsumer<Quiet>,
    partial: BTreeMap<u64, Partial>,
    /// The owner of the latest claim read, whose writes alone count from there on.
    claimed_by: Option<String>,
    /// Where entries are put together: in memory (`None`), or in files in this folder.
    into: Option<PathBuf>,
}

impl ChunkReader {
    /// A reader of `target`'s partition from its first message, putting entries together
    /// in memory. Nothing is read until [`read`](Self::read) or
    /// [`read_until_claim`](Self::read_until_claim).
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
            into: None,
        })
    }

    /// [`open`](Self::open), putting entries together in files in `dir` (a chunk in
    /// memory at a time), for [`read_found`](Self::read_found).
    pub(super) fn open_into(target: &KafkaCheckpoints, dir: &Path) -> anyhow::Result<Self> {
        let mut this = Self::open(target)?;
        this.into = Some(dir.to_path_buf());
        Ok(this)
    }

    /// With `to_end`, reads until the partition's end (failing after a minute); else
    /// only what has arrived, without waiting. For a reader opened with
    /// [`open`](Self::open).
    pub fn read(&mut self, to_end: bool) -> anyhow::Result<Vec<Entry>> {
        let found = self.read_through(if to_end { Until::End } else { Until::Nothing })?;
        Ok(in_memory(found))
    }

    /// Reads until the claim of `owner` (failing after a minute). For a reader opened
    /// with [`open`](Self::open).
    pub fn read_until_claim(&mut self, owner: &str) -> anyhow::Result<Vec<Entry>> {
        Ok(in_memory(self.read_through(Until::Claim(owner))?))
    }

    /// Reads to the partition's end, or until the claim of `owner`, into files (a reader
    /// opened with [`open_into`](Self::open_into)).
    pub(super) fn read_found(&mut self, claim: Option<&str>) -> anyhow::Result<Vec<Found>> {
        let found = self.read_through(claim.map_or(Until::End, Until::Claim))?;
        found
            .into_iter()
            .map(|(epoch, data)| match data {
                Some(Assembled::File(file)) => file.keep().map(|path| Found::Complete(epoch, path)),
                Some(Assembled::Memory(_)) => unreachable!("a reader into files"),
                None => Ok(Found::Deleted(epoch)),
            })
            .collect()
    }

    /// What was read: each entry completed (`Some`) or deleted (`None`), in order.
    fn read_through(&mut self, until: Until<'_>) -> anyhow::Result<Vec<(u64, Option<Assembled>)>> {
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
            let into = self.into.as_deref();
            if let Some(entry) = take(&mut self.partial, &mut self.claimed_by, into, &message)? {
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

/// Adds one message to the entries being put together; returns what it completed
/// (`Some`) or deleted (`None`). Fails only if a file cannot be written.
#[allow(clippy::type_complexity)]
fn take(
    partial: &mut BTreeMap<u64, Partial>,
    claimed_by: &mut Option<String>,
    into: Option<&Path>,
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> anyhow::Result<Option<(u64, Option<Assembled>)>> {
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
        return Ok(None);
    }
    if claimed_by.is_some() && header(OWNER_HEADER) != *claimed_by {
        return Ok(None);
    }
    let Some(epoch) = message
        .key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .and_then(|k| k.parse::<u64>().ok())
    else {
        return Ok(None);
    };
    if header("weir-deleted").is_some() {
        partial.remove(&epoch);
        return Ok(Some((epoch, None)));
    }
    let Some(chunk) = header("weir-chunk") else {
        return Ok(None);
    };
    let parts: Vec<u64> = chunk.split('/').filter_map(|n| n.parse().ok()).collect();
    let [attempt, index, count] = parts[..] else {
        return Ok(None);
    };
    let continues = partial
        .get(&epoch)
        .is_some_and(|p| p.attempt == attempt && p.received == index as usize);
    if !continues {
        // A new attempt (or chunks out of order): start over with this one.
        partial.remove(&epoch);
        if index != 0 {
            return Ok(None);
        }
        let data = match into {
            None => Assembled::Memory(Vec::new()),
            Some(dir) => {
                let path = dir.join(format!("{epoch}.{attempt}.part"));
                let file = std::fs::File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                Assembled::File(PartFile {
                    out: Some(std::io::BufWriter::new(file)),
                    path,
                })
            }
        };
        let started = Partial {
            attempt,
            count: count as usize,
            received: 0,
            data,
        };
        partial.insert(epoch, started);
    }
    let entry = partial.get_mut(&epoch).expect("present");
    let payload = message.payload().unwrap_or_default();
    match &mut entry.data {
        Assembled::Memory(bytes) => bytes.extend_from_slice(payload),
        Assembled::File(file) => {
            let out = file.out.as_mut().expect("open until kept");
            out.write_all(payload)
                .with_context(|| format!("cannot write {}", file.path.display()))?;
        }
    }
    entry.received += 1;
    if entry.received < entry.count {
        return Ok(None);
    }
    let done = partial.remove(&epoch).expect("present");
    Ok(Some((epoch, Some(done.data))))
}

/// The entries of a reader in memory.
fn in_memory(found: Vec<(u64, Option<Assembled>)>) -> Vec<Entry> {
    found
        .into_iter()
        .map(|(epoch, data)| match data {
            Some(Assembled::Memory(bytes)) => Entry::Complete(epoch, bytes),
            Some(Assembled::File(_)) => unreachable!("a reader in memory"),
            None => Entry::Deleted(epoch),
        })
        .collect()
}
