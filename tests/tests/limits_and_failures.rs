//! What a hostile probe of `weir run` found, each as the probe ran it against the real
//! binary and the real echo component (`tests/udfs/misbehaving`): a stop while the end of
//! input's timers fire, a line and a call's output bigger than the host will hold, a disk
//! that fills up, and an input file replaced between two runs. Each test asserts what a
//! user sees (exit code, message, summary) and what the files hold.

use serde_json::{json, Value};
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::{echo_pipeline, parse_jsonl, read_jsonl, weir, weir_bin, Workdir};

/// `weir run PIPELINE ARGS...` in the background, its stderr captured.
fn spawn_run(pipeline: &str, args: &[&str]) -> std::process::Child {
    Command::new(weir_bin())
        .arg("run")
        .arg(pipeline)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir")
}

/// Waits for `child` at most `within`; kills it and panics if it is still running.
fn wait_within(child: &mut std::process::Child, within: Duration) -> (Option<i32>, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            return (status.code(), stderr);
        }
        if started.elapsed() > within {
            let _ = child.kill();
            panic!("weir was still running {within:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The timers' outputs of the echo component's `"timers"` record: `{"timer": at, ...}`.
fn timer_times(path: &std::path::Path) -> Vec<i64> {
    read_jsonl(path)
        .iter()
        .map(|r| r["timer"].as_i64().expect("a timer's output"))
        .collect()
}

/// One record that registers `count` event-time timers (at 1001 ..= 1000 + count), each
/// spinning long enough that firing them all takes seconds, and emitting 1 KB: the end of
/// input has timers to fire for a while, and their output reaches the file as they fire.
fn slow_timers(work: &Workdir, count: u64) -> String {
    work.write_jsonl(
        "in.jsonl",
        &[json!({"user": {"id": "k"}, "ts": 1000, "fail": "timers",
                 "count": count, "work": 1_000_000, "size": 1000})],
    );
    echo_pipeline(work, "in.jsonl", "/user/id", "")
}

/// Sends SIGTERM once the end of input's timers have written their first outputs.
fn terminate_while_timers_fire(child: &mut std::process::Child, output: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(output).map_or(0, |m| m.len()) == 0 {
        assert!(Instant::now() < deadline, "no timer fired within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigterm_while_the_end_of_input_timers_fire_checkpoints_and_the_next_run_fires_the_rest() {
    let work = Workdir::new();
    let count = 4_000;
    let pipeline = slow_timers(&work, count);
    let state = work.path("state").display().to_string();
    let output = work.path("out.jsonl");

    let mut child = spawn_run(&pipeline, &["--state-dir", &state]);
    terminate_while_timers_fire(&mut child, &output);
    let (code, stderr) = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("stopped after the input ended, while its timers fired"),
        "{stderr}"
    );
    let fired = timer_times(&output);
    assert!(
        !fired.is_empty() && (fired.len() as u64) < count,
        "the stop came between timers: {} of {count} fired",
        fired.len()
    );
    assert_eq!(
        fired,
        (1001..1001 + fired.len() as i64).collect::<Vec<_>>(),
        "the timers fired so far, in order, each whole"
    );

    // The next run resumes from that checkpoint and fires the rest, once each.
    let resumed = weir(&["run", &pipeline, "--state-dir", &state, "-q"]);
    resumed.assert_success();
    assert_eq!(
        timer_times(&output),
        (1001..=1000 + count as i64).collect::<Vec<_>>(),
        "every timer fired exactly once over the two runs"
    );
}

#[test]
fn sigterm_while_the_end_of_input_timers_fire_without_checkpoints_writes_out_what_fired() {
    let work = Workdir::new();
    let count = 4_000;
    let pipeline = slow_timers(&work, count);
    let output = work.path("out.jsonl");

    let mut child = spawn_run(&pipeline, &["--no-checkpoints"]);
    terminate_while_timers_fire(&mut child, &output);
    let (code, stderr) = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&output).unwrap();
    assert!(text.ends_with('\n'), "the file ends with a whole line");
    let fired = timer_times(&output);
    let summary = format!("output main: {} records emitted", fired.len());
    assert!(
        stderr.contains(&summary),
        "the summary counts what the file holds ({summary}): {stderr}"
    );
    assert_eq!(fired, (1001..1001 + fired.len() as i64).collect::<Vec<_>>());
}

/// The peak RSS the summary reports, in MB.
fn peak_rss_mb(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("peak memory (RSS): "))
        .unwrap_or_else(|| panic!("no peak memory in the summary: {stderr}"));
    line.trim_end_matches(" MB").parse().unwrap()
}

#[test]
fn a_line_over_max_record_bytes_is_a_dead_letter_and_is_never_held_whole() {
    let work = Workdir::new();
    let huge = format!(
        r#"{{"user": {{"id": "big"}}, "ts": 2, "pad": "{}"}}"#,
        "x".repeat(200 << 20)
    );
    let text = format!(
        "{}\n{huge}\n{}\n",
        json!({"user": {"id": "a"}, "ts": 1}),
        json!({"user": {"id": "b"}, "ts": 3})
    );
    let input = work.write("in.jsonl", &text);
    drop(text);
    let pipeline = echo_pipeline(&work, &input, "/user/id", "");
    let run = weir(&["run", &pipeline, "--no-checkpoints"]);
    run.assert_success();

    let out: Vec<Value> = read_jsonl(work.path("out.jsonl"));
    assert_eq!(
        out,
        [
            json!({"user": {"id": "a"}, "ts": 1}),
            json!({"user": {"id": "b"}, "ts": 3})
        ]
    );
    let dead = read_jsonl(work.path("dead.jsonl"));
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["line"], 2);
    let reason = dead[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("the record is {} bytes", huge.len()))
            && reason.contains("max_record_bytes of 16777216"),
        "{reason}"
    );
    let raw = dead[0]["raw"].as_str().unwrap();
    assert!(raw.len() == 1024 && huge.starts_with(raw), "its first KiB");
    // Holding the 200 MiB line would take at least that much memory.
    let peak = peak_rss_mb(&run.stderr);
    assert!(peak < 150.0, "peak RSS {peak} MB: {}", run.stderr);

    // A lower limit of the pipeline's own applies the same way.
    let small = work.write(
        "small.toml",
        &std::fs::read_to_string(&pipeline).unwrap().replace(
            "timestamp_format = \"epoch_ms\"",
            "timestamp_format = \"epoch_ms\"\nmax_record_bytes = \"20B\"",
        ),
    );
    weir(&["run", &small, "--no-checkpoints", "-q"]).assert_success();
    let dead = read_jsonl(work.path("dead.jsonl"));
    assert_eq!(dead.len(), 3, "every line is over 20 bytes: {dead:?}");
}

