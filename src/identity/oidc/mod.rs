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
use std::time::Instant;

use arc_swap::ArcSwap;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::{self, Key};
use crate::config::oidc::OidcSettings;
use crate::state::Dependency;

mod claims;
mod keys;
mod refusal;

pub use refusal::Refusal;

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
    fn a_header_is_read_without_trusting_it() {
        let none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.";
        assert_eq!(read_header(none).unwrap()["alg"], "none");
        assert!(matches!(read_header("x.y"), Err(Refusal::Malformed(_))));
        assert!(matches!(read_header("!!!.y.z"), Err(Refusal::Malformed(_))));
    }
}
