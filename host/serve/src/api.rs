//! The admin API's routes (see `docs/admin-api.md`).

use crate::deployment::{DeployedStage, Deployment};
use crate::refused::Refused;
use crate::server::Server;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

type Shared = State<Arc<Server>>;

/// Every route of the admin API and the status page, on `server`'s shared state. Request
/// bodies may be up to [`MAX_BODY_BYTES`] (a UDF component), and must arrive within
/// `body_timeout`; a mutating call is authorised from its headers before its body is
/// read ([`guard`]).
pub fn router(server: Arc<Server>, body_timeout: Duration, hosts: Arc<[String]>) -> Router {
    Router::new()
        .route("/", get(|| async { Html(crate::page::PAGE.as_str()) }))
        .route("/metrics", get(metrics))
        .route("/api/pipelines", get(list).post(create))
        .route("/api/pipelines/{name}", get(inspect).delete(delete))
        .route("/api/pipelines/{name}/udf", put(deploy_udf))
        .route("/api/pipelines/{name}/rollback", post(rollback))
        .route("/api/pipelines/{name}/stop", post(stop))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            (Arc::clone(&server), body_timeout, hosts),
            guard,
        ))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(server)
}

/// Runs before every route, on the request's headers alone: a `Host` that names neither
/// an IP address, `localhost` nor one of `hosts` (`--allow-host`) is refused (421), so
/// that a web page cannot reach the API through a DNS name rebound to loopback; a
/// mutating call (`POST`, `PUT`, `DELETE`) without the token is refused (401) before a
/// byte of its body is read, a `Content-Length` over [`MAX_BODY_BYTES`] is refused
/// (413) before reading it, and a body that does not arrive within `body_timeout` is
/// refused (408). So a client without the token cannot make the server hold a body in
/// memory, nor a slow client hold a connection with one. Every answer forbids framing
/// (clickjacking of the console).
async fn guard(
    State((server, body_timeout, hosts)): State<(Arc<Server>, Duration, Arc<[String]>)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = guarded(&server, body_timeout, &hosts, request, next).await;
    let headers = response.headers_mut();
    headers.insert(
        "x-frame-options",
        axum::http::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        "content-security-policy",
        axum::http::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        "x-content-type-options",
        axum::http::HeaderValue::from_static("nosniff"),
    );
    response
}

/// Whether the `Host` header `host` (a name or address, with or without a port) is one
/// the API answers: an IP address, `localhost`, or one of `allowed`.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        // [v6]:port
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// [`guard`]'s checks, and the route if they pass.
async fn guarded(
    server: &Server,
    body_timeout: Duration,
    hosts: &[String],
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::Method;
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !host_allowed(host, hosts) {
        return Refused::new(
            421,
            format!("this server does not answer for host {host:?} (start it with --allow-host NAME to allow a name)"),
        )
        .into_response();
    }
    let mutating = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    // A refusal from the headers drops what the body sends for a short while (never
    // keeping it), so that the client reads the refusal rather than a reset connection.
    let drain_for = body_timeout / crate::BODY_TIMEOUT_FACTOR;
    if mutating {
        if let Err(refused) = authorize(server, request.headers()) {
            drain(request.into_body(), MAX_BODY_BYTES as u64, drain_for).await;
            return closing(refused.into_response());
        }
    }
    let length = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        drain(request.into_body(), 1 << 20, drain_for).await;
        return closing(too_large().into_response());
    }
    if !mutating {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(body_timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => {
            let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            next.run(request).await
        }
        Ok(Err(_)) => too_large().into_response(),
        Err(_) => Refused::new(
            408,
            format!(
                "the request body did not arrive within {} ms",
                body_timeout.as_millis()
            ),
        )
        .into_response(),
    }
}

/// Reads and drops what `body` sends, up to `limit` bytes and for at most `wait`: none of
/// it is kept.
async fn drain(mut body: axum::body::Body, limit: u64, wait: Duration) {
    use http_body::Body as _;
    let mut seen = 0u64;
    let _ = tokio::time::timeout(wait, async {
        while seen <= limit {
            let frame =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |d| d.len() as u64),
                _ => return,
            }
        }
    })
    .await;
}

/// `response`, with the connection closed after it (its request's body was not read).
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

fn too_large() -> Refused {
    Refused::new(
        413,
        format!(
            "the request body is over the API's limit of {} MiB",
            MAX_BODY_BYTES >> 20
        ),
    )
}