#[test]
fn a_call_that_emits_more_than_max_emit_bytes_fails_naming_the_limit() {
    for batch in ["max_batch = 0", ""] {
        let work = Workdir::new();
        // 4,000,000 records of 100 bytes from one call: 400 MB.
        let input = work.write_jsonl(
            "in.jsonl",
            &[
                json!({"user": {"id": "a"}, "ts": 1}),
                json!({"user": {"id": "b"}, "ts": 2, "fail": "flood", "count": 4_000_000}),
            ],
        );
        let settings = format!("{batch}\nmemory_limit = \"1GiB\"\ncall_timeout = \"60s\"");
        let pipeline = echo_pipeline(&work, &input, "/user/id", &settings);
        let run = weir(&["run", &pipeline, "--no-checkpoints"]);
        assert_eq!(run.code, Some(1), "{batch}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("emitted more than 64 MiB in one call, the pipeline's max_emit_bytes")
                && run.stderr.contains("record 2 of source \"events\""),
            "{batch}: {}",
            run.stderr
        );
        assert_eq!(
            read_jsonl(work.path("out.jsonl")),
            [json!({"user": {"id": "a"}, "ts": 1})],
            "{batch}: nothing of the failed call is written"
        );
        let peak = peak_rss_mb(&run.stderr);
        assert!(peak < 600.0, "{batch}: peak RSS {peak} MB: {}", run.stderr);
    }
}

