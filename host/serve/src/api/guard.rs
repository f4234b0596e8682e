//! What runs before every route of the admin API, on a request's headers alone: the
//! `Host` check (DNS rebinding), the token of mutating calls, the body's size and
//! deadline; and the JSON body of axum's own refusals.

use super::authorize;
use crate::connections::BODY_TIMEOUT_FACTOR;
use crate::refused::Refused;
use crate::server::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// Runs before every route, on the request's headers alone: a `Host` that names neither
/// an IP address, `localhost` nor one of `hosts` (`--allow-host`) is refused (421), so
/// that a web page cannot reach the API through a DNS name rebound to loopback; a
/// mutating call (`POST`, `PUT`, `DELETE`) without the token is refused (401) before a
/// byte of its body is read, a `Content-Length` over [`MAX_BODY_BYTES`] is refused
/// (413) before reading it, and a body that does not arrive within `body_timeout` is
/// refused (408). So a client without the token cannot make the server hold a body in
/// memory, nor a slow client hold a connection with one. Every answer forbids framing
/// (clickjacking of the console).
pub async fn guard(
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
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
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
    let drain_for = body_timeout / BODY_TIMEOUT_FACTOR;
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
pub async fn json_refusals(response: Response) -> Response {
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

#[cfg(test)]
mod tests {
    use super::host_allowed;

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
