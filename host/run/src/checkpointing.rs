//! The run's side of checkpoints: taking one from a running pipeline, and putting a
//! restored one back into sources, sinks and the operator.

use crate::control::{CheckpointRecord, KEPT_IN_STATUS};
use crate::inputs::Inputs;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use weir_checkpoint::aligned::OnStop;
use weir_checkpoint::Checkpointer;
use weir_checkpoint::{
    Chain, CheckpointFile, CounterMeta, DeadLetterMeta, DeclaredState, InputMeta, Meta, OutputMeta,
};
use weir_core::identity::UdfIdentity;
use weir_core::position::Position;
use weir_core::state::StampChange;
use weir_core::time::timers::TimeDomain;
use weir_core::time::wall_clock_ms;
use weir_engine::operator::{KeyedOperator, OperatorCounters};
use weir_engine::snapshot::{self, RestoreTo};
use weir_engine::stage::KeyedStage;
use weir_io::sink::{DeadLetters, SinkState};
use weir_io::source::Source;
use weir_pipeline::{PipelineSpec, SourceSpec};

/// The checkpoint a run starts from (nothing, for a first run).
pub(super) struct Restored {
    chain: Option<Chain>,
}

impl Restored {
    /// Checks that the newest checkpoint belongs to this pipeline and UDF.
    pub fn check(
        chain: Option<Chain>,
        spec: &PipelineSpec,
        udf: &UdfIdentity,
    ) -> anyhow::Result<Self> {
        if let Some(chain) = &chain {
            let meta = &chain.newest().meta;
            anyhow::ensure!(
                meta.pipeline == spec.name && meta.udf.name == udf.name,
                "{} holds checkpoints of pipeline {:?} with UDF {:?}, not of {:?} with {:?}; \
                 use another --state-dir, or --fresh to start over",
                spec.checkpoint.location(),
                meta.pipeline,
                meta.udf.name,
                spec.name,
                udf.name
            );
            if meta.udf.sha256 != udf.sha256 {
                tracing::warn!(
                    "checkpoint {} was written by another build of UDF {:?}; restoring its state into this one",
                    meta.epoch,
                    udf.name
                );
            }
            tracing::info!(
                "resuming from checkpoint {} ({} file(s) in {}), watermark {}",
                meta.epoch,
                chain.files.len(),
                spec.checkpoint.location(),
                weir_core::time::display(meta.watermark)
            );
        }
        Ok(Self { chain })
    }

    /// The epoch restored, if any.
    pub fn epoch(&self) -> Option<u64> {
        self.meta().map(|m| m.epoch)
    }

    fn meta(&self) -> Option<&Meta> {
        self.chain.as_ref().map(|c| &c.newest().meta)
    }

    pub fn input(&self, name: &str) -> Option<&InputMeta> {
        self.meta()?.inputs.iter().find(|i| i.name == name)
    }

    /// Opens a source at its checkpointed positions, or at its start.
    pub fn open_source(&self, spec: &SourceSpec) -> anyhow::Result<Box<dyn Source>> {
        let partitioned = spec.location.is_partitioned();
        let prefix = format!("{}:", spec.name);
        let positions: Vec<_> = self
            .meta()
            .into_iter()
            .flat_map(|m| &m.inputs)
            .filter(|i| match partitioned {
                true => i.name.starts_with(&prefix),
                false => i.name == spec.name,
            })
            .map(|i| i.position.clone())
            .collect();
        weir_io::source::open(
            &spec.name,
            &spec.location,
            &positions,
            spec.max_record_bytes,
        )
    }

    /// The saved state of the sink of `output`.
    pub fn sink(&self, output: &str) -> Option<&SinkState> {
        let newest = self.chain.as_ref()?.newest();
        let index = newest.meta.outputs.iter().position(|o| o.name == output)?;
        newest.sinks.get(index)
    }

    /// The dead-letter output's length and count.
    pub fn dead_letters(&self) -> Option<(u64, u64)> {
        let meta = self.meta()?;
        Some((meta.dead_letters.length?, meta.dead_letters.count))
    }