#[test]
fn a_full_disk_leaves_whole_lines_and_the_summary_counts_only_those() {
    // A file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so that writes fail with
    // EFBIG) stands in for a full disk: mounting a small tmpfs needs root.
    let work = Workdir::new();
    let records: Vec<Value> = (0..50_000)
        .map(|i| json!({"user": {"id": format!("k{}", i % 100)}, "ts": i, "n": i}))
        .collect();
    let input = work.write_jsonl("in.jsonl", &records);
    let pipeline = echo_pipeline(&work, &input, "/user/id", "");
    // `sh`'s `ulimit -f` counts 512-byte blocks: 1,024,000 bytes.
    let script = format!(
        "ulimit -f 2000; trap '' XFSZ; exec '{}' run '{pipeline}' --no-checkpoints --no-compile-cache",
        weir_bin().display()
    );
    let run = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    let text = std::fs::read_to_string(work.path("out.jsonl")).unwrap();
    assert!(
        text.len() <= 1_024_000 && text.len() > 500_000,
        "{}",
        text.len()
    );
    assert!(text.ends_with('\n'), "no half-written line is left");
    let lines = parse_jsonl(&text);
    assert_eq!(
        lines,
        records[..lines.len()],
        "the file holds the first records, whole"
    );
    assert!(
        stderr.contains(&format!("output main: {} records emitted", lines.len())),
        "the summary counts the {} records the file holds: {stderr}",
        lines.len()
    );
    assert!(
        stderr.contains("cannot write to") && stderr.contains("are not in it"),
        "the error says records were not written: {stderr}"
    );
}

#[test]
fn an_input_file_replaced_by_a_longer_one_is_refused_on_resume() {
    let work = Workdir::new();
    let records = |tag: &str| -> Vec<Value> {
        (0..20_000)
            .map(|i| json!({"user": {"id": format!("{tag}{}", i % 50)}, "ts": i}))
            .collect()
    };
    // The input ends with the slow timers' record: SIGTERM while they fire checkpoints
    // the file's position at its end.
    let mut first = records("a");
    first.push(json!({"user": {"id": "k"}, "ts": 30_000, "fail": "timers",
                      "count": 4_000, "work": 1_000_000, "size": 1000}));
    let input = work.write_jsonl("in.jsonl", &first);
    let pipeline = echo_pipeline(&work, &input, "/user/id", "");
    let state = work.path("state").display().to_string();
    let mut child = spawn_run(&pipeline, &["--state-dir", &state]);
    let output = work.path("out.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&output)
        .unwrap_or_default()
        .contains("\"timer\"")
    {
        assert!(Instant::now() < deadline, "no timer fired within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let (code, stderr) = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("stopped after the input ended"), "{stderr}");

    // Another export of other data, longer than the first: the checkpoint's position is
    // inside it, but the bytes before it differ. Refused, as a shorter file is.
    let mut replaced = records("b");
    replaced.extend(records("c"));
    work.write_jsonl("in.jsonl", &replaced);
    let resumed = weir(&["run", &pipeline, "--state-dir", &state]);
    assert_eq!(resumed.code, Some(1), "{}", resumed.stderr);
    assert!(
        resumed
            .stderr
            .contains("is not the file the checkpoint read")
            && resumed.stderr.contains("--fresh"),
        "{}",
        resumed.stderr
    );

    // The same file with more appended (a growing log) resumes.
    let mut appended = first.clone();
    appended.push(json!({"user": {"id": "z"}, "ts": 40_000}));
    work.write_jsonl("in.jsonl", &appended);
    weir(&["run", &pipeline, "--state-dir", &state, "-q"]).assert_success();
    let out = read_jsonl(&output);
    assert_eq!(
        out.iter().filter(|r| r.get("timer").is_some()).count(),
        4_000,
        "every timer fired once"
    );
    assert_eq!(
        out.iter().filter(|r| r["user"]["id"] == "z").count(),
        1,
        "the appended record is read"
    );
}
