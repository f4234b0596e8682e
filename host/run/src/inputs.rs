//! The run's inputs: every partition of every source, with its read-ahead queue, its
//! idleness and its end, and the merge that hands the operator records in timestamp
//! order.
//!
//! Every source partition (a file, stdin, one Kafka partition) is an *input*. A source is
//! read ahead into its inputs' queues, each up to its share of a run (see
//! [`Inputs::new`]); each record's key and event timestamp are decoded as it is read (a
//! record that cannot be decoded is handed back to the run for its dead letters). The
//! merge takes the input whose next record has the smallest timestamp (ties in
//! pipeline-file order) and stops where an input runs dry, so a live input with nothing
//! queued never lets a later record of another go first. This module only keeps the
//! books: the run decides what an input becoming idle, active or ended does to the
//! watermark.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};
use weir_core::time::Timestamp;
use weir_io::source::decode::{MessageMeta, RecordDecoder};
use weir_io::source::{Polled, Source, SourceRecord};

/// How many records an input reads ahead per shard, and the most records per shard
/// handed to the shards at once: a run of records holds `READ_AHEAD` times the number of
/// shards, so that each shard gets about this many of its own records per run (which
/// it may send to its UDF as one batch), whatever the parallelism.
pub(crate) const READ_AHEAD: usize = 512;

/// Which input: a source, and for a source of several partitions (Kafka) which one.
///
/// Its text form (`clicks`, or `orders:orders[3]`) names the input in checkpoints,
/// messages and the run report, so it must not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InputId {
    /// The source's name in the pipeline file.
    pub source: String,
    /// The partition's name (`topic[partition]`), for a partitioned source.
    pub partition: Option<String>,
}

impl fmt::Display for InputId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.partition {
            Some(partition) => write!(f, "{}:{partition}", self.source),
            None => f.write_str(&self.source),
        }
    }
}

/// One source: where its records come from and how they are decoded.
pub(crate) struct SourceSlot {
    /// Its name in the pipeline file.
    pub name: String,
    /// The connector.
    pub source: Box<dyn Source>,
    decoder: RecordDecoder,
    /// The longest record it may hand on.
    max_record_bytes: usize,
    /// Its partitions' inputs.
    pub inputs: Range<usize>,
    exhausted: bool,
    /// The stage it reads stopped on request, and everything it sent was read
    /// ([`Polled::Stopped`]): it is read no further in this run, but has not ended.
    stopped: bool,
    /// It is another stage's output (see [`SourceSettings::reads_stage`]).
    reads_stage: bool,
}

/// One partition of a source, with the records it has read ahead.
pub(crate) struct Input {
    /// Which input this is.
    pub id: InputId,
    /// Its checkpoint and report name (`id` as text), kept to avoid formatting it.
    pub name: String,
    /// Its source (an index into the sources).
    pub source: usize,
    /// The UDF input it feeds.
    pub input_index: u32,
    queue: VecDeque<Pending>,
    /// The source said it has no more records (some may still be queued).
    exhausted: bool,
    /// The source is exhausted and its queue drained: it no longer holds the watermark.
    pub ended: bool,
    /// Records read so far (dead letters included), counting those before a restore.
    pub read: u64,
    idle_timeout: Option<Duration>,
    last_record: Instant,
    idle: bool,
    /// The latest watermark marker's event time, applied once the records read before
    /// it have been processed.
    progress: Option<Timestamp>,
    /// It delivered a checkpoint barrier, and is read no further until the stage's
    /// checkpoint is taken.
    barrier: bool,
}

/// A decoded record waiting its turn.
pub(crate) struct Pending {
    /// The raw record.
    pub record: SourceRecord,
    key: KeyBytes,
    /// Its key's key group, computed once here for every shard of the stage.
    pub group: u16,
    /// Its event time.
    pub timestamp: Timestamp,
    /// The record's number in its input (1-based, dead letters included).
    pub number: u64,
}

impl Pending {
    /// The record's key.
    pub fn key(&self) -> &[u8] {
        match &self.key {
            KeyBytes::InLine(range) => &self.record.data[range.clone()],
            KeyBytes::Owned(bytes) => bytes,
        }
    }
}

