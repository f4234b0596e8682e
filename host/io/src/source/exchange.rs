//! Exchanges: how one keyed stage of a pipeline hands its output to the next, inside
//! one process.
//!
//! An [`Exchange`] is a bounded queue between an output of an upstream stage and one
//! input of a downstream stage. The upstream writes into it through an
//! [`ExchangeSink`] (one sink may feed several exchanges: an output read by several
//! stages), the downstream reads it as a [`Source`] ([`ExchangeSource`]) whose records
//! carry the key that emitted them (`@key`) and the event time the upstream gave them
//! (`@timestamp`). Between the records go the upstream's watermarks, in order: a
//! downstream input's watermark is its upstream's (Flink's rule), never derived from
//! the records' timestamps. The queue is bounded, so a slow downstream holds its
//! upstream back instead of letting records pile up in memory.
//!
//! When the upstream takes a checkpoint, a barrier follows the records its cut covers:
//! the downstream takes its own checkpoint when every exchange it reads delivered the
//! barrier ([`Polled::Barrier`]).
//!
//! Either end may go away: the upstream when its run ends (having finished the sink, or
//! not, when it failed), the downstream when its run ends. The other end then gets an
//! error naming the stage ([`StageGone`]) instead of waiting for ever. An upstream
//! stopped on request (after its last checkpoint's barrier) is not gone: its downstream
//! reads what it sent, then learns that it stopped ([`Polled::Stopped`]) and stops too.

use super::poll::{Polled, Source, SourceRecord};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use weir_core::output::{OutputRecord, Sink, SinkState};
use weir_core::position::Position;

/// How many records an exchange holds before its upstream waits.
pub const EXCHANGE_CAPACITY: usize = 16_384;

/// How many records a sink gathers before it hands them to its exchanges at once (the
/// lock is taken once per run of records, not once per record).
const HAND_ON_EVERY: usize = 256;

/// What crosses an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Message {
    /// Records the upstream emitted, in order.
    Records(Batch),
    /// The upstream's watermark advanced to this: every record before it was sent.
    Watermark(i64),
    /// The upstream took a checkpoint after the records before this one (a stage of a
    /// graph checkpointing in step: `weir_checkpoint::aligned`).
    Barrier,
}

/// A run of records handed on at once: each one's key (if it has one) and value one
/// after another in one buffer, so a run costs one allocation, not two per record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Batch {
    bytes: Vec<u8>,
    /// Each record: its key's length (`None`: no key), its value's length, the event time
    /// the upstream gave it.
    records: Vec<(Option<usize>, usize, i64)>,
}

impl Batch {
    fn push(&mut self, record: &OutputRecord<'_>) {
        if let Some(key) = record.key {
            self.bytes.extend_from_slice(key);
        }
        self.bytes.extend_from_slice(record.value);
        self.records.push((
            record.key.map(<[u8]>::len),
            record.value.len(),
            record.timestamp,
        ));
    }
}

impl Message {
    /// The records it holds.
    fn records(&self) -> usize {
        match self {
            Message::Records(batch) => batch.records.len(),
            Message::Watermark(_) | Message::Barrier => 0,
        }
    }
}

/// How the upstream end stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// It may send more.
    Open,
    /// It finished: everything it will ever send is in the queue.
    Finished,
    /// Its run ended without finishing (it failed).
    Gone,
    /// Its run stopped on request: everything it sends in this run is in the queue, and
    /// the input goes on in a run resumed from a checkpoint.
    Stopped,
}

struct Queue {
    messages: VecDeque<Message>,
    /// Records (not watermarks) in `messages`.
    records: usize,
    upstream: Upstream,
    /// The downstream's run ended: nothing will read the queue again.
    downstream_gone: bool,
}

struct Shared {
    /// The upstream stage and output, and the downstream stage: `stage a (output main)
    /// to stage b`, for messages.
    name: String,
    upstream_stage: String,
    downstream_stage: String,
    queue: Mutex<Queue>,
    /// Signalled when messages arrive or the upstream ends.
    arrived: Condvar,
    /// Signalled when records leave or the downstream goes away.
    left: Condvar,
}

/// One end of a stage's output read by one downstream stage. Clones are handles on the
/// same queue; it is compared by identity.
#[derive(Clone)]
pub struct Exchange {
    shared: Arc<Shared>,
}

