//! Loading a pipeline file: [`PipelineSpec::load`] reads and resolves it, and
//! [`PipelineSpec::apply`] applies the command line's overrides.

use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use weir_checkpoint::CheckpointSpec;
use weir_io::sink::SinkTarget;
use weir_io::source::SourceLocation;

use crate::file::*;
use crate::name;
use crate::resolve::*;
use crate::spec::*;

impl PipelineSpec {
    /// Reads, checks and resolves a pipeline file.
    pub fn load(path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        load_file(path, |text| Self::parse(text, path, overrides))
    }

    /// Checks and resolves pipeline text; relative paths are relative to `path`'s folder.
    /// A file of several `[[stage]]`s is refused here: [`crate::StageGraph`] reads it.
    pub fn parse(text: &str, path: &Path, overrides: &Overrides) -> anyhow::Result<Self> {
        let mut file = parse_file(text)?;
        if !file.stages.is_empty() {
            bail!(
                "this pipeline has {} stages ([[stage]]): only `weir run`, `weir dev` and `weir serve` run a pipeline of several stages so far",
                file.stages.len()
            );
        }
        let udf = file.udf.take().ok_or_else(|| {
            anyhow::anyhow!("missing [udf]: the component that processes the records")
        })?;
        let common = Common::resolve(file, path)?;
        let udf = resolve_udf(&udf, &|p: &str| common.base.join(p), path).context("[udf]")?;
        let mut sinks = Vec::new();
        for (i, (stage, sink)) in common.sinks.into_iter().enumerate() {
            if stage.is_some() {
                bail!(
                    "[[sink]] #{} (output {:?}): `stage` names a stage of a pipeline of several [[stage]]s; this one has a single [udf]",
                    i + 1,
                    sink.output
                );
            }
            if sinks.iter().any(|s: &SinkSpec| s.output == sink.output) {
                bail!("two sinks for output {:?}", sink.output);
            }
            sinks.push(sink);
        }
        let mut spec = PipelineSpec {
            name: common.name,
            sources: common.sources,
            udf,
            sinks,
            dead_letter: common.dead_letter,
            checkpoint: common.checkpoint,
            restart: common.restart,
            state: common.state,
            parallelism: common.parallelism,
        };
        spec.apply(overrides)?;
        Ok(spec)
    }

    /// Applies command-line overrides; paths in them are relative to the working directory.
    pub fn apply(&mut self, overrides: &Overrides) -> anyhow::Result<()> {
        if let Some(parallelism) = overrides.parallelism {
            check_parallelism(parallelism).context("--parallelism")?;
            self.parallelism = parallelism;
        }
        for (name, path) in &overrides.inputs {
            let Some(source) = self.sources.iter_mut().find(|s| &s.name == name) else {
                let known: Vec<_> = self.sources.iter().map(|s| s.name.as_str()).collect();
                bail!("--input {name}=...: the pipeline has no source {name:?} (its sources: {known:?})");
            };
            source.location = match path.as_str() {
                "-" => SourceLocation::Stdin,
                path => SourceLocation::File(PathBuf::from(path)),
            };
        }
        for (output, path) in &overrides.outputs {
            let target = match path.as_str() {
                "-" => SinkTarget::Stdout,
                path => SinkTarget::File(PathBuf::from(path)),
            };
            match self.sinks.iter_mut().find(|s| &s.output == output) {
                Some(sink) => {
                    sink.target = target;
                    sink.from_command_line = true;
                }
                None => self.sinks.push(SinkSpec {
                    output: output.clone(),
                    target,
                    upsert: None,
                    feeds: Vec::new(),
                    from_command_line: true,
                }),
            }
        }
        for (key, value) in &overrides.config {
            self.udf.config_from_command_line.push(key.clone());
            match self.udf.config.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.clone(),
                None => self.udf.config.push((key.clone(), value.clone())),
            }
        }
        if let Some(udf) = &overrides.udf {
            self.udf.path = udf.clone();
            // Another component: messages name it after its file, not the one it replaces.
            if let Some(stem) = udf.file_stem() {
                self.udf.name = stem.to_string_lossy().replace('_', "-");
            }
        }
        if let Some(dead_letter) = &overrides.dead_letter {
            self.dead_letter = dead_letter.clone();
        }
        if let Some(dir) = &overrides.state_dir {
            self.checkpoint.dir = dir.clone();
        }
        if let Some(interval) = &overrides.checkpoint_interval {
            self.checkpoint.interval = checkpoint_interval(interval)
                .map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e:#}"))?;
        }
        if overrides.no_checkpoints {
            self.checkpoint.enabled = false;
        }
        Ok(())
    }

    /// The UDF's input names, in the order the sources first name them.
    pub fn input_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for s in &self.sources {
            if !names.contains(&s.input) {
                names.push(s.input.clone());
            }
        }
        names
    }
}

