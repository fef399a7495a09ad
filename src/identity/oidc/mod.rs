//! Bearer JWTs of one OIDC issuer as identities.
//!
//! A token is accepted when, in this order: it is a JWS in compact form
//! whose header names an allowed algorithm (never `none`, never HS*); a key
//! of the issuer's JWKS with its `kid` exists and fits that algorithm (its
//! kind, and its own `alg` if it has one); the signature holds (checked by
//! `jsonwebtoken`); `iss` is the issuer; `aud` names one of the audiences;
//! `exp` (required) and `nbf` hold within the leeway; the name claim is a
//! name and the roles claim a list of names.
//!
//! The keys are cached ([`KeySet`]) and fetched again on an interval
//! ([`Verifier::run`]) and when a token names an unknown `kid`, at most once
//! per cooldown, one fetch at a time, so a flood of made-up `kid`s costs the
//! issuer one request per cooldown. A failed fetch keeps the last good keys;
//! once they are older than the staleness bound the dependency `oidc` is
//! down (`/healthz` and `/readyz` say `degraded`), and tokens are still
//! checked against them. Neither a token, nor a claim's value, nor a key
//! reaches a log line or an answer: a refusal says what was wrong in
//! general terms ([`Refusal`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::jwks::{self, Key};
use crate::config::oidc::{JwksLocation, OidcSettings};
use crate::state::Dependency;

/// The longest bearer token taken for a JWT (real ones are 1-4 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The longest identity name a name claim may give.
const MAX_NAME_BYTES: usize = 256;

/// The most keys a token without a `kid` is tried against: the keys of
/// its algorithm, when the issuer publishes at most this many (real
/// issuers publish two or three; one publishing thousands made one forged
/// token cost 0.3-0.7 s of a worker). Past it, such a token is refused.
pub const MAX_KEYS_WITHOUT_KID: usize = 8;

/// What a verified token says about its holder.
#[derive(Debug, Clone)]
pub struct Verified {
    /// `oidc:` and the name claim's value: never a static token's name
    /// (those have no `:`).
    pub name: Arc<str>,
    /// The roles the roles claim lists.
    pub roles: Vec<Arc<str>>,
    /// Every claim of the token, for policies that bind them.
    pub claims: Arc<Map<String, Value>>,
}

