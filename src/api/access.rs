//! The access line: one INFO line (message `access`) per request, written
//! when its answer's body is done (sent whole, failed, or dropped because
//! the client went away), so it can say how many body bytes went out.
//! It is emitted in the request's span (route, replica, identity, client
//! address), after the turn that wrote the last bytes
//! ([`crate::telemetry::after_this_turn`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// Wraps every answer's body to write its access line: a plain layer, as
/// [`super::metrics::TrackLayer`] is.
#[derive(Clone, Copy, Default)]
pub struct AccessLayer;

impl<S> tower::Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Access<S> {
        Access { inner }
    }
}

/// See [`AccessLayer`].
#[derive(Clone)]
pub struct Access<S> {
    inner: S,
}

impl<S, B> tower::Service<Request> for Access<S>
where
    S: tower::Service<Request, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        Answering {
            started: Instant::now(),
            // A HEAD answer's body is never sent: not an aborted one.
            head: req.method() == axum::http::Method::HEAD,
            inner: self.inner.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer; its body is wrapped when it is ready.
    pub struct Answering<F> {
        #[pin]
        inner: F,
        started: Instant,
        head: bool,
    }
}

impl<F, E, B> std::future::Future for Answering<F>
where
    F: std::future::Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        Poll::Ready(out.map(|response| {
            let status = response.status().as_u16();
            let latency = this.started.elapsed();
            let head = *this.head;
            response.map(|body| {
                Body::new(Counted {
                    // An empty body (204, 304) may never be polled.
                    ended: head || body.is_end_stream(),
                    inner: body,
                    bytes: 0,
                    status,
                    latency,
                    // The request's span (the trace layer's, entered while
                    // its answer is polled).
                    span: tracing::Span::current(),
                })
            })
        }))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that counts the bytes it yields and writes the
    /// access line when it is dropped.
    struct Counted<B> {
        #[pin]
        inner: B,
        bytes: u64,
        ended: bool,
        status: u16,
        latency: Duration,
        span: tracing::Span,
    }

    impl<B> PinnedDrop for Counted<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let ended = *this.ended;
            let (status, bytes, latency) = (*this.status, *this.bytes, *this.latency);
            let _entered = this.span.enter();
            crate::telemetry::after_this_turn(move || {
                let latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3;
                if ended {
                    tracing::info!(status, latency_ms, bytes, "access");
                } else {
                    // The body stopped before its end: an error inside it,
                    // or the client went away.
                    tracing::info!(status, latency_ms, bytes, aborted = true, "access");
                }
            });
        }
    }
}

impl<B> http_body::Body for Counted<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let polled = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                }
                // A body of known length is not polled past its end.
                if this.inner.is_end_stream() {
                    *this.ended = true;
                }
            }
            None => *this.ended = true,
            Some(Err(_)) => {}
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
