//! The sinks the shards of a [`KeyedStage`](super::KeyedStage) share: each shard writes
//! into a [`ShardSink`], which hands its records on in runs to the one [`SharedOutput`]
//! of that output. A shard numbers its records per key group, so a replay after a crash
//! gives every record the number it had (the Kafka sink's `weir-id`), whatever the
//! parallelism.

use std::sync::{Arc, Mutex, MutexGuard};
use weir_core::output::{OutputRecord, Sink, SinkState};

/// One output's sink, shared by the shards.
pub struct SharedOutput {
    /// The sink's location, for the shards' handles.
    location: String,
    sink: Mutex<Box<dyn Sink>>,
}

impl SharedOutput {
    /// Shares `sink`.
    pub fn new(sink: Box<dyn Sink>) -> Arc<Self> {
        Arc::new(Self {
            location: sink.location().to_string(),
            sink: Mutex::new(sink),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn Sink>> {
        // A shard that panicked while writing ends the run anyway.
        self.sink
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes what every shard handed on durable (see [`Sink::checkpoint`]).
    /// The stage calls this when it takes a checkpoint, after every shard's [`ShardSink`]
    /// handed on what it gathered.
    pub fn checkpoint(&self) -> anyhow::Result<SinkState> {
        self.lock().checkpoint()
    }

    /// Completes the sink ([`Sink::finish`]), once, after every shard closed its sinks.
    /// The stage calls this when the run ends or stops.
    pub fn finish(&self) -> anyhow::Result<()> {
        self.lock().finish()
    }

    /// Hands the stage's watermark to the sink ([`Sink::watermark`]). The stage calls
    /// this after every shard handed on what it gathered.
    pub fn watermark(&self, watermark: i64) -> anyhow::Result<()> {
        self.lock().watermark(watermark)
    }

    /// Hands on what the sink buffers ([`Sink::flush`]). The stage calls this after every
    /// shard flushed its handle, while the input is idle.
    pub fn flush(&self) -> anyhow::Result<()> {
        self.lock().flush()
    }
}

/// How many records a shard gathers before it hands them to the shared sink: the lock
/// is taken once per run of them, not once per record.
const HAND_ON_EVERY: usize = 256;

/// A shard's end of a [`SharedOutput`]: gathers the records the shard's UDF emits and
/// hands them on in runs, in the order they were emitted.
pub struct ShardSink {
    output: Arc<SharedOutput>,
    location: String,
    /// The gathered records' bytes: each record's key (if any), then its value.
    bytes: Vec<u8>,
    /// Per gathered record: where its key and value end in `bytes`, whether it has a
    /// key, its timestamp and its sequence number.
    records: Vec<Gathered>,
}

struct Gathered {
    key_end: usize,
    value_end: usize,
    keyed: bool,
    timestamp: i64,
    sequence: u64,
}

impl ShardSink {
    /// A shard's handle on `output`.
    pub fn new(output: Arc<SharedOutput>) -> Self {
        Self {
            location: output.location.clone(),
            output,
            bytes: Vec::new(),
            records: Vec::with_capacity(HAND_ON_EVERY),
        }
    }

    /// Writes the gathered records into the shared sink.
    fn hand_on(&mut self) -> anyhow::Result<()> {
        if self.records.is_empty() {
            return Ok(());
        }
        let mut shared = self.output.lock();
        let mut start = 0;
        let mut result = Ok(());
        for gathered in &self.records {
            let key = &self.bytes[start..gathered.key_end];
            let record = OutputRecord {
                key: gathered.keyed.then_some(key),
                value: &self.bytes[gathered.key_end..gathered.value_end],
                timestamp: gathered.timestamp,
                sequence: gathered.sequence,
            };
            start = gathered.value_end;
            if let Err(e) = shared.write(&record) {
                result = Err(e);
                break;
            }
        }
        drop(shared);
        self.records.clear();
        self.bytes.clear();
        result
    }
}

impl Sink for ShardSink {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        if let Some(key) = record.key {
            self.bytes.extend_from_slice(key);
        }
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(record.value);
        self.records.push(Gathered {
            key_end,
            value_end: self.bytes.len(),
            keyed: record.key.is_some(),
            timestamp: record.timestamp,
            sequence: record.sequence,
        });
        if self.records.len() >= HAND_ON_EVERY {
            self.hand_on()?;
        }
        Ok(())
    }

    /// Hands on what is gathered; the stage flushes the shared sink itself, once, after
    /// every shard ([`SharedOutput::flush`]): a flush may wait for acknowledgements.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.hand_on()
    }

    /// Hands on what is gathered; the stage hands the watermark to the shared sink
    /// itself, once, after every shard ([`SharedOutput::watermark`]).
    fn watermark(&mut self, _watermark: i64) -> anyhow::Result<()> {
        self.hand_on()
    }

    /// Hands on what is gathered; the shared sink is completed once, by the stage, after
    /// every shard ([`SharedOutput::finish`]).
    fn finish(&mut self) -> anyhow::Result<()> {
        self.hand_on()
    }

    /// Hands on what is gathered; the stage checkpoints the shared sink itself
    /// ([`SharedOutput::checkpoint`]) once every shard has.
    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        self.hand_on()?;
        Ok(SinkState::default())
    }

    fn lost(&self) -> u64 {
        self.output.lock().lost()
    }
}