/// Why a token was refused. Each says what was wrong in terms a client may
/// be told: never a claim's value, the expected value, or key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a JWT, or one the gateway cannot read: the reason.
    Malformed(&'static str),
    /// Its algorithm is not allowed, or not the one its key is for.
    AlgorithmNotAllowed(&'static str),
    /// The issuer has no key with its `kid` (after a fetch, or within the
    /// cooldown of the last one).
    UnknownKey,
    /// The signature does not hold.
    BadSignature,
    /// `iss` is not the issuer.
    WrongIssuer,
    /// `aud` names none of the audiences.
    WrongAudience,
    /// `exp` passed, beyond the leeway.
    Expired,
    /// `nbf` is ahead, beyond the leeway.
    NotYetValid,
    /// The token cannot be checked now: the issuer's keys could not be
    /// fetched (none yet, or the fetch for the `kid` it names failed). The
    /// issuer's fault, not the client's: 503 with `Retry-After`.
    IssuerUnavailable,
}

impl Refusal {
    /// The problem type's last part.
    pub fn slug(self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "token-malformed",
            Refusal::AlgorithmNotAllowed(_) => "token-algorithm-not-allowed",
            Refusal::UnknownKey => "token-unknown-key",
            Refusal::BadSignature => "token-bad-signature",
            Refusal::WrongIssuer => "token-wrong-issuer",
            Refusal::WrongAudience => "token-wrong-audience",
            Refusal::Expired => "token-expired",
            Refusal::NotYetValid => "token-not-yet-valid",
            Refusal::IssuerUnavailable => "issuer-unavailable",
        }
    }

    /// Whether the refusal is the issuer's outage rather than the token's
    /// fault.
    pub fn issuer_unavailable(self) -> bool {
        self == Refusal::IssuerUnavailable
    }

    /// The problem's title.
    pub fn title(self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "Token malformed",
            Refusal::AlgorithmNotAllowed(_) => "Token algorithm not allowed",
            Refusal::UnknownKey => "Token signed with an unknown key",
            Refusal::BadSignature => "Token signature invalid",
            Refusal::WrongIssuer => "Token from another issuer",
            Refusal::WrongAudience => "Token for another audience",
            Refusal::Expired => "Token expired",
            Refusal::NotYetValid => "Token not yet valid",
            Refusal::IssuerUnavailable => "Identity issuer unavailable",
        }
    }

    /// The problem a caller gets: 503 when the issuer's keys cannot be
    /// had (the service's fault, a retry may succeed), else 401.
    pub fn problem(self) -> crate::problems::Problem {
        use crate::problems::{kind, Problem};
        if self.issuer_unavailable() {
            Problem::new(&kind::ISSUER_UNAVAILABLE, self.detail())
        } else {
            Problem::with_slug(
                &kind::UNAUTHORIZED,
                self.slug(),
                self.title(),
                self.detail(),
            )
        }
    }

    /// What was wrong, for the problem's detail.
    pub fn detail(self) -> String {
        match self {
            Refusal::Malformed(why) => format!("the bearer token is not a JWT the gateway accepts: {why}"),
            Refusal::AlgorithmNotAllowed(why) => format!("the token's signature algorithm is not allowed: {why}"),
            Refusal::UnknownKey => "the token names a signing key (kid) the issuer does not publish; if the issuer has just rotated its keys, retry shortly".into(),
            Refusal::BadSignature => "the token's signature does not verify with the issuer's key".into(),
            Refusal::WrongIssuer => "the token was not issued by the issuer this gateway trusts (iss)".into(),
            Refusal::WrongAudience => "the token was not issued for this gateway (aud)".into(),
            Refusal::Expired => "the token has expired (exp); get a new one from the issuer".into(),
            Refusal::NotYetValid => "the token is not valid yet (nbf)".into(),
            Refusal::IssuerUnavailable => "the token cannot be checked now: the OIDC issuer's signing keys could not be fetched; retry shortly (query tokens are not affected)".into(),
        }
    }

    /// The `reason` label of `duckgate_auth_failures_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "jwt_malformed",
            Refusal::AlgorithmNotAllowed(_) => "jwt_algorithm",
            Refusal::UnknownKey => "jwt_unknown_key",
            Refusal::BadSignature => "jwt_signature",
            Refusal::WrongIssuer => "jwt_issuer",
            Refusal::WrongAudience => "jwt_audience",
            Refusal::Expired => "jwt_expired",
            Refusal::NotYetValid => "jwt_not_yet_valid",
            Refusal::IssuerUnavailable => "jwt_issuer_unavailable",
        }
    }

    /// Every `reason` label, for the metrics' zeroes.
    pub const REASONS: &'static [&'static str] = &[
        "jwt_malformed",
        "jwt_algorithm",
        "jwt_unknown_key",
        "jwt_signature",
        "jwt_issuer",
        "jwt_audience",
        "jwt_expired",
        "jwt_not_yet_valid",
        "jwt_issuer_unavailable",
    ];
}

/// Whether `token` has the shape of a JWS in compact form: three base64url
/// parts separated by dots (a static token never looks like that by chance).
pub fn looks_like_jwt(token: &[u8]) -> bool {
    token.len() <= MAX_TOKEN_BYTES
        && token.iter().filter(|b| **b == b'.').count() == 2
        && token
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
        && !token.starts_with(b".")
}

/// The keys in use.
#[derive(Debug, Default)]
pub struct KeySet {
    /// The issuer's usable keys.
    pub keys: Vec<Key>,
    /// When they were fetched; `None`: never.
    pub fetched: Option<Instant>,
    /// Increments with every successful fetch.
    pub generation: u64,
}

/// How fetches went, for the schedule and the health message.
#[derive(Debug, Default)]
struct FetchStatus {
    /// When the last fetch began.
    last_attempt: Option<Instant>,
    /// Consecutive failed fetches.
    failures: u32,
    /// Why the last fetch failed, while failing.
    last_error: Option<String>,
}

/// Checks bearer JWTs of the issuer against its keys.
pub struct Verifier {
    /// The settings.
    settings: OidcSettings,
    /// The keys in use, swapped whole by a fetch.
    keys: ArcSwap<KeySet>,
    /// The source, locked for one fetch at a time (a tokio mutex: it is
    /// held across the fetch; nothing else waits on it).
    source: tokio::sync::Mutex<jwks::Source>,
    /// The schedule's facts; held for a moment, never across an await.
    status: Mutex<FetchStatus>,
    /// The dependency `oidc` of the health snapshot.
    health: Arc<Dependency>,
}

