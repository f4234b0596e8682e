//! Keyed shards: a pipeline of parallelism N runs N keyed operators, each with its own
//! UDF instance, keyed state and timers, side by side on N threads.
//!
//! A key belongs to one of [`KEY_GROUPS`](weir_core::key::KEY_GROUPS) key groups, and a
//! group to one shard ([`shard_of`](weir_core::key::shard_of)). Every shard is handed
//! every run of records the merge takes: it calls its UDF for the records of its own
//! keys and reads only the timestamps of the others, so each shard's watermark is the
//! pipeline's at every record, and its timers fire exactly where they would in one
//! operator. A key's records, timers and outputs therefore keep their order end to
//! end; only the outputs of different keys interleave differently.
//!
//! The runs of records are the only work done in parallel: the run's thread hands one
//! to every shard, waits for all of them, and between two runs drives the shards one
//! after another (watermark markers, idleness, ends of input, processing-time timers,
//! swaps, rollbacks, checkpoints), so a checkpoint is aligned across the shards by
//! construction: no shard is inside a run when it is cut. A failure inside a run is
//! dealt with on the run's thread, shard by shard, as at parallelism 1.
//!
//! The shards share the pipeline's sinks: each shard writes into a [`ShardSink`], which
//! hands its records on in runs to the one [`SharedOutput`] of that output. A shard
//! numbers its records per key group, so a replay after a crash gives every record the
//! number it had (the Kafka sink's `weir-id`), whatever the parallelism.

use std::sync::{Arc, Mutex, MutexGuard};
use weir_core::output::{OutputRecord, Sink, SinkState};
use weir_engine::operator::{KeyedOperator, OperatorCounters, OperatorError};
use weir_engine::runtime::ElementRef;

/// What a shard's run of records came to: `Err` with the index of the element the
/// failure was reported on, as [`KeyedOperator::process_elements`] says.
pub(crate) type ShardResult = Result<(), (usize, OperatorError)>;

/// The operators of the shards besides the one the run drives (`Runner::operator`).
pub(crate) struct Shards {
    /// The operators by shard index; the slot of the shard in the runner is empty.
    parked: Vec<Option<KeyedOperator>>,
    /// The shard whose operator is in the runner.
    active: usize,
    /// The sinks the shards share, by output id (empty at parallelism 1, where the one
    /// operator owns its sinks).
    pub outputs: Vec<Arc<SharedOutput>>,
    /// One thread per shard, kept for the run (none at parallelism 1).
    pool: Option<rayon::ThreadPool>,
}

impl Shards {
    /// The shards of a run: `others` are shards 1 to N-1 (shard 0 is in the runner), and
    /// `outputs` the sinks they share.
    pub fn new(
        others: Vec<KeyedOperator>,
        outputs: Vec<Arc<SharedOutput>>,
    ) -> anyhow::Result<Self> {
        let mut parked = vec![None];
        parked.extend(others.into_iter().map(Some));
        // At parallelism 1 too: the one shard works on its thread while the run's reads
        // ahead and decodes the next run of records.
        let pool = Some(
            rayon::ThreadPoolBuilder::new()
                .num_threads(parked.len())
                .thread_name(|shard| format!("weir-shard-{shard}"))
                .build()
                .map_err(|e| anyhow::anyhow!("cannot start the shards' threads: {e}"))?,
        );
        Ok(Self {
            parked,
            active: 0,
            outputs,
            pool,
        })
    }

    /// How many shards run.
    pub fn count(&self) -> usize {
        self.parked.len()
    }

    /// Puts shard `shard`'s operator in `slot` (the runner's), parking the one there.
    pub fn activate(&mut self, slot: &mut KeyedOperator, shard: usize) {
        if shard == self.active {
            return;
        }
        let incoming = self.parked[shard].take().expect("a parked shard");
        let outgoing = std::mem::replace(slot, incoming);
        self.parked[self.active] = Some(outgoing);
        self.active = shard;
    }

    /// The operators not in the runner.
    pub fn parked(&self) -> impl Iterator<Item = &KeyedOperator> {
        self.parked.iter().flatten()
    }

    /// The operators not in the runner, to change.
    pub fn parked_mut(&mut self) -> impl Iterator<Item = &mut KeyedOperator> {
        self.parked.iter_mut().flatten()
    }

