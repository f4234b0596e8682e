//! The broker and database the connector tests use, started by the project's own
//! `scripts/services.sh` (idempotent). `make test` starts them before the tests and exports
//! their addresses; a test run on its own starts them itself, so it never skips.

use std::process::Command;
use std::sync::OnceLock;

/// `KEY=VALUE` lines printed by `scripts/services.sh start`.
fn started() -> &'static Vec<(String, String)> {
    static LINES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    LINES.get_or_init(|| {
        let script = crate::repo_root().join("scripts/services.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("start")
            .output()
            .expect("run scripts/services.sh");
        assert!(
            out.status.success(),
            "scripts/services.sh start failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            })
            .collect()
    })
}

fn address(env: &str, key: &str) -> String {
    if let Ok(value) = std::env::var(env) {
        return value;
    }
    started()
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("scripts/services.sh start printed no {key}= line"))
}

/// The PostgreSQL connection string (`WEIR_PG_URL`, or from the services script).
pub fn postgres_url() -> String {
    address("WEIR_PG_URL", "PG")
}

/// The Kafka bootstrap brokers (`WEIR_KAFKA`, or from the services script).
pub fn kafka_brokers() -> String {
    address("WEIR_KAFKA", "KAFKA")
}

/// A table name no other test uses.
pub fn unique_table(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The change-only counter (`udfs/change-only-counter`) over the clicks at `clicks` (JSON
/// lines), with the `[[sink]]` section `sink` for its main output: the pipeline's text.
pub fn counter_pipeline_text(clicks: &std::path::Path, sink: &str) -> String {
    format!(
        r#"[[source]]
name = "clicks"
type = "file"
path = "{clicks}"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "{udf}"

[[sink]]
output = "main"
{sink}
"#,
        clicks = clicks.display(),
        udf = crate::component("change-only-counter").display()
    )
}

/// The lines of a `postgres` sink that upserts the change-only counter's counts into
/// `table` (created if missing): one row per ad, its last count and when.
pub fn counter_counts_to_postgres(table: &str) -> String {
    format!(
        r#"type = "postgres"
url = "{url}"
table = "{table}"
create_table = true
primary_key = ["ad_id"]
columns = [
    {{ name = "ad_id", type = "text" }},
    {{ name = "clicks", type = "bigint" }},
    {{ name = "updated_at", type = "timestamp" }},
]"#,
        url = postgres_url()
    )
}

/// The seed 001 pipeline (`examples/taxi-revenue`) with its main output upserted into the
/// PostgreSQL table `table` instead of a file; returns the new pipeline file's path.
pub fn taxi_revenue_to_postgres(work: &crate::Workdir, table: &str) -> String {
    let dir = crate::repo_root().join("examples/taxi-revenue");
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).expect("the example pipeline");
    let start = text
        .find("[[sink]]\noutput = \"main\"")
        .expect("the main sink of the example");
    let end = start
        + text[start..]
            .find("\n\n")
            .expect("the end of the main sink");
    let sink = format!(
        r#"[[sink]]
output = "main"
type = "postgres"
url = "{url}"
table = "{table}"
create_table = true
primary_key = ["window_start", "pulocationid"]
columns = [
    {{ name = "window_start", type = "timestamp" }},
    {{ name = "pulocationid", field = "PULocationID", type = "integer" }},
    {{ name = "num_trips", type = "bigint" }},
    {{ name = "total_revenue", type = "numeric(12,2)" }},
]"#,
        url = postgres_url()
    );
    let text = format!("{}{}{}", &text[..start], sink, &text[end..]).replace(
        "path = \"../../",
        &format!("path = \"{}/../../", dir.display()),
    );
    work.write(&format!("{table}.toml"), &text)
}

/// The rows of a table made by [`taxi_revenue_to_postgres`], as the JSON text the file
/// upsert sink writes for the same rows.
pub fn revenue_rows(table: &str) -> std::collections::BTreeSet<String> {
    let mut client = postgres::Client::connect(&postgres_url(), postgres::NoTls).expect("connect");
    let query = format!(
        "SELECT to_char(window_start, 'YYYY-MM-DD HH24:MI:SS'), pulocationid, num_trips, total_revenue::text FROM \"{table}\""
    );
    let rows = client.query(&query, &[]).expect("query the table");
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "window_start": r.get::<_, String>(0),
                "PULocationID": r.get::<_, i32>(1),
                "num_trips": r.get::<_, i64>(2),
                "total_revenue": r.get::<_, String>(3),
            })
            .to_string()
        })
        .collect()
}

/// The final table of `examples/taxi-revenue` on `rides` with its file upsert sink: what
/// a PostgreSQL table of the same pipeline must end with. Rows as JSON text.
pub fn file_revenue_rows(work: &crate::Workdir, rides: &str) -> std::collections::BTreeSet<String> {
    let table = work.path("file-table.jsonl").display().to_string();
    let late = work.path("file-late.jsonl").display().to_string();
    let dead = work.path("file-dead.jsonl").display().to_string();
    crate::weir(&[
        "run",
        "examples/taxi-revenue/pipeline.toml",
        "-q",
        "--input",
        &format!("rides={rides}"),
        "--output",
        &format!("main={table}"),
        "--output",
        &format!("late={late}"),
        "--dead-letter",
        &dead,
    ])
    .assert_success();
    crate::read_jsonl(&table)
        .iter()
        .map(serde_json::Value::to_string)
        .collect()
}
