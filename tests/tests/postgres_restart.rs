//! PostgreSQL restarted in the middle of a run: the sink logs, retries with backoff,
//! reconnects and catches up, and the table ends as if nothing had happened. In a test
//! binary of its own, since it stops the server that other tests use.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::services::{
    file_revenue_rows, postgres_url, revenue_rows, taxi_revenue_to_postgres, unique_table,
};
use weir_e2e::Workdir;

fn ride(i: i64) -> Value {
    let zone = [79, 132, 161][(i % 3) as usize];
    json!({
        "PULocationID": zone,
        "total_amount": format!("{}.{:02}", 5 + i % 40, i % 100),
        "tpep_pickup_datetime": 1_761_955_200_000i64 + i * 30_000,
    })
}

fn services(command: &str) {
    let script = weir_e2e::repo_root().join("scripts/services.sh");
    let status = Command::new("bash")
        .arg(script)
        .arg(command)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "scripts/services.sh {command} failed");
}

#[test]
fn the_sink_catches_up_after_postgres_restarts_mid_run() {
    let work = Workdir::new();
    let rides: Vec<Value> = (0..1_200).map(ride).collect();
    let all = work.write_jsonl("rides.jsonl", &rides);
    let late = work.path("late.jsonl").display().to_string();
    let dead = work.path("dead.jsonl").display().to_string();

    // What the table must end with: the file upsert sink on the same rides.
    let expected = file_revenue_rows(&work, &all);

    let table = unique_table("revenue_restart");
    let text = std::fs::read_to_string(taxi_revenue_to_postgres(&work, &table)).unwrap();
    let pipeline = work.write("pg.toml", &text);
    let mut child = Command::new(weir_e2e::weir_bin())
        .current_dir(weir_e2e::repo_root())
        .args([
            "run",
            &pipeline,
            "--input",
            "rides=-",
            "--output",
            &format!("late={late}"),
            "--dead-letter",
            &dead,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (first, second) = rides.split_at(600);
    for r in first {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    // The first windows reach the table while the input is idle.
    let deadline = Instant::now() + Duration::from_secs(30);
    while table_count(&table) == 0 {
        assert!(Instant::now() < deadline, "no rows reached PostgreSQL");
        std::thread::sleep(Duration::from_millis(100));
    }

    services("stop");
    for r in second {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    services("start");
    drop(stdin);

    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("retrying in"),
        "the retries are logged:\n{stderr}"
    );
    assert_eq!(revenue_rows(&table), expected);
}

fn table_count(table: &str) -> i64 {
    let Ok(mut client) = postgres::Client::connect(&postgres_url(), postgres::NoTls) else {
        return 0;
    };
    client
        .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
}