    /// Puts keyed state, timers, watermarks and counters back into the operator (after
    /// the UDF's `init`, which declares the states). The operator of shard `shard` of
    /// `parallelism` takes only the keys of its key groups, whatever the parallelism the
    /// checkpoint was taken at, and only shard 0 takes the counters (the run sums them).
    pub fn restore_operator(
        &self,
        operator: &mut KeyedOperator,
        inputs: &[&str],
        outputs: &[String],
        (shard, parallelism): (usize, usize),
    ) -> anyhow::Result<()> {
        let Some(chain) = &self.chain else {
            return Ok(());
        };
        for (index, file) in chain.files.iter().enumerate() {
            let host = operator.host_mut();
            let mapping: Vec<_> = file
                .meta
                .states
                .iter()
                .map(|declared| {
                    let found = host
                        .states()
                        .find(&declared.name)
                        .filter(|(_, kind)| kind.label() == declared.kind);
                    if found.is_none() {
                        tracing::warn!(
                            "the UDF no longer declares {} state {:?}: its checkpointed contents are dropped",
                            declared.kind,
                            declared.name
                        );
                    }
                    found.map(|(id, _)| {
                        // The label names the clock: `600000ms event-time on-write`.
                        let clock = |label: &str| {
                            if label.contains("processing-time") {
                                TimeDomain::ProcessingTime
                            } else {
                                TimeDomain::EventTime
                            }
                        };
                        let before = declared.ttl.as_deref().map(clock);
                        let after = host.states().ttl(id).map(|ttl| ttl.domain);
                        let stamps = StampChange::between(before, after);
                        RestoreTo { id, stamps }
                    })
                })
                .collect();
            let mine = |key: &[u8]| weir_core::key::shard_of(key, parallelism) == shard;
            // The chain's first file is a full checkpoint, applied into an empty table.
            let apply = match index {
                0 => snapshot::apply_base_where,
                _ => snapshot::apply_where,
            };
            chain.read_keyed(index, &mut |part| {
                apply(host, part, &mapping, mine).map_err(|e| anyhow::anyhow!("keyed state: {e:#}"))
            })?;
        }
        let meta = &chain.newest().meta;
        let watermarks: Vec<_> = inputs
            .iter()
            .map(|name| self.input(name).map(|i| i.watermark))
            .collect();
        let emitted = outputs
            .iter()
            .map(|name| {
                meta.outputs
                    .iter()
                    .find(|o| &o.name == name)
                    .map_or(0, |o| o.emitted)
            })
            .collect();
        let counters = if shard > 0 {
            OperatorCounters {
                emitted: vec![0; outputs.len()],
                ..OperatorCounters::default()
            }
        } else {
            OperatorCounters {
                elements: meta.counters.elements,
                late: meta.counters.late,
                event_timers: meta.counters.event_timers,
                processing_timers: meta.counters.processing_timers,
                emitted,
            }
        };
        operator.restore(&watermarks, meta.watermark, counters);
        let by_group: Vec<Vec<u64>> = outputs
            .iter()
            .map(|name| {
                meta.outputs
                    .iter()
                    .find(|o| &o.name == name)
                    .map_or_else(Vec::new, |o| o.by_group.clone())
            })
            .collect();
        operator.restore_by_group(&by_group);
        Ok(())
    }
}

/// The run's checkpoints: the store and its cadence, the positions the last one holds
/// until it is durable, and what the report says of them.
pub(crate) struct Checkpoints {
    checkpointer: Option<Checkpointer>,
    /// Positions of the last checkpoint written, per source, to commit once it is durable.
    uncommitted: Option<Vec<Vec<Position>>>,
    /// The epoch the run resumed from, if any.
    pub resumed_from: Option<u64>,
    /// Checkpoints this run took.
    pub taken: u64,
    /// The longest processing paused for one.
    pub longest_pause: Duration,
    /// The last [`KEPT_IN_STATUS`] taken, for the live status.
    pub history: VecDeque<CheckpointRecord>,
    /// Checkpoints taken since a stop request (a stage of several stopping in step).
    pub taken_on_stop: u64,
}

impl Checkpoints {
    /// Checkpoints into `checkpointer` (none: checkpoints are off), after resuming from
    /// `resumed_from`.
    pub fn new(checkpointer: Option<Checkpointer>, resumed_from: Option<u64>) -> Self {
        Self {
            checkpointer,
            uncommitted: None,
            resumed_from,
            taken: 0,
            longest_pause: Duration::ZERO,
            history: VecDeque::new(),
            taken_on_stop: 0,
        }
    }

    /// Whether a checkpoint is due: on the cadence, or, for a stage that reads other
    /// stages of its graph, when its inputs from them are all at a barrier
    /// (`weir_checkpoint::aligned`).
    pub fn is_due(&self, inputs: &Inputs) -> bool {
        match &self.checkpointer {
            None => false,
            Some(c) if c.in_step() && inputs.reads_stages() => inputs.at_barrier(),
            Some(c) => c.is_due(),
        }
    }

    /// Whether the run is a stage of several that checkpoints in step with the others:
    /// it then takes checkpoints only in step (not when it stops), and leaves them in
    /// place when it completes (the graph removes every stage's once all completed).
    pub fn in_step(&self) -> bool {
        self.checkpointer
            .as_ref()
            .is_some_and(Checkpointer::in_step)
    }

