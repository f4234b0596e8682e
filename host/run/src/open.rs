//! Opening a run: the checkpoint to resume from, the inputs at its positions, the keyed
//! stage with the UDF initialised in every shard, the sinks its outputs are routed to,
//! the restored state, and the dead-letter output, in that order.

use crate::checkpointing::{Checkpoints, Restored};
use crate::failures::UdfFailures;
use crate::inputs::{Inputs, SourceSettings};
use crate::options::{CommandLineMistake, RunOptions};
use crate::runner::Runner;
use crate::steering::{StatusPublisher, UdfVersions};
use anyhow::Context as _;
use std::sync::Arc;
use weir_checkpoint::Checkpointer;
use weir_core::identity::UdfIdentity;
use weir_core::time::wall_clock_ms;
use weir_engine::operator::{KeyedOperator, OperatorError};
use weir_engine::runtime::{InitInfo, ProcessFunction};
use weir_engine::stage::{InitFailure, KeyedStage};
use weir_io::sink::{DeadLetters, Sink};
use weir_io::source::decode::RecordDecoder;
use weir_pipeline::{PipelineSpec, SourceLocation, StateBackend};

/// The inputs of a run, opened, and what the operators need to know of them.
struct OpenedInputs {
    inputs: Inputs,
    /// Each input's out-of-orderness bound, in input order.
    delays: Vec<i64>,
    /// The inputs that are other stages' outputs: their watermark is their upstream's.
    follows_upstream: Vec<usize>,
}

