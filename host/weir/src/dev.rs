//! `weir dev`: the inner loop for UDF authors. Runs a pipeline, watches the UDF's
//! sources, rebuilds on save and puts the new version to work. A build error or a
//! component the host refuses is printed, and the old version stays.
//!
//! Two ways, by the input:
//! - **A bounded input** (every source a file, as in the project `weir new` makes): the
//!   run goes to the end of the input, prints its summary and keeps watching; each save
//!   of the UDF's sources, of an input file or of the pipeline file rebuilds and runs the
//!   input again from the start, with fresh state. `--once` exits after the first run.
//! - **A live input** (stdin, Kafka, a named pipe): each new version is swapped into the
//!   running pipeline — state and pending timers kept, no record lost or processed twice.
//!   A bounded run that is still going when a save comes does the same.
//!
//! A Python project (as `weir new --lang python` makes) is not rebuilt on a save: its
//! sources go into `weir dev`'s Python development runtime, compiled once (`pydev.rs`),
//! unless the runtime cannot run them as the built component would (then the project is
//! built, as for `--full-build`).

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use weir_control::{prepare, swap_prepared_into};
use weir_core::identity::sha256_hex;
use weir_pipeline::{Overrides, PipelineSpec, SourceLocation};
use weir_run::{run_with, RunControl, RunOptions, RunReport};

use crate::project::{Build, Project, ProjectArgs};
use crate::pydev::PythonDev;

/// What `weir dev` watches, how it rebuilds, and whether it stops after one run.
#[derive(Debug, Clone)]
pub struct DevConfig {
    /// How the UDF's project is found when the pipeline does not say.
    pub project: ProjectArgs,
    /// Exits once a bounded input has been run through, as `weir run` does.
    pub once: bool,
    /// Builds a Python project's component on every save instead of running its
    /// sources in the Python development runtime.
    pub full_build: bool,
}

/// How long to wait for more changes after one, so an editor's burst of writes makes
/// one rebuild.
const SETTLE: Duration = Duration::from_millis(150);
/// The same for a watched `.wasm`, which a build or a copy replaces in one go.
pub(crate) const SETTLE_WASM: Duration = Duration::from_millis(20);

/// Runs the pipeline of `pipeline` (loaded with `overrides` as `spec`) until
/// SIGINT/SIGTERM — or, for a live input or with `--once`, until its input ends —
/// rebuilding its UDF on changes (see the module's documentation).
pub fn dev(
    pipeline: &Path,
    overrides: &Overrides,
    mut spec: PipelineSpec,
    config: DevConfig,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let project = Project::of(&spec, &config.project)?;
    let bounded = is_bounded(&spec);
    let mut shown = project.sources.clone();
    if bounded && !config.once {
        shown.extend(rerun_on(std::slice::from_ref(&spec), pipeline));
    }
    let watch_paths = absolute(&shown)?;
    let shown = shown
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let from_command_line = config.project.watch.is_some()
        || config.project.build.is_some()
        || config.project.crate_dir.is_some();
    let python = (!config.full_build && !from_command_line)
        .then(|| PythonDev::detect(&spec))
        .flatten();
    if python.is_some() {
        eprintln!(
            "weir dev: Python project: a save runs its sources in the Python development runtime (no build, no compile; `weir build` makes {} for `weir run`, `--full-build` builds on every save)",
            spec.udf.path.display()
        );
    }
    let mut loader = Loader {
        build: project.build.clone(),
        python,
        current: None,
    };
    let mut version = loader
        .load(&spec, true)
        .map_err(|why| anyhow::anyhow!(why))?
        .expect("a first version");
    let (_watcher, changed) = watch(&watch_paths)?;
    eprintln!(
        "weir dev: running {:?}; watching {shown} (Ctrl-C to stop)",
        spec.name
    );
    let settle = match &config.project.watch {
        Some(path) if path.extension().is_some_and(|e| e == "wasm") => SETTLE_WASM,
        _ => SETTLE,
    };
    let mut first = true;
    loop {
        let run = run_swapping(&spec, version, &mut loader, &changed, settle, &stop);
        match run {
            Ok(report) => eprintln!("{}", report.summary()),
            // The first run's failure is the command's; a later one waits for a fix.
            Err(e) if first || config.once || !bounded => return Err(e),
            Err(e) => eprintln!("error: {e:#}"),
        }
        first = false;
        if config.once || !bounded || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        eprintln!(
            "weir dev: the input ended; watching {shown} for changes (Ctrl-C to stop): a save runs the input again from the start, with fresh state"
        );
        // Until a change that builds, or a signal.
        loop {
            if !next_change(&changed, settle, &stop) {
                return Ok(());
            }
            match PipelineSpec::load(pipeline, overrides) {
                Ok(reloaded) => spec = reloaded,
                Err(e) => {
                    eprintln!("weir dev: {e:#}; waiting for the next save");
                    continue;
                }
            }
            // The pipeline may have changed too: the version is prepared again.
            loader.current = None;
            match loader.load(&spec, false) {
                Ok(Some(next)) => {
                    version = next;
                    break;
                }
                Ok(None) => unreachable!("no current version to be the same as"),
                Err(why) => eprintln!("weir dev: {why}; waiting for the next save"),
            }
        }
        eprintln!(
            "weir dev: running {:?} again from the start of its input",
            spec.name
        );
    }
}

