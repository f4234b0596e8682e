//! The keyed stage: one UDF at parallelism N, as N [`KeyedOperator`]s (shards) that
//! each own the keys of their key groups, with the threads they run on, the sinks they
//! share and the swaps of a new UDF version into all of them at once.
//!
//! A key belongs to one of [`KEY_GROUPS`](weir_core::key::KEY_GROUPS) key groups, and a
//! group to one shard ([`shard_of`](weir_core::key::shard_of)). Every shard is handed
//! every run of records the run takes: it calls its UDF for the records of its own keys
//! and reads only the timestamps of the others, so each shard's watermark is the
//! stage's at every record, and its timers fire exactly where they would in one
//! operator. A key's records, timers and outputs therefore keep their order end to end;
//! only the outputs of different keys interleave differently.
//!
//! The runs of records are the only work done in parallel ([`KeyedStage::process`]):
//! the run's thread hands one to every shard, waits for all of them, and between two
//! runs drives the shards one after another ([`KeyedStage::shard_mut`]: watermark
//! markers, idleness, ends of input, processing-time timers, failures), so a checkpoint
//! is aligned across the shards by construction: no shard is inside a run when it is
//! cut.

mod shared;
#[cfg(test)]
mod tests;

pub use shared::{ShardSink, SharedOutput};

use crate::operator::{KeyedOperator, OperatorCounters, OperatorError};
use crate::runtime::{ElementRef, InitInfo, ProcessFunction};
use std::fmt;
use std::sync::Arc;
use weir_core::output::{Sink, SinkState};

/// What a shard's run of records came to: `Err` with the index of the element the
/// failure was reported on, as [`KeyedOperator::process_elements`] says.
pub type ShardResult = Result<(), (usize, OperatorError)>;

/// Why a stage's UDF did not start ([`KeyedStage::init`]).
#[derive(Debug)]
pub enum InitFailure {
    /// A shard's `init` failed.
    Failed {
        /// The shard whose `init` failed (0 is the first).
        shard: usize,
        /// What it failed with.
        error: OperatorError,
    },
    /// A shard declared other outputs than shard 0.
    Disagree {
        /// The shard that disagrees.
        shard: usize,
        /// What it declared.
        declared: Vec<String>,
        /// What shard 0 declared.
        first: Vec<String>,
    },
}

impl fmt::Display for InitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed { shard, error } => write!(f, "in shard {shard}: {error}"),
            Self::Disagree {
                shard,
                declared,
                first,
            } => write!(
                f,
                "declared outputs {declared:?} in shard {shard}, but {first:?} in shard 0"
            ),
        }
    }
}

impl std::error::Error for InitFailure {}

/// One keyed stage of a pipeline: its shards, their threads and the sinks they share.
///
/// The run drives it in this order: [`new`](Self::new) (the shards made), [`init`](Self::init),
/// [`bind_sinks`](Self::bind_sinks), then, when it resumes from a checkpoint, each
/// shard's state through [`shards_mut`](Self::shards_mut). Until the inputs end it hands
/// over runs of records ([`process`](Self::process)) and, between them, drives each
/// shard on its own ([`shard_mut`](Self::shard_mut)), takes checkpoints
/// ([`checkpoint_sinks`](Self::checkpoint_sinks)) and swaps ([`swap`](Self::swap)); it
/// ends with [`finish_sinks`](Self::finish_sinks) once every shard finished or closed
/// its sinks.
pub struct KeyedStage {
    /// The operators, by shard index.
    shards: Vec<KeyedOperator>,
    /// The sinks the shards share, by output id (empty at parallelism 1, where the one
    /// operator owns its sinks).
    shared: Vec<Arc<SharedOutput>>,
    /// One thread per shard, kept for the run: at parallelism 1 too, the one shard works
    /// on its thread while the run's reads ahead and decodes the next run of records.
    pool: rayon::ThreadPool,
}

