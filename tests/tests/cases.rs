//! Golden test cases: every folder under `tests/cases/` is one test. A case is a
//! pipeline, its input files and the files the run must write (`expected/`), with an
//! optional `case.toml` of directives. The runner copies the case into a temp dir, runs
//! the real `weir run` on it there, and compares every expected file with what the run
//! wrote, printing a unified diff where they differ. `tests/README.md` is the guide.
//!
//! ```text
//! cargo test --release -p weir-e2e --test cases                  # compare
//! cargo test --release -p weir-e2e --test cases -- --bless       # (re)write expected/
//! WEIR_BLESS=1 cargo test --release -p weir-e2e --test cases     # the same
//! cargo test --release -p weir-e2e --test cases -- dead-letters  # one case (a filter)
//! ```
//!
//! The rules, in one place (the README says the same for case authors):
//!
//! - The work folder is a copy of the case folder (without `case.toml` and `expected/`),
//!   on top of a copy of the top-level files of `from` (an example folder) if the case
//!   names one. `weir run PIPELINE` runs with that folder as its working directory, so
//!   paths in `args` are relative to it; it gets a state directory of its own, stdin is
//!   empty and `WEIR_LOG` is `info` unless `env` says otherwise.
//! - UDF paths: a path in the pipeline file that leads from its own folder into the
//!   repository's `target/` (`../../../target/...` in a case folder, `../../target/...`
//!   in an example) is pointed at the real target directory (`CARGO_TARGET_DIR` if set),
//!   so the same file runs by hand from its folder. `$TARGET` and `$REPO` in `args` are
//!   replaced by the target directory and the repository root.
//! - What the run wrote: every file in the work folder that is new or changed, at its
//!   path there; `stdout`, if not empty; and `stderr`, if not empty, normalised (below).
//!   The set of expected files must be exactly that set: a missing file fails the case,
//!   and so does an output with no expected file.
//! - Normalising `stderr`, the only output normalised: the temp folder's path becomes
//!   `$TMP` (the work folder is `$TMP/<case>`), the target directory `$TARGET` and the
//!   repository `$REPO`; the summary's `peak memory` line is dropped (and the disk
//!   state backend's `state store` line, so that a case expects the same of both), its
//!   `processed N records in T s (R records/s)` line keeps `processed N records` and its
//!   `checkpoints: N taken, longest pause T ms` line keeps `checkpoints: N taken`.
//!   Nothing else in any output may depend on the machine or the clock.

use libtest_mimic::{Arguments, Failed, Trial};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::repo_root;

/// How long one `weir` process may take before the case fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// `WEIR_LOG` for a case's runs: warnings and errors only, so stderr holds no
/// information lines about the compile cache and the like.
const CASE_LOG: &str = "warn";
/// `WEIR_LOG` for the runs of a restart, whose stderr is read for "resuming from
/// checkpoint" but not compared.
const RESTART_LOG: &str = "info";

/// The expected file that holds what the process printed on stdout.
const STDOUT: &str = "stdout";
/// The expected file that holds what the process printed on stderr, normalised.
const STDERR: &str = "stderr";

/// Runs every case as a libtest trial; `--bless` (or `WEIR_BLESS=1`) writes the
/// expected files instead of comparing them.
fn main() {
    let mut bless = std::env::var("WEIR_BLESS").is_ok_and(|v| v == "1");
    let args: Vec<String> = std::env::args()
        .filter(|a| {
            let is_bless = a == "--bless";
            bless |= is_bless;
            !is_bless
        })
        .collect();
    let args = Arguments::from_iter(args);
    libtest_mimic::run(&args, trials(bless)).exit();
}

/// One trial per folder under `tests/cases`, in name order.
fn trials(bless: bool) -> Vec<Trial> {
    let root = repo_root().join("tests/cases");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            Trial::test(name, move || run_case(&dir, bless).map_err(Failed::from))
        })
        .collect()
}

