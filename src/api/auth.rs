//! Bearer tokens: query tokens open `/query`, the admin token opens
//! `/admin/...`, and neither opens the other; `/queries` takes either (a
//! query token sees its own queries, the admin token all). Comparisons take
//! constant time; tokens never reach a log line, only their names do.
//!
//! With `DUCKGATE_OIDC_ISSUER` set, a bearer JWT of that issuer opens what a
//! query token opens, as the identity `oidc:<name claim>` with the roles and
//! claims it carries ([`crate::identity::oidc`]); never the admin routes.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::api::AppState;

/// A query token and the name lists, logs and metrics show for it.
pub struct NamedToken {
    /// The token's name: the one given as `name:token`, else `token-<position>`.
    pub name: Arc<str>,
    /// The token itself.
    pub secret: SecretString,
}

impl NamedToken {
    /// `name:token` names a token (a name is 1-64 of `A-Za-z0-9._-`); a bare
    /// token (no `:`) is named by its place in the configured list
    /// (`token-1`, `token-2`, ...). Not by a hash of it: a hash in every
    /// log line would let anyone who reads the logs test guesses of a short
    /// token offline. An entry with a `:` whose name is not a name is
    /// refused rather than taken for a bare token (`bad name:abc` meant a
    /// name, and `bad name:abc` as the token would be a surprise).
    pub fn parse(text: &str, position: usize) -> Result<Self, String> {
        match text.split_once(':') {
            Some((name, secret)) => {
                if !(crate::engine::queries::valid_id(name) && name.len() <= 64) {
                    return Err(format!(
                        "entry {position} has the form name:token, and its name is not 1-64 of A-Za-z0-9._-"
                    ));
                }
                if secret.is_empty() {
                    return Err(format!(
                        "entry {position} ({name}) has no token after its name"
                    ));
                }
                Ok(Self {
                    name: name.into(),
                    secret: SecretString::from(secret.to_string()),
                })
            }
            None => Ok(Self {
                name: format!("token-{position}").into(),
                secret: SecretString::from(text.to_string()),
            }),
        }
    }
}

/// The shortest token the gateway accepts where it listens beyond
/// loopback (query tokens and the admin token).
pub const MIN_TOKEN_CHARS: usize = 16;

/// Reads and checks the token settings for a gateway listening on `addr`:
/// the tokens (`DUCKGATE_QUERY_TOKENS` and its file), the admin token (or
/// its file) and the URL signing key (its file, or a random one). Every
/// file is read now, so a reload calls this again.
pub fn load(
    auth: &crate::config::AuthConfig,
    addr: std::net::SocketAddr,
) -> Result<Tokens, crate::config::ConfigError> {
    use crate::config::ConfigError;
    let read = |setting: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            ConfigError::new(
                setting,
                format!("cannot read {}: {}", path.display(), e.kind()),
            )
        })
    };
    let mut entries: Vec<(&'static str, String)> = auth
        .query_tokens
        .iter()
        .map(|t| t.expose_secret().trim().to_string())
        .filter(|t| !t.is_empty())
        .map(|t| ("DUCKGATE_QUERY_TOKENS", t))
        .collect();
    if let Some(path) = &auth.query_tokens_file {
        let text = String::from_utf8(read("DUCKGATE_QUERY_TOKENS_FILE", path)?).map_err(|_| {
            ConfigError::new(
                "DUCKGATE_QUERY_TOKENS_FILE",
                format!("{} is not UTF-8 text", path.display()),
            )
        })?;
        entries.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| ("DUCKGATE_QUERY_TOKENS_FILE", l.to_string())),
        );
    }
    let loopback = addr.ip().is_loopback();
    // With OIDC on, identities come from the issuer: no static token is needed.
    let oidc = auth.oidc.enabled();
    if entries.is_empty() && !loopback && !auth.allow_anonymous && !oidc {
        return Err(ConfigError::new(
            "DUCKGATE_QUERY_TOKENS",
            format!(
                "no query tokens and {addr} is not a loopback address: set DUCKGATE_QUERY_TOKENS (or _FILE), or pass --allow-anonymous to serve anonymous queries on purpose"
            ),
        ));
    }
    let mut query = Vec::with_capacity(entries.len());
    for (i, (setting, text)) in entries.iter().enumerate() {
        let token = NamedToken::parse(text, i + 1).map_err(|e| ConfigError::new(setting, e))?;
        if !loopback && token.secret.expose_secret().chars().count() < MIN_TOKEN_CHARS {
            return Err(ConfigError::new(
                setting,
                format!(
                    "token {} is shorter than {MIN_TOKEN_CHARS} characters, too easy to guess on {addr}",
                    token.name
                ),
            ));
        }
        query.push(token);
    }
    let mut names: Vec<&str> = query.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConfigError::new(
            "DUCKGATE_QUERY_TOKENS",
            format!("two query tokens are named {}: names must be unique", w[0]),
        ));
    }
    let admin = match &auth.admin_token_file {
        Some(path) => {
            let text =
                String::from_utf8(read("DUCKGATE_ADMIN_TOKEN_FILE", path)?).map_err(|_| {
                    ConfigError::new(
                        "DUCKGATE_ADMIN_TOKEN_FILE",
                        format!("{} is not UTF-8 text", path.display()),
                    )
                })?;
            Some(("DUCKGATE_ADMIN_TOKEN_FILE", text.trim().to_string()))
        }
        None => auth
            .admin_token
            .as_ref()
            .map(|t| ("DUCKGATE_ADMIN_TOKEN", t.expose_secret().trim().to_string())),
    }
    .filter(|(_, t)| !t.is_empty());
    if let Some((setting, t)) = &admin {
        if t.chars().count() < MIN_TOKEN_CHARS {
            return Err(ConfigError::new(
                setting,
                format!("must be at least {MIN_TOKEN_CHARS} characters"),
            ));
        }
    }
    let signer = match &auth.url_signing_key_file {
        None => crate::api::links::UrlSigner::random(),
        Some(path) => {
            let key = read("DUCKGATE_URL_SIGNING_KEY_FILE", path)?;
            // A key written as text (`openssl rand -base64 32 > key`) ends
            // in a newline that is not part of it; raw random bytes are
            // the key as they are (trimming them cut ~4% of random 32-byte
            // keys to 31 bytes, which then refused to start).
            let text = key
                .iter()
                .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
            let key = if text { key.trim_ascii().to_vec() } else { key };
            if key.len() < 32 {
                return Err(ConfigError::new(
                    "DUCKGATE_URL_SIGNING_KEY_FILE",
                    format!(
                        "{} holds {} bytes; a URL signing key needs at least 32",
                        path.display(),
                        key.len()
                    ),
                ));
            }
            crate::api::links::UrlSigner::new(key)
        }
    };
    Ok(Tokens {
        anonymous: query.is_empty() && !oidc,
        query,
        admin: admin.map(|(_, t)| SecretString::from(t)),
        signer,
    })
}