/// Where the key is: inside the record's line (no copy), or unescaped into its own buffer.
enum KeyBytes {
    InLine(Range<usize>),
    Owned(Vec<u8>),
}

/// What one read of a source gave.
pub(crate) enum Read {
    /// A record was decoded and queued on `input`.
    Queued {
        /// The input it went to.
        input: usize,
        /// The input had been idle and delivers again.
        resumed: bool,
    },
    /// A record of `input` whose key or timestamp cannot be read: for the dead letters,
    /// then back to [`Inputs::recycle`].
    Undecodable {
        /// The input it came from.
        input: usize,
        /// The record.
        record: SourceRecord,
        /// Why it cannot be decoded.
        reason: String,
        /// The input had been idle and delivers again.
        resumed: bool,
    },
    /// `input` delivered a watermark marker (applied later, see
    /// [`Inputs::take_progress`]) or a checkpoint barrier ([`Inputs::at_barrier`]).
    Marker {
        /// The input.
        input: usize,
        /// The input had been idle and delivers again.
        resumed: bool,
    },
    /// Nothing within the wait.
    Idle,
    /// The source has ended.
    End,
    /// The stage the source reads stopped on request ([`Polled::Stopped`]).
    Stopped,
}

/// Every input of a run, and the sources behind them.
pub(crate) struct Inputs {
    sources: Vec<SourceSlot>,
    inputs: Vec<Input>,
    /// Record buffers to reuse.
    spare: Vec<SourceRecord>,
    /// The most records a run takes.
    run_size: usize,
}

/// The settings of one source that its inputs need.
pub(crate) struct SourceSettings<'a> {
    /// The source's name.
    pub name: &'a str,
    /// Whether it has several partitions (named in its inputs' ids).
    pub partitioned: bool,
    /// The UDF input it feeds.
    pub input_index: u32,
    /// How its records are decoded.
    pub decoder: RecordDecoder,
    /// How long without a record before its inputs stop holding the watermark back.
    pub idle_timeout: Option<Duration>,
    /// The longest record it may hand on; a longer one is undecodable.
    pub max_record_bytes: usize,
    /// The source is another stage's output. Nothing is read past a watermark marker
    /// until the records before it have been processed and it has been applied, so
    /// every record sees exactly the markers before it (the downstream's timers then
    /// fire as they would with the stages one after another); nothing is read past a
    /// checkpoint barrier until the stage took its checkpoint ([`Inputs::at_barrier`]).
    /// Otherwise a marker waits for the records read before it and the source reads on
    /// meanwhile (a repartition topic's).
    pub reads_stage: bool,
}

impl Inputs {
    /// No sources yet, for a run of `shards` shards: a run takes at most [`READ_AHEAD`]
    /// records per shard, and the inputs read ahead that many between them (each at
    /// least [`READ_AHEAD`]), so what is queued stays under `READ_AHEAD` times the
    /// larger of the shards and the inputs.
    pub fn new(shards: usize) -> Self {
        Self {
            sources: Vec::new(),
            inputs: Vec::new(),
            spare: Vec::new(),
            run_size: READ_AHEAD * shards.max(1),
        }
    }

    /// The most records a run of records holds ([`Inputs::take_chunk`]).
    pub fn run_size(&self) -> usize {
        self.run_size
    }

    /// The most records one input queues: its share of a run, and never fewer than
    /// [`READ_AHEAD`].
    fn queue_limit(&self) -> usize {
        (self.run_size / self.inputs.len().max(1)).max(READ_AHEAD)
    }