/// A case's `case.toml`. Every field is optional but `about`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Case {
    /// What the case checks, and which earlier test it came from if any.
    about: String,
    /// A folder (relative to the repository) whose top-level files the work folder
    /// starts from, typically an example: `examples/ad-clicks`.
    from: Option<String>,
    /// The pipeline file to run, relative to the work folder.
    pipeline: String,
    /// Extra `weir run` arguments, after the pipeline.
    args: Vec<String>,
    /// Extra environment variables for `weir`.
    env: BTreeMap<String, String>,
    /// The exit code the run must end with.
    exit_code: i32,
    /// Whether stderr is an output (compared and blessed like a file).
    compare_stderr: bool,
    /// Text the normalised stderr must contain (checked in bless mode too).
    stderr_contains: Vec<String>,
    /// Text the normalised stderr must not contain.
    stderr_lacks: Vec<String>,
    /// Outputs whose line order is not specified: compared with their lines sorted.
    unordered: Vec<String>,
    /// Also run with each of these `[udf] max_batch` values; each run must write the
    /// same expected files.
    batch_sizes: Vec<u32>,
    /// Also run with `--parallelism N` for each of these: each run must write the same
    /// expected files, compared per key (see [`compare_per_key`]), since the outputs of
    /// different keys interleave differently in N shards; stderr exactly.
    parallelism: Vec<usize>,
    /// The JSON field that holds a line's key in the outputs (for [`parallelism`]):
    /// lines with it are compared key by key, in order; the other lines as a set.
    ///
    /// [`parallelism`]: Self::parallelism
    key: Option<String>,
    /// Also run interrupted and restarted from a checkpoint; see [`Restart`].
    restart: Option<Restart>,
}

impl Default for Case {
    fn default() -> Self {
        Self {
            about: String::new(),
            from: None,
            pipeline: "pipeline.toml".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            exit_code: 0,
            compare_stderr: true,
            stderr_contains: Vec::new(),
            stderr_lacks: Vec::new(),
            unordered: Vec::new(),
            batch_sizes: Vec::new(),
            parallelism: Vec::new(),
            key: None,
            restart: None,
        }
    }
}

/// After the plain run, the case runs again in a fresh folder, interrupted: source
/// `source` is fed through stdin, a run at a time, each run stopped after a number of
/// its records; a last run reads the rest from a file. Its files must equal the plain
/// run's expected files (stdout and stderr are not compared: the case must write its
/// outputs to files).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Restart {
    /// The source fed through stdin.
    source: String,
    /// The interrupted runs' `--checkpoint-interval`. Without it they checkpoint only
    /// when stopped with SIGTERM (the interval is an hour), so what each restart resumes
    /// from is exact.
    checkpoint_interval: Option<String>,
    /// The interruptions, in order.
    stops: Vec<Stop>,
    /// The `--parallelism` of each run in turn, the interrupted ones and the last
    /// (default: none given, so 1): each restores the checkpoint the one before took at
    /// its own parallelism. With any above 1, the files are compared per key.
    #[serde(default)]
    parallelism: Vec<usize>,
}

/// One interrupted run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stop {
    /// The run is stopped once it has read this many records of the source (counted
    /// from the start of the input, blank lines not counted).
    after: usize,
    /// How it is stopped.
    signal: Signal,
}

/// How an interrupted run is stopped.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
enum Signal {
    /// SIGTERM: a graceful stop, which takes a checkpoint.
    #[serde(rename = "TERM")]
    Term,
    /// SIGKILL (`kill -9`): no checkpoint. With `checkpoint_interval` the runner first
    /// waits for two periodic checkpoints after the records were fed, so the next run
    /// resumes from them; without, it resumes from the last SIGTERM's (or starts over),
    /// and what the killed run wrote since must be cut back.
    #[serde(rename = "KILL")]
    Kill,
}

/// An error that is the harness's doing, not the case's: the run is tried again.
struct Race(String);

