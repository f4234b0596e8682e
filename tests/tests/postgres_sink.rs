//! The PostgreSQL upsert sink against a real server (started by scripts/services.sh):
//! the seed 001 pipeline with its main output upserted into a table ends with exactly the
//! rows of the file upsert sink on the same rides, corrections included; a locked table
//! stalls the run and its source (backpressure) without growing its memory.

use weir_e2e::gen::rides;
use weir_e2e::services::{file_revenue_rows, revenue_rows, taxi_revenue_to_postgres, unique_table};
use weir_e2e::{weir, Workdir};

#[test]
fn the_table_ends_with_the_same_rows_as_the_file_upsert_sink() {
    let work = Workdir::new();
    let input = work.write_jsonl("rides.jsonl", &rides(3_000, 17));
    let table = unique_table("revenue");
    let dead = work.path("dead.jsonl").display().to_string();
    let late = work.path("late.jsonl").display().to_string();

    let expected = file_revenue_rows(&work, &input);
    assert!(
        expected.len() > 20,
        "enough windows to mean something: {}",
        expected.len()
    );

    let pipeline = taxi_revenue_to_postgres(&work, &table);
    let run_into_postgres = || {
        let rides = format!("rides={input}");
        let late = format!("late={late}");
        let args = [
            "run",
            &pipeline,
            "-q",
            "--input",
            &rides,
            "--output",
            &late,
            "--dead-letter",
            &dead,
        ];
        weir(&args).assert_success();
    };
    run_into_postgres();
    assert_eq!(revenue_rows(&table), expected);

    // Running again (a replay) converges to the same table.
    run_into_postgres();
    assert_eq!(revenue_rows(&table), expected);
}

#[test]
fn a_value_the_column_rejects_fails_the_run_with_postgres_message() {
    let work = Workdir::new();
    let table = unique_table("revenue_bad");
    let good = std::fs::read_to_string(taxi_revenue_to_postgres(&work, &table)).unwrap();
    let bad = good.replace("type = \"bigint\"", "type = \"date\"");
    let pipeline_path = work.write("bad.toml", &bad);
    let input = work.write_jsonl("rides.jsonl", &rides(50, 3));
    let run = weir(&[
        "run",
        &pipeline_path,
        "-q",
        "--input",
        &format!("rides={input}"),
        "--dead-letter",
        &work.path("d.jsonl").display().to_string(),
        "--output",
        &format!("late={}", work.path("l.jsonl").display()),
    ]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("postgres table \"{table}\": upsert failed")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("invalid input syntax for type date"),
        "{}",
        run.stderr
    );
}

/// Backpressure: while the table is locked, the sink's insert waits, the shards wait for
/// it, the run stops reading and its stdin stops taking lines; memory stays within the
/// read-ahead's bound. Once the lock is released the run catches up and the table ends
/// with the file run's rows. Run at parallelism 2.
#[test]
fn a_locked_table_stalls_the_source_without_growing_memory() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let work = Workdir::new();
    let all = rides(60_000, 23);
    let input = work.write_jsonl("rides.jsonl", &all);
    let expected = file_revenue_rows(&work, &input);
    let table = unique_table("revenue_locked");
    let pipeline = taxi_revenue_to_postgres(&work, &table);
    let late = format!("late={}", work.path("late.jsonl").display());
    let dead = work.path("dead.jsonl").display().to_string();
    let mut child = Command::new(weir_e2e::weir_bin())
        .current_dir(weir_e2e::repo_root())
        .args([
            "run",
            &pipeline,
            "-q",
            "--parallelism",
            "2",
            "--input",
            "rides=-",
        ])
        .args(["--output", &late, "--dead-letter", &dead])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines: Vec<String> = all.iter().map(|r| r.to_string()).collect();
    let (first, rest) = lines.split_at(2_000);
    for line in first {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let url = weir_e2e::services::postgres_url();
    let count = |client: &mut postgres::Client| -> i64 {
        client
            .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
            .map(|r| r.get::<_, i64>(0))
            .unwrap_or(0)
    };
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&mut client) == 0 {
        assert!(Instant::now() < deadline, "no rows reached PostgreSQL");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Lock the table, then feed the rest from a thread that counts what stdin took.
    let mut lock = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut tx = lock.transaction().unwrap();
    tx.batch_execute(&format!("LOCK TABLE \"{table}\" IN ACCESS EXCLUSIVE MODE"))
        .unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let written = Arc::clone(&written);
        let rest = rest.to_vec();
        std::thread::spawn(move || {
            for line in rest {
                writeln!(stdin, "{line}").unwrap();
                written.fetch_add(1, Ordering::Relaxed);
                if written.load(Ordering::Relaxed) == 500 {
                    // A pause: the run goes idle and flushes into the locked table.
                    stdin.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let stalled_at = written.load(Ordering::Relaxed);
    let rss_kb = rss_kb(child.id());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        written.load(Ordering::Relaxed),
        stalled_at,
        "stdin kept taking lines while the sink could not write"
    );
    assert!(
        stalled_at < rest.len() / 2,
        "{stalled_at} of {} lines taken: the source did not stall",
        rest.len()
    );
    // The bound: the read-ahead (512 records an input, one run in flight), the shards'
    // hand-off buffers and the sink's batch, far below the 60,000 rides.
    assert!(rss_kb < 64_000, "{rss_kb} kB resident while stalled");
    tx.commit().unwrap();
    writer.join().unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(revenue_rows(&table), expected);
    eprintln!("stdin stalled after {stalled_at} lines; {rss_kb} kB resident meanwhile");
}

/// The resident memory of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}
