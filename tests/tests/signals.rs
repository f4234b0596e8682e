//! SIGTERM (or SIGINT) stops a run gracefully: reading stops, what was read is processed
//! and written out, a checkpoint is taken, the summary says the input had not ended, and
//! the exit code is 0. The next run resumes from that checkpoint, pending timers included.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::{parse_jsonl, weir, Workdir};

#[test]
fn sigterm_stops_reading_writes_out_and_exits_cleanly() {
    let work = Workdir::new();
    let output = work.path("counts.jsonl");
    let mut child = Command::new(weir_e2e::weir_bin())
        .current_dir(weir_e2e::repo_root())
        .args([
            "run",
            "examples/ad-clicks/pipeline.toml",
            "--input",
            "clicks=-",
            "--no-checkpoints",
        ])
        .arg("--output")
        .arg(format!("main={}", output.display()))
        .arg("--dead-letter")
        .arg(work.path("dead.jsonl"))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut stdin = child.stdin.take().unwrap();
    for second in 0..5 {
        writeln!(
            stdin,
            r#"{{"ad_id": "ad-1", "clicked_at": "2026-11-29 10:00:0{second}.000"}}"#
        )
        .unwrap();
    }
    stdin.flush().unwrap();

    // The five rising counts are written while the input is idle.
    let deadline = Instant::now() + Duration::from_secs(20);
    while parse_jsonl(&std::fs::read_to_string(&output).unwrap_or_default()).len() < 5 {
        assert!(
            Instant::now() < deadline,
            "the counts were not written while idle"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let finished = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&finished.stderr);
    assert_eq!(finished.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("stopped before the input ended"),
        "{stderr}"
    );
    assert!(stderr.contains("processed 5 records"), "{stderr}");
    let counts: Vec<i64> = parse_jsonl(&std::fs::read_to_string(&output).unwrap())
        .iter()
        .map(|r| r["clicks"].as_i64().unwrap())
        .collect();
    assert_eq!(
        counts,
        vec![1, 2, 3, 4, 5],
        "no drain: the window's expiry timers did not fire"
    );
    drop(stdin);
}

#[test]
fn sigterm_checkpoints_and_the_next_run_resumes_with_state_and_timers() {
    let work = Workdir::new();
    let output = work.path("counts.jsonl");
    let state = work.path("state");
    let click = |at: &str| format!(r#"{{"ad_id": "ad-1", "clicked_at": "2026-11-29 {at}.000"}}"#);
    let first: Vec<String> = (0..5).map(|s| click(&format!("10:00:0{s}"))).collect();
    let later = click("10:10:00");

    // Uninterrupted: all six clicks from a file.
    let all = work.write("all.jsonl", &(first.join("\n") + "\n" + &later + "\n"));
    let expected = work.path("expected.jsonl");
    weir(&[
        "run",
        "examples/ad-clicks/pipeline.toml",
        "-q",
        "--no-checkpoints",
        "--input",
        &format!("clicks={all}"),
        "--output",
        &format!("main={}", expected.display()),
        "--dead-letter",
        &work.path("dead.jsonl").display().to_string(),
    ])
    .assert_success();

    // Interrupted: five clicks on stdin, then SIGTERM...
    let mut child = Command::new(weir_e2e::weir_bin())
        .current_dir(weir_e2e::repo_root())
        .args([
            "run",
            "examples/ad-clicks/pipeline.toml",
            "--input",
            "clicks=-",
        ])
        .arg("--output")
        .arg(format!("main={}", output.display()))
        .arg("--dead-letter")
        .arg(work.path("dead.jsonl"))
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut stdin = child.stdin.take().unwrap();
    for line in &first {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while parse_jsonl(&std::fs::read_to_string(&output).unwrap_or_default()).len() < 5 {
        assert!(Instant::now() < deadline, "the counts were not written");
        std::thread::sleep(Duration::from_millis(50));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let finished = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&finished.stderr);
    assert_eq!(finished.status.code(), Some(0), "{stderr}");
    let checkpoints = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".weir"))
        .count();
    assert!(checkpoints >= 1, "a checkpoint was taken on SIGTERM");
    drop(stdin);

    // ...and a second run on the rest of the input resumes: the first run's pending
    // expiry timers fire in it, so the output ends as the uninterrupted run's does.
    let rest = work.write("rest.jsonl", &(later + "\n"));
    let resumed = weir(&[
        "run",
        "examples/ad-clicks/pipeline.toml",
        "--input",
        &format!("clicks={rest}"),
        "--output",
        &format!("main={}", output.display()),
        "--dead-letter",
        &work.path("dead.jsonl").display().to_string(),
        "--state-dir",
        &state.display().to_string(),
    ]);
    resumed.assert_success();
    assert!(
        resumed.stderr.contains("resuming from checkpoint"),
        "{}",
        resumed.stderr
    );
    let expected = std::fs::read_to_string(&expected).unwrap();
    assert!(
        parse_jsonl(&expected).len() > 6,
        "the expiry timers emit too"
    );
    assert_eq!(std::fs::read_to_string(&output).unwrap(), expected);
}