/// A version ready to run, and what it took to make it.
struct Version {
    prepared: weir_control::Prepared,
    /// Time spent building (a full build), in seconds.
    build_s: f64,
    /// Time spent compiling and initialising it, in milliseconds.
    prepare_ms: f64,
    /// How it was made, for the reload line.
    how: &'static str,
}

/// How `weir dev` makes the UDF's versions: through the Python development runtime, or
/// by running the project's build.
struct Loader {
    build: Option<Build>,
    python: Option<PythonDev>,
    /// The SHA-256 of the version running, to skip a change that changes nothing.
    current: Option<String>,
}

impl Loader {
    /// The next version; `None` if it is the one running. `first`: the component is built
    /// only if it does not exist yet.
    fn load(&mut self, spec: &PipelineSpec, first: bool) -> Result<Option<Version>, String> {
        if let Some(python) = &mut self.python {
            let started = Instant::now();
            match python.version(&spec.udf.name) {
                Ok(component) if Some(&component.sha256) == self.current.as_ref() => {
                    return Ok(None)
                }
                Ok(component) => match weir_control::prepare_component(spec, component) {
                    Ok(prepared) => {
                        self.current = Some(prepared.identity.sha256.clone());
                        return Ok(Some(Version {
                            prepared,
                            build_s: 0.0,
                            prepare_ms: started.elapsed().as_secs_f64() * 1e3,
                            how: "Python development runtime",
                        }));
                    }
                    Err(refusal) => match crate::pydev::missing_module(refusal.message()) {
                        Some(module) => eprintln!(
                            "weir dev: app.py imports the standard library module `{module}`, which the Python development runtime does not hold; building the component instead (slower: to stay on the fast path, import only modules the runtime holds, listed in docs/udf-python.md)"
                        ),
                        None => return Err(format!("the new version was refused: {refusal}")),
                    },
                },
                Err(e) if first => {
                    eprintln!(
                        "weir dev: cannot use the Python development runtime ({e:#}); building the component on every save instead"
                    );
                    self.python = None;
                }
                Err(e) => return Err(format!("{e:#}")),
            }
            // Built this time: the runtime is tried again on the next save.
            return self.built(spec, false);
        }
        self.built(spec, first)
    }

    /// The next version, from the project's build.
    fn built(&mut self, spec: &PipelineSpec, first: bool) -> Result<Option<Version>, String> {
        let started = Instant::now();
        if let Some(build) = &self.build {
            if !first || !spec.udf.path.exists() {
                if first {
                    eprintln!(
                        "weir dev: {} does not exist yet; building it",
                        spec.udf.path.display()
                    );
                }
                build.run()?;
            }
        }
        let build_s = started.elapsed().as_secs_f64();
        let bytes = std::fs::read(&spec.udf.path)
            .map_err(|e| format!("cannot read UDF component {}: {e}", spec.udf.path.display()))?;
        let sha = sha256_hex(&bytes);
        if Some(&sha) == self.current.as_ref() {
            return Ok(None); // a change that did not change the component
        }
        let started = Instant::now();
        let prepared = prepare(spec, &bytes).map_err(|e| {
            if first {
                format!("{e}")
            } else {
                format!("the new version was refused: {e}")
            }
        })?;
        self.current = Some(sha);
        Ok(Some(Version {
            prepared,
            build_s,
            prepare_ms: started.elapsed().as_secs_f64() * 1e3,
            how: "built",
        }))
    }
}

/// Whether every source of `spec` ends: files, not stdin, Kafka or a named pipe (another
/// stage's output ends when that stage's sources do).
pub(crate) fn is_bounded(spec: &PipelineSpec) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    spec.sources.iter().all(|source| match &source.location {
        SourceLocation::File(path) => {
            !std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
        }
        SourceLocation::Stage(_) => true,
        SourceLocation::Stdin | SourceLocation::Kafka(_) => false,
    })
}

