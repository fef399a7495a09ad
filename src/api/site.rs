//! Where a request comes from, for a gateway no token protects.
//!
//! With no query tokens (the embedded default, on loopback), any web page
//! the user opens could reach the gateway: a CORS-simple `POST` (a form,
//! `fetch` with `text/plain`) needs no preflight, so a page on another
//! site, or on another localhost port, ran SQL (issue 36), and a page whose
//! own name resolves to 127.0.0.1 (DNS rebinding) is same-origin to the
//! browser. So, when the gateway serves anonymous queries:
//! - a request to a route that runs or reads statements is refused when the
//!   browser says it comes from another site (`Sec-Fetch-Site: cross-site`
//!   or `same-site`, or an `Origin` that is not the gateway's own), unless
//!   that origin is one `DUCKGATE_CORS_ORIGINS` lets in. curl and programs
//!   send neither header and are unaffected; the console is same-origin.
//! - the `Host` must be a loopback name, the listen address or one of
//!   `DUCKGATE_ALLOWED_HOSTS` (checked whenever that is set, tokens or not).
//!
//! With tokens, a page cannot add `Authorization` without a preflight that
//! CORS refuses, so the token is the wall. The probes are never checked.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;

/// What the guard checks, from the configuration.
#[derive(Debug, Clone)]
pub struct SiteRules {
    /// No query tokens: anonymous queries.
    pub anonymous: bool,
    /// `DUCKGATE_ALLOWED_HOSTS`, lowercased.
    pub allowed_hosts: Vec<String>,
    /// The listen address's IP, when it names one.
    pub listen_ip: Option<IpAddr>,
    /// `DUCKGATE_CORS_ORIGINS`.
    pub cors_origins: Vec<String>,
}

impl SiteRules {
    fn host_allowed(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            if ip.is_loopback() || Some(ip) == self.listen_ip {
                return true;
            }
        }
        self.allowed_hosts
            .iter()
            .any(|h| match h.strip_prefix("*.") {
                Some(suffix) => {
                    name.len() > suffix.len() + 1 && name.ends_with(&format!(".{suffix}"))
                }
                None => h == name,
            })
    }

    fn check_host(&self) -> bool {
        self.anonymous || !self.allowed_hosts.is_empty()
    }
}

/// `host` without its port (`[::1]:8080`, `example.com:80`).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..h.len() + 1]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.contains(':') => h,
        _ => host,
    }
}

/// Routes that run, list or read statements and queries.
pub(crate) fn acts(path: &str) -> bool {
    ["/query", "/statements", "/queries", "/catalog", "/admin"]
        .iter()
        .any(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// The paths the rules never check: the probes (an orchestrator's probe
/// names the pod's address as its Host).
pub const UNCHECKED_PATHS: [&str; 2] = ["/healthz", "/readyz"];

impl SiteRules {
    /// The answer refusing `req`, or `None` to serve it.
    fn refusal(&self, req: &Request) -> Option<Response> {
        let path = req.uri().path();
        if UNCHECKED_PATHS.contains(&path) {
            return None;
        }
        let headers = req.headers();
        let authority = req.uri().authority().map(|a| a.as_str());
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(authority)
            .unwrap_or_default();
        if self.check_host() && !self.host_allowed(host) {
            return Some(
                ApiError::Forbidden {
                    slug: "host-not-allowed",
                    title: "Host not allowed",
                    detail: format!(
                        "this gateway answers loopback names, its listen address and DUCKGATE_ALLOWED_HOSTS; not {:?}",
                        strip_port(host)
                    ),
                }
                .into_response(),
            );
        }
        // A preflight runs nothing; CORS (or its absence) answers it.
        if self.anonymous && acts(path) && req.method() != axum::http::Method::OPTIONS {
            let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
            let fetch_site = headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let listed = origin.is_some_and(|o| {
                self.cors_origins
                    .iter()
                    .any(|c| c == "*" || c.eq_ignore_ascii_case(o))
            });
            let own = origin.is_some_and(|o| {
                o.eq_ignore_ascii_case(&format!("http://{host}"))
                    || o.eq_ignore_ascii_case(&format!("https://{host}"))
            });
            let foreign =
                matches!(fetch_site, "cross-site" | "same-site") || (origin.is_some() && !own);
            if foreign && !listed {
                return Some(
                    ApiError::Forbidden {
                        slug: "cross-site-request",
                        title: "Cross-site request refused",
                        detail: "this gateway serves anonymous queries, which a web page of another site \
                                 may not send; set DUCKGATE_QUERY_TOKENS, or DUCKGATE_CORS_ORIGINS for that \
                                 site"
                            .into(),
                    }
                    .into_response(),
                );
            }
        }
        None
    }
}

/// The guard, in front of everything else: a plain layer rather than
/// `from_fn`, which boxes the rest of the stack and its future for every
/// request.
#[derive(Clone)]
pub struct SiteLayer(Arc<SiteRules>);

impl SiteLayer {
    /// The guard of `rules`.
    pub fn new(rules: SiteRules) -> Self {
        Self(Arc::new(rules))
    }
}

impl<S> tower::Layer<S> for SiteLayer {
    type Service = Site<S>;

    fn layer(&self, inner: S) -> Site<S> {
        Site {
            rules: self.0.clone(),
            inner,
        }
    }
}

/// See [`SiteLayer`].
#[derive(Clone)]
pub struct Site<S> {
    rules: Arc<SiteRules>,
    inner: S,
}

/// An answer of the layers behind the guard, as the router's answer.
type Answered<B> = fn(axum::http::Response<B>) -> Response;

impl<S, B> tower::Service<Request> for Site<S>
where
    S: tower::Service<Request, Response = axum::http::Response<B>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = futures::future::Either<
        std::future::Ready<Result<Response, S::Error>>,
        futures::future::MapOk<S::Future, Answered<B>>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        use futures::TryFutureExt as _;
        match self.rules.refusal(&req) {
            Some(refused) => futures::future::Either::Left(std::future::ready(Ok(refused))),
            None => futures::future::Either::Right(
                self.inner
                    .call(req)
                    .map_ok(IntoResponse::into_response as Answered<B>),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allowed: &[&str]) -> SiteRules {
        SiteRules {
            anonymous: true,
            allowed_hosts: allowed.iter().map(|s| s.to_string()).collect(),
            listen_ip: Some("10.1.2.3".parse().unwrap()),
            cors_origins: Vec::new(),
        }
    }

    #[test]
    fn loopback_names_the_listen_address_and_listed_hosts_are_answered() {
        let r = rules(&["duckgate.example.com", "*.corp.example"]);
        for ok in [
            "localhost",
            "localhost:8080",
            "app.localhost:1",
            "127.0.0.1:8080",
            "127.9.9.9",
            "[::1]:8080",
            "10.1.2.3:8080",
            "duckgate.example.com",
            "DuckGate.Example.com:443",
            "a.corp.example",
        ] {
            assert!(r.host_allowed(ok), "{ok}");
        }
        for bad in [
            "attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "corp.example",
            "xcorp.example",
            "10.1.2.4",
            "",
        ] {
            assert!(!r.host_allowed(bad), "{bad}");
        }
    }
}
