//! `weir dev` of a Python project through the Python development runtime (the project's
//! sources handed to a component compiled once, instead of a componentize-py build and a
//! compile per save): a save swaps the new sources into a live run with its state and
//! timers; what the runtime cannot run as the built component would (a standard library
//! module it does not hold, even one imported under `try`) is named, and the component
//! is built instead; and the runtime's records and errors are the built component's.
//!
//! The toolchain is `$WEIR_PYTHON_TOOLCHAIN` if set, else the checkout's (installed if
//! need be, as `make guests` does).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use weir_e2e::{new_project, repo_root, wait_for, weir_bin, StderrLog};

/// The template's sessions (see `new_project.rs`).
const MAIN: [&str; 4] = [
    r#"{"user":"ben","events":1,"started_at":"2026-11-29 10:00:05.000","ended_at":"2026-11-29 10:00:05.000"}"#,
    r#"{"user":"ana","events":3,"started_at":"2026-11-29 10:00:00.000","ended_at":"2026-11-29 10:00:20.000"}"#,
    r#"{"user":"ben","events":1,"started_at":"2026-11-29 10:01:00.000","ended_at":"2026-11-29 10:01:00.000"}"#,
    r#"{"user":"ana","events":1,"started_at":"2026-11-29 10:02:00.000","ended_at":"2026-11-29 10:02:00.000"}"#,
];

/// A Python project as `weir new` makes it, in a fresh folder under `parent`.
fn python_project(parent: &Path) -> PathBuf {
    let dir = new_project(parent, "py-sessions", "python");
    if std::env::var_os("WEIR_PYTHON_TOOLCHAIN").is_none() {
        let script = repo_root().join("scripts/toolchain/python.sh");
        assert!(Command::new(script).status().unwrap().success());
    }
    dir
}

/// `weir ARGS` in the project folder.
fn weir_in(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(weir_bin());
    command
        .args(args)
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    command
}

