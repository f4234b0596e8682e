//! Shared pieces of Weir's end-to-end tests and benchmarks: finding the built `weir`
//! binary and UDF components, running pipelines, generating inputs, and the independent
//! models that the outputs are compared with.

pub mod crash;
pub mod gen;
pub mod graphs;
pub mod group;
pub mod kafka;
pub mod model;
pub mod services;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repo")
        .to_path_buf()
}

/// The build's target folder: `$CARGO_TARGET_DIR`, else the repo's `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// `path`, checked to exist and to be newer than every source file under `sources`
/// (relative to the repo): `cargo test` alone does not rebuild what the tests run.
fn built(path: PathBuf, sources: &[&str]) -> PathBuf {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built_at) = modified(&path) else {
        panic!(
            "{} is missing: run `make build` first (`make test` does)",
            path.display()
        );
    };
    for dir in sources {
        if let Some(newer) = newest_file(&repo_root().join(dir)).filter(|(t, _)| *t > built_at) {
            panic!(
                "{} is older than {}: run `make build` first (`make test` does)",
                path.display(),
                newer.1.display()
            );
        }
    }
    path
}

/// The most recently modified file under `dir`, if any.
fn newest_file(dir: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let candidate = if path.is_dir() {
            newest_file(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        };
        if let Some(c) = candidate {
            if newest.as_ref().is_none_or(|n| c.0 > n.0) {
                newest = Some(c);
            }
        }
    }
    newest
}

/// The `weir` binary built by `make build`.
pub fn weir_bin() -> PathBuf {
    built(target_dir().join("release/weir"), &["host", "wit"])
}

/// `weir new NAME --lang LANG` into `parent/NAME`, as a new user makes a project; returns
/// that folder. Panics with `weir new`'s stderr if it fails.
pub fn new_project(parent: &Path, name: &str, lang: &str) -> PathBuf {
    let dir = parent.join(name);
    let output = Command::new(weir_bin())
        .args(["new", name, "--lang", lang, "--dir"])
        .arg(&dir)
        .output()
        .expect("weir new runs");
    assert!(
        output.status.success(),
        "weir new {name} --lang {lang} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// A UDF written in another language, built by `make guests`: `guest("python",
/// "change-only-counter")` is `udfs/python/change-only-counter` with the Python SDK.
pub fn guest(lang: &str, name: &str) -> PathBuf {
    let wasm = format!("guests/{lang}/{}.wasm", name.replace('-', "_"));
    // The SDK files that go into a component (not the SDK's own tests and scripts).
    let sdk = match lang {
        "python" => "guest-sdk/python/weir",
        _ => "guest-sdk/js/sdk",
    };
    let sources = [format!("udfs/{lang}/{name}"), sdk.to_string()];
    built(target_dir().join(wasm), &[&sources[0], &sources[1], "wit"])
}

/// A UDF written in another language built with the batch export (`weir:udf/batch`,
/// `WEIR_GUEST_BATCH=1`) by `make guests`: `guest_batched("js", "order-timeout")` is
/// `udfs/js/order-timeout`, `guest_batched("python", "misbehaving")` is
/// `tests/udfs/python/misbehaving`, each with its language's SDK.
pub fn guest_batched(lang: &str, name: &str) -> PathBuf {
    let wasm = format!("guests/{lang}-batch/{}.wasm", name.replace('-', "_"));
    let sdk = match lang {
        "python" => "guest-sdk/python/weir",
        _ => "guest-sdk/js/sdk",
    };
    let source = ["udfs", "tests/udfs"]
        .iter()
        .map(|d| format!("{d}/{lang}/{name}"))
        .find(|d| repo_root().join(d).exists())
        .unwrap_or_else(|| format!("udfs/{lang}/{name}"));
    built(target_dir().join(wasm), &[&source, sdk, "wit"])
}

/// A UDF component built by `make udfs`, by crate name (`change-only-counter`).
pub fn component(crate_name: &str) -> PathBuf {
    let wasm = target_dir()
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", crate_name.replace('-', "_")));
    // The versioned-udf-* crates share one source folder.
    let stem = match crate_name.strip_prefix("versioned-udf-") {
        Some(_) => "versioned",
        None => crate_name.trim_end_matches("-udf"),
    };
    let crate_dir = ["udfs", "tests/udfs"]
        .iter()
        .map(|d| format!("{d}/{stem}"))
        .find(|d| repo_root().join(d).join("src").exists())
        .unwrap_or_else(|| format!("udfs/{crate_name}"));
    // A component built without the SDK (not-a-udf) is not rebuilt when the SDK changes.
    // (The versioned crates keep their manifests one level down, and all use the SDK.)
    let manifest = std::fs::read_to_string(repo_root().join(&crate_dir).join("Cargo.toml"))
        .unwrap_or_default();
    let uses_sdk = crate_dir.ends_with("versioned") || manifest.contains("weir-sdk");
    let src = format!("{crate_dir}/src");
    if uses_sdk {
        built(wasm, &[&src, "guest-sdk/src", "wit"])
    } else {
        built(wasm, &[&src])
    }
}

/// A finished `weir` process.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Panics with the process's output unless it succeeded.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.success(),
            "weir failed ({:?}):\n{}",
            self.code,
            self.stderr
        );
        self
    }
}