    /// Every shard's operator, `first` (the runner's) first: for what the run does to
    /// all of them at once (a checkpoint, a swap).
    pub fn with_first<'a>(
        &'a mut self,
        first: &'a mut KeyedOperator,
    ) -> Vec<&'a mut KeyedOperator> {
        std::iter::once(first).chain(self.parked_mut()).collect()
    }

    /// Runs `elements` through every shard at once, each on its own thread (`first` is
    /// the runner's operator, which must hold shard 0), while this thread does
    /// `meanwhile` (the run reads ahead); returns each shard's result, by shard index,
    /// once all are done, and what `meanwhile` returned. The run calls this for every
    /// run of records of a pipeline whose parallelism is above 1.
    pub fn process_in_parallel<T: Send>(
        &mut self,
        first: &mut KeyedOperator,
        elements: &[(usize, ElementRef<'_>)],
        meanwhile: impl FnOnce() -> T + Send,
    ) -> (Vec<ShardResult>, T) {
        debug_assert_eq!(self.active, 0);
        let pool = self.pool.as_ref().expect("a pool when there are shards");
        let mut results: Vec<Option<ShardResult>> = (0..self.parked.len()).map(|_| None).collect();
        let (result_0, others) = results.split_first_mut().expect("shard 0");
        let done = pool.in_place_scope(|scope| {
            scope.spawn(|_| *result_0 = Some(first.process_elements(elements)));
            for (operator, result) in self.parked.iter_mut().flatten().zip(others) {
                scope.spawn(move |_| *result = Some(operator.process_elements(elements)));
            }
            meanwhile()
        });
        let results = results
            .into_iter()
            .map(|r| r.expect("every shard ran"))
            .collect();
        (results, done)
    }
}

/// The counters of a run: the sum of its shards' (`operators`, shard 0 first).
pub(crate) fn sum_counters<'a>(
    mut operators: impl Iterator<Item = &'a KeyedOperator>,
) -> OperatorCounters {
    let mut sum = operators.next().expect("shard 0").counters().clone();
    for operator in operators {
        let c = operator.counters();
        sum.elements += c.elements;
        sum.late += c.late;
        sum.event_timers += c.event_timers;
        sum.processing_timers += c.processing_timers;
        for (total, emitted) in sum.emitted.iter_mut().zip(&c.emitted) {
            *total += emitted;
        }
    }
    sum
}

/// One output's sink, shared by the shards.
pub(crate) struct SharedOutput {
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

    /// Makes what every shard handed on durable (see [`Sink::checkpoint`]). The run calls
    /// this when it takes a checkpoint, after flushing every shard's [`ShardSink`].
    pub fn checkpoint(&self) -> anyhow::Result<SinkState> {
        self.lock().checkpoint()
    }

    /// Completes the sink ([`Sink::finish`]), once, after every shard closed its sinks.
    pub fn finish(&self) -> anyhow::Result<()> {
        self.lock().finish()
    }

    /// Hands on what the sink buffers ([`Sink::flush`]).
    pub fn flush(&self) -> anyhow::Result<()> {
        self.lock().flush()
    }
}

/// How many records a shard gathers before it hands them to the shared sink: the lock
/// is taken once per run of them, not once per record.
const HAND_ON_EVERY: usize = 256;

/// A shard's end of a [`SharedOutput`]: gathers the records the shard's UDF emits and
/// hands them on in runs, in the order they were emitted.
pub(crate) struct ShardSink {
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

    /// Hands on what is gathered; the run flushes the shared sink itself, once, after
    /// every shard ([`SharedOutput::flush`]): a flush may wait for acknowledgements.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.hand_on()
    }

    /// Hands on what is gathered; the shared sink is completed once, by the run, after
    /// every shard ([`SharedOutput::finish`]).
    fn finish(&mut self) -> anyhow::Result<()> {
        self.hand_on()
    }

    /// Hands on what is gathered; the run checkpoints the shared sink itself
    /// ([`SharedOutput::checkpoint`]) once every shard has.
    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        self.hand_on()?;
        Ok(SinkState::default())
    }

    fn lost(&self) -> u64 {
        self.output.lock().lost()
    }
}
