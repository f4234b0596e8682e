//! Pipelines of several keyed stages: `[[stage]]`s, each with its own UDF, inputs, key
//! and parallelism, joined by in-process [`Exchange`]s (Flink's
//! `keyBy(ad).process(count).keyBy(campaign).process(top)`).
//!
//! [`StageGraph::parse`] checks the graph (unknown names, cycles, a stage nothing reads
//! and no sink takes, a stage input without a key) and resolves each stage into the
//! [`PipelineSpec`] of a one-stage run whose sources include its upstream stages'
//! exchanges and whose sinks include the exchanges of the stages that read it. A file
//! with a single `[udf]` is a graph of one stage.

use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weir_checkpoint::aligned::{Aligned, GraphEpochs};
use weir_io::sink::SinkTarget;
use weir_io::source::decode::{RecordDecoder, MESSAGE_TIMESTAMP};
use weir_io::source::exchange::Exchange;
use weir_io::source::{SourceLocation, DEFAULT_MAX_RECORD_BYTES};

use crate::file::{StageEntry, StageInputEntry};
use crate::load::{load_file, parse_file, Common};
use crate::name;
use crate::resolve::resolve_udf;
use crate::spec::{check_parallelism, Overrides, PipelineSpec, SinkSpec, SourceSpec};

/// A pipeline as a graph of keyed stages, resolved.
#[derive(Debug, Clone)]
pub struct StageGraph {
    /// The pipeline's name.
    pub name: String,
    /// The stages, in file order (one for a `[udf]` file).
    pub stages: Vec<Stage>,
}

/// One keyed stage of a [`StageGraph`].
#[derive(Debug, Clone)]
pub struct Stage {
    /// Its name (the pipeline's, for a `[udf]` file).
    pub name: String,
    /// What a run of this stage alone is given: its sources (files, Kafka, and the
    /// exchanges of the stages it reads), its UDF, and its sinks (including the
    /// exchanges of the stages that read it).
    pub spec: PipelineSpec,
}

impl StageGraph {
    /// Reads, checks and resolves a pipeline file of one stage or several.
    pub fn load(path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        load_file(path, |text| Self::parse(text, path, overrides))
    }