    /// Adds a source, with one input per partition; `read` says how many records each
    /// input had read before (from the checkpoint restored). Returns the inputs' indices.
    pub fn add(
        &mut self,
        source: Box<dyn Source>,
        settings: SourceSettings<'_>,
        read: impl Fn(&str) -> u64,
    ) -> Range<usize> {
        let first = self.inputs.len();
        for partition in source.partitions() {
            let id = InputId {
                source: settings.name.to_string(),
                partition: settings.partitioned.then_some(partition),
            };
            let name = id.to_string();
            self.inputs.push(Input {
                read: read(&name),
                id,
                name,
                source: self.sources.len(),
                input_index: settings.input_index,
                queue: VecDeque::new(),
                exhausted: false,
                ended: false,
                idle_timeout: settings.idle_timeout,
                last_record: Instant::now(),
                idle: false,
                progress: None,
                barrier: false,
            });
        }
        let range = first..self.inputs.len();
        self.sources.push(SourceSlot {
            name: settings.name.to_string(),
            source,
            decoder: settings.decoder,
            max_record_bytes: settings.max_record_bytes,
            inputs: range.clone(),
            exhausted: false,
            stopped: false,
            reads_stage: settings.reads_stage,
        });
        range
    }

    /// The inputs, in pipeline-file order (an input's index is its place here).
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// The sources, in pipeline-file order.
    pub fn sources(&self) -> &[SourceSlot] {
        &self.sources
    }

    /// The sources, to commit positions to.
    pub fn sources_mut(&mut self) -> &mut [SourceSlot] {
        &mut self.sources
    }

    /// The input at `index`.
    pub fn input(&self, index: usize) -> &Input {
        &self.inputs[index]
    }

    /// The source an input belongs to.
    pub fn source_of(&self, input: usize) -> &SourceSlot {
        &self.sources[self.inputs[input].source]
    }

    /// Whether any input has a record queued.
    pub fn any_ready(&self) -> bool {
        self.inputs.iter().any(|i| !i.queue.is_empty())
    }

    /// Whether every queue is empty: what was read has all been processed.
    pub fn drained(&self) -> bool {
        !self.any_ready()
    }

    /// Whether every input has ended.
    pub fn all_ended(&self) -> bool {
        self.inputs.iter().all(|i| i.ended)
    }

    /// Whether source `index` should be read: it has not ended and none of its inputs'
    /// queues is full.
    pub fn wants_more(&self, index: usize) -> bool {
        let slot = &self.sources[index];
        let limit = self.queue_limit();
        !slot.exhausted
            && !slot.stopped
            && !slot.inputs.clone().any(|i| {
                let input = &self.inputs[i];
                input.queue.len() >= limit
                    || input.barrier
                    || (slot.reads_stage && input.progress.is_some())
            })
    }

    /// Reads ahead on every source whose inputs have room in their queues, without
    /// waiting, and leaves in `read` what the run must still deal with (see
    /// [`Read`]: records that cannot be decoded, inputs that deliver again). The run
    /// calls this while the shards of a parallel pipeline process the run of records
    /// taken before, where it cannot touch the operators.
    pub fn read_ahead(&mut self, read: &mut Vec<Read>) -> anyhow::Result<()> {
        for index in 0..self.sources.len() {
            while self.wants_more(index) {
                match self.read(index, Duration::ZERO)? {
                    Read::Idle => break,
                    Read::Queued { resumed: false, .. } | Read::End | Read::Stopped => {}
                    other => read.push(other),
                }
            }
        }
        Ok(())
    }

