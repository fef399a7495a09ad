//! The key that signs result URLs (`api::links` mints and checks them):
//! an HMAC-SHA256 over each field after its length, and the keys a reload
//! replaced, which verify what they signed until it expires.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use secrecy::{ExposeSecret, SecretBox};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Longest lifetime a signed URL may ask for.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The key that signs result URLs, and the keys it replaced, which still
/// verify the URLs they signed until those expire.
#[derive(Clone)]
pub struct UrlSigner {
    key: Arc<SecretBox<Vec<u8>>>,
    /// Keys this one replaced (a reload), with when they stop verifying.
    previous: Vec<(Arc<SecretBox<Vec<u8>>>, SystemTime)>,
}

impl UrlSigner {
    /// A signer with `key` (at least 32 bytes; start-up checks).
    pub fn new(key: Vec<u8>) -> Self {
        Self {
            key: Arc::new(SecretBox::new(Box::new(key))),
            previous: Vec::new(),
        }
    }

    /// Whether `other` signs with the same key.
    pub fn same_key(&self, other: &UrlSigner) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(self.key.expose_secret().ct_eq(other.key.expose_secret()))
    }

    /// Keeps verifying what `old` signed (its key and its own previous
    /// ones) for as long as a URL may live.
    pub fn keep_verifying(&mut self, old: &UrlSigner) {
        let now = SystemTime::now();
        self.previous = std::iter::once((old.key.clone(), now + MAX_TTL))
            .chain(old.previous.iter().cloned())
            .filter(|(_, until)| *until > now)
            .collect();
    }

    /// A signer with a random key: URLs it signs hold on this process only.
    pub fn random() -> Self {
        let mut key = vec![0u8; 32];
        getrandom::fill(&mut key).expect("the operating system's random source");
        Self::new(key)
    }

    fn mac(&self, path: &str, expires: u64, owner: &str, instance: &str) -> HmacSha256 {
        Self::mac_with(&self.key, path, expires, owner, instance)
    }

    fn mac_with(
        key: &SecretBox<Vec<u8>>,
        path: &str,
        expires: u64,
        owner: &str,
        instance: &str,
    ) -> HmacSha256 {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key.expose_secret())
            .expect("HMAC takes keys of any length");
        // Each field after its length: no field can slide into the next,
        // whatever bytes it holds (an owner name from a query string may
        // hold a decoded newline).
        for part in ["GET", path, &expires.to_string(), owner, instance] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The signature of a `GET` of `path` by `owner`'s name until `expires`
    /// (Unix seconds), of the statement `instance`, URL-safe base64.
    pub fn sign(&self, path: &str, expires: u64, owner: &str, instance: &str) -> String {
        let tag = self
            .mac(path, expires, owner, instance)
            .finalize()
            .into_bytes();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag)
    }

    /// Whether `sig` is this key's signature (compared in constant time).
    pub fn verify(&self, path: &str, expires: u64, owner: &str, instance: &str, sig: &str) -> bool {
        let Ok(tag) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(sig) else {
            return false;
        };
        let now = SystemTime::now();
        std::iter::once(&self.key)
            .chain(
                self.previous
                    .iter()
                    .filter(|(_, until)| *until > now)
                    .map(|(k, _)| k),
            )
            .any(|key| {
                Self::mac_with(key, path, expires, owner, instance)
                    .verify_slice(&tag)
                    .is_ok()
            })
    }
}
