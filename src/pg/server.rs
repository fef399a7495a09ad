//! The listener and each connection's loop: TLS (`SSLRequest`, and
//! PostgreSQL 17's direct TLS), the door's limits, then pgwire's message
//! dispatch to the door's handlers.
//!
//! pgwire's own socket loop has a fixed startup timeout and neither an idle
//! timeout nor a message cap, so the loop is the door's, over pgwire's
//! pieces (`negotiate_tls`, `process_message`, `process_error`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::PgWireError;
use pgwire::tokio::server::{
    negotiate_tls, process_error, process_message, MaybeTls, PgWireMessageServerCodec,
};
use pgwire::tokio::TlsAcceptor;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::pg::auth::Startup;
use crate::pg::backend::State;
use crate::pg::errors::{self, code};
use crate::pg::query::{Prepared, Queries};
use crate::pg::{Door, Limits};

/// The door's handlers, shared by every connection.
struct Handlers {
    queries: Arc<Queries>,
    startup: Arc<Startup>,
    cancel: Arc<Cancels>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// Cancel requests, to the gateway's cancel.
struct Cancels {
    door: Arc<Door>,
}

#[async_trait::async_trait]
impl pgwire::api::cancel::CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: pgwire::messages::cancel::CancelRequest) {
        self.door
            .cancel(request.pid, &request.secret_key.to_bytes());
    }
}

/// A running PostgreSQL listener.
pub struct Listener {
    /// The address it is bound to (port 0 resolved).
    pub addr: SocketAddr,
    handle: JoinHandle<()>,
    stop: CancellationToken,
}

impl Listener {
    /// Binds `addr` and serves the door with `state` until
    /// [`Listener::stop`]. Fails (start-up stops) when the address cannot be
    /// bound or the TLS files cannot be read.
    pub async fn start(state: State, addr: SocketAddr) -> anyhow::Result<Listener> {
        let server = &state.config.server;
        let tls = match (&server.pg_tls_cert, &server.pg_tls_key) {
            (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
            _ => None,
        };
        let limits = Limits {
            max_connections: server.pg_max_connections as usize,
            max_connections_per_identity: server.pg_max_connections_per_identity as usize,
            startup_timeout: Duration::from_millis(server.pg_startup_timeout_ms),
            idle_timeout: (server.pg_idle_timeout_ms > 0)
                .then(|| Duration::from_millis(server.pg_idle_timeout_ms)),
            max_message_bytes: server.pg_max_message_bytes as usize,
        };
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("DUCKGATE_PG_LISTEN: binding {addr}"))?;
        let addr = listener
            .local_addr()
            .context("reading the PostgreSQL address")?;
        crate::pg::register_metrics();
        let door = Door::new(state, limits);
        let handlers = Arc::new(Handlers {
            queries: Arc::new(Queries { door: door.clone() }),
            startup: Arc::new(Startup::new(door.clone())),
            cancel: Arc::new(Cancels { door: door.clone() }),
        });
        let stop = CancellationToken::new();
        let tls_on = tls.is_some();
        let handle = tokio::spawn(accept(listener, door, handlers, tls, stop.clone()));
        tracing::info!(
            tls = tls_on,
            "PostgreSQL listening on {addr}{}",
            if tls_on { " (TLS)" } else { "" }
        );
        Ok(Listener { addr, handle, stop })
    }

    /// Stops accepting and waits (up to `within`) for open connections to
    /// end; running queries are interrupted by the gateway's drain.
    pub async fn stop(self, within: Duration) {
        self.stop.cancel();
        let mut handle = self.handle;
        if tokio::time::timeout(within, &mut handle).await.is_err() {
            tracing::warn!(
                "PostgreSQL connections still open after the grace period; closing them"
            );
            handle.abort();
        }
    }
}