    /// Reads the next record of source `index`, waiting at most `wait`, and queues it
    /// on its input (or hands it back, if it cannot be decoded).
    pub fn read(&mut self, index: usize, wait: Duration) -> anyhow::Result<Read> {
        let mut record = self.spare.pop().unwrap_or_default();
        let slot = &mut self.sources[index];
        let polled = slot.source.poll(&mut record, wait)?;
        let first = slot.inputs.start;
        Ok(match polled {
            Polled::Record => {
                let at = first + record.partition;
                let decoded = decode(&slot.decoder, &record, slot.max_record_bytes);
                let input = &mut self.inputs[at];
                input.read += 1;
                let resumed = input.delivered();
                match decoded {
                    Ok((key, timestamp)) => {
                        let number = input.read;
                        let group = weir_core::key::key_group(match &key {
                            KeyBytes::InLine(range) => &record.data[range.clone()],
                            KeyBytes::Owned(bytes) => bytes,
                        });
                        input.queue.push_back(Pending {
                            record,
                            key,
                            group,
                            timestamp,
                            number,
                        });
                        Read::Queued { input: at, resumed }
                    }
                    Err(reason) => Read::Undecodable {
                        input: at,
                        record,
                        reason,
                        resumed,
                    },
                }
            }
            Polled::Progress { input, timestamp } => {
                self.spare.push(record);
                let at = first + input;
                let input = &mut self.inputs[at];
                input.progress = Some(input.progress.map_or(timestamp, |p| p.max(timestamp)));
                let resumed = input.delivered();
                Read::Marker { input: at, resumed }
            }
            Polled::Barrier { input } => {
                self.spare.push(record);
                let at = first + input;
                let input = &mut self.inputs[at];
                input.barrier = true;
                let resumed = input.delivered();
                Read::Marker { input: at, resumed }
            }
            Polled::Idle => {
                self.spare.push(record);
                Read::Idle
            }
            Polled::End => {
                self.spare.push(record);
                slot.exhausted = true;
                for i in slot.inputs.clone() {
                    self.inputs[i].exhausted = true;
                }
                Read::End
            }
            Polled::Stopped => {
                self.spare.push(record);
                slot.stopped = true;
                Read::Stopped
            }
        })
    }

    /// Gives a record buffer back for reuse.
    pub fn recycle(&mut self, record: SourceRecord) {
        self.spare.push(record);
    }

    /// The watermark markers due: those of inputs whose records read before the marker
    /// have all been processed (their queues are empty). Each is taken once.
    pub fn take_progress(&mut self) -> Vec<(usize, Timestamp)> {
        self.inputs
            .iter_mut()
            .enumerate()
            .filter(|(_, input)| input.queue.is_empty())
            .filter_map(|(index, input)| input.progress.take().map(|ts| (index, ts)))
            .collect()
    }

    /// Whether the stage's checkpoint is due at barriers: every input reading another
    /// stage that has neither ended nor stopped delivered a barrier, and at least one
    /// did. Only a stage reading other stages, checkpointing in step with them, asks.
    pub fn at_barrier(&self) -> bool {
        let mut waiting = self
            .sources
            .iter()
            .filter(|slot| slot.reads_stage && !slot.stopped)
            .flat_map(|slot| &self.inputs[slot.inputs.clone()])
            .filter(|input| !input.ended)
            .peekable();
        waiting.peek().is_some() && waiting.all(|input| input.barrier)
    }

    /// Whether every stage this one reads has stopped or finished, and everything they
    /// sent was read: a stage reading on under a stop request stops once what it read
    /// is processed.
    pub fn upstreams_stopped(&self) -> bool {
        (self.sources.iter())
            .filter(|slot| slot.reads_stage)
            .all(|slot| slot.stopped || slot.exhausted)
    }

    /// Whether any source is another stage's output.
    pub fn reads_stages(&self) -> bool {
        self.sources.iter().any(|slot| slot.reads_stage)
    }

    /// The stage's checkpoint was taken: the inputs held at their barriers read on.
    pub fn release_barriers(&mut self) {
        for input in &mut self.inputs {
            input.barrier = false;
        }
    }

    /// Marks idle the inputs that have had no record for their `idle_timeout` and have
    /// nothing queued; returns them (each once, until it delivers again).
    pub fn newly_idle(&mut self) -> Vec<usize> {
        let mut idle = Vec::new();
        for (index, input) in self.inputs.iter_mut().enumerate() {
            let Some(timeout) = input.idle_timeout else {
                continue;
            };
            if !input.idle
                && !input.ended
                && input.queue.is_empty()
                && input.last_record.elapsed() >= timeout
            {
                input.idle = true;
                tracing::info!(
                    "input {:?} has had no record for {} ms: it no longer holds the watermark back",
                    input.name,
                    timeout.as_millis()
                );
                idle.push(index);
            }
        }
        idle
    }