/// Reloads the tokens on `SIGHUP` and when a token or key file changes
/// (checked every 2 s: a Kubernetes Secret's volume is updated in place),
/// until `stop`.
pub async fn watch(
    tokens: Arc<arc_swap::ArcSwap<Tokens>>,
    auth: crate::config::AuthConfig,
    addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
) {
    let files: Vec<std::path::PathBuf> = [
        &auth.query_tokens_file,
        &auth.admin_token_file,
        &auth.url_signing_key_file,
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    // What a change looks like from outside: modification time and size.
    let stamp = || -> Vec<Option<(std::time::SystemTime, u64)>> {
        files
            .iter()
            .map(|f| {
                std::fs::metadata(f)
                    .ok()
                    .and_then(|m| m.modified().ok().map(|t| (t, m.len())))
            })
            .collect()
    };
    let mut last = stamp();
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut every = tokio::time::interval(std::time::Duration::from_secs(2));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hup = async {
            match hangup.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<()>();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = hup => {
                reload(&tokens, &auth, addr, "SIGHUP");
                last = stamp();
            }
            _ = every.tick() => {
                let now = stamp();
                if now != last {
                    last = now;
                    reload(&tokens, &auth, addr, "file changed");
                }
            }
        }
    }
}

/// Reads the token settings again (`SIGHUP`, or a token or key file that
/// changed) and puts them in place at once: a request sees the old set or
/// the new one, never half of each. A reload that fails, or that would
/// switch the gateway between anonymous and token access, keeps the
/// current tokens. URLs signed with the previous key keep holding until
/// they expire. Logs names and what changed, never a token.
pub fn reload(
    current: &arc_swap::ArcSwap<Tokens>,
    auth: &crate::config::AuthConfig,
    addr: std::net::SocketAddr,
    why: &'static str,
) -> bool {
    let old = current.load_full();
    let outcome = load(auth, addr).and_then(|new| {
        if new.anonymous != old.anonymous {
            return Err(crate::config::ConfigError::new(
                "DUCKGATE_QUERY_TOKENS",
                "a reload cannot switch between anonymous and token access; restart for that",
            ));
        }
        Ok(new)
    });
    match outcome {
        Ok(mut new) => {
            let names = |t: &Tokens| -> Vec<String> {
                t.query.iter().map(|q| q.name.to_string()).collect()
            };
            let (before, after) = (names(&old), names(&new));
            let added: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
            let removed: Vec<&String> = before.iter().filter(|n| !after.contains(n)).collect();
            let changed: Vec<&str> = old
                .query
                .iter()
                .filter(|o| {
                    new.query.iter().any(|n| {
                        n.name == o.name && n.secret.expose_secret() != o.secret.expose_secret()
                    })
                })
                .map(|o| o.name.as_ref())
                .collect();
            let admin_changed = old.admin.as_ref().map(|a| a.expose_secret().to_string())
                != new.admin.as_ref().map(|a| a.expose_secret().to_string());
            let key_changed = !new.signer.same_key(&old.signer);
            if key_changed {
                new.signer.keep_verifying(&old.signer);
            } else {
                new.signer = old.signer.clone();
            }
            current.store(Arc::new(new));
            metrics::counter!("duckgate_config_reloads_total", "outcome" => "ok").increment(1);
            tracing::info!(
                trigger = why,
                tokens_added = ?added,
                tokens_removed = ?removed,
                tokens_changed = ?changed,
                admin_token_changed = admin_changed,
                signing_key_changed = key_changed,
                "tokens reloaded"
            );
            true
        }
        Err(e) => {
            metrics::counter!("duckgate_config_reloads_total", "outcome" => "refused").increment(1);
            tracing::error!(trigger = why, error = %e, "reload refused: the current tokens stay");
            false
        }
    }
}