/// What a change of runs a bounded input again: the input files of `specs` and the
/// pipeline file.
pub(crate) fn rerun_on(specs: &[PipelineSpec], pipeline: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = (specs.iter())
        .flat_map(|spec| &spec.sources)
        .filter_map(|source| match &source.location {
            SourceLocation::File(path) => Some(path.clone()),
            _ => None,
        })
        .collect();
    paths.push(pipeline.to_path_buf());
    paths
}

/// `paths` made absolute: change events name absolute paths, and are compared with them.
pub(crate) fn absolute(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    paths.iter().map(std::path::absolute).collect()
}

/// While `running()` says the run goes on, waits for a change and lets its burst of
/// writes settle, to take them all as one; returns when the first write came, or `None`
/// once the run ended (or nothing watches any more).
pub(crate) fn next_save(
    changed: &mpsc::Receiver<()>,
    settle: Duration,
    running: impl Fn() -> bool,
) -> Option<Instant> {
    while running() {
        match changed.recv_timeout(Duration::from_millis(200)) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Ok(()) => {
                let saved = Instant::now();
                std::thread::sleep(settle);
                while changed.try_recv().is_ok() {}
                return Some(saved);
            }
        }
    }
    None
}

/// Waits for a change and lets the burst of writes settle; false on a signal.
pub(crate) fn next_change(
    changed: &mpsc::Receiver<()>,
    settle: Duration,
    stop: &AtomicBool,
) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        match changed.recv_timeout(Duration::from_millis(200)) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
    std::thread::sleep(settle);
    while changed.try_recv().is_ok() {}
    true
}

/// Watches `paths`; the receiver gets one message per relevant change. Files are
/// watched through their folder: a build that replaces a file (write to a temporary
/// name, rename over) gives it a new inode, which a watch on the file itself would miss.
pub(crate) fn watch(
    paths: &[PathBuf],
) -> anyhow::Result<(notify::RecommendedWatcher, mpsc::Receiver<()>)> {
    let files: Vec<PathBuf> = paths.iter().filter(|p| !p.is_dir()).cloned().collect();
    let (changes, changed) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        let relevant = event.paths.iter().any(|path| {
            let in_watched_file_dir = files
                .iter()
                .any(|f| f.parent() == path.parent() && f.file_name().is_some());
            !in_watched_file_dir || files.iter().any(|f| f.file_name() == path.file_name())
        });
        if relevant {
            let _ = changes.send(());
        }
    })?;
    for path in paths {
        use notify::Watcher as _;
        let (target, mode) = if path.is_dir() {
            (path.clone(), notify::RecursiveMode::Recursive)
        } else {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            (
                parent.unwrap_or(Path::new(".")).to_path_buf(),
                notify::RecursiveMode::NonRecursive,
            )
        };
        watcher
            .watch(&target, mode)
            .with_context(|| format!("cannot watch {}", target.display()))?;
    }
    Ok((watcher, changed))
}

/// Runs `spec` with `version` once, to the end of its input or a signal, swapping each
/// new version `loader` makes on a change into the running pipeline.
fn run_swapping(
    spec: &PipelineSpec,
    version: Version,
    loader: &mut Loader,
    changed: &mpsc::Receiver<()>,
    settle: Duration,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<RunReport> {
    let weir_control::Prepared { function, identity } = version.prepared;
    let control = RunControl::new();
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(stop)),
        fresh: false,
        control: Some(Arc::clone(&control)),
    };
    let run_spec = spec.clone();
    let runner = std::thread::Builder::new()
        .name("weir-dev-pipeline".into())
        .spawn(move || run_with(&run_spec, function, identity, &options))?;
    while let Some(saved) = next_save(changed, settle, || !runner.is_finished()) {
        let previous = loader.current.clone();
        let version = match loader.load(spec, false) {
            Ok(Some(version)) => version,
            Ok(None) => continue,
            Err(why) => {
                eprintln!("weir dev: {why}; the running version stays");
                continue;
            }
        };
        let running = !runner.is_finished();
        let sha = version.prepared.identity.sha256.clone();
        match swap_prepared_into(
            &control,
            running,
            version.prepared,
            version.prepare_ms,
            0,
            weir_control::DEFAULT_PROBATION_CALLS,
        ) {
            Ok(done) => eprintln!(
                "weir dev: reloaded {} ({}, {}) — build {:.2} s, prepare {:.0} ms, swap pause {:.2} ms, {:.0} ms from save to swapped in",
                spec.udf.name,
                &sha[..12],
                version.how,
                version.build_s,
                done.prepare_ms,
                done.swap_pause_ms,
                saved.elapsed().as_secs_f64() * 1e3
            ),
            Err(refused) => {
                loader.current = previous;
                eprintln!(
                    "weir dev: the new version was refused: {}; the running version stays",
                    refused
                )
            }
        }
    }
    runner
        .join()
        .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?
        .map_err(|failure| anyhow::anyhow!("{failure}"))
}
