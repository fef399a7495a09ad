//! The issuer's signing keys: a JWKS (RFC 7517) read from a URL, a file, or
//! the `jwks_uri` of the issuer's discovery document, parsed into the keys a
//! token may be verified with. Only public signing keys are kept: RSA
//! (2048 bits and more), EC P-256 and P-384, Ed25519. A symmetric key
//! (`kty: oct`), an encryption key or one of an unknown kind is skipped,
//! never an error of the whole set. No key material reaches a log line or
//! an error: errors name the URL (without its query) and what went wrong.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, KeyOperations, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::config::oidc::JwksLocation;

/// The largest JWKS or discovery document read (real sets are a few KiB).
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// The kind of a key, which decides the algorithms it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA: RS256/384/512, PS256/384/512.
    Rsa,
    /// EC on P-256: ES256.
    P256,
    /// EC on P-384: ES384.
    P384,
    /// Ed25519: EdDSA.
    Ed25519,
}

/// One public signing key of the issuer.
#[derive(Clone)]
pub struct Key {
    /// Its `kid`, if it has one.
    pub kid: Option<String>,
    /// The one algorithm its JWK says it is for (`alg`), if it says.
    pub alg: Option<Algorithm>,
    /// Its kind.
    pub kind: KeyKind,
    /// The key, as the JWT library verifies with it.
    pub decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Public, but there is no reason to print it either.
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// Whether this key may verify a signature made with `alg`: its kind
    /// fits the algorithm and its own `alg`, if any, is that algorithm.
    pub fn fits(&self, alg: Algorithm) -> bool {
        use Algorithm::*;
        if self.alg.is_some_and(|a| a != alg) {
            return false;
        }
        matches!(
            (self.kind, alg),
            (KeyKind::Rsa, RS256 | RS384 | RS512 | PS256 | PS384 | PS512)
                | (KeyKind::P256, ES256)
                | (KeyKind::P384, ES384)
                | (KeyKind::Ed25519, EdDSA)
        )
    }

    /// The key a JWK describes, or why it is skipped.
    fn from_jwk(jwk: &Jwk) -> Result<Key, &'static str> {
        let common = &jwk.common;
        match &common.public_key_use {
            None | Some(PublicKeyUse::Signature) => {}
            Some(_) => return Err("not a signing key (use)"),
        }
        if let Some(ops) = &common.key_operations {
            if !ops.iter().any(|o| matches!(o, KeyOperations::Verify)) {
                return Err("not a verifying key (key_ops)");
            }
        }
        let alg = match &common.key_algorithm {
            None => None,
            Some(a) => Some(signing_algorithm(a).ok_or("not for a signature algorithm (alg)")?),
        };
        let kind = match &jwk.algorithm {
            AlgorithmParameters::RSA(p) => {
                // ring verifies 2048 bits and more; a shorter modulus is
                // refused here rather than at every token.
                let n = base64::Engine::decode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    p.n.trim_end_matches('='),
                )
                .map_err(|_| "an RSA modulus that is not base64url")?;
                let bits = n.iter().skip_while(|b| **b == 0).count() * 8;
                if bits < 2048 {
                    return Err("an RSA key shorter than 2048 bits");
                }
                KeyKind::Rsa
            }
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => KeyKind::P256,
                EllipticCurve::P384 => KeyKind::P384,
                _ => return Err("an EC curve the gateway does not verify"),
            },
            AlgorithmParameters::OctetKeyPair(p) => match p.curve {
                EllipticCurve::Ed25519 => KeyKind::Ed25519,
                _ => return Err("an OKP curve the gateway does not verify"),
            },
            AlgorithmParameters::OctetKey(_) => {
                return Err("a symmetric key (kty oct), never used to verify")
            }
        };
        let decoding = DecodingKey::from_jwk(jwk).map_err(|_| "a key that does not decode")?;
        Ok(Key {
            kid: common.key_id.clone(),
            alg,
            kind,
            decoding,
        })
    }
}