/// The file as serde reads it, with its errors on one line.
pub(crate) fn parse_file(text: &str) -> anyhow::Result<PipelineFile> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
}

/// What a pipeline of one stage and one of several resolve alike: its name, sources,
/// sinks (with the stage each names, if any), dead letters, checkpoints, restarts and
/// parallelism.
pub(crate) struct Common {
    pub(crate) base: PathBuf,
    pub(crate) name: String,
    pub(crate) sources: Vec<SourceSpec>,
    pub(crate) sinks: Vec<(Option<String>, SinkSpec)>,
    pub(crate) dead_letter: PathBuf,
    pub(crate) checkpoint: CheckpointSpec,
    pub(crate) restart: RestartSpec,
    pub(crate) state: StateBackend,
    pub(crate) parallelism: usize,
}

impl Common {
    /// Resolves the parts of `file` (read from `path`) that are not the UDFs.
    pub(crate) fn resolve(file: PipelineFile, path: &Path) -> anyhow::Result<Self> {
        let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let resolve = |p: &str| base.join(p);
        let mut sources = Vec::new();
        for (i, entry) in file.sources.into_iter().enumerate() {
            let context = || format!("[[source]] #{} ({:?})", i + 1, entry.name);
            sources.push(resolve_source(&entry, &resolve).with_context(context)?);
        }
        if sources.is_empty() {
            bail!("no [[source]]: a pipeline needs at least one");
        }
        for (i, s) in sources.iter().enumerate() {
            if sources[..i].iter().any(|t| t.name == s.name) {
                bail!("two sources are named {:?}", s.name);
            }
        }
        let mut sinks = Vec::new();
        for (i, entry) in file.sinks.into_iter().enumerate() {
            let context = || format!("[[sink]] #{} (output {:?})", i + 1, entry.output);
            let target = sink_target(&entry, &resolve).with_context(context)?;
            let upsert = upsert_spec(&entry, &resolve).with_context(context)?;
            sinks.push((
                entry.stage,
                SinkSpec {
                    output: entry.output,
                    target,
                    upsert,
                    feeds: Vec::new(),
                    from_command_line: false,
                },
            ));
        }
        let dead_letter = match file.dead_letter {
            Some(entry) => resolve(&entry.path),
            None => path.with_extension("dead-letter.jsonl"),
        };
        let name = match file.name {
            Some(name) => {
                name::check(&name).context("name")?;
                name
            }
            None => name::derive(&default_name(path)),
        };
        for source in &mut sources {
            if let SourceLocation::Kafka(kafka) = &mut source.location {
                if kafka.group.is_empty() {
                    kafka.group = format!("weir-{name}");
                }
            }
        }
        let checkpoint =
            checkpoint_spec(file.checkpoint.as_ref(), &name, &resolve).context("[checkpoint]")?;
        let restart = restart_spec(file.restart.as_ref()).context("[restart]")?;
        let state = state_backend(file.state.as_ref()).context("[state]")?;
        let parallelism = file.parallelism.unwrap_or(1);
        check_parallelism(parallelism).context("parallelism")?;
        Ok(Self {
            base,
            name,
            sources,
            sinks,
            dead_letter,
            checkpoint,
            restart,
            state,
            parallelism,
        })
    }
}

/// Reads the pipeline file at `path` and hands its text to `parse`; errors name the file.
pub(crate) fn load_file<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pipeline file {}", path.display()))?;
    parse(&text).with_context(|| format!("pipeline file {}", path.display()))
}