/// The error an end gets when the stage at the other end went away: the other stage's
/// own error says why.
#[derive(Debug)]
pub struct StageGone {
    /// The stage that went away.
    pub stage: String,
    /// Whether it was the upstream (else the downstream).
    pub upstream: bool,
}

impl std::fmt::Display for StageGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.upstream {
            write!(
                f,
                "stage {:?}, which feeds this one, ended without finishing",
                self.stage
            )
        } else {
            write!(
                f,
                "stage {:?}, which reads this one's output, ended",
                self.stage
            )
        }
    }
}

impl std::error::Error for StageGone {}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Exchange({})", self.shared.name)
    }
}

impl PartialEq for Exchange {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for Exchange {}

impl Exchange {
    /// A new, empty exchange from `output` of stage `upstream` to stage `downstream`.
    pub fn new(upstream: &str, output: &str, downstream: &str) -> Self {
        Self {
            shared: Arc::new(Shared {
                name: format!("stage {upstream} (output {output}) to stage {downstream}"),
                upstream_stage: upstream.to_string(),
                downstream_stage: downstream.to_string(),
                queue: Mutex::new(Queue {
                    messages: VecDeque::new(),
                    records: 0,
                    upstream: Upstream::Open,
                    downstream_gone: false,
                }),
                arrived: Condvar::new(),
                left: Condvar::new(),
            }),
        }
    }

    /// `stage a (output main) to stage b`.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The upstream stage's run ended: if it did not finish the exchange, the downstream
    /// learns that it went away. The graph calls this when an upstream stage's run
    /// returns, whatever it returned.
    pub fn upstream_ended(&self) {
        let mut queue = self.lock();
        if queue.upstream == Upstream::Open {
            queue.upstream = Upstream::Gone;
        }
        drop(queue);
        self.shared.arrived.notify_all();
    }

    /// The upstream stage's run stopped on request: the downstream reads what is queued,
    /// then [`Polled::Stopped`]. The graph calls this instead of
    /// [`upstream_ended`](Self::upstream_ended) when an upstream's run returns stopped.
    pub fn upstream_stopped(&self) {
        let mut queue = self.lock();
        if queue.upstream == Upstream::Open {
            queue.upstream = Upstream::Stopped;
        }
        drop(queue);
        self.shared.arrived.notify_all();
    }

    /// The downstream stage's run ended: the upstream's next write fails instead of
    /// waiting for room. The graph calls this when a downstream stage's run returns.
    pub fn downstream_ended(&self) {
        let mut queue = self.lock();
        queue.downstream_gone = true;
        queue.messages.clear();
        queue.records = 0;
        drop(queue);
        self.shared.left.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `messages` (emptying it), waiting while the queue is full.
    fn send(&self, messages: &mut Vec<Message>) -> anyhow::Result<()> {
        let mut queue = self.lock();
        loop {
            if queue.downstream_gone {
                return Err(StageGone {
                    stage: self.shared.downstream_stage.clone(),
                    upstream: false,
                }
                .into());
            }
            if queue.records < EXCHANGE_CAPACITY {
                break;
            }
            queue = self
                .shared
                .left
                .wait(queue)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        queue.records += messages.iter().map(Message::records).sum::<usize>();
        queue.messages.extend(messages.drain(..));
        drop(queue);
        self.shared.arrived.notify_one();
        Ok(())
    }

    /// Marks the upstream finished: the downstream's input ends once it read the rest.
    fn finish(&self) {
        self.lock().upstream = Upstream::Finished;
        self.shared.arrived.notify_all();
    }
}

/// The upstream's end: an output of a stage written into the exchanges of the stages
/// that read it.
pub struct ExchangeSink {
    location: String,
    exchanges: Vec<Exchange>,
    /// The records written since the last message.
    batch: Batch,
    gathered: Vec<Message>,
    /// A copy of `gathered` for each exchange but the last.
    copy: Vec<Message>,
}

impl ExchangeSink {
    /// A sink writing into every one of `exchanges` (they share their upstream output).
    pub fn new(exchanges: Vec<Exchange>) -> Self {
        let location = exchanges
            .iter()
            .map(|e| format!("stage {}", e.shared.downstream_stage))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            location,
            exchanges,
            batch: Batch::default(),
            gathered: Vec::new(),
            copy: Vec::new(),
        }
    }

    /// Ends the run of records written so far: it goes before what is gathered next.
    fn seal(&mut self) {
        if !self.batch.records.is_empty() {
            self.gathered
                .push(Message::Records(std::mem::take(&mut self.batch)));
        }
    }

    fn hand_on(&mut self) -> anyhow::Result<()> {
        self.seal();
        if self.gathered.is_empty() {
            return Ok(());
        }
        let (last, others) = self.exchanges.split_last().expect("at least one exchange");
        for exchange in others {
            self.copy.clone_from(&self.gathered);
            exchange.send(&mut self.copy)?;
        }
        last.send(&mut self.gathered)
    }
}

impl Sink for ExchangeSink {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        self.batch.push(record);
        if self.batch.records.len() >= HAND_ON_EVERY {
            self.hand_on()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.hand_on()
    }