    /// Checks and resolves pipeline text; relative paths are relative to `path`'s folder.
    pub fn parse(text: &str, path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        let mut file = parse_file(text)?;
        if file.stages.is_empty() {
            let spec = PipelineSpec::parse(text, path, overrides)?;
            return Ok(Self {
                name: spec.name.clone(),
                stages: vec![Stage {
                    name: spec.name.clone(),
                    spec,
                }],
            });
        }
        if file.udf.is_some() {
            bail!("give either [udf] (a pipeline of one stage) or [[stage]]s, not both");
        }
        for (flag, given) in [
            ("--udf", overrides.udf.is_some()),
            ("--config", !overrides.config.is_empty()),
            ("--output", !overrides.outputs.is_empty()),
        ] {
            if given {
                bail!("{flag} names no stage: in a pipeline of several stages, give it in the file's [[stage]] or [[sink]]");
            }
        }
        let entries = std::mem::take(&mut file.stages);
        let common = Common::resolve(file, path)?;
        check_names(&entries, &common.sources)?;
        let order = order(&entries)?;
        let edges = edges(&entries);

        for (stage, sink) in &common.sinks {
            let Some(stage) = stage else {
                bail!(
                    "[[sink]] for output {:?}: name the stage whose output it takes (stage = \"...\"; the stages: {:?})",
                    sink.output,
                    names(&entries)
                );
            };
            if !entries.iter().any(|e| &e.name == stage) {
                bail!(
                    "[[sink]] for output {:?}: there is no stage {stage:?} (the stages: {:?})",
                    sink.output,
                    names(&entries)
                );
            }
        }
        let mut stages = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let context = || format!("[[stage]] {:?}", entry.name);
            let stage = resolve_stage(index, entry, &common, &edges, path).with_context(context)?;
            stages.push(stage);
        }
        let mut graph = Self {
            name: common.name,
            stages,
        };
        graph.stages = order.into_iter().map(|i| graph.stages[i].clone()).collect();
        graph.apply(overrides)?;
        Ok(graph)
    }

    /// Applies the command line's overrides that a graph takes: `--input` (to the stage
    /// reading that source), `--parallelism` (every stage), and the dead-letter, state
    /// and checkpoint flags.
    fn apply(&mut self, overrides: &Overrides) -> anyhow::Result<()> {
        for (name, _) in &overrides.inputs {
            if !self
                .stages
                .iter()
                .any(|s| s.spec.sources.iter().any(|source| &source.name == name))
            {
                bail!("--input {name}=...: the pipeline has no source {name:?}");
            }
        }
        for stage in &mut self.stages {
            let mine = Overrides {
                inputs: overrides
                    .inputs
                    .iter()
                    .filter(|(name, _)| stage.spec.sources.iter().any(|s| &s.name == name))
                    .cloned()
                    .collect(),
                dead_letter: overrides
                    .dead_letter
                    .as_ref()
                    .map(|path| stage_path(path, &stage.name)),
                state_dir: overrides
                    .state_dir
                    .as_ref()
                    .map(|dir| dir.join(&stage.name)),
                outputs: Vec::new(),
                config: Vec::new(),
                udf: None,
                ..overrides.clone()
            };
            stage.spec.apply(&mine)?;
        }
        if self.stages.len() > 1 {
            // The stages checkpoint in step: one epoch over all of them.
            let roots = (self.stages.iter().enumerate())
                .filter(|(_, stage)| {
                    !(stage.spec.sources.iter())
                        .any(|s| matches!(s.location, SourceLocation::Stage(_)))
                })
                .map(|(index, _)| index)
                .collect();
            let names = self.stages.iter().map(|s| s.name.clone()).collect();
            let epochs = GraphEpochs::new(names, roots);
            for (index, stage) in self.stages.iter_mut().enumerate() {
                stage.spec.checkpoint.aligned = stage.spec.checkpoint.enabled.then(|| Aligned {
                    stage: index,
                    epochs: Arc::clone(&epochs),
                    restore: None,
                    resume_epoch: None,
                });
            }
        }
        Ok(())
    }

    /// Whether the pipeline is one stage (a `[udf]` file, or a single `[[stage]]`).
    pub fn is_single(&self) -> bool {
        self.stages.len() == 1
    }
}

fn names(entries: &[StageEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.name.as_str()).collect()
}

/// `dir/x.dead-letter.jsonl` for stage `s`: `dir/x.dead-letter.s.jsonl`.
fn stage_path(path: &Path, stage: &str) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    match path.extension() {
        Some(ext) => path.with_file_name(format!("{stem}.{stage}.{}", ext.to_string_lossy())),
        None => path.with_file_name(format!("{stem}.{stage}")),
    }
}

/// Stage names are valid, unique, and no source's.
fn check_names(entries: &[StageEntry], sources: &[SourceSpec]) -> anyhow::Result<()> {
    for (i, entry) in entries.iter().enumerate() {
        name::check(&entry.name).with_context(|| format!("[[stage]] #{} name", i + 1))?;
        if entries[..i].iter().any(|e| e.name == entry.name) {
            bail!("two stages are named {:?}", entry.name);
        }
        if sources.iter().any(|s| s.name == entry.name) {
            bail!(
                "{:?} names both a stage and a source: an input's `from` must say which",
                entry.name
            );
        }
        if entry.inputs.is_empty() {
            bail!(
                "[[stage]] {:?} reads nothing: give it a [[stage.input]] with from = a source or another stage",
                entry.name
            );
        }
        for input in &entry.inputs {
            let known = entries.iter().any(|e| e.name == input.from)
                || sources.iter().any(|s| s.name == input.from);
            if !known {
                let sources: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
                bail!(
                    "[[stage]] {:?} reads {:?}, which is neither a source ({sources:?}) nor a stage ({:?})",
                    entry.name,
                    input.from,
                    names(entries)
                );
            }
        }
    }
    for source in sources {
        let readers: Vec<&str> = entries
            .iter()
            .filter(|e| e.inputs.iter().any(|i| i.from == source.name))
            .map(|e| e.name.as_str())
            .collect();
        match readers.as_slice() {
            [] => bail!("source {:?} is read by no stage", source.name),
            [_] => {}
            [first, second, ..] => bail!(
                "source {:?} is read by stages {first:?} and {second:?}: a source feeds one stage (declare a second [[source]] of the same data for the other)",
                source.name
            ),
        }
    }
    Ok(())
}

