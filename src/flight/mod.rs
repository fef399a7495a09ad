//! The Arrow Flight SQL listener (`DUCKGATE_FLIGHT_LISTEN`): a tonic gRPC
//! server for ADBC, JDBC and other Flight SQL clients, beside the HTTP API.
//!
//! It is a second door onto the same machinery, not a second engine:
//!
//! - identity: the `authorization` metadata's bearer is decided by the
//!   same [`Authenticator`](crate::identity::Authenticator) as HTTP's
//!   (static query tokens, OIDC JWTs), so a token works, fails and is
//!   counted alike on both doors;
//! - a statement becomes the same [`QueryJob`](crate::engine::QueryJob)
//!   `POST /query` builds, in the Arrow IPC format, run by
//!   [`execute::run`](crate::engine::execute::run): the guard, the pool and
//!   its admission (shares, shedding), the time limit, the row and byte caps
//!   (an error the client sees, never a short result; a call's `timeout_ms`
//!   and `max_rows` headers as [`options`] reads them), the registry of
//!   running queries (listed in `/queries`, cancellable, one audit line with
//!   `api=flight`) and the credential retry;
//! - the IPC stream DuckDB's batches were written to is read back into
//!   record batches ([`results`]) and sent as Flight data: the bytes are
//!   DuckDB's Arrow export, as over HTTP;
//! - errors are the HTTP problems mapped to gRPC codes ([`status`]), with
//!   the problem's title and detail as the message.
//!
//! A prepared statement is described when it is created (the guard, then
//! DuckDB's prepare: [`crate::engine::execute::describe`]), so drivers read
//! its columns before they execute it. `GetSchema`, which arrow-flight's
//! Flight SQL dispatch leaves unimplemented, describes a statement the
//! same way ([`server`]).
//!
//! The statement runs from `GetFlightInfo` on, so SQL errors and refusals
//! answer that call (where clients expect them) and the FlightInfo carries
//! the exact schema; the running result waits in [`tickets`] for its
//! `DoGet`, bound to the identity that asked, for at most
//! `DUCKGATE_FLIGHT_TICKET_TTL_MS` (then it is dropped and the query
//! interrupted) and at most `DUCKGATE_FLIGHT_MAX_TICKETS` at once. A client
//! that drops the stream interrupts the query like an HTTP client that
//! goes away; `CancelFlightInfo` and `CancelQuery` cancel it like
//! `DELETE /queries/{id}`.

mod answers;
mod catalog;
pub(crate) mod options;
mod params;
pub(crate) mod results;
mod server;
mod service;
pub mod status;
mod tickets;
mod xdbc;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::core::state::AppState;

/// A running Flight SQL listener.
pub struct Listener {
    /// The address it is bound to (port 0 resolved).
    pub addr: SocketAddr,
    /// Serves until `stop`, then lets open calls end.
    handle: JoinHandle<()>,
    /// Stops accepting.
    stop: CancellationToken,
}

impl Listener {
    /// Binds `addr` and serves Flight SQL on it with `state` until
    /// [`Listener::stop`]. Fails (start-up stops) when the address cannot be
    /// bound or the TLS files cannot be read.
    pub async fn start(state: AppState, addr: SocketAddr) -> anyhow::Result<Listener> {
        let server = &state.config.server;
        let tls = match (&server.flight_tls_cert, &server.flight_tls_key) {
            (Some(cert), Some(key)) => {
                let cert = std::fs::read(cert).with_context(|| {
                    format!("DUCKGATE_FLIGHT_TLS_CERT: reading {}", cert.display())
                })?;
                let key = std::fs::read(key).with_context(|| {
                    format!("DUCKGATE_FLIGHT_TLS_KEY: reading {}", key.display())
                })?;
                Some(
                    tonic::transport::ServerTlsConfig::new()
                        .identity(tonic::transport::Identity::from_pem(cert, key)),
                )
            }
            _ => None,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("DUCKGATE_FLIGHT_LISTEN: binding {addr}"))?;
        let addr = listener
            .local_addr()
            .context("reading the Flight SQL address")?;
        let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
        let service = service::FlightSql::new(state);
        let sweeper = service.tickets.clone();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder
                .tls_config(tls)
                .context("DUCKGATE_FLIGHT_TLS_CERT/_KEY: not a usable certificate and key")?;
        }
        let router = builder.add_service(
            FlightServiceServer::new(server::Server { inner: service })
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(usize::MAX),
        );
        let stop = CancellationToken::new();
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let handle = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let sweep = async {
                    let mut every = tokio::time::interval(Duration::from_secs(1));
                    loop {
                        every.tick().await;
                        sweeper.sweep();
                    }
                };
                let serve = router.serve_with_incoming_shutdown(incoming, stop.cancelled_owned());
                tokio::select! {
                    r = serve => if let Err(e) = r {
                        tracing::error!(error = %e, "the Flight SQL listener failed");
                    },
                    _ = sweep => {}
                }
                sweeper.clear();
            })
        };
        tracing::info!("Flight SQL listening on {scheme}://{addr}");
        Ok(Listener { addr, handle, stop })
    }

    /// Stops accepting and waits (up to `within`) for open calls to end;
    /// running queries are interrupted by the gateway's drain, as HTTP's.
    pub async fn stop(self, within: Duration) {
        self.stop.cancel();
        let mut handle = self.handle;
        if tokio::time::timeout(within, &mut handle).await.is_err() {
            tracing::warn!("Flight SQL calls still open after the grace period; closing them");
            handle.abort();
        }
    }
}