    fn watermark(&mut self, watermark: i64) -> anyhow::Result<()> {
        self.seal();
        self.gathered.push(Message::Watermark(watermark));
        self.hand_on()
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        self.hand_on()?;
        for exchange in &self.exchanges {
            exchange.finish();
        }
        Ok(())
    }

    /// Hands on what is gathered, then a barrier: the run calls this only when it takes
    /// a checkpoint, and the downstream stage takes its own at the barrier.
    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        self.seal();
        self.gathered.push(Message::Barrier);
        self.hand_on()?;
        Ok(SinkState::default())
    }
}

/// An output's sink that also feeds the stages that read the output: every record and
/// watermark goes to both, and the sink's own state is what checkpoints keep.
pub struct Feeding {
    sink: Box<dyn Sink>,
    stages: ExchangeSink,
    location: String,
}

impl Feeding {
    /// `sink`, feeding `exchanges` too; `sink` alone if there are none.
    pub fn wrap(sink: Box<dyn Sink>, exchanges: &[Exchange]) -> Box<dyn Sink> {
        if exchanges.is_empty() {
            return sink;
        }
        let stages = ExchangeSink::new(exchanges.to_vec());
        let location = format!("{} and {}", sink.location(), stages.location());
        Box::new(Self {
            sink,
            stages,
            location,
        })
    }
}

impl Sink for Feeding {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        self.sink.write(record)?;
        self.stages.write(record)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.sink.flush()?;
        self.stages.flush()
    }

    fn watermark(&mut self, watermark: i64) -> anyhow::Result<()> {
        self.sink.watermark(watermark)?;
        self.stages.watermark(watermark)
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        self.sink.finish()?;
        self.stages.finish()
    }

    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        self.stages.checkpoint()?;
        self.sink.checkpoint()
    }

    fn lost(&self) -> u64 {
        self.sink.lost()
    }
}

/// The downstream's end: the exchange read as a source of one partition.
pub struct ExchangeSource {
    exchange: Exchange,
    /// Messages taken from the queue, not handed out yet.
    taken: VecDeque<Message>,
    /// In the run of records at the front of `taken`: the next record's index and where
    /// its bytes start.
    next: (usize, usize),
    /// Records handed out so far.
    read: u64,
}

impl ExchangeSource {
    /// Reads `exchange`.
    pub fn new(exchange: Exchange) -> Self {
        Self {
            exchange,
            taken: VecDeque::new(),
            next: (0, 0),
            read: 0,
        }
    }

