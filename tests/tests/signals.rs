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