/// Runs one case; the error is the whole report of what differed.
fn run_case(dir: &Path, bless: bool) -> Result<(), String> {
    let case_file = dir.join("case.toml");
    let case: Case = match std::fs::read_to_string(&case_file) {
        Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", case_file.display()))?,
        Err(e) => return Err(format!("{}: {e}", case_file.display())),
    };
    if case.about.trim().is_empty() {
        return Err(format!(
            "{}: `about` must say what the case checks",
            case_file.display()
        ));
    }
    let weir = std::panic::catch_unwind(weir_e2e::weir_bin).map_err(panic_text)?;
    let expected_dir = dir.join("expected");

    let plain = Workspace::prepare(dir, &case, None)?;
    let ran = plain.run(&weir, &case, &case.args, CASE_LOG)?;
    let mut problems = Vec::new();
    check_run(&case, &ran, &mut problems);
    let outputs = plain.outputs(&case, &ran)?;
    if bless {
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        write_expected(&case, &expected_dir, &outputs)?;
    }
    let expected = read_tree(&expected_dir)?;
    if !bless {
        compare(&case, "", &expected, &outputs, &mut problems);
    }

    for &max_batch in &case.batch_sizes {
        let variant = Workspace::prepare(dir, &case, Some(max_batch))?;
        let ran = variant.run(&weir, &case, &case.args, CASE_LOG)?;
        let what = format!("with max_batch = {max_batch}: ");
        let mut found = Vec::new();
        check_run(&case, &ran, &mut found);
        problems.extend(found.into_iter().map(|p| format!("{what}{p}")));
        compare(
            &case,
            &what,
            &expected,
            &variant.outputs(&case, &ran)?,
            &mut problems,
        );
    }

    // Each parallelism with the default batches and with each of `batch_sizes`.
    let batches = std::iter::once(None).chain(case.batch_sizes.iter().copied().map(Some));
    let variants = batches.flat_map(|b| case.parallelism.iter().map(move |&p| (p, b)));
    for (parallelism, max_batch) in variants.collect::<Vec<_>>() {
        let variant = Workspace::prepare(dir, &case, max_batch)?;
        let mut args = case.args.clone();
        args.extend(["--parallelism".to_string(), parallelism.to_string()]);
        let ran = variant.run(&weir, &case, &args, CASE_LOG)?;
        let what = match max_batch {
            None => format!("with --parallelism {parallelism}: "),
            Some(b) => format!("with --parallelism {parallelism} and max_batch = {b}: "),
        };
        let mut found = Vec::new();
        check_run(&case, &ran, &mut found);
        problems.extend(found.into_iter().map(|p| format!("{what}{p}")));
        compare_per_key(
            &case,
            &what,
            &expected,
            &variant.outputs(&case, &ran)?,
            &mut problems,
        );
    }

    if let Some(restart) = &case.restart {
        if expected.contains_key(STDOUT) {
            problems.push("a restart case must write its outputs to files, not stdout".into());
        }
        let mut attempt = 0;
        let written = loop {
            attempt += 1;
            match run_interrupted(dir, &case, restart, &weir) {
                Ok(written) => break written,
                Err(Failure::Race(Race(why))) if attempt < 3 => {
                    eprintln!("{}: trying again: {why}", dir.display());
                }
                Err(Failure::Race(Race(why))) => return Err(why),
                Err(Failure::Case(why)) => return Err(why),
            }
        };
        let files: BTreeMap<String, Vec<u8>> = expected
            .iter()
            .filter(|(name, _)| *name != STDOUT && *name != STDERR)
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let what = "interrupted and restarted: ";
        if restart.parallelism.iter().any(|&p| p > 1) {
            compare_per_key(&case, what, &files, &written, &mut problems);
        } else {
            compare(&case, what, &files, &written, &mut problems);
        }
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// A failure of an interrupted sequence: the case's, or a race of the harness.
enum Failure {
    /// The case failed: its report.
    Case(String),
    /// The harness's timing was off: try again.
    Race(Race),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Failure::Case(why)
    }
}

/// The exit code and the stderr directives.
fn check_run(case: &Case, ran: &Ran, problems: &mut Vec<String>) {
    if ran.code != Some(case.exit_code) {
        problems.push(format!(
            "exit code {:?}, expected {}; stderr:\n{}",
            ran.code, case.exit_code, ran.stderr
        ));
    }
    for needle in &case.stderr_contains {
        if !ran.stderr.contains(needle.as_str()) {
            problems.push(format!("stderr lacks {needle:?}; stderr:\n{}", ran.stderr));
        }
    }
    for needle in &case.stderr_lacks {
        if ran.stderr.contains(needle.as_str()) {
            problems.push(format!(
                "stderr contains {needle:?}; stderr:\n{}",
                ran.stderr
            ));
        }
    }
}

/// Compares outputs with the expected files, naming each difference with a unified diff.
fn compare(
    case: &Case,
    what: &str,
    expected: &BTreeMap<String, Vec<u8>>,
    got: &BTreeMap<String, Vec<u8>>,
    problems: &mut Vec<String>,
) {
    for (name, want) in expected {
        let Some(have) = got.get(name) else {
            problems.push(format!("{what}expected/{name} was not written by the run"));
            continue;
        };
        let unordered = case.unordered.iter().any(|u| u == name);
        let (want, have) = if unordered {
            (sorted_lines(want), sorted_lines(have))
        } else {
            (want.clone(), have.clone())
        };
        if want != have {
            let (want, have) = (
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&have),
            );
            let diff = similar::TextDiff::from_lines(want.as_ref(), have.as_ref())
                .unified_diff()
                .context_radius(3)
                .header(&format!("expected/{name}"), &format!("actual/{name}"))
                .to_string();
            let sorted = if unordered { " (lines sorted)" } else { "" };
            problems.push(format!("{what}{name} differs{sorted}:\n{diff}"));
        }
    }
    for (name, have) in got {
        if !expected.contains_key(name) {
            let content = if have.is_empty() {
                " (empty)".to_string()
            } else {
                format!(":\n{}", String::from_utf8_lossy(have))
            };
            problems.push(format!(
                "{what}the run wrote {name}, which has no expected file (run with --bless to add it){content}"
            ));
        }
    }
}