/// A TLS acceptor of the PEM certificate chain and key.
fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("DUCKGATE_PG_TLS_CERT: reading {}", cert.display()))?;
    let key_pem = std::fs::read(key)
        .with_context(|| format!("DUCKGATE_PG_TLS_KEY: reading {}", key.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .context("DUCKGATE_PG_TLS_CERT: not a PEM certificate chain")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .context("DUCKGATE_PG_TLS_KEY: not a PEM private key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("DUCKGATE_PG_TLS_CERT/_KEY: not a usable certificate and key")?;
    // PostgreSQL 17's direct TLS names the protocol by ALPN.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections until `stop`, each served on a task of its own,
/// then waits for them to end.
async fn accept(
    listener: TcpListener,
    door: Arc<Door>,
    handlers: Arc<Handlers>,
    tls: Option<TlsAcceptor>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(door.limits.max_connections));
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let (socket, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "PostgreSQL door: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = slots.clone().try_acquire_owned().ok();
        let (door, handlers, tls, stop) =
            (door.clone(), handlers.clone(), tls.clone(), stop.clone());
        tasks.spawn(async move {
            let Some(_slot) = slot else {
                metrics::counter!("duckgate_pg_connections_refused_total", "reason" => "connection_limit")
                    .increment(1);
                refuse(socket, tls, &door).await;
                return;
            };
            metrics::counter!("duckgate_pg_connections_total").increment(1);
            metrics::gauge!("duckgate_pg_connections").increment(1.0);
            if let Err(e) = serve(socket, tls, &door, handlers, stop).await {
                tracing::debug!(peer = %peer, error = %e, "PostgreSQL connection ended");
            }
            metrics::gauge!("duckgate_pg_connections").decrement(1.0);
        });
    }
    tasks.close();
    tasks.wait().await;
}

/// A connection beyond `DUCKGATE_PG_MAX_CONNECTIONS`: its startup is read
/// (within the startup timeout) and answered `53300`, as PostgreSQL's
/// "too many clients".
async fn refuse(socket: TcpStream, tls: Option<TlsAcceptor>, door: &Door) {
    let answer = async {
        let Ok(Some(mut socket)) = negotiate_tls::<crate::pg::query::Prepared>(socket, tls).await
        else {
            return;
        };
        if let Some(Ok(_startup)) = socket.next().await {
            let e = errors::fatal(
                code::TOO_MANY_CONNECTIONS,
                format!(
                    "sorry, too many clients already: DUCKGATE_PG_MAX_CONNECTIONS is {}",
                    door.limits.max_connections
                ),
            );
            let _ = process_error(&mut socket, e, false).await;
        }
        let _ = socket.close().await;
    };
    let _ = tokio::time::timeout(door.limits.startup_timeout, answer).await;
}

/// Why a connection's loop stopped reading.
enum Next {
    Message(pgwire::messages::PgWireFrontendMessage),
    Closed,
    Refused(PgWireError, &'static str),
}

/// A client's connection, framed by pgwire's codec.
type Connection = Framed<MaybeTls, PgWireMessageServerCodec<Prepared>>;

/// Serves one connection: TLS negotiation and authentication within the
/// startup timeout, then its messages, each idle wait within the idle
/// timeout, each message within the size cap.
async fn serve(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    door: &Door,
    handlers: Arc<Handlers>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let startup_deadline = tokio::time::Instant::now() + door.limits.startup_timeout;
    let Some(mut socket) = negotiate(socket, tls, startup_deadline).await? else {
        return Ok(());
    };
    // The door's own handlers by their types (the trait's methods hide the
    // statement type `Connection` names); pgwire's no-op copy handler.
    let startup = handlers.startup.clone();
    let simple = handlers.queries.clone();
    let extended = handlers.queries.clone();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel.clone();
    loop {
        let message = match next_message(&mut socket, door, &stop, startup_deadline).await {
            Next::Message(m) => m,
            Next::Closed => break,
            Next::Refused(e, reason) => {
                report_refusal(&mut socket, e, reason).await;
                break;
            }
        };
        if matches!(
            message,
            pgwire::messages::PgWireFrontendMessage::Terminate(_)
        ) {
            break;
        }
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(e) => e,
            _ => message.is_extended_query(),
        };
        let is_cancel = matches!(
            message,
            pgwire::messages::PgWireFrontendMessage::CancelRequest(_)
        );
        if let Err(e) = process_message(
            message,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            let fatal = e.is_fatal();
            process_error(&mut socket, e, extended_query).await?;
            if fatal {
                break;
            }
        }
        if is_cancel {
            break;
        }
    }
    let _ = socket.close().await;
    Ok(())
}

/// The connection once TLS is negotiated, by the startup deadline; `None`
/// when the client went away or the deadline passed (counted).
async fn negotiate(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    startup_deadline: tokio::time::Instant,
) -> std::io::Result<Option<Connection>> {
    let negotiated = tokio::time::timeout_at(startup_deadline, negotiate_tls(socket, tls)).await;
    match negotiated {
        Ok(socket) => socket,
        Err(_) => {
            metrics::counter!("duckgate_pg_connections_refused_total", "reason" => "startup_timeout")
                .increment(1);
            Ok(None)
        }
    }
}

/// The connection's next message, waited for as its state allows: by the
/// startup deadline while it starts; within the idle timeout, and until
/// the gateway stops, while it waits for a query; else as long as it takes.
async fn next_message(
    socket: &mut Connection,
    door: &Door,
    stop: &CancellationToken,
    startup_deadline: tokio::time::Instant,
) -> Next {
    let starting = matches!(
        socket.state(),
        PgWireConnectionState::AwaitingStartup | PgWireConnectionState::AuthenticationInProgress
    );
    let idle = matches!(socket.state(), PgWireConnectionState::ReadyForQuery);
    let read = read_message(socket, starting, door.limits.max_message_bytes);
    if starting {
        match tokio::time::timeout_at(startup_deadline, read).await {
            Ok(n) => n,
            Err(_) => Next::Refused(
                errors::fatal(
                    code::PROTOCOL,
                    "the startup took longer than DUCKGATE_PG_STARTUP_TIMEOUT_MS",
                ),
                "startup_timeout",
            ),
        }
    } else if let (true, Some(limit)) = (idle, door.limits.idle_timeout) {
        tokio::select! {
            r = tokio::time::timeout(limit, read) => match r {
                Ok(n) => n,
                Err(_) => Next::Refused(
                    errors::fatal(code::IDLE_TIMEOUT, "terminating connection due to idle-session timeout (DUCKGATE_PG_IDLE_TIMEOUT_MS)"),
                    "idle_timeout",
                ),
            },
            _ = stop.cancelled() => Next::Refused(
                errors::fatal(code::SHUTDOWN, "terminating connection: the gateway is shutting down"),
                "",
            ),
        }
    } else if idle {
        tokio::select! {
            n = read => n,
            _ = stop.cancelled() => Next::Refused(
                errors::fatal(code::SHUTDOWN, "terminating connection: the gateway is shutting down"),
                "",
            ),
        }
    } else {
        read.await
    }
}

/// The next message read, refused once it says or proves it is larger
/// than `cap` bytes (not while `starting`: pgwire caps the startup).
async fn read_message(socket: &mut Connection, starting: bool, cap: usize) -> Next {
    let next = futures::future::poll_fn(|cx| match socket.poll_next_unpin(cx) {
        std::task::Poll::Pending if !starting && too_large(socket.read_buffer(), cap) => {
            std::task::Poll::Ready(Err(()))
        }
        polled => polled.map(Ok),
    });
    let too_large = || {
        Next::Refused(
            errors::fatal(
                code::LIMIT,
                format!("a message larger than DUCKGATE_PG_MAX_MESSAGE_BYTES ({cap} bytes)"),
            ),
            "message_too_large",
        )
    };
    match next.await {
        Err(()) | Ok(Some(Err(PgWireError::MessageTooLarge(..)))) => too_large(),
        // A message that arrived whole in one read never left the
        // decoder pending: its size is checked now.
        Ok(Some(Ok(m))) if size(&m) > cap => too_large(),
        Ok(Some(Ok(m))) => Next::Message(m),
        Ok(Some(Err(e))) => Next::Refused(e, ""),
        Ok(None) => Next::Closed,
    }
}

/// Tells the client why its connection ends, counting the refusal by
/// `reason` (empty: not counted).
async fn report_refusal(socket: &mut Connection, e: PgWireError, reason: &'static str) {
    if !reason.is_empty() {
        metrics::counter!("duckgate_pg_connections_refused_total", "reason" => reason).increment(1);
    }
    let _ = process_error(socket, e, false).await;
}

/// The bytes of what a client sent in a message (its text, parameters or
/// data).
fn size(m: &pgwire::messages::PgWireFrontendMessage) -> usize {
    use pgwire::messages::PgWireFrontendMessage as M;
    match m {
        M::Query(q) => q.query.len(),
        M::Parse(p) => p.query.len() + 4 * p.type_oids.len(),
        M::Bind(b) => b
            .parameters
            .iter()
            .map(|p| 4 + p.as_ref().map_or(0, |v| v.len()))
            .sum(),
        M::CopyData(d) => d.data.len(),
        _ => 0,
    }
}

/// Whether the message starting at the front of `buf` says it is longer
/// than `cap` bytes (checked as its header arrives, before its body is
/// read).
fn too_large(buf: &[u8], cap: usize) -> bool {
    if buf.len() < 5 {
        return false;
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    len > cap
}