/// The configured tokens.
pub struct Tokens {
    /// Anonymous queries: no query token and no OIDC issuer (start-up
    /// checked that the address or `--allow-anonymous` permits it).
    pub anonymous: bool,
    /// The query tokens (with OIDC on, possibly none).
    pub query: Vec<NamedToken>,
    /// `None`: the admin API is off.
    pub admin: Option<SecretString>,
    /// Signs and checks result URLs that need no header (`api::links`).
    pub signer: crate::api::links::UrlSigner,
}

/// Compares `given` with every token, without an early exit.
fn matches_any(given: &[u8], tokens: &[SecretString]) -> bool {
    let mut found = subtle::Choice::from(0u8);
    for t in tokens {
        found |= given.ct_eq(t.expose_secret().as_bytes());
    }
    found.into()
}

/// The index of the query token `given` is, compared with every token
/// without an early exit.
fn which_token(given: &[u8], tokens: &[NamedToken]) -> Option<usize> {
    use subtle::ConditionallySelectable;
    let mut found = subtle::Choice::from(0u8);
    let mut index = 0u32;
    for (i, t) in tokens.iter().enumerate() {
        let eq = given.ct_eq(t.secret.expose_secret().as_bytes());
        index.conditional_assign(&(i as u32), eq);
        found |= eq;
    }
    bool::from(found).then_some(index as usize)
}

fn bearer(parts: &Parts) -> Option<&[u8]> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .as_bytes();
    let rest = value
        .strip_prefix(b"Bearer ")
        .or_else(|| value.strip_prefix(b"bearer "))?;
    Some(rest.trim_ascii())
}

fn failed(route: &'static str, reason: &'static str) {
    metrics::counter!("duckgate_auth_failures_total", "route" => route, "reason" => reason)
        .increment(1);
    tracing::warn!(route, reason, "authentication failed");
}

/// Proof that the request may run queries, and who asks: a query token's
/// holder or an OIDC identity. Everything that belongs to a caller
/// (statements, running queries, shares of the pool and the spool, the
/// audit and access lines) is keyed on `name`.
#[derive(Debug, Clone)]
pub struct QueryAuth {
    /// The identity's name: a query token's (`anonymous` when the gateway
    /// is anonymous), or `oidc:<name claim>` for a JWT (a token's name has
    /// no `:`, so the two never meet).
    pub name: Arc<str>,
    /// Its roles: a JWT's roles claim; none for query tokens.
    pub roles: Vec<Arc<str>>,
    /// Its claims: a JWT's, whole, for policies that bind them (empty for
    /// query tokens).
    pub claims: Arc<serde_json::Map<String, serde_json::Value>>,
    /// What its roles let it read and change; `None`: not confined (a
    /// query token holding no role).
    pub access: Option<Arc<crate::engine::guard::access::Access>>,
}

impl QueryAuth {
    /// A query token's holder (or the anonymous caller): no roles, no claims.
    pub fn named(name: Arc<str>) -> Self {
        Self {
            name,
            roles: Vec::new(),
            claims: Arc::default(),
            access: None,
        }
    }

