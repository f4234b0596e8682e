//! `weir new` as a new user meets it, in each language: in a fresh shell (no toolchain
//! variables) `weir test` passes the project's unit tests, `weir build` builds it with the
//! toolchain the checkout's scripts installed, the pipeline runs at once, and
//! `weir dev pipeline.toml` exactly as printed runs the sample input, keeps watching,
//! and runs it again from the start after an edit. All three print the same sessions. A
//! bad `--config` value is refused with the UDF's own message in every language, as a
//! bad command line (exit 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use weir_e2e::{repo_root, target_dir, wait_for, weir, weir_bin, StderrLog};

/// The sessions of the template's `input.jsonl` (gap 30 s, busy at 3 events): ben's
/// first session ends when his next event comes 55 s later, ana's when the watermark
/// passes 10:00:50, the last two at the end of input.
const MAIN: &str = r#"{"user":"ben","events":1,"started_at":"2026-11-29 10:00:05.000","ended_at":"2026-11-29 10:00:05.000"}
{"user":"ana","events":3,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}
{"user":"ben","events":1,"started_at":"2026-11-29 10:01:00.000","ended_at":"2026-11-29 10:01:00.000"}
{"user":"ana","events":1,"started_at":"2026-11-29 10:02:00.000","ended_at":"2026-11-29 10:02:00.000"}
"#;
/// The same sessions from the UDF as [`EDITS`] changes it (`events` plus 100), run
/// again from the start: nothing counted on from the first run's state.
const MAIN_EDITED: &str = r#"{"user":"ben","events":101,"started_at":"2026-11-29 10:00:05.000","ended_at":"2026-11-29 10:00:05.000"}
{"user":"ana","events":103,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}
{"user":"ben","events":101,"started_at":"2026-11-29 10:01:00.000","ended_at":"2026-11-29 10:01:00.000"}
{"user":"ana","events":101,"started_at":"2026-11-29 10:02:00.000","ended_at":"2026-11-29 10:02:00.000"}
"#;
const BUSY: &str = r#"{"user":"ana","events":3,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}
"#;
/// Per language: the template's source file, and an edit of it that adds 100 to the
/// `events` a session is emitted with.
const EDITS: [(&str, &str, &str, &str); 3] = [
    (
        "rust",
        "src/lib.rs",
        "events: session.events,",
        "events: session.events + 100,",
    ),
    (
        "python",
        "app.py",
        "\"events\": session.events,",
        "\"events\": session.events + 100,",
    ),
    (
        "js",
        "app.js",
        "events: session.events,",
        "events: session.events + 100,",
    ),
];

/// Runs a command to completion; panics with its output if it fails.
fn check(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} failed:\n{stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `weir new NAME --lang LANG` in a fresh folder; returns the project folder.
fn new_project(parent: &Path, lang: &str) -> PathBuf {
    weir_e2e::new_project(parent, &format!("{lang}-sessions"), lang)
}

/// The `weir` command as in a fresh shell: no toolchain variables (cargo shares the
/// build's target folder, where the SDK's dependencies are built already).
fn fresh_weir(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(weir_bin());
    command
        .args(args)
        .current_dir(dir)
        .env_remove("WEIR_PYTHON_TOOLCHAIN")
        .env_remove("WEIR_JS_TOOLCHAIN")
        .env("CARGO_TARGET_DIR", target_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    command
}

/// Installs a language's pinned toolchain with the checkout's script (idempotent), as
/// `make guests` does; the project must then find it by itself.
fn install_toolchain(lang: &str) {
    let script = repo_root().join(format!("scripts/toolchain/{lang}.sh"));
    check(&mut Command::new(script), "the toolchain installer");
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
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("config `gap` must be more than 0")
            && refused
                .stderr
                .contains("(with --config gap from the command line)"),
        "{}",
        refused.stderr
    );
}

/// The whole first hour of a project in `lang`, as `weir new` prints it.
fn works_as_printed(lang: &str) {
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), lang);
    if lang != "rust" {
        install_toolchain(lang);
    }
    let tests = check(&mut fresh_weir(&dir, &["test"]), "weir test");
    if lang == "rust" {
        assert!(tests.contains("2 passed"), "{tests}");
    }
    let started = std::time::Instant::now();
    let built = fresh_weir(&dir, &["build"]).output().unwrap();
    let log = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "weir build: {log}");
    assert!(log.contains("weir build: wrote "), "{log}");
    eprintln!(
        "weir build of the {lang} project: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    runs_as_expected(&dir);

    // `weir dev pipeline.toml` exactly as printed (no folder in the path).
    let stdout = dir.join("dev.stdout");
    let mut child = fresh_weir(&dir, &["dev", "pipeline.toml"])
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = StderrLog::capture(&mut child);
    let printed = || std::fs::read_to_string(&stdout).unwrap();
    let ended = "weir dev: the input ended; watching ";
    let mut exited = || child.try_wait().unwrap().is_some();
    wait_for("the first run's end", Duration::from_secs(300), || {
        log.count(ended) == 1 || exited()
    });
    assert!(!exited(), "weir dev exited: {}", log.text());
    assert_eq!(printed(), MAIN, "{}", log.text());

    let (_, file, from, to) = EDITS.iter().find(|e| e.0 == lang).unwrap();
    let source = dir.join(file);
    let text = std::fs::read_to_string(&source).unwrap();
    assert_eq!(text.matches(from).count(), 1, "{file} changed shape");
    std::fs::write(&source, text.replace(from, to)).unwrap();
    wait_for("the run after the edit", Duration::from_secs(300), || {
        log.count(ended) == 2 || exited()
    });
    assert!(!exited(), "weir dev exited: {}", log.text());
    assert!(
        log.contains(&format!(
            "weir dev: running \"{lang}-sessions\" again from the start of its input"
        )),
        "{}",
        log.text()
    );
    assert_eq!(printed(), format!("{MAIN}{MAIN_EDITED}"), "{}", log.text());
    assert_eq!(
        std::fs::read_to_string(dir.join("busy.jsonl")).unwrap(),
        BUSY.replace("\"events\":3", "\"events\":103"),
        "the side output holds the second run only"
    );

    // Ctrl-C or SIGTERM: a clean exit.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let log = log.finish();
    assert_eq!(status.code(), Some(0), "{log}");
}

