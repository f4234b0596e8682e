//! The admin API's connections: how many a server takes at once, how long a client may
//! take to send a request, and the limit on open files they share with the pipelines.
//!
//! A client that opens connections and sends nothing (or half a request line) must not
//! starve the pipelines of file descriptors nor the API of connections: each connection
//! has [`Limits::header_timeout`] to send its headers (then it is closed), and at most
//! [`Limits::connections`] are served at once (the next ones wait in the listen backlog,
//! holding no descriptor of the server's). The cap is a quarter of the open-file limit,
//! which the server first raises from its soft to its hard value, so that three quarters
//! stay for the pipelines' files, sockets and checkpoints.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The fewest and the most API connections served at once.
const CONNECTIONS: (usize, usize) = (16, 1024);

/// A request's body may take this many times the header timeout to arrive.
pub const BODY_TIMEOUT_FACTOR: u32 = 12;

/// How the server's connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
}

impl Limits {
    /// The limits for a process allowed `open_files` descriptors, with `header_timeout`.
    pub fn new(open_files: u64, header_timeout: Duration) -> Self {
        let quarter = usize::try_from(open_files / 4).unwrap_or(usize::MAX);
        Limits {
            connections: quarter.clamp(CONNECTIONS.0, CONNECTIONS.1),
            header_timeout,
            body_timeout: header_timeout * BODY_TIMEOUT_FACTOR,
        }
    }
}

/// Raises the soft limit on open files to the hard limit; returns the limit in force
/// (1,024, a common soft limit, if it cannot be read).
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    // `rlim_t` is `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    let current = limit.rlim_cur as u64;
    current
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.connections));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A connection is accepted only once one of the permits is free.
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to be freed.
                    tracing::warn!("weir serve: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!("weir serve: a connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_open_files_go_to_connections_within_bounds() {
        let limits = |files| Limits::new(files, Duration::from_secs(10)).connections;
        assert_eq!(limits(1024), 256);
        assert_eq!(limits(32), 16);
        assert_eq!(limits(1 << 20), 1024);
        assert_eq!(
            Limits::new(1024, Duration::from_secs(10)).body_timeout,
            Duration::from_secs(120)
        );
    }
}
