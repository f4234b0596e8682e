//! The PostgreSQL upsert sink (seed 001's `processed_events_aggregated` table).
//!
//! Records are mapped to columns by field, buffered, and written in batches with one
//! `INSERT ... SELECT FROM UNNEST(...) ON CONFLICT (primary key) DO UPDATE` per batch:
//! a batch keeps only the last record per primary key (PostgreSQL refuses the same key
//! twice in one statement), so replays and corrections converge to the same table.
//! Lost connections and other transient errors are retried with backoff, reconnecting;
//! anything else (a value the column's type rejects, a missing table) fails the run with
//! PostgreSQL's message. The batches are written by a thread of the sink's own (see
//! [`PostgresSink`]).

use crate::source::extract::FieldPaths;
use anyhow::Context as _;
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;
use weir_core::output::{OutputRecord, Sink};

/// A PostgreSQL table that records are upserted into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresTarget {
    /// The connection string, e.g. `postgres://user@127.0.0.1:5432/db`.
    pub url: String,
    /// The table upserted into (`schema.table` allowed).
    pub table: String,
    /// The table's primary-key columns: the upsert key. Each is one of `columns`.
    pub primary_key: Vec<String>,
    /// Column name, record field, SQL type if declared.
    pub columns: Vec<(String, String, Option<String>)>,
    /// Create the table from `columns` (which then all have a type) if it does not
    /// exist, on every connection.
    pub create_table: bool,
}

/// Records buffered before a write.
const BATCH: usize = 2_000;
/// Attempts for one batch before the run fails.
const ATTEMPTS: u32 = 12;

/// The column values of a batch's rows (text, cast by PostgreSQL), one vector per
/// column: the upsert's `UNNEST` arrays.
type Columns = Vec<Vec<Option<String>>>;

/// The sink of one output that upserts its records into a PostgreSQL table, in
/// batches (see the module docs).
///
/// Rows are mapped and de-duplicated on the caller's thread (the shard's), and each
/// full batch is handed to a writer thread of the sink's own, so the UDF goes on while
/// PostgreSQL writes. The hand-off holds one batch: at most three batches of
/// [`BATCH`] rows are in memory (one being filled, one waiting, one being written), and
/// a table that stays locked blocks the caller at the next full batch.
pub struct PostgresSink {
    location: String,
    /// Where each column's value is in a record.
    fields: FieldPaths,
    column_count: usize,
    primary_key: Vec<String>,
    pk_columns: Vec<usize>,
    /// Column values per buffered row, and each primary key's row, so a batch holds
    /// the last value per key.
    rows: Vec<Vec<Option<String>>>,
    by_key: HashMap<Vec<Option<String>>, usize>,
    /// The writer thread, or the error it stopped on.
    writer: WriterState,
}

/// Whether the writer thread runs.
enum WriterState {
    /// It takes jobs.
    Running(Writer),
    /// It stopped on this error (kept for every later call).
    Failed(String),
}

/// What the writer thread is asked to do, in order.
enum Job {
    /// Upsert one batch.
    Upsert(Columns),
    /// Answer once every batch before this one is written.
    Written(mpsc::Sender<()>),
}

