//! How answers travel: compression by `Accept-Encoding` (gzip, zstd) of
//! text answers, the read-ahead that keeps small streamed answers
//! uncompressed and gives them a length, and CORS for the configured origins.

use std::sync::Arc;

use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt as _;
use tower::{Layer as _, ServiceExt as _};
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::{CompressionLayer, CompressionLevel};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::ServerConfig;

/// Columnar answers, never compressed by a general-purpose compressor:
/// Parquet compresses its own pages, and Arrow IPC its own buffers when
/// asked (`arrow_compression`). gzip around either costs the CPU and the
/// time of a second pass over every byte (1.5M rows of Arrow: 2.42 s with
/// gzip against 1.00 s without) for what the format does better itself.
const PARQUET: NotForContentType = NotForContentType::const_new("application/vnd.apache.parquet");
/// See [`PARQUET`].
const ARROW: NotForContentType =
    NotForContentType::const_new("application/vnd.apache.arrow.stream");

/// Which answers [`compression`] compresses.
pub type Compressible = tower_http::compression::predicate::And<
    tower_http::compression::predicate::And<
        tower_http::compression::predicate::And<SizeAbove, NotForContentType>,
        NotForContentType,
    >,
    NotForContentType,
>;

/// gzip or zstd, as the request's `Accept-Encoding` prefers (identity when
/// it names neither), for answers of at least `min_bytes` or of unknown
/// length (a streamed result) but the columnar ones (Arrow, Parquet: see
/// [`PARQUET`]), streamed through a fixed-size compressor so memory stays
/// flat however long the answer.
///
/// The fastest level of each: a result streams at the rate DuckDB produces
/// it, and level 1 keeps up with that on one core where the default levels
/// become the bottleneck; the ratio lost is small on tabular text (see
/// BENCHMARKS.md). An answer whose body fails after it began (an abort)
/// fails the compressed stream too: it ends without its gzip or zstd
/// trailer, which every decoder reports as an error; an error record
/// (NDJSON) is data and arrives decompressed like the rows before it.
pub fn compression(min_bytes: u16) -> CompressionLayer<Compressible> {
    CompressionLayer::new()
        .quality(CompressionLevel::Fastest)
        .compress_when(
            SizeAbove::new(min_bytes)
                .and(NotForContentType::IMAGES)
                .and(PARQUET)
                .and(ARROW),
        )
}

/// Reads ahead up to `min_bytes` of a streamed answer before it leaves. An
/// answer that ends within them goes out whole, with its `Content-Length`,
/// so [`compression`] leaves it alone (and clients learn its size); a
/// longer one streams on from where the read-ahead stopped. A body that
/// fails during the read-ahead fails the same way after it.
///
/// The wait is bounded by the answer itself: results send their first
/// batch at once and their end as soon as DuckDB has it, so only a result
/// whose first rows are smaller than `min_bytes` and whose next rows come
/// slowly starts a little later than it would have.
///
/// A plain layer rather than `from_fn`, which boxes the rest of the stack
/// and its future for every request: an answer of known length (a query
/// over when its answer began) passes at no cost.
#[derive(Clone, Copy)]
pub struct SettleSmallLayer {
    /// The read-ahead, in bytes: `DUCKGATE_COMPRESSION_MIN_BYTES`.
    pub min_bytes: u16,
}

impl<S> tower::Layer<S> for SettleSmallLayer {
    type Service = SettleSmall<S>;

    fn layer(&self, inner: S) -> SettleSmall<S> {
        SettleSmall {
            inner,
            min_bytes: self.min_bytes,
        }
    }
}

/// See [`SettleSmallLayer`].
#[derive(Clone)]
pub struct SettleSmall<S> {
    inner: S,
    min_bytes: u16,
}

impl<S> tower::Service<Request> for SettleSmall<S>
where
    S: tower::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Settling<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // A HEAD answer has no body to measure, and must not get a length of 0.
        let head = req.method() == Method::HEAD;
        Settling {
            inner: self.inner.call(req),
            min_bytes: self.min_bytes,
            head,
            read: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer behind [`SettleSmall`], then its read-ahead if it streams.
    pub struct Settling<F> {
        #[pin]
        inner: F,
        min_bytes: u16,
        head: bool,
        // Once the answer is in (and streams): the inner future is done.
        read: Option<futures::future::BoxFuture<'static, Response>>,
    }
}