fn now_unix_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i128)
}

/// A NumericDate claim (seconds since the epoch, maybe fractional) in ms.
fn numeric_date_ms(v: &Value) -> Option<i128> {
    if let Some(i) = v.as_i64() {
        return Some(i as i128 * 1000);
    }
    v.as_f64()
        .filter(|f| f.is_finite())
        .map(|f| (f * 1000.0) as i128)
}

/// A claim by its exact name (JSON names are case-sensitive: `TENANT` is
/// not `tenant`), or, for a name with dots, by its path through nested
/// objects (`realm_access.roles`). `Err` when both name a value (a claim
/// literally named `org.tenant` beside `org: {tenant}`): which one the
/// token means is not the gateway's to guess (row policies read claims the
/// same way, `engine/policy/document.cpp`).
fn claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Result<Option<&'a Value>, ()> {
    let literal = claims.get(name);
    let path = name.contains('.').then(|| {
        let mut parts = name.split('.');
        let mut v = claims.get(parts.next()?)?;
        for p in parts {
            v = v.as_object()?.get(p)?;
        }
        Some(v)
    });
    match (literal, path.flatten()) {
        (Some(_), Some(_)) => Err(()),
        (l, p) => Ok(l.or(p)),
    }
}

impl Verifier {
    /// A verifier with no keys yet ([`Verifier::refresh`] fetches them),
    /// publishing the keys' freshness to `health`.
    pub fn new(settings: OidcSettings, health: Arc<Dependency>) -> Result<Self, String> {
        let source = jwks::Source::new(
            settings.jwks.clone(),
            settings.issuer.clone(),
            settings.timeout,
        )?;
        Ok(Self {
            settings,
            keys: ArcSwap::from_pointee(KeySet::default()),
            source: tokio::sync::Mutex::new(source),
            status: Mutex::new(FetchStatus::default()),
            health,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The keys in use.
    pub fn keys(&self) -> Arc<KeySet> {
        self.keys.load_full()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, FetchStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Verifies `token`: the identity it names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Verified, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Malformed("it is longer than 16 KiB"));
        }
        let header = read_header(token)?;
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(Refusal::Malformed("its header names no algorithm (alg)"))?;
        let alg = self
            .settings
            .algorithms
            .iter()
            .copied()
            .find(|a| format!("{a:?}") == alg_name)
            .ok_or(Refusal::AlgorithmNotAllowed(
                "the gateway accepts only the algorithms of DUCKGATE_OIDC_ALGORITHMS (never none, never HS*)",
            ))?;
        if header.contains_key("crit") {
            return Err(Refusal::Malformed(
                "its header lists critical extensions (crit) the gateway does not implement",
            ));
        }
        let kid = match header.get("kid") {
            None => None,
            Some(Value::String(k)) => Some(k.as_str()),
            Some(_) => return Err(Refusal::Malformed("its key id (kid) is not a string")),
        };
        let mut keys = self.keys.load_full();
        if let Some(kid) = kid {
            if !keys.keys.iter().any(|k| k.kid.as_deref() == Some(kid)) {
                keys = self.keys_after_unknown_kid(keys.generation).await;
            }
        }
        if keys.fetched.is_none() {
            // No key of the issuer yet (out of reach since start-up): the
            // token cannot be checked, which is no fault of its holder.
            return Err(Refusal::IssuerUnavailable);
        }
        let named: Vec<usize> = (0..keys.keys.len())
            .filter(|&i| kid.is_none_or(|kid| keys.keys[i].kid.as_deref() == Some(kid)))
            .collect();
        let fitting: Vec<usize> = named
            .iter()
            .copied()
            .filter(|&i| keys.keys[i].fits(alg))
            .collect();
        if fitting.is_empty() {
            return Err(match (kid, named.is_empty()) {
                (Some(_), false) => {
                    Refusal::AlgorithmNotAllowed("the key it names is not for that algorithm")
                }
                // A kid the issuer may have just published, while its keys
                // cannot be fetched: the issuer's outage, not the token's.
                (Some(_), true) if self.status().last_error.is_some() => Refusal::IssuerUnavailable,
                _ => Refusal::UnknownKey,
            });
        }
        let claims = if fitting.len() == 1 {
            verify_signature(token, alg, &[&keys.keys[fitting[0]]])?
        } else {
            // A token without a kid: a bounded number of keys, tried on a
            // blocking thread, never on the worker serving other requests.
            if fitting.len() > MAX_KEYS_WITHOUT_KID {
                return Err(Refusal::Malformed(
                    "it names no signing key (kid) and the issuer publishes more keys for its algorithm than the gateway tries without one",
                ));
            }
            let token = token.to_string();
            tokio::task::spawn_blocking(move || {
                let tried: Vec<&Key> = fitting.iter().map(|&i| &keys.keys[i]).collect();
                verify_signature(&token, alg, &tried)
            })
            .await
            .map_err(|_| Refusal::Malformed("it could not be read"))??
        };
        self.check_claims(claims)
    }

    /// The checks after the signature: issuer, audience, time, name, roles.
    fn check_claims(&self, claims: Map<String, Value>) -> Result<Verified, Refusal> {
        let s = &self.settings;
        if claims.get("iss").and_then(Value::as_str) != Some(s.issuer.as_str()) {
            return Err(Refusal::WrongIssuer);
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(a)) => s.audiences.iter().any(|x| x == a),
            Some(Value::Array(all)) => all
                .iter()
                .filter_map(Value::as_str)
                .any(|a| s.audiences.iter().any(|x| x == a)),
            _ => false,
        };
        if !audience_ok {
            return Err(Refusal::WrongAudience);
        }
        let now = now_unix_ms();
        let leeway = s.leeway.as_millis() as i128;
        let exp = claims
            .get("exp")
            .ok_or(Refusal::Malformed("it has no expiry (exp)"))?;
        let exp =
            numeric_date_ms(exp).ok_or(Refusal::Malformed("its expiry (exp) is not a number"))?;
        if now >= exp + leeway {
            return Err(Refusal::Expired);
        }
        if let Some(nbf) = claims.get("nbf") {
            let nbf = numeric_date_ms(nbf).ok_or(Refusal::Malformed(
                "its not-before time (nbf) is not a number",
            ))?;
            if now + leeway < nbf {
                return Err(Refusal::NotYetValid);
            }
        }
        let ambiguous = || {
            Refusal::Malformed(
                "a claim it is read by names two values (a name with dots beside the same path through objects)",
            )
        };
        let name = match claim(&claims, &s.name_claim).map_err(|()| ambiguous())? {
            Some(Value::String(n))
                if !n.is_empty()
                    && n.len() <= MAX_NAME_BYTES
                    && !n.chars().any(char::is_control) =>
            {
                format!("oidc:{n}")
            }
            Some(_) => {
                return Err(Refusal::Malformed(
                    "its name claim (DUCKGATE_OIDC_NAME_CLAIM) is not a name: a string of 1-256 bytes without control characters",
                ))
            }
            None => {
                return Err(Refusal::Malformed(
                    "it lacks the name claim (DUCKGATE_OIDC_NAME_CLAIM)",
                ))
            }
        };
        let roles: Vec<Arc<str>> = match claim(&claims, &s.roles_claim).map_err(|()| ambiguous())? {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(text)) => text.split_whitespace().map(Arc::from).collect(),
            Some(Value::Array(items)) => {
                let mut roles = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(r) if !r.is_empty() && !r.chars().any(char::is_control) => {
                            roles.push(Arc::from(r))
                        }
                        _ => {
                            return Err(Refusal::Malformed(
                                "its roles claim (DUCKGATE_OIDC_ROLES_CLAIM) holds something that is not a role name",
                            ))
                        }
                    }
                }
                roles
            }
            Some(_) => {
                return Err(Refusal::Malformed(
                    "its roles claim (DUCKGATE_OIDC_ROLES_CLAIM) is neither an array of strings nor a space-separated string",
                ))
            }
        };
        Ok(Verified {
            name: name.into(),
            roles,
            claims: Arc::new(claims),
        })
    }

    /// The keys once a token named a `kid` of none of them (`seen`: the
    /// generation it looked at): fetched again unless another fetch ended
    /// meanwhile or the last one began within the cooldown. One fetch at a
    /// time; those who waited for it take its keys.
    async fn keys_after_unknown_kid(&self, seen: u64) -> Arc<KeySet> {
        let mut source = self.source.lock().await;
        let now = self.keys.load_full();
        if now.generation != seen {
            return now;
        }
        let recent = self
            .status()
            .last_attempt
            .is_some_and(|t| t.elapsed() < self.settings.cooldown);
        if recent {
            return now;
        }
        let _ = self.fetch_locked(&mut source, "unknown kid").await;
        self.keys.load_full()
    }

    /// Fetches the keys now (waiting for a fetch under way first); a
    /// failure keeps the last good keys. `trigger` is for the log.
    pub async fn refresh(&self, trigger: &'static str) -> Result<(), String> {
        let mut source = self.source.lock().await;
        self.fetch_locked(&mut source, trigger).await
    }

    async fn fetch_locked(
        &self,
        source: &mut jwks::Source,
        trigger: &'static str,
    ) -> Result<(), String> {
        self.status().last_attempt = Some(Instant::now());
        let outcome = source.fetch().await;
        match &outcome {
            Ok(keys) => {
                let old = self.keys.load_full();
                let kids = |ks: &[Key]| -> Vec<String> {
                    ks.iter()
                        .map(|k| k.kid.clone().unwrap_or_else(|| "-".into()))
                        .collect()
                };
                let (before, after) = (kids(&old.keys), kids(keys));
                if before != after {
                    // Key ids are public names, not key material.
                    tracing::info!(trigger, kids = ?after, "the issuer's keys changed");
                }
                self.keys.store(Arc::new(KeySet {
                    keys: keys.clone(),
                    fetched: Some(Instant::now()),
                    generation: old.generation + 1,
                }));
                let mut st = self.status();
                st.failures = 0;
                st.last_error = None;
                drop(st);
                metrics::counter!("duckgate_oidc_jwks_fetches_total", "outcome" => "ok")
                    .increment(1);
            }
            Err(e) => {
                let mut st = self.status();
                st.failures = st.failures.saturating_add(1);
                st.last_error = Some(e.clone());
                drop(st);
                metrics::counter!("duckgate_oidc_jwks_fetches_total", "outcome" => "error")
                    .increment(1);
                tracing::warn!(
                    trigger,
                    error.cause = %e,
                    "the issuer's keys could not be fetched; the last good keys stay in use"
                );
            }
        }
        self.publish_health();
        outcome.map(|_| ())
    }

    /// Publishes the keys' freshness as the dependency `oidc`: down while
    /// there are none, or they are older than the staleness bound.
    pub fn publish_health(&self) {
        let keys = self.keys.load();
        let stale_after = self.settings.stale_after;
        let last_error = self.status().last_error.clone();
        let because = last_error
            .map(|e| format!("; the last fetch failed: {e}"))
            .unwrap_or_default();
        match keys.fetched {
            Some(t) if t.elapsed() <= stale_after => self.health.ok(),
            Some(t) => self.health.failed(&format!(
                "the issuer's keys were last fetched {} s ago, past DUCKGATE_OIDC_JWKS_STALE_MS ({} s); tokens are still checked against them{because}",
                t.elapsed().as_secs(),
                stale_after.as_secs()
            )),
            None => self.health.failed(&format!(
                "no keys of the issuer yet: bearer JWTs are refused{because}"
            )),
        }
    }

    /// How long until the next scheduled fetch: the refresh period after a
    /// success; after failures, the cooldown doubled per failure, at most
    /// the refresh period.
    fn until_next_fetch(&self) -> Duration {
        let st = self.status();
        let s = &self.settings;
        let period = if st.failures == 0 {
            s.refresh
        } else {
            let doubled = s.cooldown.saturating_mul(1u32 << (st.failures - 1).min(16));
            doubled.min(s.refresh)
        };
        match st.last_attempt {
            Some(t) => period.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    /// How long until the keys turn stale, if they are fresh now.
    fn until_stale(&self) -> Option<Duration> {
        let fetched = self.keys.load().fetched?;
        (fetched + self.settings.stale_after).checked_duration_since(Instant::now())
    }

    /// Fetches the keys on the refresh schedule and publishes their
    /// freshness when they turn stale, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let next = self.until_next_fetch();
            // Wake when the keys turn stale too (a moment after), so the
            // health says so on time even with a long refresh period.
            let wait = match self.until_stale() {
                Some(s) => next.min(s + Duration::from_millis(5)),
                None => next,
            }
            .max(Duration::from_millis(10));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            if self.until_next_fetch().is_zero() {
                let _ = self.refresh("interval").await;
            } else {
                self.publish_health();
            }
        }
    }

    /// Whether the keys come from a file (a start-up failure to read it is
    /// the operator's to fix, not a service's to wait for).
    pub fn from_file(&self) -> bool {
        matches!(self.settings.jwks, JwksLocation::File(_))
    }
}

