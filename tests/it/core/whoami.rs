//! `GET /whoami`: who a credential makes its caller, as every door decides
//! it: a query token's name and the roles it is a member of, a JWT's
//! `oidc:<sub>` with the roles its claim names and its expiry, `anonymous`
//! on a gateway without tokens; refusals as the problems of any route (an
//! expired JWT is `token-expired`). The name is the one statements are
//! filed under. JWTs here are signed in the test with an Ed25519 key whose
//! public half the gateway reads from a JWKS file (the browser test uses
//! the same issuer, [`LocalIssuer`]).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::common::{self, App};

/// A test-only Ed25519 key (PKCS#8 v1, made with `openssl genpkey -algorithm
/// ed25519`): it signs the tests' JWTs and nothing else.
const ED25519_PKCS8_HEX: &str = "302e020100300506032b657004220420a5cddb256dc5e6ab7f22a6aa9cf06affca073b997ac74715226c822b3883e073";
/// Its public key (`x` of the JWK, base64url).
const ED25519_X: &str = "EUOQzIx7vI2zTN9nyLTsjU6Egtyosmth_SXXrwXC3jA";
const KID: &str = "test-ed25519";

/// An OIDC issuer made of a JWKS file and a signing key in the test.
pub(crate) struct LocalIssuer {
    _dir: tempfile::TempDir,
    jwks: std::path::PathBuf,
}

impl LocalIssuer {
    pub(crate) const ISSUER: &'static str = "https://issuer.duckgate.test";
    pub(crate) const AUDIENCE: &'static str = "duckgate-whoami-test";

    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        let doc = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": ED25519_X,
                                    "kid": KID, "alg": "EdDSA", "use": "sig"}]});
        std::fs::write(&jwks, doc.to_string()).unwrap();
        Self { _dir: dir, jwks }
    }

    /// The gateway's OIDC settings for this issuer (no leeway: an expired
    /// token is refused at its `exp`).
    pub(crate) fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DUCKGATE_OIDC_ISSUER", Self::ISSUER.to_string()),
            ("DUCKGATE_OIDC_AUDIENCE", Self::AUDIENCE.to_string()),
            ("DUCKGATE_OIDC_JWKS_FILE", self.jwks.display().to_string()),
            ("DUCKGATE_OIDC_ALGORITHMS", "EdDSA".to_string()),
            ("DUCKGATE_OIDC_LEEWAY_MS", "0".to_string()),
        ]
    }

    /// A JWT for `sub` with `roles`, expiring at `exp` (Unix seconds).
    pub(crate) fn mint(&self, sub: &str, roles: &[&str], exp: u64) -> String {
        let der: Vec<u8> = (0..ED25519_PKCS8_HEX.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&ED25519_PKCS8_HEX[i..i + 2], 16).unwrap())
            .collect();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some(KID.to_string());
        let claims = json!({"iss": Self::ISSUER, "aud": Self::AUDIENCE, "sub": sub,
                            "roles": roles, "iat": now() - 5, "exp": exp});
        jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_ed_der(&der),
        )
        .unwrap()
    }
}

/// Unix seconds now.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn whoami(g: &App, token: Option<&str>) -> (u16, Value) {
    let mut r = g.client.get(g.url("/whoami"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn whoami_names_the_identity_its_roles_and_a_jwts_expiry() {
    let issuer = LocalIssuer::new();
    let dir = tempfile::tempdir().unwrap();
    let config = common::write_file(
        dir.path(),
        "roles.toml",
        "[[role]]\nname = \"analyst\"\nmembers = [\"alice\"]\nread = [\"*.*.*\"]\n\n\
         [[role]]\nname = \"auditor\"\nmembers = [\"alice\"]\nread = [\"*.*.*\"]\n",
    );
    let mut builder = common::Gateway::builder()
        .env(
            "DUCKGATE_QUERY_TOKENS",
            "alice:whoami-alice-5d1c,bob:whoami-bob-7e2a",
        )
        .env("DUCKGATE_CONFIG", config.display());
    for (k, v) in issuer.settings() {
        builder = builder.env(k, v);
    }
    let g = builder.spawn_app().await;

    // A query token holding two roles, one holding none.
    let (status, alice) = whoami(&g, Some("whoami-alice-5d1c")).await;
    assert_eq!(status, 200, "{alice}");
    assert_eq!(
        alice,
        json!({"name": "alice", "kind": "token", "roles": ["analyst", "auditor"], "confined": true})
    );
    let (_, bob) = whoami(&g, Some("whoami-bob-7e2a")).await;
    assert_eq!(
        bob,
        json!({"name": "bob", "kind": "token", "roles": [], "confined": false})
    );
    // The name is the one the caller's statements are filed under.
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth("whoami-alice-5d1c")
        .json(&json!({"sql": "SELECT 1 AS one", "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let id = r.headers()["duckgate-query-id"]
        .to_str()
        .unwrap()
        .to_string();
    let (status, s) = g
        .get(&format!("/statements/{id}"), "whoami-alice-5d1c")
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["token"], alice["name"]);

    // A JWT: its subject, the roles its claim names, its expiry.
    let exp = now() + 600;
    let jwt = issuer.mint("carol", &["analyst"], exp);
    let (status, carol) = whoami(&g, Some(&jwt)).await;
    assert_eq!(status, 200, "{carol}");
    assert_eq!(
        carol,
        json!({"name": "oidc:carol", "kind": "oidc", "roles": ["analyst"], "confined": true,
               "expires_at_ms": exp * 1000})
    );
    // An expired one: 401 `token-expired`, the token in no answer.
    let expired = issuer.mint("carol", &["analyst"], now() - 60);
    let (status, problem) = whoami(&g, Some(&expired)).await;
    assert_eq!(status, 401, "{problem}");
    assert_eq!(problem["type"], "urn:duckgate:problem:token-expired");
    assert!(!problem.to_string().contains(&expired));
    // No token, a wrong one: 401 as on every route.
    for token in [None, Some("not-a-token")] {
        let (status, problem) = whoami(&g, token).await;
        assert_eq!(status, 401, "{token:?}: {problem}");
        assert_eq!(problem["type"], "urn:duckgate:problem:unauthorized");
    }

    // A gateway without tokens: everyone is `anonymous`.
    let anonymous = common::Gateway::builder().spawn_app().await;
    let (status, who) = whoami(&anonymous, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        who,
        json!({"name": "anonymous", "kind": "anonymous", "roles": [], "confined": false})
    );
}
