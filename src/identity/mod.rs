//! Who a statement runs as, whatever door it came through: one
//! [`Identity`], decided once per call by [`Authenticator::identify`] from
//! the bearer credential (a static query token, [`tokens`], or a JWT of the
//! OIDC issuer, [`oidc`], whose keys [`jwks`] fetches), with the roles that
//! confine it ([`crate::config::roles`]). HTTP's extractor, the Flight SQL
//! listener and the PostgreSQL door each pass the credential they received
//! and get the same identity; nothing here knows a protocol.
//!
//! What the identities are (tokens, roles, the URL key) is one
//! [`Directory`], replaced whole by a reload ([`directory`]): a call sees
//! the old one or the new one, never half of each.

pub mod directory;
pub mod jwks;
pub mod oidc;
pub mod roles;
pub mod signer;
pub mod tokens;

use std::sync::Arc;

pub use directory::Directory;

use crate::engine::guard::access::Access;

/// Who runs a statement: a query token's holder or an OIDC identity.
/// Everything that belongs to a caller (statements, running queries,
/// shares of the pool and the spool, the audit and access lines) is keyed
/// on `name`.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The identity's name: a query token's (`anonymous` when the gateway
    /// is anonymous), or `oidc:<name claim>` for a JWT (a token's name has
    /// no `:`, so the two never meet).
    pub name: Arc<str>,
    /// Its roles: those it holds of the declared ones (by membership, or
    /// named by a JWT's roles claim).
    pub roles: Vec<Arc<str>>,
    /// Its claims: a JWT's, whole, for policies that bind them (empty for
    /// query tokens).
    pub claims: Arc<serde_json::Map<String, serde_json::Value>>,
    /// What its roles let it read and change; `None`: not confined (a
    /// query token holding no role).
    pub access: Option<Arc<Access>>,
}

impl Identity {
    /// A query token's holder (or the anonymous caller) with the roles it
    /// is a member of in `roles`.
    pub fn token_holder(name: Arc<str>, roles: &crate::identity::roles::Roles) -> Self {
        Self::with_roles(name, Vec::new(), Arc::default(), roles, false)
    }

    /// A name alone, confined by nothing it could use: the owner a signed
    /// result URL stands for (it reads one statement's result, no table).
    pub fn owner(name: Arc<str>) -> Self {
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
    fn with_roles(
        name: Arc<str>,
        claimed: Vec<Arc<str>>,
        claims: Arc<serde_json::Map<String, serde_json::Value>>,
        roles: &crate::identity::roles::Roles,
        jwt: bool,
    ) -> Self {
        let mut access = roles.access(&name, &claimed, &claims);
        if access.is_none() && jwt && roles.any() {
            access = Some(Arc::default());
        }
        let roles = access.as_ref().map_or(claimed, |a| a.roles.clone());
        Self {
            name,
            roles,
            claims,
            access,
        }
    }

    /// When the identity's proof expires, in Unix seconds: a JWT's `exp`
    /// (a query token does not expire).
    pub fn expires_at(&self) -> Option<u64> {
        let exp = self.claims.get("exp")?;
        exp.as_u64()
            .or_else(|| exp.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    }
}

/// See [`Authenticator::parties`].
pub fn parties(tokens: &tokens::Tokens, oidc: bool) -> usize {
    let n = tokens.query.len();
    if oidc {
        (n + 1).max(2)
    } else {
        n
    }
}

/// What a caller without a credential is told.
pub const MISSING_DETAIL: &str = "a bearer token is required: Authorization: Bearer <token>";
/// What a caller whose credential is no query token is told.
pub const WRONG_DETAIL: &str = "the bearer token is not valid for queries";

/// Why a credential opens nothing.
#[derive(Debug)]
pub enum Denied {
    /// No credential where one is needed.
    Missing,
    /// A credential that is no query token (and no JWT of the issuer).
    Wrong,
    /// A JWT of the issuer that does not hold.
    Token(oidc::Refusal),
}

impl Denied {
    /// What a caller is told, whatever the door (HTTP adds its
    /// `WWW-Authenticate`, gRPC and PostgreSQL carry the same text).
    pub fn problem(&self) -> crate::problems::Problem {
        use crate::problems::{kind, Problem};
        match self {
            Denied::Missing => Problem::new(&kind::UNAUTHORIZED, MISSING_DETAIL),
            Denied::Wrong => Problem::new(&kind::UNAUTHORIZED, WRONG_DETAIL),
            Denied::Token(refusal) => refusal.problem(),
        }
    }

    /// The reason counted in `duckgate_auth_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::Missing => "missing",
            Denied::Wrong => "wrong",
            Denied::Token(r) => r.reason(),
        }
    }
}