    /// Ends the next input whose source is exhausted and whose queue is drained;
    /// returns it, or `None` when there is none left to end.
    pub fn end_next_drained(&mut self) -> Option<usize> {
        let (index, input) = self
            .inputs
            .iter_mut()
            .enumerate()
            .find(|(_, i)| i.exhausted && !i.ended && i.queue.is_empty())?;
        input.ended = true;
        Some(index)
    }

    /// Moves ready records into `chunk` in timestamp order (ties in pipeline-file order),
    /// at most [`Inputs::run_size`]. Stops when an input runs dry: if it may still deliver, its
    /// next record could come first; if it has ended, the watermark must stop waiting
    /// for it before the next record.
    pub fn take_chunk(&mut self, chunk: &mut Vec<(usize, Pending)>) {
        while chunk.len() < self.run_size {
            let next = (0..self.inputs.len())
                .filter(|&i| !self.inputs[i].queue.is_empty())
                .min_by_key(|&i| (self.inputs[i].queue.front().map(|p| p.timestamp), i));
            let Some(index) = next else { break };
            let input = &mut self.inputs[index];
            chunk.push((index, input.queue.pop_front().expect("non-empty")));
            if input.queue.is_empty() {
                break;
            }
        }
    }
}

impl Input {
    /// Notes that the input delivered (a record or a marker); says whether it had been
    /// idle, so that it holds the watermark back again.
    fn delivered(&mut self) -> bool {
        self.last_record = Instant::now();
        std::mem::replace(&mut self.idle, false)
    }
}

