//! The command line itself, as the README describes it: exit code 2 for a bad command
//! line, options only on the commands they apply to, `-v`/`RUST_LOG`/`WEIR_LOG`, and the
//! message for a component that was never built. (`weir status`'s table and `weir serve`'s
//! token line are checked in serve.rs, next to the server they need.)

use std::path::Path;
use std::process::{Command, Stdio};
use weir_e2e::{echo_pipeline, weir_bin, Workdir};

/// What a finished `weir` printed, and how it exited.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `weir` with `args` in `dir`, with no log settings but those in `env`.
fn weir_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let output = Command::new(weir_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("WEIR_LOG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("cannot start weir");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn a_bad_udf_name_is_a_bad_command_line() {
    let work = Workdir::new();
    let ran = weir_in(&work.path(""), &["new", "Bad_Name"], &[]);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.starts_with(
            "error: invalid value 'Bad_Name' for '<NAME>': \"Bad_Name\" is not a valid UDF name: use lower-case letters, digits and '-', starting with a letter (e.g. \"user-sessions\")\n"
        ),
        "{}",
        ran.stderr
    );
    assert!(!work.path("Bad_Name").exists());
}

#[test]
fn no_compile_cache_is_an_option_of_the_commands_that_compile_only() {
    let work = Workdir::new();
    for command in ["run", "dev", "serve"] {
        let help = weir_in(&work.path(""), &[command, "--help"], &[]);
        assert!(help.stdout.contains("--no-compile-cache"), "weir {command}");
    }
    for command in [
        "status", "rollback", "stop", "deploy", "new", "build", "test", "produce",
    ] {
        let help = weir_in(&work.path(""), &[command, "--help"], &[]);
        assert_eq!(help.code, Some(0), "weir {command} --help");
        assert!(
            !help.stdout.contains("--no-compile-cache"),
            "weir {command}"
        );
    }
    let ran = weir_in(&work.path(""), &["status", "--no-compile-cache"], &[]);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr
            .starts_with("error: unexpected argument '--no-compile-cache' found"),
        "{}",
        ran.stderr
    );
}

#[test]
fn verbose_and_rust_log_show_debug_lines_and_wasmtime_stays_quiet() {
    let work = Workdir::new();
    work.write("in.jsonl", "{\"k\": \"a\", \"ts\": 1}\n");
    let pipeline = echo_pipeline(&work, "in.jsonl", "k", "");
    let cache = work.path("cache");
    let cache = cache.to_str().unwrap();
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["run", pipeline.as_str(), "-q", "--no-checkpoints"];
        args.extend(extra);
        let mut env = env.to_vec();
        env.push(("WEIR_CACHE_DIR", cache));
        let ran = weir_in(&work.path(""), &args, &env);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        ran.stderr
    };
    // The first run fills the compile cache; the later ones load from it, at debug level.
    let quiet = run(&[], &[]);
    assert!(!quiet.contains("DEBUG"), "{quiet}");
    let loaded = "DEBUG loaded the compiled component from ";
    for (how, log) in [
        ("-v", run(&["-v"], &[])),
        ("--verbose", run(&["--verbose"], &[])),
        ("RUST_LOG=debug", run(&[], &[("RUST_LOG", "debug")])),
        ("WEIR_LOG=debug", run(&[], &[("WEIR_LOG", "debug")])),
    ] {
        assert!(log.contains(loaded), "{how}: {log}");
    }
    // WEIR_LOG comes before RUST_LOG.
    let both = run(&[], &[("WEIR_LOG", "warn"), ("RUST_LOG", "debug")]);
    assert!(!both.contains("DEBUG"), "{both}");
    // Compiling with -vv logs at trace level but nothing of wasmtime's or cranelift's:
    // the same compile with wasmtime named does.
    let wasmtime_line = |log: &str| {
        log.lines()
            .filter(|l| !l.contains("compiled") && !l.contains("loaded"))
            .count()
    };
    let very = run(&["-vv", "--no-compile-cache"], &[]);
    let named = run(
        &["--no-compile-cache"],
        &[("WEIR_LOG", "info,wasmtime=trace,cranelift=trace")],
    );
    assert_eq!(wasmtime_line(&very), 0, "{very}");
    assert!(wasmtime_line(&named) > 0, "{named}");
}

#[test]
fn a_bad_log_filter_is_a_bad_command_line() {
    let work = Workdir::new();
    let ran = weir_in(&work.path(""), &["status"], &[("RUST_LOG", "=[")]);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr
            .starts_with("error: the log filter \"=[\" (from WEIR_LOG or RUST_LOG): "),
        "{}",
        ran.stderr
    );
}

#[test]
fn running_a_component_never_built_says_how_to_build_it() {
    let work = Workdir::new();
    let made = weir_in(
        &work.path(""),
        &["new", "sessions", "--lang", "python"],
        &[],
    );
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let ran = weir_in(&work.path("sessions"), &["run", "pipeline.toml"], &[]);
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert_eq!(
        ran.stderr,
        "error: sessions.wasm: no such file; build it with `weir build pipeline.toml`\n"
    );
}

#[test]
fn weir_test_fails_when_the_projects_tests_fail() {
    let work = Workdir::new();
    let made = weir_in(&work.path(""), &["new", "sessions", "--lang", "js"], &[]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let tests = work.path("sessions/app.test.js");
    let text = std::fs::read_to_string(&tests).unwrap();
    std::fs::write(
        &tests,
        format!("{text}\ntest('fails', () => {{ throw new Error('no'); }});\n"),
    )
    .unwrap();
    let ran = weir_in(&work.path("sessions"), &["test"], &[]);
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("error: the tests failed: `node --test` failed (exit status: 1)"),
        "{}",
        ran.stderr
    );
}

#[test]
fn the_progress_line_shows_the_share_read_and_the_time_left_on_a_terminal() {
    let work = Workdir::new();
    let lines: String = (0..600_000)
        .map(|i| format!("{{\"k\": \"k{}\", \"ts\": {i}}}\n", i % 1000))
        .collect();
    work.write("in.jsonl", &lines);
    let pipeline = echo_pipeline(&work, "in.jsonl", "k", "");
    // The progress line is drawn only on a terminal: `script` gives the run one.
    let command = format!("{} run {pipeline} --no-checkpoints", weir_bin().display());
    let ran = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(work.path(""))
        .env_remove("WEIR_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs a command on a terminal");
    let screen = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(ran.status.code(), Some(0), "{screen}");
    let megabytes = format!("{:.1} MB", lines.len() as f64 / 1e6);
    let drawn = screen
        .split(['\r', '\n'])
        .find(|line| line.contains(" records/s, ") && line.contains("% of "))
        .unwrap_or_else(|| panic!("no progress line with a share:\n{screen}"));
    assert!(
        drawn.contains(&format!("% of {megabytes}, ETA ")),
        "{drawn}"
    );
    assert!(drawn.contains(", watermark 1970-01-01 "), "{drawn}");
}
