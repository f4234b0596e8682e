//! The admin API's routes (see `docs/admin-api.md`).

mod guard;
mod view;

pub use guard::MAX_BODY_BYTES;

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
use view::{describe, for_reader};

type Shared = State<Arc<Server>>;

/// Every route of the admin API and the status page, on `server`'s shared state. Request
/// bodies may be up to [`MAX_BODY_BYTES`] (a UDF component), and must arrive within
/// `body_timeout`; a mutating call is authorised from its headers before its body is
/// read ([`guard::guard`]).
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
            guard::guard,
        ))
        .layer(axum::middleware::map_response(guard::json_refusals))
        .with_state(server)
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
