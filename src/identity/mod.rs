//! Who a request runs as, beyond the static tokens `api::auth` compares:
//! bearer JWTs of an OIDC issuer, verified against the issuer's published
//! keys ([`oidc`]; the keys and how they are fetched: [`jwks`]). Nothing here
//! knows the HTTP server; `api::auth` turns a verified token into the
//! request's identity.

pub mod jwks;
pub mod oidc;