    /// Takes what the queue holds into `taken`, waiting at most `wait` for something;
    /// once everything was taken, says whether the upstream finished ([`Polled::End`])
    /// or stopped ([`Polled::Stopped`]).
    fn take(&mut self, wait: Duration) -> anyhow::Result<Option<Polled>> {
        let deadline = Instant::now() + wait;
        let shared = &self.exchange.shared;
        let mut queue = self.exchange.lock();
        loop {
            if !queue.messages.is_empty() {
                self.taken.extend(queue.messages.drain(..));
                queue.records = 0;
                drop(queue);
                shared.left.notify_all();
                return Ok(None);
            }
            match queue.upstream {
                Upstream::Finished => return Ok(Some(Polled::End)),
                Upstream::Stopped => return Ok(Some(Polled::Stopped)),
                Upstream::Gone => {
                    return Err(StageGone {
                        stage: shared.upstream_stage.clone(),
                        upstream: true,
                    }
                    .into())
                }
                Upstream::Open => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            queue = shared
                .arrived
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }
}

impl Source for ExchangeSource {
    fn location(&self) -> &str {
        self.exchange.name()
    }

    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled> {
        loop {
            if self.taken.is_empty() {
                if let Some(done) = self.take(wait)? {
                    return Ok(done);
                }
            }
            let Some(front) = self.taken.front() else {
                return Ok(Polled::Idle);
            };
            let polled = match front {
                Message::Watermark(timestamp) => Polled::Progress {
                    input: 0,
                    timestamp: *timestamp,
                },
                Message::Barrier => Polled::Barrier { input: 0 },
                Message::Records(batch) => {
                    let (index, start) = self.next;
                    let Some(&(key_len, value_len, timestamp)) = batch.records.get(index) else {
                        // This run is read out: on to the next message.
                        self.taken.pop_front();
                        self.next = (0, 0);
                        continue;
                    };
                    let value_start = start + key_len.unwrap_or(0);
                    let end = value_start + value_len;
                    match (key_len, &mut record.message_key) {
                        (None, key) => *key = None,
                        (Some(_), Some(key)) => {
                            key.clear();
                            key.extend_from_slice(&batch.bytes[start..value_start]);
                        }
                        (Some(_), key) => *key = Some(batch.bytes[start..value_start].to_vec()),
                    }
                    record.data.clear();
                    record
                        .data
                        .extend_from_slice(&batch.bytes[value_start..end]);
                    self.next = (index + 1, end);
                    self.read += 1;
                    record.line = None;
                    record.offset = self.read - 1;
                    record.partition = 0;
                    record.message_timestamp = Some(timestamp);
                    record.oversized = None;
                    return Ok(Polled::Record);
                }
            };
            self.taken.pop_front();
            return Ok(polled);
        }
    }

    fn positions(&self) -> Vec<Position> {
        vec![Position::Stream { line: self.read }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &'static [u8], value: &'static [u8], timestamp: i64) -> OutputRecord<'static> {
        OutputRecord {
            key: Some(key),
            value,
            timestamp,
            sequence: 0,
        }
    }

    /// A record as read back: its key, bytes and event time.
    type Read = (Vec<u8>, Vec<u8>, i64);

    fn poll(source: &mut ExchangeSource) -> (Polled, Option<Read>) {
        let mut r = SourceRecord::default();
        let polled = source.poll(&mut r, Duration::ZERO).unwrap();
        let got = (polled == Polled::Record).then(|| {
            (
                r.message_key.clone().unwrap(),
                r.data.clone(),
                r.message_timestamp.unwrap(),
            )
        });
        (polled, got)
    }

    #[test]
    fn records_and_watermarks_arrive_in_order_then_the_end() {
        let exchange = Exchange::new("a", "main", "b");
        let mut sink = ExchangeSink::new(vec![exchange.clone()]);
        let mut source = ExchangeSource::new(exchange);
        assert_eq!(poll(&mut source).0, Polled::Idle, "nothing yet");
        sink.write(&record(b"k1", b"{\"n\":1}", 10)).unwrap();
        assert_eq!(poll(&mut source).0, Polled::Idle, "gathered, not handed on");
        sink.watermark(9).unwrap();
        sink.write(&record(b"k2", b"{\"n\":2}", 20)).unwrap();
        sink.finish().unwrap();
        assert_eq!(
            poll(&mut source).1,
            Some((b"k1".to_vec(), b"{\"n\":1}".to_vec(), 10))
        );
        assert_eq!(
            poll(&mut source).0,
            Polled::Progress {
                input: 0,
                timestamp: 9
            }
        );
        assert_eq!(
            poll(&mut source).1,
            Some((b"k2".to_vec(), b"{\"n\":2}".to_vec(), 20))
        );
        assert_eq!(poll(&mut source).0, Polled::End);
        assert_eq!(source.positions(), vec![Position::Stream { line: 2 }]);
    }

    #[test]
    fn a_checkpoint_puts_a_barrier_after_the_records_it_covers() {
        let (b, c) = (
            Exchange::new("a", "main", "b"),
            Exchange::new("a", "main", "c"),
        );
        let mut sink = ExchangeSink::new(vec![b.clone(), c.clone()]);
        sink.write(&record(b"k", b"1", 1)).unwrap();
        assert_eq!(sink.checkpoint().unwrap(), SinkState::default());
        sink.write(&record(b"k", b"2", 2)).unwrap();
        sink.flush().unwrap();
        for exchange in [b, c] {
            let mut source = ExchangeSource::new(exchange);
            assert_eq!(poll(&mut source).1.map(|r| r.1), Some(b"1".to_vec()));
            assert_eq!(poll(&mut source).0, Polled::Barrier { input: 0 });
            assert_eq!(poll(&mut source).1.map(|r| r.1), Some(b"2".to_vec()));
            assert_eq!(poll(&mut source).0, Polled::Idle);
        }
    }

    #[test]
    fn an_output_read_by_two_stages_reaches_both() {
        let (b, c) = (
            Exchange::new("a", "main", "b"),
            Exchange::new("a", "main", "c"),
        );
        let mut sink = ExchangeSink::new(vec![b.clone(), c.clone()]);
        sink.write(&record(b"k", b"1", 1)).unwrap();
        sink.finish().unwrap();
        for exchange in [b, c] {
            let mut source = ExchangeSource::new(exchange);
            assert_eq!(poll(&mut source).1.unwrap().1, b"1");
            assert_eq!(poll(&mut source).0, Polled::End);
        }
    }

    #[test]
    fn an_upstream_that_ended_without_finishing_fails_its_downstream() {
        let exchange = Exchange::new("a", "main", "b");
        let mut sink = ExchangeSink::new(vec![exchange.clone()]);
        sink.write(&record(b"k", b"1", 1)).unwrap();
        sink.flush().unwrap();
        exchange.upstream_ended();
        let mut source = ExchangeSource::new(exchange);
        assert_eq!(poll(&mut source).0, Polled::Record, "what was sent is read");
        let mut r = SourceRecord::default();
        let error = source.poll(&mut r, Duration::ZERO).unwrap_err();
        assert_eq!(
            error.to_string(),
            "stage \"a\", which feeds this one, ended without finishing"
        );
        assert!(error.is::<StageGone>());
    }

    #[test]
    fn an_upstream_stopped_after_its_barrier_stops_its_downstream_after_what_it_sent() {
        let exchange = Exchange::new("a", "main", "b");
        let mut sink = ExchangeSink::new(vec![exchange.clone()]);
        sink.write(&record(b"k", b"1", 1)).unwrap();
        sink.checkpoint().unwrap();
        exchange.upstream_stopped();
        // A stopped upstream is not gone: a later end of its run changes nothing.
        exchange.upstream_ended();
        let mut source = ExchangeSource::new(exchange);
        assert_eq!(poll(&mut source).0, Polled::Record);
        assert_eq!(poll(&mut source).0, Polled::Barrier { input: 0 });
        assert_eq!(poll(&mut source).0, Polled::Stopped, "not the end of input");
    }

    #[test]
    fn a_full_exchange_holds_its_upstream_back_until_the_downstream_reads_or_ends() {
        let exchange = Exchange::new("a", "main", "b");
        let writer = {
            let exchange = exchange.clone();
            std::thread::spawn(move || {
                let mut sink = ExchangeSink::new(vec![exchange]);
                for i in 0..(EXCHANGE_CAPACITY + 2 * HAND_ON_EVERY) as i64 {
                    sink.write(&record(b"k", b"1", i))?;
                }
                sink.finish()
            })
        };
        let mut source = ExchangeSource::new(exchange.clone());
        let mut read = 0;
        loop {
            let mut r = SourceRecord::default();
            match source.poll(&mut r, Duration::from_millis(50)).unwrap() {
                Polled::Record => {
                    assert_eq!(r.message_timestamp, Some(read));
                    read += 1;
                }
                Polled::End => break,
                _ => {}
            }
        }
        writer.join().unwrap().unwrap();
        assert_eq!(read as usize, EXCHANGE_CAPACITY + 2 * HAND_ON_EVERY);

        // A downstream that goes away releases a waiting upstream with an error.
        let exchange = Exchange::new("a", "main", "b");
        let writer = {
            let exchange = exchange.clone();
            std::thread::spawn(move || {
                let mut sink = ExchangeSink::new(vec![exchange]);
                loop {
                    sink.write(&record(b"k", b"1", 0))?;
                }
            })
        };
        while exchange.lock().records < EXCHANGE_CAPACITY {
            std::thread::sleep(Duration::from_millis(1));
        }
        exchange.downstream_ended();
        let error: anyhow::Result<()> = writer.join().unwrap();
        assert_eq!(
            error.unwrap_err().to_string(),
            "stage \"b\", which reads this one's output, ended"
        );
    }
}