impl KeyedStage {
    /// The stage of `operators`, shard 0 first, each made the shard of its index (see
    /// [`KeyedOperator::set_shard`]); their functions are not initialised yet. The run
    /// calls this once, when it opens.
    pub fn new(mut operators: Vec<KeyedOperator>) -> anyhow::Result<Self> {
        anyhow::ensure!(!operators.is_empty(), "a stage has at least one shard");
        let parallelism = operators.len();
        for (index, operator) in operators.iter_mut().enumerate() {
            operator.set_shard(index, parallelism);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(parallelism)
            .thread_name(|shard| format!("weir-shard-{shard}"))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start the shards' threads: {e}"))?;
        Ok(Self {
            shards: operators,
            shared: Vec::new(),
            pool,
        })
    }

    /// Instances of `function` for a stage of `parallelism` shards, `function` first
    /// (see [`ProcessFunction::another_instance`]); `None` if it cannot be instantiated
    /// again. The run calls this when it opens, and for a swap.
    pub fn instances(
        function: Box<dyn ProcessFunction>,
        parallelism: usize,
    ) -> Option<Vec<Box<dyn ProcessFunction>>> {
        let mut functions = Vec::with_capacity(parallelism);
        for _ in 1..parallelism {
            functions.push(function.another_instance()?);
        }
        functions.insert(0, function);
        Some(functions)
    }

    /// Initialises the UDF in every shard; returns the outputs it declares, by id. The
    /// run calls this once, after [`new`](Self::new).
    pub fn init(&mut self, info: &InitInfo) -> Result<Vec<String>, InitFailure> {
        let mut first: Option<Vec<String>> = None;
        for (shard, operator) in self.shards.iter_mut().enumerate() {
            let declared = operator
                .init(info)
                .map_err(|error| InitFailure::Failed { shard, error })?;
            match &first {
                None => first = Some(declared),
                Some(first) if *first != declared => {
                    return Err(InitFailure::Disagree {
                        shard,
                        declared,
                        first: first.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(first.expect("at least one shard"))
    }

    /// Routes each output to its sink (`sinks[i]` takes output id `i`): the one shard's
    /// own at parallelism 1, else shared through a [`ShardSink`] per shard. The run calls
    /// this once, after [`init`](Self::init), before any record.
    pub fn bind_sinks(&mut self, sinks: Vec<Box<dyn Sink>>) {
        if self.shards.len() == 1 {
            self.shards[0].bind_sinks(sinks);
            return;
        }
        self.shared = sinks.into_iter().map(SharedOutput::new).collect();
        for shard in &mut self.shards {
            let handles = self
                .shared
                .iter()
                .map(|output| Box::new(ShardSink::new(Arc::clone(output))) as Box<dyn Sink>)
                .collect();
            shard.bind_sinks(handles);
        }
    }

    /// How many shards run.
    pub fn parallelism(&self) -> usize {
        self.shards.len()
    }

    /// Shard `shard`'s operator.
    ///
    /// # Panics
    ///
    /// If there is no such shard.
    pub fn shard(&self, shard: usize) -> &KeyedOperator {
        &self.shards[shard]
    }

    /// Shard `shard`'s operator, to drive on its own: the run does so between two runs of
    /// records, for what is not done in parallel.
    ///
    /// # Panics
    ///
    /// If there is no such shard.
    pub fn shard_mut(&mut self, shard: usize) -> &mut KeyedOperator {
        &mut self.shards[shard]
    }

    /// Every shard's operator, shard 0 first.
    pub fn shards(&self) -> impl Iterator<Item = &KeyedOperator> {
        self.shards.iter()
    }

    /// Every shard's operator, shard 0 first, to change.
    pub fn shards_mut(&mut self) -> impl Iterator<Item = &mut KeyedOperator> {
        self.shards.iter_mut()
    }

    /// The UDF's name (every shard runs the same version).
    pub fn function_name(&self) -> &str {
        self.shards[0].function_name()
    }

    /// The stage's watermark (every shard reads every record's timestamp, so theirs are
    /// the same).
    pub fn watermark(&self) -> weir_core::time::Timestamp {
        self.shards[0].watermark()
    }

    /// The counters of the stage: the sum of its shards'.
    pub fn counters(&self) -> OperatorCounters {
        let mut sum = self.shards[0].counters().clone();
        for operator in &self.shards[1..] {
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

    /// Runs `elements` through every shard at once, each on its own thread, while this
    /// thread does `meanwhile` (the run reads ahead); returns each shard's result, by
    /// shard index, once all are done, and what `meanwhile` returned. The run calls this
    /// for every run of records.
    pub fn process<T: Send>(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
        meanwhile: impl FnOnce() -> T + Send,
    ) -> (Vec<ShardResult>, T) {
        let mut results: Vec<Option<ShardResult>> = (0..self.shards.len()).map(|_| None).collect();
        let done = self.pool.in_place_scope(|scope| {
            for (operator, result) in self.shards.iter_mut().zip(&mut results) {
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

    /// Swaps `function` in as the UDF of every shard, on probation for `probation_calls`:
    /// its `init` runs against each shard's live host first, and only if every shard
    /// takes it is it put to work in all of them; if one refuses it, no shard changes
    /// (whatever the probation) and the refusal is returned. The run calls this between
    /// two runs of records, where no key is in a call and no batch is open.
    pub fn swap(
        &mut self,
        function: Box<dyn ProcessFunction>,
        info: &InitInfo,
        probation_calls: u64,
    ) -> Result<(), String> {
        let functions = Self::instances(function, self.shards.len()).ok_or_else(|| {
            "the new version was not swapped in: it cannot be instantiated once per shard"
                .to_string()
        })?;
        let mut prepared = Vec::with_capacity(functions.len());
        for (shard, function) in functions.into_iter().enumerate() {
            match self.shards[shard].prepare_swap(function, info) {
                Ok(ready) => prepared.push(ready),
                Err(e) => {
                    for (operator, ready) in self.shards.iter_mut().zip(prepared) {
                        operator.abort_swap(ready);
                    }
                    return Err(format!("the new version was not swapped in: {e}"));
                }
            }
        }
        for (operator, ready) in self.shards.iter_mut().zip(prepared) {
            operator.commit_swap(ready, probation_calls);
        }
        Ok(())
    }

    /// Goes back, in every shard, to the version before the last swap (one rollback for
    /// the whole stage). The run calls this when a version on probation failed in any
    /// shard.
    pub fn rollback(&mut self) {
        for shard in &mut self.shards {
            shard.rollback();
        }
    }

    /// Makes every output so far durable; returns where each sink stands, by output id.
    /// The run calls this when it takes a checkpoint, between two runs of records.
    pub fn checkpoint_sinks(&mut self) -> anyhow::Result<Vec<SinkState>> {
        let mut own = Vec::new();
        // Every shard hands on what it gathered, then the shared sinks are cut.
        for operator in &mut self.shards {
            own = operator
                .checkpoint_sinks()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if self.shared.is_empty() {
            return Ok(own);
        }
        self.shared
            .iter()
            .map(|output| output.checkpoint())
            .collect()
    }

    /// Hands the stage's watermark to its sinks ([`Sink::watermark`]): each shard hands
    /// on what it gathered first, so every record emitted before the watermark moved
    /// reaches a shared sink before it. The run calls this between two runs of records
    /// whenever the watermark moved.
    pub fn watermark_to_sinks(&mut self, outputs: &[String]) -> anyhow::Result<()> {
        let watermark = self.watermark();
        for operator in &mut self.shards {
            operator
                .watermark_to_sinks(watermark)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        for (output, shared) in outputs.iter().zip(&self.shared) {
            shared
                .watermark(watermark)
                .map_err(|e| e.context(format!("output {output:?}")))?;
        }
        Ok(())
    }

    /// Writes out what the shared sinks hold (`outputs` names them, by id, for errors),
    /// after every shard flushed its own. The run calls this while the input is idle.
    pub fn flush_shared(&self, outputs: &[String]) -> anyhow::Result<()> {
        for (output, shared) in outputs.iter().zip(&self.shared) {
            shared
                .flush()
                .map_err(|e| e.context(format!("output {output:?}")))?;
        }
        Ok(())
    }

    /// Completes the sinks the shards share (`outputs` names them), once every shard has
    /// finished or closed its own. The run calls this once, when it ends or stops.
    pub fn finish_sinks(&self, outputs: &[String]) -> anyhow::Result<()> {
        for (output, shared) in outputs.iter().zip(&self.shared) {
            shared
                .finish()
                .map_err(|e| e.context(format!("output {output:?}")))?;
        }
        Ok(())
    }
}
