//! SIGTERM (or SIGINT) stops a run gracefully: reading stops, what was read is processed
//! and written out, a checkpoint is taken, the summary says the input had not ended, and
//! the exit code is 0. That the next run resumes from that checkpoint, pending timers
//! included, is the golden case `tests/cases/restart-ad-clicks-sigterm`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::{parse_jsonl, Workdir};

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

/// A stop during a retry's backoff ends the retries at once: the record is not taken
/// through the rest of them (nor dead-lettered, nor counted as done), no checkpoint is
/// taken past it, and the run that resumes processes it.
#[test]
fn sigterm_during_a_retry_backoff_leaves_the_record_for_the_resume() {
    let work = Workdir::new();
    let input = work.write(
        "in.jsonl",
        concat!(
            r#"{"id":"a","ts":1000}"#,
            "\n",
            // Fails its first two calls in an instance (a transient failure).
            r#"{"id":"b","ts":2000,"fail":"flaky","count":2}"#,
            "\n",
            r#"{"id":"c","ts":3000}"#,
            "\n"
        ),
    );
    let output = work.path("out.jsonl");
    let dead = work.path("dead.jsonl");
    let pipeline = work.write(
        "pipeline.toml",
        &format!(
            r#"name = "retry-stop"
[[source]]
name = "events"
type = "file"
path = "{input}"
key = "id"
timestamp = "ts"
timestamp_format = "epoch_ms"
[udf]
path = "{udf}"
max_batch = 0
on_error = "retry"
retries = 1000
retry_backoff = "500ms"
after_retries = "dead-letter"
[[sink]]
output = "main"
type = "file"
path = "{output}"
[dead_letter]
path = "{dead}"
"#,
            udf = weir_e2e::component("misbehaving-udf").display(),
            output = output.display(),
            dead = dead.display()
        ),
    );
    let mut child = Command::new(weir_e2e::weir_bin())
        .args(["run", &pipeline])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let log = weir_e2e::StderrLog::capture(&mut child);
    weir_e2e::wait_for("the first retry warning", Duration::from_secs(20), || {
        log.contains("retry 1 of 1000")
    });
    let stopped_at = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    let stderr = log.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stopped_at.elapsed() < Duration::from_secs(5),
        "the stop waited for the retries: {stderr}"
    );
    assert!(
        stderr.contains("stopped while waiting to retry a failed call"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("retry 3 of"),
        "no retry after the stop: {stderr}"
    );
    assert!(
        parse_jsonl(&std::fs::read_to_string(&dead).unwrap_or_default()).is_empty(),
        "nothing dead-lettered"
    );

    // The run that resumes (from scratch: no checkpoint was taken past the record)
    // processes every record once, b after its two failed calls.
    let resumed = weir_e2e::weir(&["run", &pipeline]);
    resumed.assert_success();
    let ids: Vec<String> = parse_jsonl(&std::fs::read_to_string(&output).unwrap())
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(parse_jsonl(&std::fs::read_to_string(&dead).unwrap_or_default()).is_empty());
}