/// Decides identities: the current [`Directory`] and the OIDC verifier.
pub struct Authenticator {
    directory: Arc<arc_swap::ArcSwap<Directory>>,
    oidc: Option<Arc<oidc::Verifier>>,
}

impl Authenticator {
    /// Identities from `directory` (replaced by reloads) and, when OIDC is
    /// on, `oidc`'s JWTs.
    pub fn new(
        directory: Arc<arc_swap::ArcSwap<Directory>>,
        oidc: Option<Arc<oidc::Verifier>>,
    ) -> Self {
        Self { directory, oidc }
    }

    /// The directory now (tokens, roles, URL key).
    pub fn directory(&self) -> Arc<Directory> {
        self.directory.load_full()
    }

    /// Where reloads put the next directory.
    pub fn directory_cell(&self) -> &Arc<arc_swap::ArcSwap<Directory>> {
        &self.directory
    }

    /// How many parties the fair shares (of the pool, the statements, the
    /// Flight SQL handles) divide among: the query tokens and, with OIDC
    /// on, its identities as one more, and then at least two (they are
    /// many, and no one identity may take the whole).
    pub fn parties(&self) -> usize {
        parties(&self.directory.load().tokens, self.oidc.is_some())
    }

    /// The OIDC verifier, when OIDC is on.
    pub fn oidc(&self) -> Option<&Arc<oidc::Verifier>> {
        self.oidc.as_ref()
    }

    /// The identity of an `Authorization` value (`Bearer <credential>`, as
    /// HTTP and gRPC metadata carry it), or why it opens nothing: counted
    /// in `duckgate_auth_failures_total` and logged by its reason, never by
    /// the credential. Every door decides identities here.
    pub async fn identify_authorization(
        &self,
        authorization: Option<&[u8]>,
    ) -> Result<Identity, Denied> {
        match self.identify(authorization.and_then(bearer_of)).await {
            Ok(identity) => {
                tracing::Span::current().record("identity", &*identity.name);
                Ok(identity)
            }
            Err(denied) => {
                metrics::counter!(
                    "duckgate_auth_failures_total",
                    "route" => "query",
                    "reason" => denied.reason()
                )
                .increment(1);
                tracing::warn!(
                    route = "query",
                    reason = denied.reason(),
                    "authentication failed"
                );
                Err(denied)
            }
        }
    }

    /// The identity `bearer` (the credential as sent, without a scheme)
    /// proves: a query token's holder, an OIDC identity, or the anonymous
    /// caller of an anonymous gateway (which takes no credential).
    pub async fn identify(&self, bearer: Option<&[u8]>) -> Result<Identity, Denied> {
        let directory = self.directory.load_full();
        if directory.tokens.anonymous {
            return Ok(Identity::token_holder("anonymous".into(), &directory.roles));
        }
        let given = bearer.ok_or(Denied::Missing)?;
        if let Some(name) = directory.tokens.query_token(given) {
            return Ok(Identity::token_holder(name.clone(), &directory.roles));
        }
        if let Some(verifier) = &self.oidc {
            if oidc::looks_like_jwt(given) {
                // ASCII by its shape.
                let token = String::from_utf8_lossy(given);
                let v = verifier.verify(&token).await.map_err(Denied::Token)?;
                return Ok(Identity::with_roles(
                    v.name,
                    v.roles,
                    v.claims,
                    &directory.roles,
                    true,
                ));
            }
        }
        Err(Denied::Wrong)
    }

    /// The identity a query token's name (or `anonymous`) stands for now,
    /// if it still does: a signed result URL names its owner, and removing
    /// the token revokes its URLs. An OIDC identity's holds while OIDC is
    /// on (it was minted to expire no later than the JWT that minted it).
    pub fn still_named(&self, owner: &str) -> Option<Identity> {
        let directory = self.directory.load_full();
        let holds = if directory.tokens.anonymous {
            owner == "anonymous"
        } else if owner.starts_with("oidc:") {
            self.oidc.is_some()
        } else {
            directory.tokens.names(owner)
        };
        holds.then(|| Identity::owner(owner.into()))
    }
}

/// The credential of an `Authorization` value: what follows `Bearer `.
pub fn bearer_of(value: &[u8]) -> Option<&[u8]> {
    value
        .strip_prefix(b"Bearer ")
        .or_else(|| value.strip_prefix(b"bearer "))
        .map(<[u8]>::trim_ascii)
}
