//! `weir deploy`, `weir status`, `weir rollback`, `weir stop`: clients of `weir serve`'s
//! admin API.

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How a client reaches `weir serve`.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// The server's admin API.
    #[arg(long, default_value = "http://127.0.0.1:7878", env = "WEIR_SERVER")]
    pub server: String,
    /// The API token (default: $WEIR_TOKEN, or the one in the server's data dir).
    #[arg(long)]
    pub token: Option<String>,
    /// The server's data dir, where it keeps its token.
    #[arg(long, default_value = ".weir-serve")]
    pub data_dir: PathBuf,
}

impl ServerArgs {
    /// A client of the server these arguments name.
    pub fn client(&self) -> Client {
        Client::new(&self.server, self.token.clone(), &self.data_dir)
    }
}

/// Prints a client call's answer, or its error.
pub fn answer(result: anyhow::Result<serde_json::Value>) -> ExitCode {
    match result {
        Ok(value) => {
            if !value.is_null() {
                use std::io::Write as _;
                let text = serde_json::to_string_pretty(&value).unwrap_or_default();
                // A closed pipe (`| head`) is not an error worth a panic.
                let _ = writeln!(std::io::stdout(), "{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where the server is and how to talk to it.
#[derive(Debug, Clone)]
pub struct Client {
    /// The admin API's base URL, without a trailing `/`.
    pub server: String,
    /// The bearer token sent with mutating calls; without one, the server refuses them.
    pub token: Option<String>,
}

impl Client {
    /// A client for `server`; the token is the one given, or `$WEIR_TOKEN`, or the one
    /// `weir serve` keeps in `data_dir`.
    pub fn new(server: &str, token: Option<String>, data_dir: &Path) -> Self {
        let token = token
            .or_else(|| std::env::var("WEIR_TOKEN").ok())
            .or_else(|| {
                std::fs::read_to_string(data_dir.join("token"))
                    .ok()
                    .map(|t| t.trim().to_string())
            });
        Self {
            server: server.trim_end_matches('/').to_string(),
            token,
        }
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into()
    }

    /// Sends a request; returns the JSON body of a 2xx answer, or the server's error.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<serde_json::Value> {
        let url = format!("{}{path}", self.server);
        let agent = Self::agent();
        let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match (method, body) {
            ("GET", _) => agent.get(&url).call(),
            (method, body) => {
                let mut request = match method {
                    "PUT" => agent.put(&url),
                    "DELETE" => {
                        let mut r = agent.delete(&url);
                        if let Some(b) = &bearer {
                            r = r.header("Authorization", b);
                        }
                        return finish(r.call(), &url);
                    }
                    _ => agent.post(&url),
                };
                if let Some(b) = &bearer {
                    request = request.header("Authorization", b);
                }
                request.send(body.unwrap_or_default())
            }
        };
        finish(result, &url)
    }

    /// Starts a pipeline from its file.
    pub fn create(&self, pipeline: &Path) -> anyhow::Result<serde_json::Value> {
        let text = std::fs::read_to_string(pipeline)
            .with_context(|| format!("cannot read pipeline file {}", pipeline.display()))?;
        let base = absolute(pipeline.parent().unwrap_or(Path::new(".")))?;
        let query = format!(
            "/api/pipelines?base={}",
            percent_encode(&base.display().to_string())
        );
        self.call("POST", &query, Some(text.into_bytes()))
    }

    /// Swaps in a new UDF component; with `wait`, the answer comes once probation has
    /// decided (a rollback is an error).
    pub fn deploy_udf(
        &self,
        pipeline: &str,
        stage: Option<&str>,
        wasm: &Path,
        wait: bool,
    ) -> anyhow::Result<serde_json::Value> {
        let bytes =
            std::fs::read(wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
        let wait = wait.then_some("true");
        let query = query(&[("stage", stage), ("wait", wait)]);
        self.call(
            "PUT",
            &format!("/api/pipelines/{pipeline}/udf{query}"),
            Some(bytes),
        )
    }

    /// Every pipeline the server runs, or with `pipeline` that one (`GET`, no token
    /// needed).
    pub fn status(&self, pipeline: Option<&str>) -> anyhow::Result<serde_json::Value> {
        match pipeline {
            Some(name) => self.call("GET", &format!("/api/pipelines/{name}"), None),
            None => self.call("GET", "/api/pipelines", None),
        }
    }

    /// Swaps the previous UDF version of the pipeline (of its stage `stage`) back in.
    pub fn rollback(
        &self,
        pipeline: &str,
        stage: Option<&str>,
    ) -> anyhow::Result<serde_json::Value> {
        let query = query(&[("stage", stage)]);
        self.call(
            "POST",
            &format!("/api/pipelines/{pipeline}/rollback{query}"),
            Some(Vec::new()),
        )
    }

    /// Stops the pipeline gracefully; the answer comes once it has stopped.
    pub fn stop(&self, pipeline: &str) -> anyhow::Result<serde_json::Value> {
        self.call(
            "POST",
            &format!("/api/pipelines/{pipeline}/stop"),
            Some(Vec::new()),
        )
    }
}

/// A URL's query of the `params` that have a value (`?stage=sum&wait=true`), each value
/// percent-encoded but for letters, digits and `-_.~`; empty when none has one.
fn query(params: &[(&str, Option<&str>)]) -> String {
    let encode = |value: &str| -> String {
        value
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect()
    };
    let given: Vec<String> = (params.iter())
        .filter_map(|(name, value)| Some(format!("{name}={}", encode((*value)?))))
        .collect();
    match given.is_empty() {
        true => String::new(),
        false => format!("?{}", given.join("&")),
    }
}

fn finish(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    url: &str,
) -> anyhow::Result<serde_json::Value> {
    let mut response = result.map_err(|e| match e {
        ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
            anyhow::anyhow!("no weir serve answers at {url} ({e}); start one with `weir serve`")
        }
        other => anyhow::anyhow!("{url}: {other}"),
    })?;
    let status = response.status();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let json: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    };
    if status.is_success() {
        Ok(json)
    } else {
        let message = json
            .get("error")
            .and_then(|e| e.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| json.to_string());
        anyhow::bail!("weir serve refused ({status}): {message}")
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `weir status`'s table: one line per pipeline of the admin API's answer (one pipeline
/// object, or `{"pipelines": [...]}`), with the watermark lag in human units.
pub fn status_table(answer: &serde_json::Value) -> String {
    let pipelines = match answer.get("pipelines").and_then(|p| p.as_array()) {
        Some(list) => list.clone(),
        None => vec![answer.clone()],
    };
    let header = [
        "NAME",
        "STATE",
        "VERSION",
        "RECORDS/S",
        "PROCESSED",
        "WATERMARK LAG",
        "DEAD LETTERS",
        "ERRORS",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    // A pipeline of several stages is a row per stage, `pipeline/stage`: a stage is
    // described as a pipeline of one stage is (state, UDF and status).
    let rows_of = |pipeline: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        let name = pipeline["name"].as_str().unwrap_or("?");
        match pipeline["stages"].as_array() {
            Some(stages) if stages.len() > 1 => stages
                .iter()
                .map(|s| {
                    (
                        format!("{name}/{}", s["name"].as_str().unwrap_or("?")),
                        s.clone(),
                    )
                })
                .collect(),
            _ => vec![(name.to_string(), pipeline.clone())],
        }
    };
    for (name, part) in pipelines.iter().flat_map(rows_of) {
        let status = &part["status"];
        let number = |value: &serde_json::Value| {
            value
                .as_u64()
                .map_or_else(|| "-".to_string(), |n| n.to_string())
        };
        rows.push(vec![
            name,
            part["state"].as_str().unwrap_or("?").to_string(),
            number(&part["udf"]["version"]),
            status["records_per_second"]
                .as_f64()
                .map_or_else(|| "-".to_string(), |r| format!("{r:.1}")),
            number(&status["processed"]),
            status["watermark_lag_ms"]
                .as_i64()
                .map_or_else(|| "-".to_string(), human_duration),
            number(&status["dead_letters"]),
            number(&status["udf_errors"]),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    let mut table = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, width))| match column {
                // Names and states read left-aligned, numbers right-aligned.
                0 | 1 => format!("{cell:<width$}"),
                _ => format!("{cell:>width$}"),
            })
            .collect();
        table.push_str(cells.join("  ").trim_end());
        table.push('\n');
    }
    if pipelines.is_empty() {
        table.push_str("(no pipelines)\n");
    }
    table
}

/// A duration in ms the way a person reads it: `850 ms`, `12.3 s`, `4 min 5 s`,
/// `3 h 12 min`, `2 d 4 h`.
pub fn human_duration(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let (s, m, h, d) = (ms / 1000, ms / 60_000, ms / 3_600_000, ms / 86_400_000);
    let text = if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{m} min {} s", s % 60)
    } else if ms < 86_400_000 {
        format!("{h} h {} min", m % 60)
    } else {
        format!("{d} d {} h", h % 24)
    };
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(human_duration(850), "850 ms");
        assert_eq!(human_duration(12_340), "12.3 s");
        assert_eq!(human_duration(245_000), "4 min 5 s");
        assert_eq!(human_duration(11_520_000), "3 h 12 min");
        assert_eq!(human_duration(31_555_492_058), "365 d 5 h");
        assert_eq!(human_duration(-1500), "-1.5 s");
    }

    #[test]
    fn the_status_table_has_one_line_per_pipeline() {
        let answer = serde_json::json!({"pipelines": [{
            "name": "counter", "state": "running", "udf": {"version": 2},
            "status": {"records_per_second": 9.87, "processed": 10, "watermark_lag_ms": 90_000,
                       "dead_letters": 1, "udf_errors": 0}
        }]});
        assert_eq!(
            status_table(&answer),
            "NAME     STATE    VERSION  RECORDS/S  PROCESSED  WATERMARK LAG  DEAD LETTERS  ERRORS\n\
             counter  running        2        9.9         10     1 min 30 s             1       0\n"
        );
    }
}
