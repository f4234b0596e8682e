//! # Weir run
//!
//! Running a pipeline: its plan (`weir-pipeline`) wired into sources, the keyed operator
//! with its UDF, and sinks, until every source ends or the run is asked to stop.
//!
//! One run is one thread that reads, merges and steers, and `parallelism` keyed shards
//! (a `KeyedStage` of `weir-engine`) on threads of their own that process the runs of records it hands
//! them, all at once, while it reads ahead. Its loop, in `runner.rs`:
//!
//! 1. **Steer** (`steering.rs`): apply a UDF version someone asked to swap in, publish
//!    the live status a few times a second.
//! 2. **Read ahead** (`inputs.rs`): every source partition is an input with its own
//!    queue; records are decoded (key, event time) as they are read, and those that
//!    cannot be go to the dead-letter output.
//! 3. **Merge**: records are handed to the operator in timestamp order across inputs
//!    (ties in pipeline-file order), in runs of up to 512; a live input with nothing
//!    queued does not hold the others back, and one quiet for its `idle_timeout` stops
//!    holding the watermark back.
//! 4. **Recover** (`recovery.rs`): a record or timer whose key's state the UDF cannot
//!    read goes to the dead letters; a new version failing within its probation is
//!    rolled back; anything else ends the run with a message naming the record.
//! 5. **Checkpoint** (`checkpointing.rs`): between records, once the read-ahead queues
//!    are drained, every `interval` and when the run is stopped; a run resumes from the
//!    newest one, and a run that completes removes them.
//!
//! A pipeline of several stages (`graph.rs`) runs each stage this way, on a thread of its
//! own, the stages joined by in-process exchanges.
//!
//! The run ends when every input has ended, after the final watermark and the remaining
//! processing-time timers have fired; [`RunReport`] says what it did.

#![warn(missing_docs)]

mod checkpointing;
pub mod control;
mod failures;
mod graph;
mod inputs;
mod open;
mod options;
mod recovery;
mod report;
mod runner;
mod steering;
mod udf;

pub use control::{
    CheckpointRecord, ExceptionRecord, LiveStatus, RateTracker, RunControl, RunState, ShardStatus,
    SwapDone, SwapRequest, TaskStatus, KEPT_IN_STATUS, SWAP_WAIT,
};
pub use graph::{run_graph, run_graph_with, GraphFailure, GraphReport};
pub use options::{CommandLineMistake, RunFailure, RunOptions};
pub use report::{DeadLetterCauses, RunReport};
pub use runner::{run, run_with};
pub use udf::{load_udf, short_hash, udf_from_bytes, udf_limits};
