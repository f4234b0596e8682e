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

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use weir_control::{prepare, swap_into};
use weir_core::identity::sha256_hex;
use weir_pipeline::{Overrides, PipelineSpec, SourceLocation};
use weir_run::{run_with, RunControl, RunOptions, RunReport};

use crate::project::{Build, Project, ProjectArgs};

/// What `weir dev` watches, how it rebuilds, and whether it stops after one run.
#[derive(Debug, Clone)]
pub struct DevConfig {
    /// How the UDF's project is found when the pipeline does not say.
    pub project: ProjectArgs,
    /// Exits once a bounded input has been run through, as `weir run` does.
    pub once: bool,
}

/// How long to wait for more changes after one, so an editor's burst of writes makes
/// one rebuild.
const SETTLE: Duration = Duration::from_millis(150);
/// The same for a watched `.wasm`, which a build or a copy replaces in one go.
const SETTLE_WASM: Duration = Duration::from_millis(20);

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
        for source in &spec.sources {
            if let SourceLocation::File(path) = &source.location {
                shown.push(path.clone());
            }
        }
        shown.push(pipeline.to_path_buf());
    }
    // Change events name absolute paths: compare them with absolute ones.
    let watch_paths: Vec<PathBuf> = shown
        .iter()
        .map(std::path::absolute)
        .collect::<std::io::Result<_>>()?;
    let shown = shown
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if let (false, Some(build)) = (spec.udf.path.exists(), &project.build) {
        eprintln!(
            "weir dev: {} does not exist yet; building it",
            spec.udf.path.display()
        );
        build.run().map_err(|why| anyhow::anyhow!(why))?;
    }
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
        let run = run_swapping(&spec, project.build.as_ref(), &changed, settle, &stop);
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
            if let Some(build) = &project.build {
                if let Err(why) = build.run() {
                    eprintln!("weir dev: {why}; waiting for the next save");
                    continue;
                }
            }
            break;
        }
        eprintln!(
            "weir dev: running {:?} again from the start of its input",
            spec.name
        );
    }
}

/// Whether every source of `spec` ends: files, not stdin, Kafka or a named pipe.
fn is_bounded(spec: &PipelineSpec) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    spec.sources.iter().all(|source| match &source.location {
        SourceLocation::File(path) => {
            !std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
        }
        SourceLocation::Stdin | SourceLocation::Kafka(_) => false,
    })
}

/// Waits for a change and lets the burst of writes settle; false on a signal.
fn next_change(changed: &mpsc::Receiver<()>, settle: Duration, stop: &AtomicBool) -> bool {
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
fn watch(paths: &[PathBuf]) -> anyhow::Result<(notify::RecommendedWatcher, mpsc::Receiver<()>)> {
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

/// Runs `spec` once, to the end of its input or a signal, swapping each rebuilt
/// version into the running pipeline.
fn run_swapping(
    spec: &PipelineSpec,
    build: Option<&Build>,
    changed: &mpsc::Receiver<()>,
    settle: Duration,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<RunReport> {
    let bytes = std::fs::read(&spec.udf.path)
        .with_context(|| format!("cannot read UDF component {}", spec.udf.path.display()))?;
    let weir_control::Prepared { function, identity } =
        prepare(spec, &bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut current = identity.sha256.clone();
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
    while !runner.is_finished() {
        match changed.recv_timeout(Duration::from_millis(200)) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Ok(()) => {}
        }
        // Let the burst of writes settle, then take them all as one change.
        let saved = Instant::now();
        std::thread::sleep(settle);
        while changed.try_recv().is_ok() {}
        let built = Instant::now();
        if let Some(build) = build {
            if let Err(why) = build.run() {
                eprintln!("weir dev: {why}; the running version stays");
                continue;
            }
        }
        let build_time = built.elapsed();
        let Ok(bytes) = std::fs::read(&spec.udf.path) else {
            eprintln!(
                "weir dev: cannot read {}; the running version stays",
                spec.udf.path.display()
            );
            continue;
        };
        let sha = sha256_hex(&bytes);
        if sha == current {
            continue; // a change that did not change the component
        }
        let running = !runner.is_finished();
        match swap_into(
            spec,
            &control,
            running,
            Arc::new(bytes),
            0,
            weir_control::DEFAULT_PROBATION_CALLS,
        ) {
            Ok(done) => {
                current = sha;
                eprintln!(
                    "weir dev: reloaded {} ({}) — build {:.2} s, prepare {:.0} ms, swap pause {:.2} ms, {:.0} ms from save to swapped in",
                    spec.udf.name,
                    &current[..12],
                    build_time.as_secs_f64(),
                    done.prepare_ms,
                    done.swap_pause_ms,
                    saved.elapsed().as_secs_f64() * 1e3
                );
            }
            Err(refused) => eprintln!(
                "weir dev: the new version was refused: {}; the running version stays",
                refused
            ),
        }
    }
    runner
        .join()
        .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?
        .map_err(|failure| anyhow::anyhow!("{failure}"))
}