/// The writer thread and the queue to it.
struct Writer {
    jobs: mpsc::SyncSender<Job>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

/// A connection to the table, reopened on transient errors, with its upsert statement.
/// Owned by the writer thread once the sink is connected.
struct Connection {
    location: String,
    target: PostgresTarget,
    client: Option<Client>,
    statement: Option<String>,
}

impl PostgresSink {
    /// Connects (creating the table if asked) and prepares the upsert, retrying
    /// transient failures, then starts the writer thread. Assumes every primary-key
    /// column is one of the columns, as the pipeline loader checks (it panics
    /// otherwise).
    pub fn connect(target: &PostgresTarget) -> anyhow::Result<Self> {
        let fields: Vec<&str> = target.columns.iter().map(|(_, f, _)| f.as_str()).collect();
        let fields = FieldPaths::new(&fields).map_err(|e| anyhow::anyhow!("{e}"))?;
        let pk_columns = target
            .primary_key
            .iter()
            .map(|pk| {
                target
                    .columns
                    .iter()
                    .position(|(c, ..)| c == pk)
                    .expect("checked")
            })
            .collect();
        let location = format!("postgres table {:?}", target.table);
        let mut connection = Connection {
            location: location.clone(),
            target: target.clone(),
            client: None,
            statement: None,
        };
        connection.with_retries("connect", |_| Ok(()))?;
        let (jobs, queue) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("weir-postgres-sink".into())
            .spawn(move || connection.serve(queue))
            .context("cannot start the PostgreSQL writer thread")?;
        Ok(Self {
            location,
            fields,
            column_count: target.columns.len(),
            primary_key: target.primary_key.clone(),
            pk_columns,
            rows: Vec::new(),
            by_key: HashMap::new(),
            writer: WriterState::Running(Writer { jobs, thread }),
        })
    }

    /// Hands `job` to the writer thread, waiting while the one before it waits too.
    /// Fails with the writer's error if it stopped on one.
    fn send(&mut self, job: Job) -> anyhow::Result<()> {
        if let WriterState::Running(writer) = &self.writer {
            if writer.jobs.send(job).is_ok() {
                return Ok(());
            }
        }
        Err(self.writer_failed())
    }

    /// The error the writer thread stopped on: joined the first time.
    fn writer_failed(&mut self) -> anyhow::Error {
        let state = std::mem::replace(&mut self.writer, WriterState::Failed(String::new()));
        let why = match state {
            WriterState::Failed(why) => why,
            WriterState::Running(writer) => {
                drop(writer.jobs);
                match writer.thread.join() {
                    Ok(Err(e)) => format!("{e:#}"),
                    Ok(Ok(())) => format!("{}: the writer thread stopped", self.location),
                    Err(_) => format!("{}: the writer thread panicked", self.location),
                }
            }
        };
        self.writer = WriterState::Failed(why.clone());
        anyhow::anyhow!("{why}")
    }

    /// Hands the buffered rows to the writer thread as one batch.
    fn hand_off(&mut self) -> anyhow::Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let mut columns: Columns = (0..self.column_count)
            .map(|_| Vec::with_capacity(self.rows.len()))
            .collect();
        for row in self.rows.drain(..) {
            for (column, value) in columns.iter_mut().zip(row) {
                column.push(value);
            }
        }
        self.by_key.clear();
        self.send(Job::Upsert(columns))
    }
}

impl Connection {
    /// The writer thread: upserts each batch in order, until the sink is dropped or a
    /// batch fails for good.
    fn serve(mut self, queue: mpsc::Receiver<Job>) -> anyhow::Result<()> {
        for job in queue {
            match job {
                Job::Upsert(columns) => self.upsert(&columns)?,
                Job::Written(done) => {
                    let _ = done.send(());
                }
            }
        }
        Ok(())
    }

