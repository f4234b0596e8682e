//! The admin API's routes (see `docs/admin-api.md`).

use crate::deployment::Deployment;
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

type Shared = State<Arc<Server>>;

/// Every route of the admin API and the status page, on `server`'s shared state. Request
/// bodies may be up to 64 MiB (a UDF component).
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/", get(|| async { Html(crate::page::PAGE) }))
        .route("/metrics", get(metrics))
        .route("/api/pipelines", get(list).post(create))
        .route("/api/pipelines/{name}", get(inspect).delete(delete))
        .route("/api/pipelines/{name}/udf", put(deploy_udf))
        .route("/api/pipelines/{name}/rollback", post(rollback))
        .route("/api/pipelines/{name}/stop", post(stop))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(server)
}

/// Mutating calls need `Authorization: Bearer <token>`.
fn authorize(server: &Server, headers: &HeaderMap) -> Result<(), Refused> {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
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

/// One pipeline as the API shows it.
fn describe(name: &str, d: &Deployment) -> serde_json::Value {
    let status = d.control.status();
    let active = d.active_version();
    json!({
        "name": name,
        "state": status.state,
        "udf": { "name": d.spec.udf.name, "version": active, "sha256": status.udf_sha256 },
        "versions": d.version_info(),
        "status": status,
    })
}

async fn list(State(server): Shared) -> Json<serde_json::Value> {
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    let all: Vec<_> = pipelines.iter().map(|(n, d)| describe(n, d)).collect();
    Json(json!({ "pipelines": all }))
}

async fn inspect(State(server): Shared, UrlPath(name): UrlPath<String>) -> Response {
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    match pipelines.get(&name) {
        Some(d) => Json(describe(&name, d)).into_response(),
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
    let base = query.base.unwrap_or_else(|| PathBuf::from("."));
    let name =
        tokio::task::spawn_blocking(move || server.create(&body, &base).map(|n| (n, server)))
            .await
            .map_err(|e| Refused::new(500, e.to_string()))?;
    let (name, server) = name?;
    let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
    Ok((StatusCode::CREATED, Json(describe(&name, d))).into_response())
}

/// Swaps in version `bytes` (a new one, or an earlier one for a rollback).
async fn swap_in(
    server: Arc<Server>,
    name: String,
    bytes: Arc<Vec<u8>>,
    probation_calls: u64,
) -> Result<Response, Refused> {
    let result = tokio::task::spawn_blocking(move || {
        let sha256 = weir_core::identity::sha256_hex(&bytes);
        // Prepare and swap without holding the lock: compiling takes a while.
        let (number, known, spec, control, steering, running) = {
            let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
            let (number, known) = d.versions.number_for(&sha256);
            (
                number,
                known,
                d.spec.clone(),
                Arc::clone(&d.control),
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
            let mut pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = pipelines.get_mut(&name) {
                d.versions.insert(number, bytes, sha256);
            }
        }
        Ok::<_, Refused>(deployed)
    })
    .await
    .map_err(|e| Refused::new(500, e.to_string()))??;
    Ok(Json(result).into_response())
}

async fn deploy_udf(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let probation = server.probation_calls;
    swap_in(server, name, Arc::new(body.to_vec()), probation).await
}

async fn rollback(
    State(server): Shared,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
) -> Result<Response, Refused> {
    authorize(&server, &headers)?;
    let bytes = {
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
        let active = d.active_version().unwrap_or(1);
        let previous = d.versions.before(active).ok_or_else(|| {
            Refused::new(
                409,
                format!("version {active} is the first: nothing to roll back to"),
            )
        })?;
        previous.bytes
    };
    swap_in(server, name, bytes, 0).await
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
            d.request_stop()
        };
        // Joined without the lock: a pipeline stuck in a UDF call must not hold up the API.
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        let d = pipelines.get(&name).ok_or_else(|| not_found(&name))?;
        Ok::<_, Refused>(describe(&name, d))
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
            pipelines.remove(&name).ok_or_else(|| not_found(&name))?
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
