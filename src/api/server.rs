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
        // A self-wake of the connection's task (hyper handing the request
        // body over) polls it again here instead of waking another worker.
        tracker.spawn(super::repoll::Repoll::new(async move {
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
        }));
    }
    tracker.close();
    tracker
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Sends `n` POSTs with a body over one kept-alive connection, one at a
    /// time, each answer read whole.
    fn post_many(s: &mut std::net::TcpStream, n: usize) {
        let request = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello";
        let mut buf = Vec::new();
        for _ in 0..n {
            s.write_all(request).unwrap();
            buf.clear();
            let mut chunk = [0u8; 1024];
            loop {
                let got = s.read(&mut chunk).unwrap();
                assert!(got > 0, "the server closed the connection");
                buf.extend_from_slice(&chunk[..got]);
                let text = String::from_utf8_lossy(&buf);
                if let Some(end) = text.find("\r\n\r\n") {
                    if buf.len() >= end + 4 + 5 {
                        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                        assert!(text.ends_with("hello"), "{text}");
                        break;
                    }
                }
            }
        }
    }

    /// Parks of the runtime's workers per request while one client posts
    /// bodies to `addr`.
    fn parks_per_request(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> f64 {
        let parks = || {
            let m = rt.metrics();
            (0..m.num_workers())
                .map(|w| m.worker_park_count(w))
                .sum::<u64>()
        };
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        post_many(&mut s, 50);
        let before = parks();
        let n = 500;
        post_many(&mut s, n);
        (parks() - before) as f64 / n as f64
    }

    /// hyper hands a request's body to its handler inside the connection's
    /// own poll, which wakes that task while it runs: tokio then wakes an
    /// idle worker to steal it, and that worker parks again. Served here,
    /// the task is polled again instead (`repoll`): one park per request,
    /// the serving worker's wait for the next one. The control serves the
    /// same router with hyper alone and shows the extra parks.
    #[test]
    fn a_request_body_does_not_wake_another_worker() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let app = Router::new().route(
            "/echo",
            axum::routing::post(|body: String| async move { body }),
        );
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 8,
        };
        let stop = CancellationToken::new();
        let (ours, control) = rt.block_on(async {
            let ours = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let control = TcpListener::bind("127.0.0.1:0").await.unwrap();
            (ours, control)
        });
        let (ours_addr, control_addr) = (ours.local_addr().unwrap(), control.local_addr().unwrap());
        rt.spawn(serve(ours, app.clone(), limits, stop.clone()));
        rt.spawn(async move {
            loop {
                let (tcp, _) = control.accept().await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let app = app.clone();
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let app = app.clone();
                        async move { app.oneshot(req.map(axum::body::Body::new)).await }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        // Other tests share the cores: a worker preempted mid-request parks
        // once more. Up to three tries; one clean one shows the property.
        let mut seen = Vec::new();
        for _ in 0..3 {
            let served = parks_per_request(&rt, ours_addr);
            let plain = parks_per_request(&rt, control_addr);
            eprintln!("parks per request: {served:.2} served here, {plain:.2} with hyper alone");
            seen.push((served, plain));
            if served < 1.3 && plain > served + 0.3 {
                break;
            }
        }
        stop.cancel();
        let (served, plain) = *seen.last().unwrap();
        assert!(
            served < 1.3,
            "parks per request when served here: {seen:.2?} (served, hyper alone)"
        );
        assert!(
            plain > served + 0.3,
            "the control shows the extra parks: {seen:.2?} (served, hyper alone)"
        );
    }
}