fn finished(output: Output) -> Finished {
    Finished {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `weir` with `args` from the repo root. A `weir run` gets a state directory of
/// its own unless `args` choose one, so tests running the same example at once never
/// share (or leave behind) checkpoints.
pub fn weir(args: &[&str]) -> Finished {
    weir_with_env(args, &[])
}

/// Starts `weir run PIPELINE --group GROUP` (one member of a consumer group), its log at
/// info level in `log`.
pub fn spawn_group_member(pipeline: &str, group: &str, log: &Path) -> std::process::Child {
    Command::new(weir_bin())
        .args(["run", pipeline, "--group", group])
        .env("WEIR_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("start weir")
}

/// [`weir`] with extra environment variables.
pub fn weir_with_env(args: &[&str], env: &[(&str, &Path)]) -> Finished {
    let state = tempfile::tempdir().expect("temp dir");
    let mut command = Command::new(weir_bin());
    command.args(args);
    command.envs(env.iter().copied());
    let chooses = args
        .iter()
        .any(|a| *a == "--state-dir" || *a == "--no-checkpoints");
    if args.first() == Some(&"run") && !chooses {
        command.arg("--state-dir").arg(state.path());
    }
    let output = command
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .output()
        .expect("cannot start weir");
    finished(output)
}

/// A scratch folder for one test's pipeline, inputs and outputs.
pub struct Workdir {
    dir: tempfile::TempDir,
}

impl Default for Workdir {
    fn default() -> Self {
        Self::new()
    }
}

impl Workdir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` to `name`; returns the path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write test file");
        path.display().to_string()
    }

    /// Writes JSON values, one per line.
    pub fn write_jsonl(&self, name: &str, records: &[Value]) -> String {
        let text: String = records.iter().map(|r| format!("{r}\n")).collect();
        self.write(name, &text)
    }
}

/// Reads a JSON-lines file; every line must be JSON.
pub fn read_jsonl(path: impl AsRef<Path>) -> Vec<Value> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_jsonl(&text)
}

/// Parses JSON lines; every line must be JSON.
pub fn parse_jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Formats epoch milliseconds as `YYYY-MM-DD HH:MM:SS.mmm` (UTC), as the seeds write them.
pub fn datetime_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("in range")
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

/// Milliseconds since midnight of a `HH:MM:SS` time.
pub fn seconds_of_day(hms: &str) -> i64 {
    let parts: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().expect("HH:MM:SS"))
        .collect();
    ((parts[0] * 60 + parts[1]) * 60 + parts[2]) * 1000
}

/// A pipeline around the `misbehaving-udf` test component, which echoes records: one
/// source `events` reading `input` (keyed by `key`, epoch-ms timestamps in `ts`), the
/// main output to `out.jsonl` and dead letters to `dead.jsonl`, all in `work`.
/// `udf_settings` are extra lines for the `[udf]` table.
pub fn echo_pipeline(work: &Workdir, input: &str, key: &str, udf_settings: &str) -> String {
    let toml = format!(
        r#"
[[source]]
name = "events"
type = "file"
path = "{input}"
key = "{key}"
timestamp = "ts"
timestamp_format = "epoch_ms"

[udf]
path = "{udf}"
{udf_settings}

[[sink]]
output = "main"
type = "file"
path = "out.jsonl"

[dead_letter]
path = "dead.jsonl"
"#,
        udf = component("misbehaving-udf").display()
    );
    work.write("pipeline.toml", &toml)
}

/// A copy of an example pipeline in `work`, with the UDF path made absolute and extra
/// lines added to its `[udf]` table (e.g. `max_batch = 7`); returns its path.
pub fn example_variant(work: &Workdir, example: &str, udf_lines: &str) -> String {
    let dir = repo_root().join("examples").join(example);
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).expect("example pipeline");
    let udf_dir = dir.display().to_string();
    let text = text
        .replace("path = \"../../", &format!("path = \"{udf_dir}/../../"))
        .replace("[udf]\n", &format!("[udf]\n{udf_lines}\n"));
    work.write(&format!("{example}-variant.toml"), &text)
}

/// Polls `done` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A child process's stderr, collected line by line on its own thread, so a test can wait
/// for what the process logs while it runs.
pub struct StderrLog {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl StderrLog {
    /// Takes over `child`'s stderr (spawned with `Stdio::piped()`).
    pub fn capture(child: &mut std::process::Child) -> Self {
        use std::io::BufRead as _;
        let stderr = child.stderr.take().expect("stderr is piped");
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = std::sync::Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Self { text, reader }
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    pub fn contains(&self, needle: &str) -> bool {
        self.text.lock().unwrap().contains(needle)
    }

    /// How often `needle` was logged so far.
    pub fn count(&self, needle: &str) -> usize {
        self.text.lock().unwrap().matches(needle).count()
    }

    /// Everything logged, once the process has closed its stderr.
    pub fn finish(self) -> String {
        self.reader.join().expect("the stderr reader");
        std::sync::Arc::try_unwrap(self.text)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|shared| shared.lock().unwrap().clone())
    }
}
