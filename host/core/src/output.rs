//! What leaves the keyed operator: the records a UDF emits, and the [`Sink`] contract
//! every output connector implements.
//!
//! The trait lives here, below the operator, because the operator writes into sinks
//! directly; the sinks themselves (files, upsert tables, PostgreSQL, Kafka) are in the io
//! crate, above.

/// One record the UDF emitted, as a sink sees it.
#[derive(Debug, Clone, Copy)]
pub struct OutputRecord<'a> {
    /// The key of the element or timer that emitted it (`None` for records emitted
    /// outside a key's scope, such as from `init`).
    pub key: Option<&'a [u8]>,
    /// The emitted bytes: one JSON document.
    pub value: &'a [u8],
    /// The record's event time: the element's timestamp, or the timer's.
    pub timestamp: i64,
    /// The record's number in its output (0-based, counted over the pipeline's whole
    /// history, checkpoints included): a replay gives the same record the same number.
    /// A pipeline of parallelism above 1 numbers the records of each key group on their
    /// own ([`Sequence::Grouped`]), which a replay at any such parallelism repeats.
    pub sequence: u64,
}

/// The top bit of a [`OutputRecord::sequence`] says it is numbered within a key group.
const GROUPED: u64 = 1 << 63;

/// What a record's sequence number says, read by [`Sequence::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequence {
    /// The record's number in its whole output (a pipeline of parallelism 1).
    Output(u64),
    /// The record's number among the records its key group emitted to the output (a
    /// pipeline of parallelism above 1, whose shards interleave their outputs).
    Grouped {
        /// The key group of the key that emitted it.
        group: u16,
        /// Its number in that group's records of the output.
        number: u64,
    },
}

impl Sequence {
    /// The sequence number of record `number` of key group `group`.
    pub fn grouped(group: u16, number: u64) -> u64 {
        GROUPED | (number << 8) | u64::from(group)
    }

    /// What sequence number `sequence` says.
    pub fn of(sequence: u64) -> Self {
        if sequence & GROUPED == 0 {
            Sequence::Output(sequence)
        } else {
            Sequence::Grouped {
                group: (sequence & 0xff) as u16,
                number: (sequence & !GROUPED) >> 8,
            }
        }
    }
}

/// Where a sink stood at a checkpoint, so a restored run can go back there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkState {
    /// Bytes of a file sink's output (the file is truncated to this on restore).
    pub length: Option<u64>,
    /// Anything else the sink needs back (an upsert sink's table).
    pub data: Vec<u8>,
}

/// An output connector: receives the records of one UDF output, in emission order.
///
/// A sink is built when a run starts (or restores: then it is handed back the
/// [`SinkState`] of the checkpoint it resumes from) and is driven by one thread, the
/// run's. The engine never calls two methods at once, and calls nothing after
/// [`finish`](Sink::finish) or after any method returned an error (the run then fails).
pub trait Sink: Send {
    /// Where records go (a path, `stdout`, `postgres table t`, `kafka topic t`), for
    /// messages and the run report. Called at any time; must be cheap.
    fn location(&self) -> &str;

    /// Takes one record. Called by the keyed operator for every record the UDF emits to
    /// this output, in the order the UDF emitted them, as soon as the UDF call that
    /// emitted them returned. May buffer: nothing is assumed durable until
    /// [`checkpoint`](Sink::checkpoint) returns. An error fails the run.
    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()>;

    /// Hands on what is buffered. Called when every input is idle (so output does not
    /// wait behind a quiet source) and by the default [`finish`](Sink::finish).
    fn flush(&mut self) -> anyhow::Result<()>;

    /// Called once when the run completes (its inputs ended, or it was asked to stop and
    /// took its last checkpoint), never after a failure. The default flushes.
    fn finish(&mut self) -> anyhow::Result<()> {
        self.flush()
    }

    /// The run's watermark advanced to `watermark`: every record emitted before it was
    /// written here. Called after a run of records (and the timers it fired) whenever the
    /// watermark moved. A sink feeding another stage hands the watermark on (see
    /// `weir-io`'s exchanges); the default does nothing.
    fn watermark(&mut self, watermark: i64) -> anyhow::Result<()> {
        let _ = watermark;
        Ok(())
    }

    /// Makes everything written so far durable and says where the sink stands. Called
    /// between two records when a checkpoint is taken, before the checkpoint is written:
    /// the checkpoint records the returned state as done, and a run restored from it
    /// reopens the sink with that state and replays every record written after it. Sinks
    /// that can be replayed into without harm (upserts, Kafka with id headers) return
    /// the default state.
    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        self.flush()?;
        Ok(SinkState::default())
    }

    /// How many of the records it took ([`write`](Sink::write) returned `Ok`) are not in
    /// its destination after all. Called once, after a method returned an error, so that
    /// the run counts only what the sink holds. The default, 0, is for sinks that cannot
    /// tell (their checkpoints still say what is durable).
    fn lost(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_sequences_read_back_and_never_meet_whole_output_ones() {
        let s = Sequence::grouped(127, 5);
        assert_eq!(
            Sequence::of(s),
            Sequence::Grouped {
                group: 127,
                number: 5
            }
        );
        assert_eq!(Sequence::of(41), Sequence::Output(41));
        assert!(Sequence::grouped(0, 0) > u64::MAX / 2);
        assert_ne!(Sequence::grouped(1, 0), Sequence::grouped(0, 1));
    }
}