/// The JOSE header of `token`, read without trusting it.
fn read_header(token: &str) -> Result<Map<String, Value>, Refusal> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed(
            "it is not three base64url parts separated by dots",
        ));
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .map_err(|_| Refusal::Malformed("its header is not base64url"))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(Refusal::Malformed("its header is not a JSON object")),
    }
}

/// Checks the signature of `token` (algorithm `alg`) with each of `keys`
/// until one holds: the claims, untouched. Only the signature is checked
/// here (claims are [`Verifier::check_claims`]'s).
fn verify_signature(
    token: &str,
    alg: Algorithm,
    keys: &[&Key],
) -> Result<Map<String, Value>, Refusal> {
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    let mut refusal = Refusal::BadSignature;
    for key in keys {
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) => {
                refusal = match e.kind() {
                    ErrorKind::InvalidSignature
                    | ErrorKind::InvalidEcdsaKey
                    | ErrorKind::InvalidRsaKey(_)
                    | ErrorKind::Crypto(_) => Refusal::BadSignature,
                    ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                        Refusal::AlgorithmNotAllowed("the key it names is not for that algorithm")
                    }
                    ErrorKind::Base64(_) | ErrorKind::Utf8(_) => {
                        return Err(Refusal::Malformed("a part of it is not base64url"))
                    }
                    ErrorKind::Json(_) => {
                        return Err(Refusal::Malformed("its claims are not a JSON object"))
                    }
                    _ => Refusal::Malformed("it could not be read"),
                };
            }
        }
    }
    Err(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert!(looks_like_jwt(b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"));
        assert!(looks_like_jwt(b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."));
        assert!(!looks_like_jwt(b"alice-secret-9d2c"));
        assert!(!looks_like_jwt(b"a.b"));
        assert!(!looks_like_jwt(b"a.b.c.d"));
        assert!(!looks_like_jwt(b"a b.c.d"));
    }

    #[test]
    fn claims_by_name_or_path() {
        let m: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "https://example.com/roles": ["a"],
            "realm_access": {"roles": ["b", "c"]},
            "Roles": ["x"],
            "org": {"tenant": "acme"},
            "org.tenant": "globex"
        }))
        .unwrap();
        assert_eq!(
            claim(&m, "https://example.com/roles"),
            Ok(Some(&serde_json::json!(["a"])))
        );
        assert_eq!(
            claim(&m, "realm_access.roles"),
            Ok(Some(&serde_json::json!(["b", "c"])))
        );
        assert_eq!(claim(&m, "realm_access.nope"), Ok(None));
        // Exact names: `Roles` is not `roles`.
        assert_eq!(claim(&m, "roles"), Ok(None));
        assert_eq!(claim(&m, "Roles"), Ok(Some(&serde_json::json!(["x"]))));
        // A literal dotted name beside the same path: neither is taken.
        assert_eq!(claim(&m, "org.tenant"), Err(()));
    }

    #[test]
    fn numeric_dates() {
        assert_eq!(numeric_date_ms(&serde_json::json!(10)), Some(10_000));
        assert_eq!(numeric_date_ms(&serde_json::json!(10.5)), Some(10_500));
        assert_eq!(numeric_date_ms(&serde_json::json!("10")), None);
    }

    #[test]
    fn a_header_is_read_without_trusting_it() {
        let none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.";
        assert_eq!(read_header(none).unwrap()["alg"], "none");
        assert!(matches!(read_header("x.y"), Err(Refusal::Malformed(_))));
        assert!(matches!(read_header("!!!.y.z"), Err(Refusal::Malformed(_))));
    }
}
