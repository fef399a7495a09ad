//! Serving HTTP/1.1 connections with bounds axum's `serve` does not offer:
//! a header-read timeout that also closes idle keep-alive connections
//! (slowloris, forgotten clients), and a cap on open connections (excess
//! ones wait in the kernel's listen backlog, so file descriptors never run
//! out). Graceful shutdown stops accepting and lets each connection finish
//! its request in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Connection bounds.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Longest time to receive a request's headers, and longest idle time
    /// between requests on a kept-alive connection.
    pub header_read_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `stop` is cancelled, then waits for the
/// open connections to finish (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> TaskTracker {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let tracker = TaskTracker::new();
    loop {
        // Capacity first: past the cap, connections wait in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("never closed"),
            _ = stop.cancelled() => break,
        };
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        // Responses are streamed in several writes: without TCP_NODELAY,
        // Nagle's algorithm meets the client's delayed ACK and small answers
        // wait up to 40 ms.
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let stop = stop.clone();
        tracker.spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut req = req.map(axum::body::Body::new);
                    req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                    let app = app.clone();
                    async move {
                        Ok::<_, Infallible>(app.oneshot(req).await.unwrap_or_else(|e| match e {}))
                    }
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    tracker.close();
    tracker
}