    /// The identity with the grants of its roles (`[[role]]` of the TOML
    /// file): those it is a member of by name and, for a JWT, those its
    /// roles claim names. A JWT holding no declared role, where roles are
    /// declared, is confined to nothing: an issuer's every token is not
    /// the operator's to trust with every table.
    fn with_roles(mut self, roles: &crate::config::roles::Roles, jwt: bool) -> Self {
        self.access = roles.access(&self.name, &self.roles, &self.claims);
        if self.access.is_none() && jwt && roles.any() {
            self.access = Some(Arc::default());
        }
        if let Some(a) = &self.access {
            self.roles = a.roles.clone();
        }
        self
    }

    /// When the identity's proof expires, in Unix seconds: a JWT's `exp`
    /// (a query token does not expire).
    pub fn expires_at(&self) -> Option<u64> {
        let exp = self.claims.get("exp")?;
        exp.as_u64()
            .or_else(|| exp.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    }
}

impl FromRequestParts<AppState> for QueryAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let all = state.tokens.load();
        if all.anonymous {
            tracing::Span::current().record("identity", "anonymous");
            return Ok(QueryAuth::named("anonymous".into()).with_roles(&state.roles, false));
        }
        let Some(given) = bearer(parts) else {
            failed("query", "missing");
            return Err(ApiError::Unauthorized {
                detail: "a bearer token is required: Authorization: Bearer <token>",
            });
        };
        if let Some(i) = which_token(given, &all.query) {
            let name = all.query[i].name.clone();
            tracing::Span::current().record("identity", &*name);
            return Ok(QueryAuth::named(name).with_roles(&state.roles, false));
        }
        if let Some(verifier) = state.oidc.as_deref() {
            if crate::identity::oidc::looks_like_jwt(given) {
                // ASCII by its shape.
                let token = String::from_utf8_lossy(given).into_owned();
                return match verifier.verify(&token).await {
                    Ok(v) => {
                        tracing::Span::current().record("identity", &*v.name);
                        Ok(QueryAuth {
                            name: v.name,
                            roles: v.roles,
                            claims: v.claims,
                            access: None,
                        }
                        .with_roles(&state.roles, true))
                    }
                    Err(refusal) => {
                        failed("query", refusal.reason());
                        Err(ApiError::TokenRefused(refusal))
                    }
                };
            }
        }
        failed("query", "wrong");
        Err(ApiError::Unauthorized {
            detail: "the bearer token is not valid for queries",
        })
    }
}

/// Who asks about running queries: the admin (every query) or a query
/// token's holder or an OIDC identity (its own).
pub enum Caller {
    /// The admin token.
    Admin,
    /// A query token's holder or an OIDC identity (`anonymous` when the
    /// gateway is anonymous).
    Owner(QueryAuth),
}

impl Caller {
    /// Whether this caller may see and cancel a query of `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Owner(auth) => auth.name.as_ref() == owner,
        }
    }

    /// The owner whose things this caller sees; `None`: the admin, every
    /// owner's.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Caller::Admin => None,
            Caller::Owner(auth) => Some(&auth.name),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // A signed result URL stands for its owner's token (GET of exactly
        // the path it was made for; see `api::links`).
        if bearer(parts).is_none() {
            if let Some(signed) = crate::api::links::signed_caller(parts, state) {
                return signed;
            }
        }
        if let (Some(admin), Some(given)) = (&state.tokens.load().admin, bearer(parts)) {
            if matches_any(given, std::slice::from_ref(admin)) {
                tracing::Span::current().record("identity", "admin");
                return Ok(Caller::Admin);
            }
        }
        QueryAuth::from_request_parts(parts, state)
            .await
            .map(Caller::Owner)
    }
}

/// Proof that the request may use the admin API.
pub struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tokens = state.tokens.load();
        let Some(admin) = &tokens.admin else {
            return Err(ApiError::AdminDisabled);
        };
        match bearer(parts) {
            None => {
                failed("admin", "missing");
                Err(ApiError::Unauthorized {
                    detail: "the admin API needs Authorization: Bearer <DUCKGATE_ADMIN_TOKEN>",
                })
            }
            Some(given) if matches_any(given, std::slice::from_ref(admin)) => {
                tracing::Span::current().record("identity", "admin");
                Ok(AdminAuth)
            }
            Some(_) => {
                failed("admin", "wrong");
                Err(ApiError::Unauthorized {
                    detail: "the bearer token is not the admin token",
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_match() {
        let tokens = vec![
            SecretString::from("alpha-token".to_string()),
            SecretString::from("beta".to_string()),
        ];
        assert!(matches_any(b"beta", &tokens));
        assert!(matches_any(b"alpha-token", &tokens));
        assert!(!matches_any(b"alpha", &tokens));
        assert!(!matches_any(b"", &tokens));
    }
}