impl<F, E> std::future::Future for Settling<F>
where
    F: std::future::Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        if let Some(read) = this.read {
            return read.as_mut().poll(cx).map(Ok);
        }
        let response = std::task::ready!(this.inner.poll(cx))?;
        if *this.head || response.body().size_hint().exact().is_some() {
            return std::task::Poll::Ready(Ok(response));
        }
        let mut read = Box::pin(read_ahead(response, *this.min_bytes));
        let polled = read.as_mut().poll(cx).map(Ok);
        *this.read = Some(read);
        polled
    }
}

/// [`SettleSmallLayer`]'s read-ahead of a streamed answer.
async fn read_ahead(response: Response, min_bytes: u16) -> Response {
    let (parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    let mut read: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while len < usize::from(min_bytes) {
        match stream.next().await {
            Some(Ok(chunk)) => {
                len += chunk.len();
                read.push(chunk);
            }
            Some(Err(e)) => {
                // One turn of the scheduler before the error: hyper writes
                // the head with the first data and drops what it has not
                // flushed when the body fails (see `execute::before_abort`).
                let replay = futures::stream::iter(read.into_iter().map(Ok)).chain(
                    futures::stream::once(async move {
                        tokio::task::yield_now().await;
                        Err(e)
                    }),
                );
                return Response::from_parts(parts, Body::from_stream(replay));
            }
            None => return Response::from_parts(parts, Body::from(read.concat())),
        }
    }
    // Fused: the compressor polls its body once more after the end (for
    // trailers), which a stream made with `unfold` (a result page) answers
    // with a panic.
    let replay = futures::stream::iter(read.into_iter().map(Ok))
        .chain(stream)
        .fuse();
    Response::from_parts(parts, Body::from_stream(replay))
}

/// The headers a page on an allowed origin may send.
const ALLOWED_HEADERS: [&str; 4] = [
    "authorization",
    "content-type",
    "accept",
    "duckgate-query-id",
];

/// The response headers a page on an allowed origin may read (beyond the
/// CORS-safelisted ones such as `Content-Type`).
const EXPOSED_HEADERS: [&str; 10] = [
    "duckgate-query-id",
    "duckgate-statement",
    "duckgate-credential-epoch",
    "duckgate-retried",
    "duckgate-statement-state",
    "duckgate-total-rows",
    "link",
    "location",
    "retry-after",
    "x-request-id",
];

/// CORS for the configured origins: which ones, and the layer that answers
/// their preflights and marks their answers.
pub struct Cors {
    /// Every origin (`*`), or these exactly.
    origins: Option<Vec<HeaderValue>>,
    /// tower-http's CORS, for requests from an allowed origin.
    layer: CorsLayer,
}

impl Cors {
    /// The CORS policy of `server`; `None` when no origin is configured
    /// (CORS off: no request gets a CORS header).
    pub fn from_config(server: &ServerConfig) -> Option<Arc<Self>> {
        let configured: Vec<&str> = server
            .cors_origins
            .iter()
            .map(|o| o.as_str())
            .filter(|o| !o.is_empty())
            .collect();
        if configured.is_empty() {
            return None;
        }
        let origins = if configured.contains(&"*") {
            None
        } else {
            Some(
                configured
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok())
                    .collect::<Vec<_>>(),
            )
        };
        let allow = match &origins {
            None => AllowOrigin::any(),
            Some(list) => AllowOrigin::list(list.clone()),
        };
        let layer = CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::HEAD,
                Method::POST,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers(ALLOWED_HEADERS.map(HeaderName::from_static))
            .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
            .max_age(server.cors_max_age());
        Some(Arc::new(Self { origins, layer }))
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        match &self.origins {
            None => true,
            Some(list) => list.iter().any(|o| o == origin),
        }
    }
}

/// Applies [`Cors`] to requests from an allowed origin only. tower-http's
/// layer alone would answer every `OPTIONS` and send its method, header
/// and max-age lists to any origin; here a request from another origin, or
/// from none, is served as if CORS were off.
pub async fn cors(State(cors): State<Arc<Cors>>, req: Request, next: Next) -> Response {
    let allowed = req
        .headers()
        .get(header::ORIGIN)
        .is_some_and(|o| cors.allows(o));
    if !allowed {
        let mut response = next.run(req).await;
        // The answer differs by origin: a shared cache must not hand this
        // one to an allowed origin's page, nor the other way round.
        response
            .headers_mut()
            .append(header::VARY, HeaderValue::from_static("origin"));
        return response;
    }
    match cors.layer.layer(next).oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