/// The largest request body the API takes (a UDF component): 64 MiB.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Gives axum's own refusals (a body over [`MAX_BODY_BYTES`], a body that is not UTF-8
/// text, a bad query) the JSON body `{"error": ...}` every other refusal has. Runs on
/// every answer; those that are not an error with a plain-text body pass unchanged.
async fn json_refusals(response: Response) -> Response {
    let status = response.status();
    let plain_text = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain_text {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!(
            "the request body is over the API's limit of {} MiB ({text})",
            MAX_BODY_BYTES >> 20
        )
    } else {
        text
    };
    Refused::new(status.as_u16(), message).into_response()
}

/// Mutating calls need `Authorization: Bearer <token>`.
fn authorize(server: &Server, headers: &HeaderMap) -> Result<(), Refused> {
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match given {
        Some(token) if token == server.token => Ok(()),
        Some(_) => Err(Refused::new(401, "wrong token")),
        None => Err(Refused::new(
            401,
            "this call needs `Authorization: Bearer <token>` (the token weir serve printed)",
        )),
    }
}

fn not_found(name: &str) -> Refused {
    Refused::new(404, format!("no pipeline {name:?}"))
}

/// One pipeline as the API shows it: its state, its stages (each with its UDF, versions
/// and status), its history; a pipeline of one stage shows that stage's UDF, versions
/// and status at the top too.
fn describe(server: &Server, name: &str, d: &Deployment) -> serde_json::Value {
    let (history, definition) = server
        .registry
        .get(name)
        .map(|r| (r.history, r.definition))
        .unwrap_or_default();
    let stages: Vec<serde_json::Value> = d.stages.iter().map(describe_stage).collect();
    let mut pipeline = json!({
        "name": name,
        "definition": definition,
        "graph": graph(d),
        "state": d.state(),
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

/// One stage as the API shows it: its name, state, UDF (with the version running),
/// kept versions and live status.
fn describe_stage(stage: &DeployedStage) -> serde_json::Value {
    let status = stage.control.status();
    json!({
        "name": stage.name,
        "state": status.state,
        "udf": {
            "name": stage.spec.udf.name,
            "version": stage.active_version(),
            "sha256": status.udf_sha256,
        },
        "versions": stage.version_info(),
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

async fn list(State(server): Shared, headers: HeaderMap) -> Json<serde_json::Value> {
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    let all: Vec<_> = pipelines
        .iter()
        .map(|(n, d)| for_reader(&server, &headers, describe(&server, n, d)))
        .collect();
    Json(json!({ "pipelines": all }))
}

async fn inspect(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
) -> Response {
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    match pipelines.get(&name) {
        Some(d) => Json(for_reader(&server, &headers, describe(&server, &name, d))).into_response(),
        None => not_found(&name).into_response(),
    }
}

/// A pipeline as a reader sees it: with the token, whole; without it (reads need none),
/// its definition without secrets ([`redact_secrets`]): a definition may hold a
/// database password or Kafka SASL settings.
fn for_reader(
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

#[derive(Deserialize)]
struct CreateQuery {
    /// The folder the pipeline file's relative paths start from.
    base: Option<PathBuf>,
}

async fn create(
    State(server): Shared,
    headers: HeaderMap,
    Query(query): Query<CreateQuery>,
    body: String,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let base = match query.base {
        Some(base) if !base.is_absolute() => {
            return Err(Refused::new(
                400,
                format!(
                    "base {:?} is not an absolute path: give the folder the pipeline file's relative paths start from",
                    base.display()
                ),
            ))
        }
        Some(base) if !base.is_dir() => {
            return Err(Refused::new(
                400,
                format!("base {:?} is not a folder on the server", base.display()),
            ))
        }
        Some(base) => base,
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let name =
        tokio::task::spawn_blocking(move || server.create(&body, &base).map(|n| (n, server)))
            .await
            .map_err(|e| Refused::new(500, e.to_string()))?;
    let (name, server) = name?;
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
    Ok((StatusCode::CREATED, Json(describe(&server, &name, d))).into_response())
}

/// Swaps version `bytes` (a new one, or an earlier one for a rollback) into stage
/// `stage` of pipeline `name` (`None`: its only stage) and records it in the registry as
/// `action` (`deployed`, `rolled back`) before answering with what the swap did.
async fn swap(
    server: Arc<Server>,
    name: String,
    stage: Option<String>,
    bytes: Arc<Vec<u8>>,
    probation_calls: u64,
    action: &'static str,
) -> Result<weir_control::Deployed, Refused> {
    let result = tokio::task::spawn_blocking(move || {
        let sha256 = weir_core::identity::sha256_hex(&bytes);
        // One swap of a pipeline at a time, from numbering the version to recording it.
        let swapping = {
            let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
            d.stage(stage.as_deref())?;
            Arc::clone(&d.swapping)
        };
        let _turn = swapping.lock().unwrap_or_else(|e| e.into_inner());
        // Stored before the swap: a crash after it finds the component the record names.
        server
            .registry
            .store_component(&bytes)
            .map_err(|e| Refused::new(500, format!("{e:#}")))?;
        let target = Target {
            pipeline: &name,
            stage: stage.as_deref(),
        };
        let result = swap_recorded(&server, target, bytes, probation_calls, action);
        server.registry.release_component(&sha256);
        result
    })
    .await
    .map_err(|e| Refused::new(500, e.to_string()))??;
    Ok(result)
}

/// The stage a swap is for: a pipeline, and one of its stages by name (`None`: its only
/// stage).
#[derive(Clone, Copy)]
struct Target<'a> {
    pipeline: &'a str,
    stage: Option<&'a str>,
}

/// The swap of [`swap`], under its pipeline's turn: numbers the version among the
/// stage's, swaps it in, and records it.
fn swap_recorded(
    server: &Server,
    target: Target<'_>,
    bytes: Arc<Vec<u8>>,
    probation_calls: u64,
    action: &str,
) -> Result<weir_control::Deployed, Refused> {
    let name = target.pipeline;
    let sha256 = weir_core::identity::sha256_hex(&bytes);
    // Prepare and swap without holding the pipelines' lock: compiling takes a while.
    let (stage, number, known, spec, control, steering, running) = {
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        let d = pipelines.get(name).ok_or_else(|| not_found(name))?;
        let stage = d.stage(target.stage)?;
        let (number, known) = stage.versions.number_for(&sha256);
        (
            stage.name.clone(),
            number,
            known,
            stage.spec.clone(),
            Arc::clone(&stage.control),
            d.steering.clone(),
            d.is_running(),
        )
    };
    let deployed = match steering {
        Some(steering) if running => steering.deploy(Arc::clone(&bytes), number)?,
        _ => weir_control::swap_into(
            &spec,
            &control,
            running,
            Arc::clone(&bytes),
            number,
            probation_calls,
        )?,
    };
    if !known {
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Ok(stage)) = pipelines.get(name).map(|d| d.stage(Some(&stage))) {
            stage.versions.insert(number, bytes, sha256.clone());
        }
    }
    let keep = server.registry.keep_versions();
    let recorded = server.registry.change(name, |r| {
        if let Some(versions) = r.stage_mut(&stage) {
            versions.activate(number, &sha256, keep);
        }
        r.record(action, &stage, "");
    });
    if let Err(e) = recorded {
        return Err(Refused::new(
            500,
            format!("version {number} runs, but the registry could not record it: {e:#}"),
        ));
    }
    server.forget_unkept_versions(name);
    Ok(deployed)
}

#[derive(Deserialize)]
struct StageQuery {
    /// The stage the call is for, in a pipeline of several stages.
    stage: Option<String>,
}

#[derive(Deserialize)]
struct DeployQuery {
    /// Answer once probation has decided (see [`PROBATION_WAIT`]).
    #[serde(default)]
    wait: bool,
    /// The stage to deploy to, in a pipeline of several stages.
    stage: Option<String>,
}

/// How long `PUT .../udf?wait=true` waits for probation to decide before it answers
/// that it is still pending.
pub const PROBATION_WAIT: Duration = Duration::from_secs(60);

async fn deploy_udf(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
    Query(query): Query<DeployQuery>,
    body: Bytes,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let probation = server.probation_calls;
    let deployed = swap(
        Arc::clone(&server),
        name.clone(),
        query.stage.clone(),
        Arc::new(body.to_vec()),
        probation,
        "deployed",
    )
    .await?;
    let mut answer = serde_json::to_value(&deployed).unwrap_or_default();
    if query.wait && probation > 0 {
        let control = {
            let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
            Arc::clone(&d.stage(query.stage.as_deref())?.control)
        };
        let outcome = probation_outcome(&control, &deployed.sha256).await;
        if let Probation::RolledBack(reason) = &outcome {
            return Err(Refused::new(
                409,
                format!(
                    "version {} was rolled back within its probation: {reason}",
                    deployed.version
                ),
            ));
        }
        answer["probation"] = outcome.to_json();
    }
    Ok(Json(answer).into_response())
}

/// What probation decided about a version just swapped in.
enum Probation {
    /// It passed its probation calls.
    Passed,
    /// It failed within them and was rolled back, for this reason.
    RolledBack(String),
    /// Not decided within [`PROBATION_WAIT`], or the pipeline ended first: calls left.
    Pending(u64),
}

impl Probation {
    fn to_json(&self) -> serde_json::Value {
        match self {
            Probation::Passed => json!({ "outcome": "passed" }),
            Probation::RolledBack(reason) => json!({ "outcome": "rolled back", "reason": reason }),
            Probation::Pending(left) => json!({ "outcome": "pending", "calls_left": left }),
        }
    }
}

/// Watches the status of the pipeline `control` runs until the version `sha256` passes
/// its probation or is rolled back, at most [`PROBATION_WAIT`].
async fn probation_outcome(control: &weir_run::RunControl, sha256: &str) -> Probation {
    let deadline = tokio::time::Instant::now() + PROBATION_WAIT;
    loop {
        let status = control.status();
        // A group's status joins the hashes its tasks run.
        let running = status.udf_sha256.split(',').any(|h| h == sha256);
        if !running {
            let reason = status.last_error.unwrap_or_default();
            return Probation::RolledBack(reason);
        }
        let Some(left) = status.probation_calls_left else {
            return Probation::Passed;
        };
        let ended = !matches!(
            status.state,
            weir_run::RunState::Running | weir_run::RunState::Starting
        );
        if ended || tokio::time::Instant::now() >= deadline {
            return Probation::Pending(left);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn rollback(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
    Query(query): Query<StageQuery>,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let bytes = {
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
        let stage = d.stage(query.stage.as_deref())?;
        let active = stage.active_version().unwrap_or(1);
        let previous = stage.versions.before(active).ok_or_else(|| {
            Refused::new(
                409,
                format!("version {active} is the first: nothing to roll back to"),
            )
        })?;
        previous.bytes
    };
    let rolled_back = swap(server, name, query.stage, bytes, 0, "rolled back").await?;
    Ok(Json(rolled_back).into_response())
}

async fn stop(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let result = tokio::task::spawn_blocking(move || {
        let thread = {
            let mut pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            let d = pipelines.get_mut(&name).ok_or_else(|| not_found(&name))?;
            server
                .registry
                .change(&name, |r| {
                    r.desired = crate::registry::Desired::Stopped;
                    r.record("stopped", "", "");
                })
                .map_err(|e| Refused::new(500, format!("{e:#}")))?;
            d.request_stop()
        };
        // Joined without the lock: a pipeline stuck in a UDF call must not hold up the API.
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
        Ok::<_, Refused>(describe(&server, &name, d))
    })
    .await
    .map_err(|e| Refused::new(500, e.to_string()))??;
    Ok(Json(result).into_response())
}

async fn delete(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    tokio::task::spawn_blocking(move || {
        let mut d = {
            let mut pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            let d = pipelines.remove(&name).ok_or_else(|| not_found(&name))?;
            server
                .registry
                .remove(&name)
                .map_err(|e| Refused::new(500, format!("{e:#}")))?;
            d
        };
        d.stop();
        Ok::<_, Refused>(())
    })
    .await
    .map_err(|e| Refused::new(500, e.to_string()))??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn metrics(State(server): Shared) -> Response {
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    let text = crate::metrics::render(&pipelines);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::{host_allowed, redact_secrets};

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

    #[test]
    fn addresses_localhost_and_allowed_names_are_answered_other_names_not() {
        let allowed = ["weir.internal".to_string()];
        for host in [
            "127.0.0.1:7878",
            "127.0.0.1",
            "[::1]:7878",
            "localhost:7878",
            "LOCALHOST",
            "10.1.2.3:80",
            "weir.internal:7878",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:7878",
            "",
            "127.0.0.1.nip.io:7878",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }
}