/// The stages in an order where each comes after every stage it reads (file order where
/// that allows), or the cycle that prevents one.
fn order(entries: &[StageEntry]) -> anyhow::Result<Vec<usize>> {
    let upstream = |i: usize| -> Vec<usize> {
        entries[i]
            .inputs
            .iter()
            .filter_map(|input| entries.iter().position(|e| e.name == input.from))
            .collect()
    };
    let mut placed = vec![false; entries.len()];
    let mut order = Vec::new();
    while order.len() < entries.len() {
        let next =
            (0..entries.len()).find(|&i| !placed[i] && upstream(i).into_iter().all(|u| placed[u]));
        match next {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => {
                // Every stage left reads one left: follow upstream links to a cycle.
                let mut path = vec![(0..entries.len()).find(|&i| !placed[i]).expect("left")];
                loop {
                    let last = *path.last().expect("non-empty");
                    let up = upstream(last)
                        .into_iter()
                        .find(|&u| !placed[u])
                        .expect("a stage left reads another left");
                    if let Some(start) = path.iter().position(|&p| p == up) {
                        let mut cycle: Vec<&str> = path[start..]
                            .iter()
                            .rev()
                            .map(|&i| entries[i].name.as_str())
                            .collect();
                        cycle.push(cycle[0]);
                        bail!(
                            "the stages form a cycle: {} (a stage may not read its own output, even through others)",
                            cycle.join(" -> ")
                        );
                    }
                    path.push(up);
                }
            }
        }
    }
    Ok(order)
}

/// An edge of the graph: a stage input that reads another stage's output.
struct Edge {
    /// The upstream stage and its output.
    upstream: String,
    output: String,
    /// The downstream stage (its index in the file) and its input (index in the stage).
    stage: usize,
    input: usize,
    exchange: Exchange,
}

/// One edge, with its exchange, per stage input that reads another stage.
fn edges(entries: &[StageEntry]) -> Vec<Edge> {
    let mut all = Vec::new();
    for (stage, entry) in entries.iter().enumerate() {
        for (index, input) in entry.inputs.iter().enumerate() {
            if entries.iter().any(|e| e.name == input.from) {
                let output = input.output.clone().unwrap_or_else(|| "main".into());
                let exchange = Exchange::new(&input.from, &output, &entry.name);
                all.push(Edge {
                    upstream: input.from.clone(),
                    output,
                    stage,
                    input: index,
                    exchange,
                });
            }
        }
    }
    all
}