impl Runner {
    /// Opens the checkpoint store, the sources (at their checkpointed positions), the
    /// UDF (its `init`, in every shard), the sinks and the dead-letter output, and
    /// restores the checkpoint's state into the operators. Called once per run, before
    /// [`Runner::run`].
    pub(crate) fn open(
        spec: &PipelineSpec,
        function: Box<dyn ProcessFunction>,
        udf: UdfIdentity,
        options: &RunOptions,
    ) -> anyhow::Result<Self> {
        let started = std::time::Instant::now();
        let (checkpointer, chain) = if spec.checkpoint.enabled {
            let (checkpointer, chain) = Checkpointer::open(&spec.checkpoint, options.fresh)?;
            (Some(checkpointer), chain)
        } else {
            (None, None)
        };
        let restored = Restored::check(chain, spec, &udf)?;
        let opened = open_inputs(spec, &restored)?;
        let mut stage = open_stage(spec, function, &opened, options)?;
        let info = InitInfo {
            config: spec.udf.config.clone(),
            inputs: spec.input_names(),
        };
        let outputs = init(&mut stage, spec, &info)?;
        check_routes(spec, &outputs)?;
        stage.bind_sinks(open_sinks(spec, &outputs, &restored)?);
        let inputs = opened.inputs;
        let input_names: Vec<&str> = inputs.inputs().iter().map(|i| i.name.as_str()).collect();
        for (shard, operator) in stage.shards_mut().enumerate() {
            restored
                .restore_operator(operator, &input_names, &outputs, (shard, spec.parallelism))
                .context("cannot restore the checkpoint")?;
            if checkpointer.is_some() {
                operator.host_mut().keys_mut().track_changes();
            }
            operator
                .evict_state()
                .map_err(|e| anyhow::anyhow!("cannot restore the checkpoint: {e}"))?;
        }
        if let Some(epoch) = restored.epoch() {
            let keys: usize = stage.shards().map(|o| o.host().keys().len()).sum();
            tracing::info!(
                "restored checkpoint {epoch}: {keys} keys in {:.0} ms (reading its files, opening the pipeline and applying them)",
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        let dead_letters = open_dead_letters(spec, &restored)?;
        Ok(Self {
            pipeline: spec.name.clone(),
            interrupted: false,
            stopped_in_timers: false,
            stopped_before_retry: None,
            inputs,
            stage,
            active: 0,
            outputs,
            dead_letters,
            checkpoints: Checkpoints::new(checkpointer, restored.epoch()),
            udf: UdfVersions::new(udf),
            init_info: info,
            control: options.control.clone(),
            status: StatusPublisher::new(),
            failures: UdfFailures::new(spec.udf.on_error, options.stop.clone()),
            rollbacks: 0,
            undecodable: 0,
            forwarded: spec
                .sinks
                .iter()
                .any(|s| !s.feeds.is_empty())
                .then_some(weir_core::time::MIN_WATERMARK),
        })
    }
}

/// Opens every source of `spec` at the positions `restored` holds (its start, for a
/// first run), an input per partition.
fn open_inputs(spec: &PipelineSpec, restored: &Restored) -> anyhow::Result<OpenedInputs> {
    let input_names = spec.input_names();
    let mut opened = OpenedInputs {
        inputs: Inputs::new(spec.parallelism),
        delays: Vec::new(),
        follows_upstream: Vec::new(),
    };
    for s in &spec.sources {
        let source = restored.open_source(s)?;
        let decoder = RecordDecoder::new(&s.key, &s.timestamp, s.timestamp_format)
            .map_err(|e| anyhow::anyhow!("source {:?}: {e}", s.name))?;
        let input_index = input_names
            .iter()
            .position(|n| n == &s.input)
            .expect("input named by a source") as u32;
        let from_stage = matches!(s.location, SourceLocation::Stage(_));
        let settings = SourceSettings {
            name: &s.name,
            partitioned: s.location.is_partitioned(),
            input_index,
            decoder,
            idle_timeout: s.idle_timeout,
            max_record_bytes: s.max_record_bytes,
            reads_stage: from_stage,
        };
        let added = opened.inputs.add(source, settings, |name| {
            restored.input(name).map_or(0, |i| i.read)
        });
        for input in added {
            opened.delays.push(s.out_of_orderness_ms);
            if from_stage {
                opened.follows_upstream.push(input);
            }
        }
    }
    Ok(opened)
}

/// The keyed stage of `spec`: `function` instantiated once per shard, each in an
/// Bytes of the disk state backend's store blocks each shard keeps in memory (its
/// `[state] cache` is for the state itself).
const STORE_BLOCK_CACHE: u64 = 8 << 20;

/// operator over `opened`'s inputs.
fn open_stage(
    spec: &PipelineSpec,
    function: Box<dyn ProcessFunction>,
    opened: &OpenedInputs,
    options: &RunOptions,
) -> anyhow::Result<KeyedStage> {
    let parallelism = spec.parallelism;
    let name = function.name().to_string();
    let functions = KeyedStage::instances(function, parallelism).ok_or_else(|| {
        anyhow::anyhow!(
            "UDF {name:?} cannot run at parallelism {parallelism}: it cannot be instantiated once per shard"
        )
    })?;
    let now = wall_clock_ms();
    let operators: Vec<KeyedOperator> = functions
        .into_iter()
        .enumerate()
        .map(|(shard, function)| {
            let mut operator = KeyedOperator::new(function, &opened.delays, now);
            if let StateBackend::Disk { cache_bytes } = spec.state {
                let root = spec.checkpoint.dir.join("store");
                let store = weir_store::DiskStore::open_for_shard(&root, shard, STORE_BLOCK_CACHE)?;
                let budget = cache_bytes / parallelism;
                operator
                    .host_mut()
                    .keys_mut()
                    .spill_to(Box::new(store), budget);
            }
            for &input in &opened.follows_upstream {
                operator.follow_upstream(input);
            }
            operator.set_max_batch(spec.udf.max_batch);
            operator.set_max_emit_bytes(spec.udf.max_emit_bytes);
            if let Some(stop) = &options.stop {
                operator.stop_on(Arc::clone(stop));
            }
            Ok(operator)
        })
        .collect::<anyhow::Result<_>>()?;
    KeyedStage::new(operators)
}

/// Runs the UDF's `init` in every shard; returns the outputs it declares. A failure
/// names the UDF (and the command line's `--config`, which may be the mistake).
fn init(
    stage: &mut KeyedStage,
    spec: &PipelineSpec,
    info: &InitInfo,
) -> anyhow::Result<Vec<String>> {
    let name = stage.shard(0).function_name().to_string();
    stage.init(info).map_err(|failure| match failure {
        InitFailure::Failed { shard: 0, error } => {
            let failed = format!("UDF {name:?} failed to initialise: {error}");
            match spec.udf.config_from_command_line.as_slice() {
                [] => anyhow::anyhow!(failed),
                // The UDF checks its config in `init`: with keys from the command line,
                // the mistake may be the command line's (exit 2, as for a bad flag).
                keys => CommandLineMistake(format!(
                    "{failed} (with --config {} from the command line)",
                    keys.join(", ")
                ))
                .into(),
            }
        }
        InitFailure::Failed { shard, error } => {
            anyhow::anyhow!("UDF {name:?} failed to initialise in shard {shard}: {error}")
        }
        disagree => anyhow::anyhow!("UDF {name:?} {disagree}"),
    })
}

/// Checks that every output the UDF declares has a sink, and that every sink named on
/// the command line or read by another stage takes an output the UDF declares (a sink
/// of the file for another output is only warned about).
fn check_routes(spec: &PipelineSpec, outputs: &[String]) -> anyhow::Result<()> {
    let unrouted: Vec<String> = outputs
        .iter()
        .filter(|o| !spec.sinks.iter().any(|s| &s.output == *o))
        .cloned()
        .collect();
    if !unrouted.is_empty() {
        anyhow::bail!(
            "{}; add a [[sink]] with output = {:?} (or --output {}=PATH)",
            OperatorError::Unrouted(unrouted.clone()),
            unrouted[0],
            unrouted[0]
        );
    }
    for sink in &spec.sinks {
        if outputs.contains(&sink.output) {
            continue;
        }
        if sink.from_command_line {
            return Err(CommandLineMistake(format!(
                "--output {}=...: the UDF has no output {:?} (it declares {:?})",
                sink.output, sink.output, outputs
            ))
            .into());
        }
        if let Some(exchange) = sink.feeds.first() {
            anyhow::bail!(
                "the UDF has no output {:?} (it declares {:?}), which {} reads",
                sink.output,
                outputs,
                exchange.name()
            );
        }
        tracing::warn!(
            "the pipeline routes output {:?}, which the UDF does not declare (it declares {:?})",
            sink.output,
            outputs
        );
    }
    Ok(())
}

/// The sink of each of `outputs`, in order, opened where `restored` left it (and feeding
/// the stages that read the output).
fn open_sinks(
    spec: &PipelineSpec,
    outputs: &[String],
    restored: &Restored,
) -> anyhow::Result<Vec<Box<dyn Sink>>> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::with_capacity(outputs.len());
    for output in outputs {
        let sink = spec
            .sinks
            .iter()
            .find(|s| &s.output == output)
            .expect("every output routed (check_routes)");
        let opened = weir_io::sink::open(
            &sink.target,
            sink.upsert.as_ref(),
            &spec.name,
            output,
            restored.sink(output),
        )?;
        sinks.push(weir_io::source::exchange::Feeding::wrap(
            opened,
            &sink.feeds,
        ));
    }
    Ok(sinks)
}

/// The dead-letter output, resumed at the length and count `restored` holds.
fn open_dead_letters(spec: &PipelineSpec, restored: &Restored) -> anyhow::Result<DeadLetters> {
    let mut resume = restored.dead_letters();
    if spec.checkpoint.kafka.is_some() {
        // A task of a consumer group may have moved here from another machine, whose
        // dead-letter file this one is not: append to what is here instead.
        let here = std::fs::metadata(&spec.dead_letter).map_or(0, |m| m.len());
        resume = resume.map(|(length, count)| (length.min(here), count));
    }
    DeadLetters::open(&spec.dead_letter, resume).context("dead-letter output")
}