    fn open(&mut self) -> anyhow::Result<&mut Client> {
        if self.client.is_none() {
            let mut client = Client::connect(&self.target.url, NoTls)?;
            if self.target.create_table {
                client.batch_execute(&create_table_sql(&self.target))?;
            }
            if self.statement.is_none() {
                let types = column_types(&mut client, &self.target)?;
                self.statement = Some(upsert_sql(&self.target, &types));
            }
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just opened"))
    }

    /// Runs `f` on a connection, reconnecting and retrying transient failures.
    fn with_retries(
        &mut self,
        what: &str,
        mut f: impl FnMut(&mut Self) -> Result<(), postgres::Error>,
    ) -> anyhow::Result<()> {
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=ATTEMPTS {
            let result = match self.open() {
                Ok(_) => f(self).map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) if attempt < ATTEMPTS && is_transient(&e) => {
                    tracing::warn!(
                        "{}: {what} failed ({}), retrying in {} ms ({attempt}/{ATTEMPTS})",
                        self.location,
                        describe(&e),
                        delay.as_millis()
                    );
                    self.client = None;
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    return Err(anyhow::anyhow!(
                        "{}: {what} failed: {}",
                        self.location,
                        describe(&e)
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Upserts one batch, retrying transient failures.
    fn upsert(&mut self, columns: &Columns) -> anyhow::Result<()> {
        self.with_retries("upsert", |connection| {
            let statement = connection.statement.clone().expect("prepared on connect");
            let params: Vec<&(dyn postgres::types::ToSql + Sync)> = columns
                .iter()
                .map(|c| c as &(dyn postgres::types::ToSql + Sync))
                .collect();
            let client = connection.client.as_mut().expect("connected");
            client.execute(statement.as_str(), &params).map(|_| ())
        })
    }
}

impl Sink for PostgresSink {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        let text = std::str::from_utf8(record.value).context("record is not UTF-8")?;
        let mut found = vec![None; self.column_count];
        self.fields
            .extract(text, &mut found)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.location))?;
        let row: Vec<Option<String>> = found
            .iter()
            .map(|raw| raw.and_then(|r| sql_text(r.get())))
            .collect();
        let key: Vec<Option<String>> = self.pk_columns.iter().map(|&c| row[c].clone()).collect();
        if let Some(pos) = key.iter().position(Option::is_none) {
            let column = &self.primary_key[pos];
            anyhow::bail!(
                "{}: a record has no value for primary-key column {column:?}: {text}",
                self.location
            );
        }
        match self.by_key.get(&key) {
            Some(&i) => self.rows[i] = row,
            None => {
                self.by_key.insert(key, self.rows.len());
                self.rows.push(row);
            }
        }
        if self.rows.len() >= BATCH {
            self.hand_off()?;
        }
        Ok(())
    }

    /// Hands on the buffered rows and waits until the writer thread has written every
    /// batch: after it returns, the table holds every record taken.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.hand_off()?;
        let (done, written) = mpsc::channel();
        self.send(Job::Written(done))?;
        match written.recv() {
            Ok(()) => Ok(()),
            Err(_) => Err(self.writer_failed()),
        }
    }
}

/// The writer thread finishes what it was handed before the sink is gone, so that
/// nothing is written after the run that owned the sink has returned.
impl Drop for PostgresSink {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.writer, WriterState::Failed(String::new()));
        if let WriterState::Running(writer) = state {
            drop(writer.jobs);
            let _ = writer.thread.join();
        }
    }
}

/// The text PostgreSQL casts to the column's type: a string's contents, a number's or
/// boolean's JSON text, nested JSON as JSON text; `null` is SQL NULL.
fn sql_text(raw: &str) -> Option<String> {
    match raw.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw).ok(),
        Some(b'n') => None,
        _ => Some(raw.to_string()),
    }
}

fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// The table name, quoted; `schema.table` is kept as two identifiers.
fn quote_table(table: &str) -> String {
    table.split('.').map(quote).collect::<Vec<_>>().join(".")
}

fn create_table_sql(t: &PostgresTarget) -> String {
    let columns: Vec<String> = t
        .columns
        .iter()
        .map(|(name, _, ty)| format!("{} {}", quote(name), ty.as_deref().unwrap_or("text")))
        .collect();
    let pk: Vec<String> = t.primary_key.iter().map(|c| quote(c)).collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))",
        quote_table(&t.table),
        columns.join(", "),
        pk.join(", ")
    )
}

/// Each column's type: declared in the pipeline, or read from the table.
fn column_types(client: &mut Client, t: &PostgresTarget) -> Result<Vec<String>, postgres::Error> {
    let mut from_table = HashMap::new();
    if t.columns.iter().any(|(_, _, ty)| ty.is_none()) {
        let rows = client.query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            &[&quote_table(&t.table)],
        )?;
        for row in rows {
            from_table.insert(row.get::<_, String>(0), row.get::<_, String>(1));
        }
    }
    Ok(t.columns
        .iter()
        .map(|(name, _, ty)| {
            ty.clone()
                .or_else(|| from_table.get(name).cloned())
                .unwrap_or_else(|| "text".into())
        })
        .collect())
}