fn resolve_stage(
    index: usize,
    entry: &StageEntry,
    common: &Common,
    edges: &[Edge],
    path: &Path,
) -> anyhow::Result<Stage> {
    let resolve = |p: &str| common.base.join(p);
    let udf = resolve_udf(&entry.udf, &resolve, path).context("[stage.udf]")?;
    let parallelism = entry.parallelism.unwrap_or(common.parallelism);
    check_parallelism(parallelism).context("parallelism")?;

    let mut sources = Vec::new();
    for (number, input) in entry.inputs.iter().enumerate() {
        let context = || format!("[[stage.input]] #{} (from {:?})", number + 1, input.from);
        let source = match common.sources.iter().find(|s| s.name == input.from) {
            Some(source) => from_source(source, input).with_context(context)?,
            None => {
                let exchange = edges
                    .iter()
                    .find(|e| e.stage == index && e.input == number)
                    .map(|e| e.exchange.clone())
                    .expect("an edge per stage input from a stage");
                from_stage(input, exchange).with_context(context)?
            }
        };
        if sources.iter().any(|s: &SourceSpec| s.name == source.name) {
            bail!("it reads {:?} twice", source.name);
        }
        sources.push(source);
    }

    let mut sinks: Vec<SinkSpec> = common
        .sinks
        .iter()
        .filter(|(stage, _)| stage.as_deref() == Some(entry.name.as_str()))
        .map(|(_, sink)| sink.clone())
        .collect();
    for (i, sink) in sinks.iter().enumerate() {
        if sinks[..i].iter().any(|s| s.output == sink.output) {
            bail!("two sinks for its output {:?}", sink.output);
        }
    }
    let mut outputs: Vec<(&str, Vec<Exchange>)> = Vec::new();
    for edge in edges.iter().filter(|e| e.upstream == entry.name) {
        match outputs.iter_mut().find(|(o, _)| *o == edge.output) {
            Some((_, readers)) => readers.push(edge.exchange.clone()),
            None => outputs.push((&edge.output, vec![edge.exchange.clone()])),
        }
    }
    for (output, readers) in outputs {
        match sinks.iter_mut().find(|s| s.output == output) {
            Some(sink) => sink.feeds = readers,
            None => sinks.push(SinkSpec {
                output: output.to_string(),
                target: SinkTarget::Discard,
                upsert: None,
                feeds: readers,
                from_command_line: false,
            }),
        }
    }
    if sinks.is_empty() {
        bail!(
            "nothing takes its output: add a [[sink]] with stage = {:?}, or a stage with an input from = {:?}",
            entry.name,
            entry.name
        );
    }
    let mut checkpoint = common.checkpoint.clone();
    checkpoint.dir = checkpoint.dir.join(&entry.name);
    Ok(Stage {
        name: entry.name.clone(),
        spec: PipelineSpec {
            name: format!("{}.{}", common.name, entry.name),
            sources,
            udf,
            sinks,
            dead_letter: stage_path(&common.dead_letter, &entry.name),
            checkpoint,
            restart: common.restart,
            state: common.state,
            parallelism,
        },
    })
}

/// A stage input reading a source: the source as the file gives it.
fn from_source(source: &SourceSpec, input: &StageInputEntry) -> anyhow::Result<SourceSpec> {
    if input.key.is_some() || input.timestamp.is_some() || input.timestamp_format.is_some() {
        bail!(
            "key and timestamp of a source are given in its [[source]] ({:?}), not here",
            source.name
        );
    }
    if input.output.is_some() {
        bail!(
            "`output` is for an input from a stage; {:?} is a source",
            source.name
        );
    }
    let mut source = source.clone();
    if let Some(name) = &input.input {
        source.input = name.clone();
    }
    Ok(source)
}

/// A stage input reading another stage's output, through `exchange`.
fn from_stage(input: &StageInputEntry, exchange: Exchange) -> anyhow::Result<SourceSpec> {
    let Some(key) = &input.key else {
        bail!(
            "an input from stage {:?} needs a key: a field of its records (key = \"campaign\"), or key = \"@key\" for the key that emitted each",
            input.from
        );
    };
    let timestamp = input
        .timestamp
        .clone()
        .unwrap_or_else(|| MESSAGE_TIMESTAMP.to_string());
    let timestamp_format = input
        .timestamp_format
        .unwrap_or(weir_core::time::format::TimestampFormat::EpochMs);
    RecordDecoder::new(key, &timestamp, timestamp_format).map_err(|e| anyhow::anyhow!("{e}"))?;
    let output = input.output.as_deref().unwrap_or("main");
    let name = if output == "main" {
        input.from.clone()
    } else {
        format!("{}.{output}", input.from)
    };
    Ok(SourceSpec {
        input: input.input.clone().unwrap_or_else(|| input.from.clone()),
        name,
        location: SourceLocation::Stage(exchange),
        key: key.clone(),
        timestamp,
        timestamp_format,
        out_of_orderness_ms: 0,
        idle_timeout: None,
        max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
    })
}

#[cfg(test)]
mod tests;