#[test]
fn a_rust_project_works_as_printed() {
    works_as_printed("rust");
}

#[test]
fn a_python_project_works_as_printed() {
    works_as_printed("python");
}

#[test]
fn a_javascript_project_works_as_printed() {
    works_as_printed("js");
}

#[test]
fn a_python_project_builds_with_the_batch_export_when_asked() {
    install_toolchain("python");
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), "python");
    let wasm = dir.join("python-sessions.wasm");
    let exports_batch = || {
        let bytes = std::fs::read(&wasm).unwrap();
        let name = b"weir:udf/batch@";
        bytes.windows(name.len()).any(|w| w == name)
    };
    check(&mut fresh_weir(&dir, &["build"]), "weir build");
    assert!(!exports_batch(), "a plain build has no batch export");
    check(
        fresh_weir(&dir, &["build"]).env("WEIR_GUEST_BATCH", "1"),
        "WEIR_GUEST_BATCH=1 weir build",
    );
    assert!(exports_batch(), "WEIR_GUEST_BATCH=1 adds the batch export");
    runs_as_expected(&dir);
}

#[test]
fn weir_dev_once_exits_after_the_input_as_a_script_expects() {
    let parent = tempfile::tempdir().unwrap();
    // A name of its own: the projects share the build's target folder, where another
    // test's edited `rust-sessions` build may land while this one runs.
    let dir = weir_e2e::new_project(parent.path(), "rust-sessions-once", "rust");
    let dev = check(
        &mut fresh_weir(&dir, &["dev", "pipeline.toml", "--once"]),
        "weir dev --once",
    );
    assert_eq!(dev, MAIN);
}

#[test]
fn without_its_toolchain_a_project_says_which_command_installs_it() {
    let parent = tempfile::tempdir().unwrap();
    let dir = new_project(parent.path(), "python");
    // An empty PATH but for the shell's tools, and a checkout whose .weir-tools is
    // elsewhere: build.sh cannot find componentize-py.
    let script = std::fs::read_to_string(dir.join("build.sh")).unwrap();
    let checkout = repo_root().canonicalize().unwrap();
    let moved = script.replace(
        &format!("checkout='{}'", checkout.display()),
        &format!("checkout='{}/nowhere'", parent.path().display()),
    );
    assert_ne!(moved, script, "build.sh names the checkout");
    std::fs::write(dir.join("build.sh"), moved).unwrap();
    let built = fresh_weir(&dir, &["build"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&built.stderr);
    assert_eq!(built.status.code(), Some(1), "{log}");
    assert!(
        log.contains(
            "build.sh: componentize-py not found. Install it with:\n    python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1\n"
        ),
        "{log}"
    );

    // A checkout that has the installer but has not run it: the message is that script.
    let fake = parent.path().join("checkout");
    let installer = fake.join("scripts/toolchain/python.sh");
    std::fs::create_dir_all(installer.parent().unwrap()).unwrap();
    std::fs::write(&installer, "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&installer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let with_installer = script.replace(
        &format!("checkout='{}'", checkout.display()),
        &format!("checkout='{}'", fake.display()),
    );
    std::fs::write(dir.join("build.sh"), with_installer).unwrap();
    let built = fresh_weir(&dir, &["build"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&built.stderr);
    assert_eq!(built.status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "build.sh: componentize-py not found. Install the pinned one with:\n    {}\n",
            installer.display()
        )),
        "{log}"
    );
}