fn upsert_sql(t: &PostgresTarget, types: &[String]) -> String {
    let names: Vec<String> = t.columns.iter().map(|(n, ..)| quote(n)).collect();
    let casts: Vec<String> = names
        .iter()
        .zip(types)
        .map(|(n, ty)| format!("u.{n}::{ty}"))
        .collect();
    let arrays: Vec<String> = (1..=names.len()).map(|i| format!("${i}::text[]")).collect();
    let pk: Vec<String> = t.primary_key.iter().map(|c| quote(c)).collect();
    let updates: Vec<String> = t
        .columns
        .iter()
        .filter(|(n, ..)| !t.primary_key.contains(n))
        .map(|(n, ..)| format!("{} = EXCLUDED.{}", quote(n), quote(n)))
        .collect();
    let on_conflict = if updates.is_empty() {
        "DO NOTHING".to_string()
    } else {
        format!("DO UPDATE SET {}", updates.join(", "))
    };
    format!(
        "INSERT INTO {table} ({cols}) SELECT {casts} FROM UNNEST({arrays}) AS u({cols}) ON CONFLICT ({pk}) {on_conflict}",
        table = quote_table(&t.table),
        cols = names.join(", "),
        casts = casts.join(", "),
        arrays = arrays.join(", "),
        pk = pk.join(", "),
    )
}

/// Whether an error may go away by itself: the connection, or the server, went away.
fn is_transient(e: &anyhow::Error) -> bool {
    let Some(pg) = e.downcast_ref::<postgres::Error>() else {
        return false;
    };
    if pg.is_closed() {
        return true;
    }
    match pg.code() {
        None => true, // I/O: refused, reset, timed out
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                ]
                .contains(code)
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
        }
    }
}

fn describe(e: &anyhow::Error) -> String {
    match e
        .downcast_ref::<postgres::Error>()
        .and_then(postgres::Error::as_db_error)
    {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => format!("{e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> PostgresTarget {
        PostgresTarget {
            url: "postgres://x".into(),
            table: "processed_events_aggregated".into(),
            primary_key: vec!["window_start".into(), "zone".into()],
            columns: vec![
                (
                    "window_start".into(),
                    "window_start".into(),
                    Some("timestamp".into()),
                ),
                ("zone".into(), "PULocationID".into(), Some("integer".into())),
                (
                    "revenue".into(),
                    "total_revenue".into(),
                    Some("numeric(12,2)".into()),
                ),
            ],
            create_table: true,
        }
    }

    #[test]
    fn statements() {
        let t = target();
        assert_eq!(
            create_table_sql(&t),
            r#"CREATE TABLE IF NOT EXISTS "processed_events_aggregated" ("window_start" timestamp, "zone" integer, "revenue" numeric(12,2), PRIMARY KEY ("window_start", "zone"))"#
        );
        let types = vec![
            "timestamp".to_string(),
            "integer".into(),
            "numeric(12,2)".into(),
        ];
        assert_eq!(
            upsert_sql(&t, &types),
            r#"INSERT INTO "processed_events_aggregated" ("window_start", "zone", "revenue") SELECT u."window_start"::timestamp, u."zone"::integer, u."revenue"::numeric(12,2) FROM UNNEST($1::text[], $2::text[], $3::text[]) AS u("window_start", "zone", "revenue") ON CONFLICT ("window_start", "zone") DO UPDATE SET "revenue" = EXCLUDED."revenue""#
        );
    }

    #[test]
    fn values_as_sql_text() {
        assert_eq!(sql_text(r#""a\"b""#), Some("a\"b".into()));
        assert_eq!(sql_text("12.50"), Some("12.50".into()));
        assert_eq!(sql_text("null"), None);
        assert_eq!(sql_text(r#"{"x": 1}"#), Some(r#"{"x": 1}"#.into()));
        assert_eq!(quote_table("public.t\"x"), r#""public"."t""x""#);
    }
}