    /// What the run does next under a stop request, once its read-ahead is processed:
    /// a stage of several that reads no other stage (`reads_stages` false) checkpoints
    /// in step with the others until the graph's last epoch is complete
    /// ([`weir_checkpoint::aligned::GraphEpochs::on_stop`]); any other run stops (a run
    /// of one stage taking its checkpoint as it does).
    pub fn on_stop(&self, reads_stages: bool) -> OnStop {
        match &self.checkpointer {
            Some(checkpointer) if !reads_stages => checkpointer.on_stop().unwrap_or(OnStop::Stop),
            _ => OnStop::Stop,
        }
    }

    /// What a stage of several whose run completed does next: take its final section,
    /// wait for the epoch before it to complete, or end without one
    /// ([`weir_checkpoint::aligned::GraphEpochs::on_complete`]); any other run stops.
    pub fn on_complete(&self) -> OnStop {
        match &self.checkpointer {
            Some(checkpointer) => checkpointer.on_complete().unwrap_or(OnStop::Stop),
            None => OnStop::Stop,
        }
    }

    /// A stage of several stops without a last checkpoint in step: no epoch completes
    /// again, and the others stop without waiting for one.
    pub fn give_up(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.ended();
        }
    }

    /// The run completed: a stage of several that took its final section (`last`)
    /// leaves its checkpoints to the graph, and one that could not tells the others
    /// (which then take no further checkpoint); a run of one stage removes them, and a
    /// new one starts from scratch.
    pub fn completed(&mut self, last: bool) -> anyhow::Result<()> {
        match &mut self.checkpointer {
            Some(checkpointer) if checkpointer.in_step() => {
                if !last {
                    checkpointer.ended();
                }
                // The section being written lands before the run returns: the graph
                // clears every stage's checkpoints once all completed, and must find no
                // write in flight (nor the directory still locked by it).
                checkpointer.wait()?;
                Ok(())
            }
            _ => self.clear(),
        }
    }

    /// Removes every checkpoint: the run completed, and a new one starts from scratch.
    fn clear(&mut self) -> anyhow::Result<()> {
        match &mut self.checkpointer {
            Some(checkpointer) => checkpointer.store.clear(),
            None => Ok(()),
        }
    }
}

/// The records each key group emitted to `output`, over the shards: a group's count
/// grows only in the shard that owns it, so the largest is the group's.
fn by_group(stage: &KeyedStage, output: usize) -> Vec<u64> {
    let mut counts: Vec<u64> = Vec::new();
    for operator in stage.shards() {
        if let Some(theirs) = operator.emitted_by_group().get(output) {
            counts.resize(theirs.len(), 0);
            for (count, &their) in counts.iter_mut().zip(theirs) {
                *count = (*count).max(their);
            }
        }
    }
    counts
}

/// What a checkpoint is cut from: the run's parts, borrowed while it is taken.
pub(crate) struct Cut<'a> {
    /// The pipeline's name.
    pub pipeline: &'a str,
    /// The UDF version running.
    pub udf: &'a UdfIdentity,
    /// The UDF's outputs, in id order.
    pub outputs: &'a [String],
    /// The keyed stage: its sinks, and its shards' keyed state, timers, watermarks and
    /// counters.
    pub stage: &'a mut KeyedStage,
    /// The inputs: their sources' positions.
    pub inputs: &'a mut Inputs,
    /// The dead-letter output.
    pub dead_letters: &'a mut DeadLetters,
    /// The run completed: this is a stage's final section (`weir_checkpoint::aligned`).
    pub finished: bool,
}

