//! Why a token was refused, in terms a client may be told, and the problem
//! each answers with.

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
