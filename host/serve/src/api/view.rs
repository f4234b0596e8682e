//! How the admin API shows a pipeline: its stages, versions, status and graph, and its
//! definition without secrets to a reader without the token.

use super::authorize;
use crate::deployment::{DeployedStage, Deployment};
use crate::server::Server;
use axum::http::HeaderMap;
use serde_json::json;

/// One pipeline as the API shows it: its state, its stages (each with its UDF, versions
/// and status), its history; a pipeline of one stage shows that stage's UDF, versions
/// and status at the top too.
pub fn describe(server: &Server, name: &str, d: &Deployment) -> serde_json::Value {
    let (history, definition) = server
        .registry
        .get(name)
        .map(|r| (r.history, r.definition))
        .unwrap_or_default();
    // One status per stage, read once: the pipeline's state agrees with what each
    // stage's shows.
    let statuses: Vec<_> = d.stages.iter().map(|s| s.control.status()).collect();
    let states: Vec<_> = statuses.iter().map(|s| s.state).collect();
    let stages: Vec<serde_json::Value> = (d.stages.iter())
        .zip(statuses)
        .map(|(stage, status)| describe_stage(stage, status))
        .collect();
    let mut pipeline = json!({
        "name": name,
        "definition": definition,
        "graph": graph(d),
        "state": d.state_of(&states),
        "history": history,
    });
    if let [only] = stages.as_slice() {
        for field in ["udf", "versions", "status"] {
            pipeline[field] = only[field].clone();
        }
    }
    pipeline["stages"] = json!(stages);
    pipeline
}

/// One stage as the API shows it, from its live `status`: its name, state, UDF (with
/// the version running), kept versions and status.
fn describe_stage(stage: &DeployedStage, status: weir_run::LiveStatus) -> serde_json::Value {
    json!({
        "name": stage.name,
        "state": status.state,
        "udf": {
            "name": stage.spec.udf.name,
            "version": stage.versions.number_of(&status.udf_sha256),
            "sha256": status.udf_sha256,
        },
        "versions": stage.versions.info(&status.udf_sha256),
        "status": status,
    })
}

/// The pipeline's parts as the console draws them: per stage its inputs (sources, or
/// other stages' outputs: type `stage`, named by the stage, or `stage.output` for a
/// side output), its UDF, and per output the sink it is routed to and how many stages
/// read it. A pipeline of one stage shows that stage's parts at the top too.
fn graph(d: &Deployment) -> serde_json::Value {
    let stages: Vec<serde_json::Value> = d
        .stages
        .iter()
        .map(|stage| {
            let spec = &stage.spec;
            let sources: Vec<_> = (spec.sources.iter())
                .map(|s| json!({ "name": s.name, "input": s.input, "type": s.location.kind() }))
                .collect();
            let sinks: Vec<_> = (spec.sinks.iter())
                .map(|s| json!({ "output": s.output, "type": s.target.kind(), "stages": s.feeds.len() }))
                .collect();
            json!({ "name": stage.name, "sources": sources, "udf": spec.udf.name, "sinks": sinks })
        })
        .collect();
    let mut graph = match stages.as_slice() {
        [only] => only.clone(),
        _ => json!({}),
    };
    graph["stages"] = json!(stages);
    graph
}

/// A pipeline as a reader sees it: with the token, whole; without it (reads need none),
/// its definition without secrets ([`redact_secrets`]): a definition may hold a
/// database password or Kafka SASL settings.
pub fn for_reader(
    server: &Server,
    headers: &HeaderMap,
    mut pipeline: serde_json::Value,
) -> serde_json::Value {
    if authorize(server, headers).is_err() {
        if let Some(text) = pipeline["definition"].as_str() {
            pipeline["definition"] = json!(redact_secrets(text));
        }
    }
    pipeline
}

/// Words that mark a setting as a secret, in its name (`password`, `sasl.password`,
/// `secret`, `token`, `credentials`, ...).
const SECRET_WORDS: [&str; 5] = ["password", "secret", "token", "credential", "passwd"];

/// A pipeline file's text as shown to a reader without the token: the value of every
/// setting whose name holds one of [`SECRET_WORDS`], the user and password of every URL
/// (`postgres://user:pass@host` becomes `postgres://<redacted>@host`) and every
/// `password=...` of a connection string are replaced by `<redacted>`. Comments too.
fn redact_secrets(definition: &str) -> String {
    definition
        .split_inclusive('\n')
        .map(|line| {
            let (body, end) = line.strip_suffix('\n').map_or((line, ""), |b| (b, "\n"));
            redact_url_users(&redact_setting(body)) + end
        })
        .collect()
}

/// `line` with its value replaced if it sets a secret (`name = value`).
fn redact_setting(line: &str) -> String {
    let Some((name, _)) = line.split_once('=') else {
        return line.to_string();
    };
    let name = name.to_ascii_lowercase();
    if SECRET_WORDS.iter().any(|w| name.contains(w)) {
        format!(
            "{name}= \"<redacted>\"",
            name = &line[..line.find('=').unwrap_or(0)]
        )
    } else {
        // `password=...` inside a value (a libpq connection string).
        match line.to_ascii_lowercase().find("password=") {
            Some(at) => {
                let start = at + "password=".len();
                let end = line[start..]
                    .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                    .map_or(line.len(), |n| start + n);
                format!("{}<redacted>{}", &line[..start], &line[end..])
            }
            None => line.to_string(),
        }
    }
}

/// `line` with the user (and password) of every URL in it replaced.
fn redact_url_users(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("://") {
        let start = at + 3;
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let authority_end = rest
            .find(|c: char| c == '/' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(rest.len());
        if let Some(user_end) = rest[..authority_end].rfind('@') {
            out.push_str("<redacted>");
            rest = &rest[user_end..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact_secrets;

    #[test]
    fn secrets_in_a_definition_are_redacted_and_the_rest_kept() {
        let definition = r#"name = "p"
key = "ad_id"
url = "postgres://weir:hunter2@db.internal:5432/weir"
connection = "host=db user=weir password=hunter2 dbname=weir"
"sasl.password" = "hunter2"
# api_token = "hunter2"
brokers = "kafka://broker:9092""#;
        let shown = redact_secrets(definition);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains(r#"key = "ad_id""#), "{shown}");
        assert!(
            shown.contains("postgres://<redacted>@db.internal:5432/weir"),
            "{shown}"
        );
        assert!(
            shown.contains("user=weir password=<redacted> dbname=weir"),
            "{shown}"
        );
        assert!(
            shown.contains(r#""sasl.password" = "<redacted>""#),
            "{shown}"
        );
        assert!(
            shown.contains(r#"brokers = "kafka://broker:9092""#),
            "{shown}"
        );
    }
}