impl Checkpoints {
    /// Takes a checkpoint of `cut` (if checkpoints are on). Called by the run between two
    /// runs of records, with every read-ahead queue empty, so that the sources' positions
    /// are exactly what the state has seen: the sinks make their output durable first,
    /// then the keyed section is built, then the file goes to the background writer.
    pub fn take(&mut self, cut: Cut<'_>) -> anyhow::Result<()> {
        let Cut {
            pipeline,
            udf,
            outputs,
            stage,
            inputs,
            dead_letters,
            finished,
        } = cut;
        if self.checkpointer.is_none() {
            return Ok(());
        }
        let started = Instant::now();
        self.commit_durable(inputs)?;
        let sinks = stage.checkpoint_sinks()?;
        let dead_letters = DeadLetterMeta {
            count: dead_letters.count(),
            length: dead_letters.checkpoint()?,
        };
        let checkpointer = self.checkpointer.as_mut().expect("checked above");
        let mut plan = checkpointer.plan();
        // No checkpoint keeps an expired state entry.
        let now = wall_clock_ms();
        for operator in stage.shards_mut() {
            operator.expire_state(now);
            if !operator.host().keys().is_tracking() {
                // Changes stopped being remembered when the last input ended (a stop
                // during the end of input's timers): only a full checkpoint is right.
                plan.parent = None;
            }
        }
        // The shards' keys are disjoint: their sections, one after another, are one.
        // The parts set aside and the keys to read from the `disk` backend's stores
        // come last, on the writer's thread.
        let mut keyed = Vec::new();
        let mut later = Vec::new();
        for operator in stage.shards_mut() {
            let host = operator.host_mut();
            let section = match plan.parent {
                None => {
                    let full = snapshot::begin_full(host.keys())?;
                    host.keys_mut().take_changes();
                    host.keys_mut().take_dormant_changes();
                    full
                }
                Some(_) => snapshot::begin_changes(host.keys_mut())?,
            };
            keyed.extend(section.in_memory);
            later.extend(section.later);
        }
        let operator = stage.shard(0);
        let host = operator.host();
        let states = (0..host.states().len() as u32)
            .filter_map(|id| host.states().get(id).map(|(name, kind)| (id, name, kind)))
            .map(|(id, name, kind)| DeclaredState {
                name: name.to_string(),
                kind: kind.label().to_string(),
                ttl: host.states().ttl(id).map(|ttl| ttl.label()),
            })
            .collect();
        let mut positions = Vec::with_capacity(inputs.sources().len());
        let mut input_metas = Vec::with_capacity(inputs.inputs().len());
        let read: Vec<(String, u64)> = inputs
            .sources()
            .iter()
            .map(|s| {
                let read = s.inputs.clone().map(|i| inputs.input(i).read).sum();
                (s.name.clone(), read)
            })
            .collect();
        for slot in inputs.sources() {
            let source_positions = slot.source.positions();
            for (i, position) in slot.inputs.clone().zip(&source_positions) {
                let input = inputs.input(i);
                input_metas.push(InputMeta {
                    name: input.name.clone(),
                    position: position.clone(),
                    watermark: operator.source_watermark(i),
                    ended: input.ended,
                    read: input.read,
                });
            }
            positions.push(source_positions);
        }
        let counters = stage.counters();
        let meta = Meta {
            epoch: plan.epoch,
            parent: plan.parent,
            pipeline: pipeline.to_string(),
            udf: udf.clone(),
            written_at: wall_clock_ms(),
            states,
            watermark: operator.watermark(),
            inputs: input_metas,
            outputs: outputs
                .iter()
                .zip(&counters.emitted)
                .enumerate()
                .map(|(output, (name, &emitted))| OutputMeta {
                    name: name.clone(),
                    emitted,
                    by_group: by_group(stage, output),
                })
                .collect(),
            dead_letters,
            counters: CounterMeta {
                elements: counters.elements,
                late: counters.late,
                event_timers: counters.event_timers,
                processing_timers: counters.processing_timers,
            },
            finished,
        };
        let at = meta.written_at;
        let file = CheckpointFile { meta, sinks, keyed };
        let checkpointer = self.checkpointer.as_mut().expect("checked above");
        // Its size, unless the writer reads part of it from the stores (then once it is
        // durable: `commit_durable`).
        let bytes = match later.is_empty() {
            true => checkpointer.write(file)?,
            false => {
                let keyed_later = move |part: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>| {
                    for later in later {
                        later.write_parts(part)?;
                    }
                    Ok(())
                };
                checkpointer.write_later(file, Box::new(keyed_later))?;
                0
            }
        };
        inputs.release_barriers();
        self.uncommitted = Some(positions);
        let pause = started.elapsed();
        self.taken += 1;
        self.longest_pause = self.longest_pause.max(pause);
        self.history.push_back(CheckpointRecord {
            epoch: plan.epoch,
            at,
            pause_ms: pause.as_secs_f64() * 1e3,
            bytes,
            kind: if plan.parent.is_some() {
                "incremental"
            } else {
                "full"
            },
            read,
        });
        while self.history.len() > KEPT_IN_STATUS {
            self.history.pop_front();
        }
        tracing::debug!(
            "checkpoint {} taken ({}), processing paused {:.2} ms",
            plan.epoch,
            if plan.parent.is_some() {
                "incremental"
            } else {
                "full"
            },
            pause.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Waits for the checkpoint being written, then lets the sources of `inputs` commit
    /// its positions. Called before the next checkpoint and when the run stops.
    pub fn commit_durable(&mut self, inputs: &mut Inputs) -> anyhow::Result<()> {
        let Some(checkpointer) = &mut self.checkpointer else {
            return Ok(());
        };
        if let Some(written) = checkpointer.wait()? {
            let epoch = written.epoch;
            if let Some(record) = self.history.iter_mut().find(|r| r.epoch == epoch) {
                record.bytes = written.bytes;
            }
            if let Some(positions) = self.uncommitted.take() {
                for (slot, positions) in inputs.sources_mut().iter_mut().zip(&positions) {
                    slot.source.commit(positions)?;
                }
            }
            tracing::debug!("checkpoint {epoch} is durable");
        }
        Ok(())
    }
}