/// Replaces the one `from` in the project's app.py with `to`.
fn edit_app(dir: &Path, from: &str, to: &str) {
    let path = dir.join("app.py");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.matches(from).count(),
        1,
        "app.py changed shape: {from}"
    );
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// The run's error report: the lines from `error:` to the summary.
fn error_report(stderr: &str) -> String {
    stderr
        .lines()
        .skip_while(|line| !line.starts_with("error: "))
        .take_while(|line| !line.starts_with("weir: pipeline"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_save_swaps_the_sources_into_the_live_run_with_its_state_and_timers() {
    let parent = tempfile::tempdir().unwrap();
    let dir = python_project(parent.path());
    let stdout = dir.join("dev.stdout");
    let mut child = weir_in(&dir, &["dev", "pipeline.toml", "--input", "events=-"])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = StderrLog::capture(&mut child);
    let printed = || std::fs::read_to_string(&stdout).unwrap();
    let input = std::fs::read_to_string(dir.join("input.jsonl")).unwrap();
    let lines: Vec<&str> = input.lines().collect();
    let mut stdin = child.stdin.take().unwrap();
    wait_for("weir dev to start", Duration::from_secs(300), || {
        log.contains("watching app.py")
    });
    // Up to ben's second event: ben's first session and ana's end (the old version
    // emits them); ben's second one is open, its end timer registered by the old version.
    for line in &lines[..5] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    wait_for(
        "the old version's sessions",
        Duration::from_secs(30),
        || printed().lines().count() == 2,
    );

    edit_app(
        &dir,
        "\"events\": session.events,",
        "\"events\": session.events + 100,",
    );
    wait_for("the swap", Duration::from_secs(60), || {
        log.contains("weir dev: reloaded")
    });
    assert!(
        log.contains("Python development runtime) — build 0.00 s"),
        "swapped through the runtime, not a build: {}",
        log.text()
    );
    writeln!(stdin, "{}", lines[5]).unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    let log = log.finish();
    assert!(status.success(), "{log}");
    assert!(!log.contains("build.sh: wrote"), "nothing was built: {log}");
    // ben's second session: the old version's state and timer, the new version's +100.
    let expected = [
        MAIN[0].to_string(),
        MAIN[1].to_string(),
        MAIN[2].replace("\"events\":1", "\"events\":101"),
        MAIN[3].replace("\"events\":1", "\"events\":101"),
    ];
    assert_eq!(
        printed().lines().collect::<Vec<_>>(),
        expected,
        "the new version goes on from the old one's state and timers: {log}"
    );
}

#[test]
fn a_standard_library_module_the_runtime_lacks_is_named_and_the_component_built() {
    let parent = tempfile::tempdir().unwrap();
    let dir = python_project(parent.path());
    // Imported under `try`: the runtime must not run the app without it, which the
    // built component (it has the module) would not do.
    edit_app(
        &dir,
        "from dataclasses import dataclass\n",
        "from dataclasses import dataclass\n\ntry:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n",
    );
    edit_app(
        &dir,
        "\"events\": session.events,",
        "\"events\": session.events,\n            \"toml\": tomllib is not None,",
    );
    let output = weir_in(&dir, &["dev", "pipeline.toml", "--once"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "weir dev: app.py imports the standard library module `tomllib`, which the Python development runtime does not hold; building the component instead"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("build.sh: wrote py-sessions.wasm"),
        "{stderr}"
    );
    let expected: Vec<String> = MAIN
        .iter()
        .map(|line| line.replace(",\"started_at\"", ",\"toml\":true,\"started_at\""))
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn the_runtime_emits_and_fails_as_the_built_component_does() {
    let parent = tempfile::tempdir().unwrap();
    let dir = python_project(parent.path());

    // The template as it is: the same records either way.
    let dev = weir_in(&dir, &["dev", "pipeline.toml", "--once"])
        .output()
        .unwrap();
    let dev_log = String::from_utf8_lossy(&dev.stderr);
    assert!(dev.status.success(), "{dev_log}");
    assert!(!dev_log.contains("build.sh: wrote"), "{dev_log}");
    assert_eq!(
        String::from_utf8_lossy(&dev.stdout)
            .lines()
            .collect::<Vec<_>>(),
        MAIN
    );
    let built = weir_in(&dir, &["build"]).output().unwrap();
    assert!(built.status.success(), "{built:?}");
    let run = weir_in(&dir, &["run", "pipeline.toml", "--no-checkpoints"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    assert_eq!(run.stdout, dev.stdout);

    // Imports inside a function: of a module the app's imports loaded (json, through
    // the SDK), which works, and of one they did not (statistics: in the runtime, not
    // imported by the app), which fails on ben's first event with the same error and
    // traceback in both.
    edit_app(
        &dir,
        "        at = event.timestamp()\n",
        "        at = event.timestamp()\n        import json.decoder\n        if ctx.current_key_str() == \"ben\":\n            import statistics\n",
    );
    let dev = weir_in(&dir, &["dev", "pipeline.toml", "--once"])
        .output()
        .unwrap();
    let dev_log = String::from_utf8_lossy(&dev.stderr).into_owned();
    assert_eq!(dev.status.code(), Some(1), "{dev_log}");
    assert!(!dev_log.contains("build.sh: wrote"), "{dev_log}");
    let expected = "error: UDF \"py-sessions\" failed on record 2 of source \"events\" (line 2 of input.jsonl): returned an error: ModuleNotFoundError: No module named 'statistics'\nTraceback (most recent call last):\n  File \"app.py\", line 56, in process_element\n    import statistics";
    assert_eq!(error_report(&dev_log), expected, "{dev_log}");

    let built = weir_in(&dir, &["build"]).output().unwrap();
    assert!(built.status.success(), "{built:?}");
    let run = weir_in(&dir, &["run", "pipeline.toml", "--no-checkpoints"])
        .output()
        .unwrap();
    let run_log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(1), "{run_log}");
    assert_eq!(error_report(&run_log), expected, "{run_log}");
}
