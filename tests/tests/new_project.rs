//! `weir new`: a project in each language passes its own unit tests, builds with its
//! toolchain and runs at once,
//! and all three print the same sessions for the sample input. A bad config is refused
//! with the UDF's own message in every language.

use std::path::{Path, PathBuf};
use std::process::Command;
use weir_e2e::{repo_root, weir, weir_bin};

/// The sessions of the template's `input.jsonl` (gap 30 s, busy at 3 events): ben's
/// first session ends when his next event comes 55 s later, ana's when the watermark
/// passes 10:00:50, the last two at the end of input.
const MAIN: &str = r#"{"user":"ben","events":1,"started_at":"2026-11-29 10:00:05.000","ended_at":"2026-11-29 10:00:05.000"}
{"user":"ana","events":3,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}
{"user":"ben","events":1,"started_at":"2026-11-29 10:01:00.000","ended_at":"2026-11-29 10:01:00.000"}
{"user":"ana","events":1,"started_at":"2026-11-29 10:02:00.000","ended_at":"2026-11-29 10:02:00.000"}
"#;
const BUSY: &str = r#"{"user":"ana","events":3,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}
"#;

/// Runs a command to completion; panics with its output if it fails.
fn check(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} failed:\n{stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `weir new NAME --lang LANG` in a fresh folder; returns the project folder.
fn new_project(parent: &Path, lang: &str) -> PathBuf {
    let name = format!("{lang}-sessions");
    let dir = parent.join(&name);
    check(
        Command::new(weir_bin())
            .args(["new", &name, "--lang", lang, "--dir"])
            .arg(&dir),
        "weir new",
    );
    dir
}

/// The pinned toolchain of a language, installed by the repo's script if missing.
fn toolchain(lang: &str) -> String {
    let script = repo_root().join(format!("scripts/toolchain/{lang}.sh"));
    check(
        Command::new(script).arg("--print"),
        "the toolchain installer",
    )
    .trim()
    .to_string()
}

/// Runs the project's pipeline; checks the main output, the side output and a bad config.
fn runs_as_expected(dir: &Path) {
    let pipeline = dir.join("pipeline.toml");
    let pipeline = pipeline.to_str().unwrap();
    let run = weir(&["run", pipeline, "-q", "--no-checkpoints"]);
    run.assert_success();
    assert_eq!(run.stdout, MAIN, "main output of {}", dir.display());
    assert_eq!(
        std::fs::read_to_string(dir.join("busy.jsonl")).unwrap(),
        BUSY,
        "busy side output of {}",
        dir.display()
    );
    let refused = weir(&[
        "run",
        pipeline,
        "-q",
        "--no-checkpoints",
        "--config",
        "gap=0s",
    ]);
    assert_ne!(refused.code, Some(0));
    assert!(
        refused.stderr.contains("config `gap` must be more than 0"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_rust_project_passes_its_unit_tests_builds_and_runs() {
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), "rust");
    // Share the checkout's target folder: the SDK's dependencies are built already.
    let cargo = |args: &[&str]| {
        let mut command = Command::new("cargo");
        command
            .args(args)
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", repo_root().join("target"));
        command
    };
    let tests = check(&mut cargo(&["test", "--release"]), "cargo test");
    assert!(tests.contains("2 passed"), "{tests}");
    check(
        &mut cargo(&["build", "--release", "--target", "wasm32-wasip2"]),
        "cargo build",
    );
    // The pipeline names the component in the project's own target folder.
    let wasm = repo_root().join("target/wasm32-wasip2/release/rust_sessions.wasm");
    let local = dir.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(wasm, local.join("rust_sessions.wasm")).unwrap();
    runs_as_expected(&dir);
    // `weir dev pipeline.toml` exactly as `weir new` prints it, with no folder in the
    // path (it used to fail to start `cargo metadata` in the folder "").
    let dev = check(
        Command::new(weir_bin())
            .args(["dev", "pipeline.toml"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", repo_root().join("target"))
            .stdin(std::process::Stdio::null()),
        "weir dev pipeline.toml",
    );
    assert_eq!(dev, MAIN, "weir dev's main output");
}

#[test]
fn a_python_project_builds_and_runs() {
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), "python");
    check(
        Command::new("python3")
            .args(["-m", "unittest", "-v"])
            .current_dir(&dir)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "the project's unit tests",
    );
    check(
        Command::new(dir.join("build.sh")).env("WEIR_PYTHON_TOOLCHAIN", toolchain("python")),
        "build.sh",
    );
    runs_as_expected(&dir);
}

#[test]
fn a_javascript_project_builds_and_runs() {
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), "js");
    check(
        Command::new("node").arg("--test").current_dir(&dir),
        "the project's unit tests",
    );
    check(
        Command::new(dir.join("build.sh")).env("WEIR_JS_TOOLCHAIN", toolchain("js")),
        "build.sh",
    );
    runs_as_expected(&dir);
}
