//! A small bounded memo keyed by text, for what is cheap to compute again
//! but worth remembering per connection or per pool (the guard's verdicts,
//! CSV COPYs, S3 classifications): once full, the next new key empties it
//! first, so its memory stays bounded whatever texts clients send.

use std::collections::HashMap;

/// A map of at most `capacity` texts, emptied when a new one would pass it.
pub struct BoundedCache<V> {
    map: HashMap<String, V>,
    capacity: usize,
}

impl<V> BoundedCache<V> {
    /// An empty cache of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        BoundedCache {
            map: HashMap::new(),
            capacity,
        }
    }

    /// The value remembered for `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.map.get(key)
    }

    /// The value remembered for `key`, to change it in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Whether `key` is remembered.
    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remembers `value` for `key`; a new key in a full cache empties it first.
    pub fn insert(&mut self, key: String, value: V) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            self.map.clear();
        }
        self.map.insert(key, value);
    }
}

/// The first `bytes` bytes of `text`'s SHA-256, in lowercase hex: a short
/// key for a long text, or a correlation that shows nothing of it.
pub fn sha256_hex(text: &str, bytes: usize) -> String {
    use sha2::Digest;
    use std::fmt::Write as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(2 * bytes);
    for b in digest.iter().take(bytes) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::{sha256_hex, BoundedCache};

    /// DuckDB's own `sha256` is the reference, whole and cut short.
    #[test]
    fn the_digest_is_duckdbs_sha256_cut_to_its_bytes() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        for text in ["", "SELECT 42", "SELECT 'é' || repeat('x', 5000)"] {
            let duckdb: String = conn
                .query_row("SELECT sha256(?)", [text], |r| r.get(0))
                .unwrap();
            assert_eq!(sha256_hex(text, 32), duckdb);
            assert_eq!(sha256_hex(text, 8), duckdb[..16]);
        }
    }

    #[test]
    fn a_full_cache_empties_for_a_new_key_only() {
        let mut c = BoundedCache::new(2);
        c.insert("a".into(), 1);
        c.insert("b".into(), 2);
        c.insert("b".into(), 3);
        assert_eq!((c.len(), c.get("b")), (2, Some(&3)));
        c.insert("c".into(), 4);
        assert_eq!(c.len(), 1);
        assert!(!c.contains_key("a") && c.contains_key("c"));
        *c.get_mut("c").unwrap() += 1;
        assert_eq!(c.get("c"), Some(&5));
    }
}
