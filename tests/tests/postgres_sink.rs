//! The PostgreSQL upsert sink against a real server (started by scripts/services.sh):
//! the seed 001 pipeline with its main output upserted into a table ends with exactly the
//! rows of the file upsert sink on the same rides, corrections included; a locked table
//! stalls the run and its source (backpressure) without growing its memory; a run long
//! enough for many full batches (written by the sink's own thread) ends with each key's
//! last record, and a batch the table refuses in the middle of it fails the run.

use std::collections::BTreeMap;
use weir_e2e::gen::{clicks, rides};
use weir_e2e::services::{
    counter_counts_to_postgres, counter_pipeline_text, file_revenue_rows, postgres_url,
    revenue_rows, taxi_revenue_to_postgres, unique_table,
};
use weir_e2e::{read_jsonl, weir, Workdir};

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

/// The run failed on an upsert into `table` that PostgreSQL refused with `message`.
fn assert_upsert_failed(run: &weir_e2e::Finished, table: &str, message: &str) {
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("postgres table \"{table}\": upsert failed")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(message), "{}", run.stderr);
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
    assert_upsert_failed(&run, &table, "invalid input syntax for type date");
}

/// The change-only counter over `clicks` with the sink lines `sink` for its counts,
/// written to `<name>.toml`; returns the pipeline file's path.
fn counter_pipeline(work: &Workdir, clicks: &str, name: &str, sink: &str) -> String {
    work.write(
        &format!("{name}.toml"),
        &counter_pipeline_text(std::path::Path::new(clicks), sink),
    )
}

/// The 60,000 clicks on 6,000 ads of the counter tests below: at about one count per
/// click, some 30 full batches of distinct ads.
fn many_clicks(work: &Workdir) -> String {
    let records: Vec<_> = clicks(60_000, 6_000, 61, 40, 200, 0.0, 0.0)
        .iter()
        .map(|c| c.to_json())
        .collect();
    work.write_jsonl("clicks.jsonl", &records)
}

/// Batches go to PostgreSQL from the sink's writer thread while the UDF goes on; they
/// must land in order, so the table ends with each ad's last count as the file run
/// emitted it, across some 30 full batches and the final flush.
#[test]
fn many_batches_end_with_each_keys_last_record() {
    let work = Workdir::new();
    let input = many_clicks(&work);
    let file = work.path("counts.jsonl").display().to_string();
    weir(&[
        "run",
        "-q",
        &counter_pipeline(
            &work,
            &input,
            "file",
            &format!("type = \"file\"\npath = \"{file}\""),
        ),
    ])
    .assert_success();
    let mut expected = BTreeMap::new();
    let emitted = read_jsonl(&file);
    for record in &emitted {
        expected.insert(
            record["ad_id"].as_str().unwrap().to_string(),
            (
                record["clicks"].as_i64().unwrap(),
                record["updated_at"].as_str().unwrap().to_string(),
            ),
        );
    }
    assert!(emitted.len() > 40_000, "{} counts emitted", emitted.len());

    let table = unique_table("click_counts");
    weir(&[
        "run",
        "-q",
        &counter_pipeline(&work, &input, &table, &counter_counts_to_postgres(&table)),
    ])
    .assert_success();
    let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls).unwrap();
    let rows: BTreeMap<String, (i64, String)> = client
        .query(
            &format!(
                "SELECT ad_id, clicks, to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.MS') FROM \"{table}\""
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect();
    assert_eq!(rows.len(), expected.len());
    assert_eq!(rows, expected);
}

/// A batch the table refuses after many have been written (a check constraint that the
/// counts of the last third of the clicks' 20 minutes break) fails the run with PostgreSQL's
/// message, though the writer thread finds it while the UDF is already further on.
#[test]
fn a_batch_refused_in_the_middle_of_a_run_fails_it() {
    let work = Workdir::new();
    let input = many_clicks(&work);
    let table = unique_table("click_counts_checked");
    let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls).unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (ad_id text PRIMARY KEY, clicks bigint, updated_at timestamp CHECK (updated_at < '2026-11-29 10:13:00'))"
        ))
        .unwrap();
    let pipeline = counter_pipeline(&work, &input, &table, &counter_counts_to_postgres(&table));
    let run = weir(&["run", "-q", &pipeline]);
    assert_upsert_failed(&run, &table, "violates check constraint");
    let written: i64 = client
        .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
        .unwrap()
        .get(0);
    assert!(written > 0, "no batch was written before the refused one");
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