/// Compares the outputs of a run at a parallelism above 1 with the expected files: the
/// lines of each file that carry the case's `key` field key by key (each key's lines in
/// the expected order), the other lines as a set; `stderr` exactly (the summary's counts
/// are the same at every parallelism).
fn compare_per_key(
    case: &Case,
    what: &str,
    expected: &BTreeMap<String, Vec<u8>>,
    got: &BTreeMap<String, Vec<u8>>,
    problems: &mut Vec<String>,
) {
    let Some(field) = &case.key else {
        problems.push(format!(
            "{what}a case run at a parallelism above 1 names its outputs' key field (`key`)"
        ));
        return;
    };
    // Per key, its lines in order; lines without the key (or not JSON) sorted, under "".
    let by_key = |bytes: &[u8]| -> Vec<u8> {
        let mut keyed: BTreeMap<String, Vec<&[u8]>> = BTreeMap::new();
        let mut rest: Vec<&[u8]> = Vec::new();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let key = serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get(field.as_str()).map(|k| k.to_string()));
            match key {
                Some(key) => keyed.entry(key).or_default().push(line),
                None => rest.push(line),
            }
        }
        rest.sort();
        let mut out = Vec::new();
        for line in rest {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        for (key, lines) in keyed {
            out.extend_from_slice(format!("# key {key}\n").as_bytes());
            for line in lines {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        out
    };
    let regroup = |files: &BTreeMap<String, Vec<u8>>| -> BTreeMap<String, Vec<u8>> {
        files
            .iter()
            .map(|(name, bytes)| match name.as_str() {
                STDERR => (name.clone(), bytes.clone()),
                _ => (name.clone(), by_key(bytes)),
            })
            .collect()
    };
    let unkeyed = Case {
        unordered: Vec::new(),
        ..Case::default()
    };
    compare(&unkeyed, what, &regroup(expected), &regroup(got), problems);
}

/// The non-empty lines of `bytes`, sorted, joined by line ends.
fn sorted_lines(bytes: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.join(&b'\n')
}

/// Replaces `dir`'s contents with `outputs` (those whose order is not specified with
/// their lines sorted, so that blessing again changes nothing).
fn write_expected(
    case: &Case,
    dir: &Path,
    outputs: &BTreeMap<String, Vec<u8>>,
) -> Result<(), String> {
    for name in outputs.keys() {
        // .gitignore leaves out dead-letter files by their default name.
        if name.ends_with(".dead-letter.jsonl") {
            return Err(format!(
                "the run wrote {name}, which git ignores: give the dead letters another \
                 name ([dead_letter] path, or --dead-letter in args)"
            ));
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for (name, bytes) in outputs {
        let sorted;
        let bytes = if case.unordered.contains(name) {
            sorted = [sorted_lines(bytes), b"\n".to_vec()].concat();
            &sorted
        } else {
            bytes
        };
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap())
            .and_then(|()| std::fs::write(&path, bytes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Every file under `dir`, by its path relative to `dir` (`/`-separated).
fn read_tree(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut files = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut files)?;
    }
    Ok(files)
}

/// Adds the files under `dir` to `files`, by their path relative to `root`.
fn walk(root: &Path, dir: &Path, files: &mut BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(root, &path, files)?;
        } else {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let name = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            files.insert(name, bytes);
        }
    }
    Ok(())
}

/// Copies what is in `from` into `to`, recursively, but the top-level entries in `skip`.
fn copy_tree(from: &Path, to: &Path, skip: &[&str]) -> Result<(), String> {
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if skip.contains(&name.as_str()) {
            continue;
        }
        let path = entry.path();
        let target = to.join(&name);
        if path.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
            copy_tree(&path, &target, &[])?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The message of a caught panic.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Cargo's target directory, as `weir_e2e` finds it.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// A case copied into a temp folder: the work folder, named after the case (so a
/// pipeline without a `name` is named after it, as when run by hand from the case
/// folder), `state/` (its checkpoints) and `scratch/` (the runner's own files).
struct Workspace {
    root: tempfile::TempDir,
    /// The case's name: the work folder's.
    name: String,
    /// Every file of the work folder before the run, to tell the outputs from the inputs.
    before: BTreeMap<String, Vec<u8>>,
}

impl Workspace {
    /// Copies the case (and its `from` folder) and rewrites the pipeline's UDF paths;
    /// with `max_batch`, sets it in the pipeline's `[udf]` table.
    fn prepare(dir: &Path, case: &Case, max_batch: Option<u32>) -> Result<Self, String> {
        let root = tempfile::tempdir().map_err(|e| e.to_string())?;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if name == "state" || name == "scratch" {
            return Err(format!("a case cannot be named {name}"));
        }
        let work = root.path().join(&name);
        for sub in [name.as_str(), "state", "scratch"] {
            std::fs::create_dir(root.path().join(sub)).map_err(|e| e.to_string())?;
        }
        // Where the pipeline file came from, to resolve its relative UDF paths.
        let mut origin = dir.to_path_buf();
        if let Some(from) = &case.from {
            let from_dir = repo_root().join(from);
            let entries =
                std::fs::read_dir(&from_dir).map_err(|e| format!("{}: {e}", from_dir.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                // Its own dead letters and outputs from runs by hand are not inputs.
                if path.is_file() && !name.ends_with(".dead-letter.jsonl") {
                    std::fs::copy(&path, work.join(&name))
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
            if !dir.join(&case.pipeline).exists() {
                origin = from_dir;
            }
        }
        copy_tree(dir, &work, &["case.toml", "expected"])?;

        let pipeline = work.join(&case.pipeline);
        if pipeline.exists() {
            let text = std::fs::read_to_string(&pipeline)
                .map_err(|e| format!("{}: {e}", pipeline.display()))?;
            let text = point_at_target(&text, &origin)?;
            let text = match max_batch {
                None => text,
                Some(n) => {
                    if text.contains("max_batch") || !text.contains("\n[udf]\n") {
                        return Err(format!(
                            "batch_sizes needs a pipeline with a `[udf]` line and no max_batch: {}",
                            case.pipeline
                        ));
                    }
                    text.replacen("\n[udf]\n", &format!("\n[udf]\nmax_batch = {n}\n"), 1)
                }
            };
            std::fs::write(&pipeline, text).map_err(|e| e.to_string())?;
        }
        let before = read_tree(&work)?;
        Ok(Self { root, name, before })
    }

    /// The work folder: the run's working directory.
    fn work(&self) -> PathBuf {
        self.root.path().join(&self.name)
    }

    /// The state directory the runs get.
    fn state(&self) -> PathBuf {
        self.root.path().join("state")
    }

    /// The runner's own files (the rest of a restarted source).
    fn scratch(&self) -> PathBuf {
        self.root.path().join("scratch")
    }

    /// `weir run PIPELINE ARGS`, with its own state directory unless `args` choose one,
    /// logging at `log` unless the case's `env` sets `WEIR_LOG`.
    fn command(&self, weir: &Path, case: &Case, args: &[String], log: &str) -> Command {
        let mut command = Command::new(weir);
        command
            .current_dir(self.work())
            .env("WEIR_LOG", log)
            .envs(&case.env)
            .arg("run")
            .arg(&case.pipeline)
            .args(args.iter().map(|a| substitute(a)));
        let chooses = args
            .iter()
            .any(|a| a == "--state-dir" || a == "--no-checkpoints");
        if !chooses {
            command.arg("--state-dir").arg(self.state());
        }
        command
    }

    /// Runs `weir` to its end with empty stdin.
    fn run(&self, weir: &Path, case: &Case, args: &[String], log: &str) -> Result<Ran, String> {
        let mut command = self.command(weir, case, args, log);
        command.stdin(Stdio::null());
        Spawned::start(command)?.finish(RUN_TIMEOUT, self)
    }

    /// The normalised stderr of a run.
    fn normalise(&self, stderr: &str) -> String {
        let mut text = stderr.replace(&target_dir().display().to_string(), "$TARGET");
        text = text.replace(&repo_root().display().to_string(), "$REPO");
        text = text.replace(&self.root.path().display().to_string(), "$TMP");
        if let Ok(real) = self.root.path().canonicalize() {
            text = text.replace(&real.display().to_string(), "$TMP");
        }
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            if line.trim_start().starts_with("peak memory (RSS):")
                || line.trim_start().starts_with("state store (disk backend):")
            {
                continue;
            }
            let line = without_log_time(line);
            match line.find("processed ").zip(line.find(" records in ")) {
                Some((start, end)) if start < end && line.ends_with(" records/s)") => {
                    out.push_str(&line[..end + " records".len()]);
                }
                _ => match line.find(", longest pause ") {
                    Some(at) if line.trim_start().starts_with("checkpoints: ") => {
                        out.push_str(&line[..at]);
                    }
                    _ => out.push_str(line),
                },
            }
            out.push('\n');
        }
        out
    }

    /// What the run wrote: changed and new files of the work folder, stdout and stderr.
    fn outputs(&self, case: &Case, ran: &Ran) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut outputs = self.files()?;
        for name in [STDOUT, STDERR] {
            if outputs.contains_key(name) {
                return Err(format!(
                    "the run wrote a file named {name}, which is reserved"
                ));
            }
        }
        if !ran.stdout.is_empty() {
            outputs.insert(STDOUT.into(), ran.stdout.clone());
        }
        if case.compare_stderr && !ran.stderr.is_empty() {
            outputs.insert(STDERR.into(), ran.stderr.clone().into_bytes());
        }
        Ok(outputs)
    }

    /// The changed and new files of the work folder.
    fn files(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut now = read_tree(&self.work())?;
        now.retain(|name, bytes| self.before.get(name) != Some(bytes));
        Ok(now)
    }
}

/// A log line without its leading time (`2026-12-01T22:09:08.864370Z  WARN ...` becomes
/// `WARN ...`); other lines as they are.
fn without_log_time(line: &str) -> &str {
    let Some((first, rest)) = line.split_once(' ') else {
        return line;
    };
    let is_time = first.len() > 20
        && first.ends_with('Z')
        && first.as_bytes()[4] == b'-'
        && first.as_bytes()[10] == b'T'
        && first[..4].bytes().all(|b| b.is_ascii_digit());
    if is_time {
        rest.trim_start()
    } else {
        line
    }
}

/// `$TARGET` and `$REPO` in an argument.
fn substitute(arg: &str) -> String {
    arg.replace("$TARGET", &target_dir().display().to_string())
        .replace("$REPO", &repo_root().display().to_string())
}

/// Points the pipeline's paths into the repository's `target/` (written relative to
/// `origin`, the folder the file came from) at the real target directory, and checks
/// that each UDF component it names is built and fresh.
fn point_at_target(text: &str, origin: &Path) -> Result<String, String> {
    let relative = origin
        .strip_prefix(repo_root())
        .map_err(|_| format!("{} is outside the repository", origin.display()))?;
    let up = "../".repeat(relative.components().count());
    let prefix = format!("\"{up}target/");
    let text = text.replace(&prefix, &format!("\"{}/", target_dir().display()));
    let marker = "wasm32-wasip2/release/";
    for (at, _) in text.match_indices(marker) {
        let rest = &text[at + marker.len()..];
        let Some(name) = rest.split('"').next().and_then(|n| n.strip_suffix(".wasm")) else {
            continue;
        };
        let crate_name = name.replace('_', "-");
        std::panic::catch_unwind(|| weir_e2e::component(&crate_name)).map_err(panic_text)?;
    }
    Ok(text)
}

/// A finished `weir` process.
struct Ran {
    /// The exit code (none if killed by a signal).
    code: Option<i32>,
    /// Everything printed on stdout.
    stdout: Vec<u8>,
    /// Normalised ([`Workspace::normalise`]).
    stderr: String,
}

/// A running `weir` process whose stdout and stderr are collected on their own threads.
struct Spawned {
    /// The process; its stdin is piped or null, as the command set it.
    child: Child,
    /// The thread collecting stdout.
    stdout: std::thread::JoinHandle<Vec<u8>>,
    /// The thread collecting stderr.
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl Spawned {
    /// Starts `command` with stdout and stderr piped.
    fn start(mut command: Command) -> Result<Self, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start weir: {e}"))?;
        let collect = |mut stream: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = stream.read_to_end(&mut bytes);
                bytes
            })
        };
        let stdout = collect(Box::new(child.stdout.take().expect("piped")));
        let stderr = collect(Box::new(child.stderr.take().expect("piped")));
        Ok(Self {
            child,
            stdout,
            stderr,
        })
    }

    /// Waits for the process to end (killing it after `timeout`).
    fn finish(mut self, timeout: Duration, workspace: &Workspace) -> Result<Ran, String> {
        drop(self.child.stdin.take());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if started.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self.stderr.join().unwrap_or_default();
                return Err(format!(
                    "weir ran longer than {} s and was killed; stderr:\n{}",
                    timeout.as_secs(),
                    workspace.normalise(&String::from_utf8_lossy(&stderr))
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ok(Ran {
            code: status.code(),
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: workspace.normalise(&String::from_utf8_lossy(
                &self.stderr.join().unwrap_or_default(),
            )),
        })
    }
}

/// The `--parallelism` flag of run `n` of a restart (the last run is number
/// `stops.len()`), if the case gives one.
fn parallelism_of_run(restart: &Restart, n: usize) -> Vec<String> {
    match restart.parallelism.get(n) {
        Some(p) => vec!["--parallelism".into(), p.to_string()],
        None => Vec::new(),
    }
}

/// The interrupted runs of a restart case, then the last run; returns the files written.
fn run_interrupted(
    dir: &Path,
    case: &Case,
    restart: &Restart,
    weir: &Path,
) -> Result<BTreeMap<String, Vec<u8>>, Failure> {
    let space = Workspace::prepare(dir, case, None)?;
    let records = source_records(&space, case, &restart.source)?;
    let mut last = 0;
    for stop in &restart.stops {
        if stop.after <= last || stop.after > records.len() {
            return Err(format!(
                "restart stops must grow and stay within the {} records of source {:?}",
                records.len(),
                restart.source
            )
            .into());
        }
        last = stop.after;
    }

    // The arguments of every run: the case's, without -q (the summary is read) and
    // without its own --input for the source.
    let input_flag = format!("{}=", restart.source);
    let mut args: Vec<String> = Vec::new();
    let mut given = case.args.iter();
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "-q" | "--quiet" => {}
            "--input" => match given.next() {
                Some(value) if value.starts_with(&input_flag) => {}
                Some(value) => args.extend(["--input".to_string(), value.clone()]),
                None => args.push(arg.clone()),
            },
            _ => args.push(arg.clone()),
        }
    }
    let interval = restart.checkpoint_interval.as_deref().unwrap_or("1h");
    args.extend(["--checkpoint-interval".into(), interval.into()]);

    // Records up to `resumed` are in the checkpoint the next run resumes from.
    let mut resumed = 0;
    for (n, stop) in restart.stops.iter().enumerate() {
        let mut run_args = args.clone();
        run_args.extend(["--input".into(), format!("{}=-", restart.source)]);
        run_args.extend(parallelism_of_run(restart, n));
        let mut command = space.command(weir, case, &run_args, RESTART_LOG);
        command.stdin(Stdio::piped());
        let mut child = Spawned::start(command)?;
        let mut pipe = child.child.stdin.take().expect("piped");
        for record in &records[resumed..stop.after] {
            pipe.write_all(record)
                .map_err(|e| format!("run {}: {e}", n + 1))?;
        }
        pipe.flush().map_err(|e| e.to_string())?;
        wait_until_read(&pipe, &mut child.child).map_err(Failure::Race)?;
        let label = format!("interrupted run {} (stopped after {})", n + 1, stop.after);
        match stop.signal {
            Signal::Term => {
                // Time for the reader thread to hand over what it read: lines it holds
                // when the signal comes are not processed.
                std::thread::sleep(Duration::from_millis(200));
                signal(&child.child, libc::SIGTERM);
                let ran = child.finish(RUN_TIMEOUT, &space)?;
                drop(pipe);
                if ran.code != Some(0) {
                    return Err(format!(
                        "{label}: exit code {:?} after SIGTERM; stderr:\n{}",
                        ran.code, ran.stderr
                    )
                    .into());
                }
                let read = records_read(&ran.stderr, &restart.source);
                if read != Some(stop.after as u64) {
                    return Err(Failure::Race(Race(format!(
                        "{label}: it had read {read:?} records when stopped; stderr:\n{}",
                        ran.stderr
                    ))));
                }
                resumed = stop.after;
            }
            Signal::Kill => {
                if restart.checkpoint_interval.is_some() {
                    wait_for_checkpoints(&space.state(), 2, &mut child.child)
                        .map_err(Failure::Race)?;
                    resumed = stop.after;
                } else {
                    // Time to process and write out what it read, for the next run to
                    // cut back.
                    std::thread::sleep(Duration::from_millis(200));
                }
                let _ = child.child.kill();
                let _ = child.finish(RUN_TIMEOUT, &space);
                drop(pipe);
            }
        }
    }

    // The last run reads the rest from a file.
    let rest_path = space
        .scratch()
        .join(format!("{}.rest.jsonl", restart.source));
    std::fs::write(&rest_path, records[resumed..].concat()).map_err(|e| e.to_string())?;
    let mut run_args = args.clone();
    run_args.extend(parallelism_of_run(restart, restart.stops.len()));
    run_args.extend([
        "--input".into(),
        format!("{}={}", restart.source, rest_path.display()),
    ]);
    let ran = space.run(weir, case, &run_args, RESTART_LOG)?;
    if ran.code != Some(case.exit_code) {
        return Err(format!(
            "the restarted run: exit code {:?}, expected {}; stderr:\n{}",
            ran.code, case.exit_code, ran.stderr
        )
        .into());
    }
    // The summary counts the records the checkpoint had read too: all of them, unless the
    // checkpoint held fewer than the runner fed before a kill (a race of the harness).
    let read = records_read(&ran.stderr, &restart.source);
    if read != Some(records.len() as u64) {
        return Err(Failure::Race(Race(format!(
            "the restarted run read {read:?} records in all, not {}; stderr:\n{}",
            records.len(),
            ran.stderr
        ))));
    }
    let resumed_from_checkpoint = ran.stderr.contains("resuming from checkpoint");
    if resumed_from_checkpoint != (resumed > 0) {
        return Err(format!(
            "the restarted run should {}resume from a checkpoint; stderr:\n{}",
            if resumed > 0 { "" } else { "not " },
            ran.stderr
        )
        .into());
    }
    Ok(space.files()?)
}

/// The non-blank lines of `source`'s input file (from `--input` in the case's args, or
/// the pipeline file), each with its line end.
fn source_records(space: &Workspace, case: &Case, source: &str) -> Result<Vec<Vec<u8>>, String> {
    let flag = format!("{source}=");
    let from_args = case
        .args
        .windows(2)
        .find(|w| w[0] == "--input" && w[1].starts_with(&flag))
        .map(|w| w[1][flag.len()..].to_string());
    let path = match from_args {
        Some(path) => space.work().join(substitute(&path)),
        None => {
            let pipeline = space.work().join(&case.pipeline);
            let text = std::fs::read_to_string(&pipeline).map_err(|e| e.to_string())?;
            let table: toml::Table = toml::from_str(&text).map_err(|e| e.to_string())?;
            let sources = table.get("source").and_then(|s| s.as_array());
            let path = sources
                .into_iter()
                .flatten()
                .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(source))
                .and_then(|s| s.get("path"))
                .and_then(|p| p.as_str())
                .ok_or_else(|| format!("the pipeline has no file source {source:?}"))?;
            pipeline.parent().unwrap().join(path)
        }
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .map(|line| {
            let mut line = line.to_vec();
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            line
        })
        .collect())
}