/// Decodes a record's key and timestamp; the error is the dead letter's reason.
fn decode(
    decoder: &RecordDecoder,
    record: &SourceRecord,
    max_record_bytes: usize,
) -> Result<(KeyBytes, Timestamp), String> {
    let length = record.oversized.unwrap_or(record.data.len() as u64);
    if length > max_record_bytes as u64 {
        let kept = if record.oversized.is_some() {
            " (its first KiB is kept here)"
        } else {
            ""
        };
        return Err(format!(
            "the record is {length} bytes, over the source's max_record_bytes of {max_record_bytes}{kept}"
        ));
    }
    let line = std::str::from_utf8(&record.data).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let message = MessageMeta {
        key: record.message_key.as_deref(),
        timestamp: record.message_timestamp,
    };
    let decoded = decoder.decode_message(line, message)?;
    let data = line.as_bytes().as_ptr_range();
    let key = match decoded.key {
        std::borrow::Cow::Borrowed(bytes) if data.contains(&bytes.as_ptr()) => {
            let start = bytes.as_ptr() as usize - line.as_ptr() as usize;
            KeyBytes::InLine(start..start + bytes.len())
        }
        key => KeyBytes::Owned(key.into_owned()),
    };
    Ok((key, decoded.timestamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::position::Position;
    use weir_core::time::format::TimestampFormat;

    /// A source of JSON lines held in memory, on `partitions` partitions: record `i`
    /// goes to partition `i % partitions`; it says `Idle` once, after the first
    /// `idle_after` records, then goes on.
    struct Memory {
        lines: Vec<String>,
        next: usize,
        partitions: usize,
        idle_after: Option<usize>,
    }

    impl Source for Memory {
        fn location(&self) -> &str {
            "memory"
        }

        fn poll(&mut self, record: &mut SourceRecord, _wait: Duration) -> anyhow::Result<Polled> {
            if self.idle_after == Some(self.next) {
                self.idle_after = None;
                return Ok(Polled::Idle);
            }
            let Some(line) = self.lines.get(self.next) else {
                return Ok(Polled::End);
            };
            record.data = line.clone().into_bytes();
            record.partition = self.next % self.partitions;
            record.line = Some(self.next as u64 + 1);
            self.next += 1;
            Ok(Polled::Record)
        }

        fn partitions(&self) -> Vec<String> {
            (0..self.partitions).map(|p| format!("m[{p}]")).collect()
        }

        fn positions(&self) -> Vec<Position> {
            vec![
                Position::Stream {
                    line: self.next as u64
                };
                self.partitions
            ]
        }
    }

    fn source<'a>(
        name: &'a str,
        records: &[(&str, i64)],
        partitions: usize,
    ) -> (Box<dyn Source>, SourceSettings<'a>) {
        let lines = records
            .iter()
            .map(|(key, ts)| format!(r#"{{"k":"{key}","ts":{ts}}}"#))
            .collect();
        let memory = Memory {
            lines,
            next: 0,
            partitions,
            idle_after: None,
        };
        let settings = SourceSettings {
            name,
            partitioned: partitions > 1,
            input_index: 0,
            decoder: RecordDecoder::new("k", "ts", TimestampFormat::EpochMs).unwrap(),
            idle_timeout: None,
            max_record_bytes: 1 << 20,
            reads_stage: false,
        };
        (Box::new(memory), settings)
    }

    /// Reads every source to its end.
    fn read_all(inputs: &mut Inputs) -> Vec<(usize, String)> {
        let mut undecodable = Vec::new();
        for index in 0..inputs.sources().len() {
            while inputs.wants_more(index) {
                match inputs.read(index, Duration::ZERO).unwrap() {
                    Read::Undecodable {
                        input,
                        record,
                        reason,
                        ..
                    } => {
                        undecodable.push((input, reason));
                        inputs.recycle(record);
                    }
                    Read::Idle => break,
                    _ => {}
                }
            }
        }
        undecodable
    }

    /// The merge's order: (input, key, timestamp) of every record, chunk by chunk.
    fn merged(inputs: &mut Inputs) -> Vec<Vec<(usize, String, i64)>> {
        let mut chunks = Vec::new();
        loop {
            let mut chunk = Vec::new();
            inputs.take_chunk(&mut chunk);
            if chunk.is_empty() {
                return chunks;
            }
            chunks.push(
                chunk
                    .iter()
                    .map(|(i, p)| {
                        (
                            *i,
                            String::from_utf8_lossy(p.key()).into_owned(),
                            p.timestamp,
                        )
                    })
                    .collect(),
            );
        }
    }

    #[test]
    fn records_merge_by_timestamp_with_ties_in_pipeline_file_order() {
        let mut inputs = Inputs::new(1);
        let (a, settings) = source("a", &[("a1", 10), ("a2", 20), ("a3", 30)], 1);
        inputs.add(a, settings, |_| 0);
        let (b, settings) = source("b", &[("b1", 10), ("b2", 15), ("b3", 30), ("b4", 40)], 1);
        inputs.add(b, settings, |_| 0);
        read_all(&mut inputs);
        let order: Vec<_> = merged(&mut inputs).concat();
        let keys: Vec<&str> = order.iter().map(|(_, k, _)| k.as_str()).collect();
        // 10: a before b (a is first in the file); 30: a3 before b3.
        assert_eq!(keys, ["a1", "b1", "b2", "a2", "a3", "b3", "b4"]);
    }

    #[test]
    fn a_run_holds_a_read_ahead_per_shard_and_the_inputs_share_it() {
        let records: Vec<(String, i64)> = (0..5000).map(|i| (format!("k{i}"), i)).collect();
        let records: Vec<(&str, i64)> = records.iter().map(|(k, t)| (k.as_str(), *t)).collect();
        // One input, four shards: it reads ahead a whole run, and a run takes 4 x 512.
        let mut inputs = Inputs::new(4);
        let (a, settings) = source("a", &records, 1);
        inputs.add(a, settings, |_| 0);
        let mut read = Vec::new();
        inputs.read_ahead(&mut read).unwrap();
        assert_eq!(inputs.inputs[0].queue.len(), 4 * READ_AHEAD);
        let mut chunk = Vec::new();
        inputs.take_chunk(&mut chunk);
        assert_eq!(chunk.len(), 4 * READ_AHEAD);
        // Eight partitions, two shards: each input still reads ahead 512 (the source
        // stops when its first input is full, the others one record short of it).
        let mut inputs = Inputs::new(2);
        let (b, settings) = source("b", &records, 8);
        inputs.add(b, settings, |_| 0);
        inputs.read_ahead(&mut read).unwrap();
        let queued: Vec<usize> = inputs.inputs.iter().map(|i| i.queue.len()).collect();
        assert_eq!(queued[0], READ_AHEAD, "{queued:?}");
        assert!(
            queued[1..].iter().all(|&n| n == READ_AHEAD - 1),
            "{queued:?}"
        );
    }

    #[test]
    fn a_chunk_stops_where_an_input_runs_dry() {
        let mut inputs = Inputs::new(1);
        let (a, settings) = source("a", &[("a1", 10)], 1);
        inputs.add(a, settings, |_| 0);
        let (b, settings) = source("b", &[("b1", 20), ("b2", 30)], 1);
        inputs.add(b, settings, |_| 0);
        read_all(&mut inputs);
        let chunks = merged(&mut inputs);
        // a1 empties input a, which may still deliver something earlier than b1.
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0], [(0, "a1".to_string(), 10)]);
        assert_eq!(chunks[1].len(), 2);
    }

    #[test]
    fn each_partition_is_an_input_named_after_its_source() {
        let mut inputs = Inputs::new(1);
        let (k, settings) = source("orders", &[("x", 1), ("y", 2), ("z", 3)], 2);
        let range = inputs.add(
            k,
            settings,
            |name| if name == "orders:m[1]" { 7 } else { 0 },
        );
        assert_eq!(range, 0..2);
        let names: Vec<&str> = inputs.inputs().iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["orders:m[0]", "orders:m[1]"]);
        assert_eq!(inputs.input(1).id.partition.as_deref(), Some("m[1]"));
        read_all(&mut inputs);
        // Counts go on from what the checkpoint says each input had read.
        assert_eq!(inputs.input(0).read, 2);
        assert_eq!(inputs.input(1).read, 8);
        let keys: Vec<(usize, String, i64)> = merged(&mut inputs).concat();
        assert_eq!(keys[0], (0, "x".to_string(), 1));
        assert_eq!(keys[1], (1, "y".to_string(), 2));
    }

    #[test]
    fn an_undecodable_record_is_handed_back_with_its_reason() {
        let mut inputs = Inputs::new(1);
        let (a, settings) = source("a", &[("a1", 1)], 1);
        inputs.add(a, settings, |_| 0);
        inputs.sources[0].source = Box::new(Memory {
            lines: vec![r#"{"k":"a1","ts":1}"#.into(), r#"{"ts":2}"#.into()],
            next: 0,
            partitions: 1,
            idle_after: None,
        });
        let undecodable = read_all(&mut inputs);
        assert_eq!(undecodable.len(), 1);
        assert_eq!(undecodable[0].0, 0);
        assert!(undecodable[0].1.contains('k'), "{}", undecodable[0].1);
        assert_eq!(inputs.input(0).read, 2, "dead letters count as read");
    }

    #[test]
    fn a_quiet_input_turns_idle_once_and_resumes_when_it_delivers() {
        let mut inputs = Inputs::new(1);
        let (a, mut settings) = source("a", &[("a1", 1), ("a2", 2)], 1);
        settings.idle_timeout = Some(Duration::ZERO);
        inputs.add(a, settings, |_| 0);
        inputs.sources[0].source = Box::new(Memory {
            lines: vec![r#"{"k":"a1","ts":1}"#.into(), r#"{"k":"a2","ts":2}"#.into()],
            next: 0,
            partitions: 1,
            idle_after: Some(1),
        });
        assert!(matches!(
            inputs.read(0, Duration::ZERO).unwrap(),
            Read::Queued {
                input: 0,
                resumed: false
            }
        ));
        assert!(inputs.newly_idle().is_empty(), "a record is queued");
        merged(&mut inputs);
        assert!(matches!(
            inputs.read(0, Duration::ZERO).unwrap(),
            Read::Idle
        ));
        assert_eq!(inputs.newly_idle(), [0]);
        assert!(inputs.newly_idle().is_empty(), "said once");
        assert!(matches!(
            inputs.read(0, Duration::ZERO).unwrap(),
            Read::Queued {
                input: 0,
                resumed: true
            }
        ));
    }

    #[test]
    fn an_input_ends_once_its_source_ended_and_its_queue_drained() {
        let mut inputs = Inputs::new(1);
        let (a, settings) = source("a", &[("a1", 1)], 1);
        inputs.add(a, settings, |_| 0);
        let (b, settings) = source("b", &[("b1", 2)], 1);
        inputs.add(b, settings, |_| 0);
        read_all(&mut inputs);
        assert_eq!(inputs.end_next_drained(), None, "records are queued");
        let mut chunk = Vec::new();
        inputs.take_chunk(&mut chunk);
        assert_eq!(inputs.end_next_drained(), Some(0));
        assert!(!inputs.all_ended());
        assert_eq!(inputs.end_next_drained(), None);
        chunk.clear();
        inputs.take_chunk(&mut chunk);
        assert_eq!(inputs.end_next_drained(), Some(1));
        assert!(inputs.all_ended());
    }

    /// What the queue of `input` holds: the keys of its records.
    fn queued(inputs: &Inputs, input: usize) -> Vec<String> {
        inputs.inputs[input]
            .queue
            .iter()
            .map(|p| String::from_utf8_lossy(p.key()).into_owned())
            .collect()
    }

    #[test]
    fn a_stage_input_stops_at_a_barrier_until_every_stage_input_delivered_one() {
        use weir_core::output::{OutputRecord, Sink};
        use weir_io::source::exchange::{Exchange, ExchangeSink, ExchangeSource};
        let record = |key: &'static str, value: &'static str| OutputRecord {
            key: Some(key.as_bytes()),
            value: value.as_bytes(),
            timestamp: 1,
            sequence: 0,
        };
        let (first, second) = (
            Exchange::new("a", "main", "c"),
            Exchange::new("b", "main", "c"),
        );
        let mut a = ExchangeSink::new(vec![first.clone()]);
        let mut b = ExchangeSink::new(vec![second.clone()]);
        let mut inputs = Inputs::new(1);
        for (name, exchange) in [("a", first), ("b", second)] {
            let (_, mut settings) = source(name, &[], 1);
            settings.reads_stage = true;
            inputs.add(Box::new(ExchangeSource::new(exchange)), settings, |_| 0);
        }
        assert!(inputs.reads_stages());
        a.write(&record("a1", r#"{"k":"a1","ts":1}"#)).unwrap();
        a.checkpoint().unwrap();
        a.write(&record("a2", r#"{"k":"a2","ts":2}"#)).unwrap();
        a.flush().unwrap();
        b.write(&record("b1", r#"{"k":"b1","ts":1}"#)).unwrap();
        b.flush().unwrap();
        read_all(&mut inputs);
        assert_eq!(queued(&inputs, 0), ["a1"], "nothing read past the barrier");
        assert_eq!(queued(&inputs, 1), ["b1"]);
        assert!(!inputs.at_barrier(), "b has not delivered its barrier");

        b.checkpoint().unwrap();
        b.write(&record("b2", r#"{"k":"b2","ts":2}"#)).unwrap();
        b.flush().unwrap();
        read_all(&mut inputs);
        assert!(inputs.at_barrier());
        assert_eq!(queued(&inputs, 1), ["b1"], "nothing read past the barrier");

        inputs.release_barriers();
        assert!(!inputs.at_barrier());
        read_all(&mut inputs);
        assert_eq!(queued(&inputs, 0), ["a1", "a2"]);
        assert_eq!(queued(&inputs, 1), ["b1", "b2"]);

        // An input whose upstream ended no longer holds the others' checkpoints back.
        a.finish().unwrap();
        read_all(&mut inputs);
        let mut chunk = Vec::new();
        while !inputs.drained() {
            inputs.take_chunk(&mut chunk);
        }
        assert_eq!(inputs.end_next_drained(), Some(0));
        b.checkpoint().unwrap();
        b.flush().unwrap();
        read_all(&mut inputs);
        assert!(inputs.at_barrier(), "only b is left to deliver a barrier");
    }
}
