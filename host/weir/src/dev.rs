//! `weir dev`: the inner loop for UDF authors. Runs a pipeline, watches the UDF's
//! sources, rebuilds on save and swaps the new version into the running pipeline — state
//! and pending timers kept, no record lost or processed twice. A build error or a
//! component the host refuses is printed, and the old version keeps running.

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use weir_control::{prepare, swap_into};
use weir_core::identity::sha256_hex;
use weir_pipeline::PipelineSpec;
use weir_run::{run_with, RunControl, RunOptions};

/// What to watch and how to rebuild.
#[derive(Debug, Clone)]
pub struct DevConfig {
    /// The UDF's Rust crate (found from the component's name when not given).
    pub crate_dir: Option<PathBuf>,
    /// Watch this path instead (a `.wasm` built by other means, or a source folder).
    pub watch: Option<PathBuf>,
    /// Run this shell command to rebuild (default for a Rust crate:
    /// `cargo build --release --target wasm32-wasip2`).
    pub build: Option<String>,
}

/// How long to wait for more changes after one, so an editor's burst of writes makes
/// one rebuild.
const SETTLE: Duration = Duration::from_millis(150);
/// The same for a watched `.wasm`, which a build or a copy replaces in one go.
const SETTLE_WASM: Duration = Duration::from_millis(20);

/// Runs `spec` until its input ends or SIGINT/SIGTERM, reloading its UDF on changes.
pub fn dev(spec: PipelineSpec, config: DevConfig, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let (watch_paths, build) = plan(&spec, &config)?;
    // Change events name absolute paths: compare them with absolute ones.
    let watch_paths: Vec<PathBuf> = watch_paths
        .iter()
        .map(std::path::absolute)
        .collect::<std::io::Result<_>>()?;
    if let (false, Some(build)) = (spec.udf.path.exists(), &build) {
        eprintln!(
            "weir dev: {} does not exist yet; building it",
            spec.udf.path.display()
        );
        build.run().map_err(|why| anyhow::anyhow!(why))?;
    }
    let bytes = std::fs::read(&spec.udf.path)
        .with_context(|| format!("cannot read UDF component {}", spec.udf.path.display()))?;
    let weir_control::Prepared { function, identity } =
        prepare(&spec, &bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut current = identity.sha256.clone();
    let control = RunControl::new();
    let options = RunOptions {
        progress: false,
        stop: Some(Arc::clone(&stop)),
        fresh: false,
        control: Some(Arc::clone(&control)),
    };
    let run_spec = spec.clone();
    let runner = std::thread::Builder::new()
        .name("weir-dev-pipeline".into())
        .spawn(move || run_with(&run_spec, function, identity, &options))?;

    // Files are watched through their folder: a build that replaces a file (write to a
    // temporary name, rename over) gives it a new inode, which a watch on the file
    // itself would miss.
    let files: Vec<PathBuf> = watch_paths
        .iter()
        .filter(|p| !p.is_dir())
        .cloned()
        .collect();
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
    for path in &watch_paths {
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
    eprintln!(
        "weir dev: running {:?}; watching {} (Ctrl-C to stop)",
        spec.name,
        watch_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let settle = match &config.watch {
        Some(path) if path.extension().is_some_and(|e| e == "wasm") => SETTLE_WASM,
        _ => SETTLE,
    };
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
        if let Some(build) = &build {
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
            &spec,
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
    stop.store(true, Ordering::Relaxed);
    let report = runner
        .join()
        .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?;
    match report {
        Ok(report) => {
            eprintln!("{}", report.summary());
            Ok(())
        }
        Err(failure) => Err(anyhow::anyhow!("{failure}")),
    }
}

/// What to watch, and the build command: the command line's `--watch`/`--build`, else
/// the pipeline's `[udf.dev]`, else the Rust crate that builds the component.
fn plan(spec: &PipelineSpec, config: &DevConfig) -> anyhow::Result<(Vec<PathBuf>, Option<Build>)> {
    let from_command_line = |command: &String| Build {
        command: command.clone(),
        dir: None,
    };
    if let Some(watch) = &config.watch {
        return Ok((
            vec![watch.clone()],
            config.build.as_ref().map(from_command_line),
        ));
    }
    if let (None, Some(dev)) = (&config.crate_dir, &spec.udf.dev) {
        let build = config
            .build
            .as_ref()
            .map(from_command_line)
            .unwrap_or(Build {
                command: dev.build.clone(),
                dir: Some(dev.dir.clone()),
            });
        return Ok((dev.watch.clone(), Some(build)));
    }
    let crate_dir = match &config.crate_dir {
        Some(dir) => dir.clone(),
        None => find_crate(&spec.udf.path)?,
    };
    let manifest = crate_dir.join("Cargo.toml");
    let command = config.build.clone().unwrap_or_else(|| {
        format!(
            "cargo build --quiet --release --target wasm32-wasip2 --manifest-path '{}'",
            manifest.display()
        )
    });
    let mut watch = vec![crate_dir.join("src")];
    watch.push(manifest);
    Ok((watch, Some(Build { command, dir: None })))
}

/// A shell command that rebuilds the component.
#[derive(Debug, Clone)]
struct Build {
    command: String,
    /// Where it runs (default: the current directory).
    dir: Option<PathBuf>,
}

impl Build {
    /// Runs the build; its output goes to the terminal.
    fn run(&self) -> Result<(), String> {
        let mut command = Command::new("sh");
        command.arg("-c").arg(&self.command);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        match command.status() {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("the build failed ({status})")),
            Err(e) => Err(format!("cannot run `{}`: {e}", self.command)),
        }
    }
}

/// The crate that builds `wasm`: the package whose name, with `-` as `_`, is the file's
/// stem, among those `cargo metadata` lists from the component's folder upwards.
fn find_crate(wasm: &Path) -> anyhow::Result<PathBuf> {
    let stem = wasm
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A relative path's last ancestor is "" (`pipeline.toml` given without a folder):
    // that is the current directory, which a child process cannot be started in by name.
    let dir = wasm
        .ancestors()
        .find(|d| d.join("Cargo.toml").exists())
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let output = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&dir)
        .output()
        .context("cannot run cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed in {}: {}; give the crate with --crate DIR, or --watch a .wasm",
        dir.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    packages
        .iter()
        .find(|p| p["name"].as_str().map(|n| n.replace('-', "_")) == Some(stem.clone()))
        .and_then(|p| p["manifest_path"].as_str())
        .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no crate in the workspace of {} builds {stem}.wasm; give it with --crate DIR, or --watch the .wasm",
                dir.display()
            )
        })
}