/// `source: N records read` from a run's summary.
fn records_read(stderr: &str, source: &str) -> Option<u64> {
    let prefix = format!("source {source}: ");
    stderr.lines().find_map(|line| {
        line.trim()
            .strip_prefix(&prefix)?
            .strip_suffix(" records read")?
            .parse()
            .ok()
    })
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child that has not been waited for.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
}

/// Waits until the process has read everything written to `pipe` (its write end).
fn wait_until_read(pipe: &std::process::ChildStdin, child: &mut Child) -> Result<(), Race> {
    use std::os::fd::AsRawFd;
    let started = Instant::now();
    loop {
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int, the bytes in the pipe not yet read.
        let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut unread) };
        if rc != 0 || unread == 0 {
            return Ok(());
        }
        if child.try_wait().ok().flatten().is_some() {
            return Err(Race("weir ended while its input was being fed".into()));
        }
        if started.elapsed() > RUN_TIMEOUT {
            return Err(Race("weir did not read its input".into()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until `count` more checkpoint files than now have been written to `state`.
fn wait_for_checkpoints(state: &Path, count: u64, child: &mut Child) -> Result<(), Race> {
    let newest = || -> u64 {
        std::fs::read_dir(state)
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.strip_prefix("checkpoint-")?
                            .strip_suffix(".weir")?
                            .parse()
                            .ok()
                    })
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let target = newest() + count;
    let started = Instant::now();
    while newest() < target {
        if child.try_wait().ok().flatten().is_some() {
            return Err(Race("weir ended while waiting for its checkpoints".into()));
        }
        if started.elapsed() > RUN_TIMEOUT {
            return Err(Race("no checkpoint was written".into()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