/// The signature algorithm a JWK's `alg` names (HMAC never: a JWKS
/// publishes keys, and a published HMAC key is no secret).
fn signing_algorithm(a: &KeyAlgorithm) -> Option<Algorithm> {
    use KeyAlgorithm as K;
    Some(match a {
        K::RS256 => Algorithm::RS256,
        K::RS384 => Algorithm::RS384,
        K::RS512 => Algorithm::RS512,
        K::PS256 => Algorithm::PS256,
        K::PS384 => Algorithm::PS384,
        K::PS512 => Algorithm::PS512,
        K::ES256 => Algorithm::ES256,
        K::ES384 => Algorithm::ES384,
        K::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

/// The usable keys of a JWKS document. Keys that are not usable are
/// skipped (counted in the log by why, never printed); a document that is
/// not a JWKS, or holds no usable key, is an error.
pub fn parse(document: &[u8]) -> Result<Vec<Key>, String> {
    let value: serde_json::Value = serde_json::from_slice(document)
        .map_err(|_| "the JWKS is not a JSON document".to_string())?;
    let Some(entries) = value.get("keys").and_then(|k| k.as_array()) else {
        return Err("the JWKS has no `keys` array".into());
    };
    let mut keys = Vec::new();
    let mut skipped: Vec<&'static str> = Vec::new();
    for entry in entries {
        match serde_json::from_value::<Jwk>(entry.clone()) {
            Ok(jwk) => match Key::from_jwk(&jwk) {
                Ok(k) => keys.push(k),
                Err(why) => skipped.push(why),
            },
            Err(_) => skipped.push("a key of a kind the gateway does not read"),
        }
    }
    if !skipped.is_empty() {
        tracing::info!(
            skipped = skipped.len(),
            reasons = ?skipped,
            "keys of the issuer's JWKS the gateway does not use"
        );
    }
    if keys.is_empty() {
        return Err(format!(
            "the JWKS holds no usable signing key ({} entries; RSA of 2048 bits or more, EC P-256/P-384 or Ed25519 are used)",
            entries.len()
        ));
    }
    Ok(keys)
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Where the keys come from, and the client that fetches them.
pub struct Source {
    location: JwksLocation,
    /// For URLs (built once: its connections are reused).
    client: HttpsClient,
    /// The `jwks_uri` the discovery document named, once read.
    discovered: Option<String>,
    /// The issuer the discovery document must name.
    issuer: String,
    /// How long one document may take.
    timeout: Duration,
}

/// `url` without its query and fragment, for messages.
fn shown(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

impl Source {
    /// A source of `location`'s keys for `issuer`, each fetch bounded by
    /// `timeout`. TLS is rustls with ring, verifying against the system's
    /// roots (as the shared state's connections).
    pub fn new(location: JwksLocation, issuer: String, timeout: Duration) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::debug!(error = %e, "a system CA certificate could not be read");
        }
        roots.add_parsable_certificates(native.certs);
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(https);
        Ok(Self {
            location,
            client,
            discovered: None,
            issuer,
            timeout,
        })
    }

    /// Reads the keys once: the file, the URL, or the discovery document
    /// and then the URL it names.
    pub async fn fetch(&mut self) -> Result<Vec<Key>, String> {
        let document = match &self.location {
            JwksLocation::File(path) => read_file(path).await?,
            JwksLocation::Url(url) => self.get(url).await?,
            JwksLocation::Discovery(config_url) => {
                let jwks_uri = match &self.discovered {
                    Some(u) => u.clone(),
                    None => {
                        let config_url = config_url.clone();
                        let u = self.discover(&config_url).await?;
                        self.discovered = Some(u.clone());
                        u
                    }
                };
                match self.get(&jwks_uri).await {
                    Ok(d) => d,
                    Err(e) => {
                        // The issuer may have moved its keys: read the
                        // discovery document again next time.
                        self.discovered = None;
                        return Err(e);
                    }
                }
            }
        };
        parse(&document)
    }

    /// The `jwks_uri` of the discovery document at `config_url`, checked:
    /// the document names this issuer, and the URI is https (or http to a
    /// loopback host).
    async fn discover(&self, config_url: &str) -> Result<String, String> {
        let document = self.get(config_url).await?;
        let value: serde_json::Value = serde_json::from_slice(&document)
            .map_err(|_| format!("the discovery document {} is not JSON", shown(config_url)))?;
        if value.get("issuer").and_then(|i| i.as_str()) != Some(self.issuer.as_str()) {
            return Err(format!(
                "the discovery document {} names another issuer than DUCKGATE_OIDC_ISSUER",
                shown(config_url)
            ));
        }
        let uri = value
            .get("jwks_uri")
            .and_then(|u| u.as_str())
            .ok_or_else(|| {
                format!(
                    "the discovery document {} has no jwks_uri",
                    shown(config_url)
                )
            })?;
        let parsed: axum::http::Uri = uri
            .parse()
            .map_err(|_| format!("the jwks_uri of {} is not a URL", shown(config_url)))?;
        let secure = match parsed.scheme_str() {
            Some("https") => true,
            Some("http") => parsed.host().is_some_and(crate::config::oidc::is_loopback),
            _ => false,
        };
        if !secure {
            return Err(format!(
                "the jwks_uri of {} is not https: the keys must not travel in clear text",
                shown(config_url)
            ));
        }
        Ok(uri.to_string())
    }

    /// GET `url`: the body of a 200 answer, at most [`MAX_DOCUMENT_BYTES`],
    /// within the timeout. Redirects are not followed.
    async fn get(&self, url: &str) -> Result<Bytes, String> {
        let what = shown(url);
        let uri: axum::http::Uri = url.parse().map_err(|_| format!("{what} is not a URL"))?;
        let request = axum::http::Request::get(uri)
            .header(axum::http::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("{what}: {e}"))?;
        let fetch = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| format!("{what}: {}", error_chain(&e)))?;
            let status = response.status();
            if status != axum::http::StatusCode::OK {
                return Err(format!("{what} answered HTTP {}", status.as_u16()));
            }
            Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| format!("{what}: reading the answer: {e}"))
        };
        tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| {
                format!(
                    "{what} did not answer within {} ms",
                    self.timeout.as_millis()
                )
            })?
    }
}

/// An error and its causes, `: `-separated (hyper's own text says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

async fn read_file(path: &PathBuf) -> Result<Bytes, String> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "{} is larger than {MAX_DOCUMENT_BYTES} bytes",
            path.display()
        ));
    }
    Ok(Bytes::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_signing_keys_are_kept() {
        let ec = serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig", "alg": "ES256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
        });
        let doc = serde_json::json!({"keys": [
            ec,
            {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "RSA", "kid": "small", "n": "AQAB", "e": "AQAB"},
            {"kty": "weird"}
        ]});
        let keys = parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        let k = &keys[0];
        assert_eq!(k.kid.as_deref(), Some("ec-1"));
        assert!(k.fits(Algorithm::ES256));
        assert!(!k.fits(Algorithm::ES384));
        assert!(!k.fits(Algorithm::RS256));
        assert!(!k.fits(Algorithm::HS256));
        assert!(parse(br#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).is_err());
        assert!(parse(b"[]").is_err());
        assert!(parse(b"not json").is_err());
    }
}
