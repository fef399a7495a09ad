//! A small bounded memo keyed by text, for what is cheap to compute again
//! but worth remembering per connection or per pool (the guard's verdicts,
//! CSV COPYs, S3 classifications): least recently used first out, so one
//! client's stream of new texts pushes out only what nobody used since,
//! and its memory stays bounded whatever texts clients send.

use std::num::NonZeroUsize;

/// A map of at most `capacity` texts; a new one past it pushes out the
/// least recently used.
pub struct BoundedCache<V> {
    map: lru::LruCache<String, V>,
}

impl<V> BoundedCache<V> {
    /// An empty cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        BoundedCache {
            map: lru::LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
        }
    }

    /// The value remembered for `key`, now the most recently used.
    pub fn get(&mut self, key: &str) -> Option<&V> {
        self.map.get(key)
    }

    /// The value remembered for `key`, leaving the order as it is.
    pub fn peek(&self, key: &str) -> Option<&V> {
        self.map.peek(key)
    }

    /// The value remembered for `key`, to change it in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Whether `key` is remembered.
    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains(key)
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remembers `value` for `key`; a new key in a full cache pushes out
    /// the least recently used.
    pub fn insert(&mut self, key: String, value: V) {
        self.map.put(key, value);
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
    fn a_full_cache_pushes_out_the_least_recently_used() {
        let mut c = BoundedCache::new(2);
        c.insert("a".into(), 1);
        c.insert("b".into(), 2);
        c.insert("b".into(), 3);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("b"), Some(&3));
        // `a` used last: `b` goes for `c`.
        assert_eq!(c.get("a"), Some(&1));
        c.insert("c".into(), 4);
        assert_eq!(c.len(), 2);
        assert!(c.contains_key("a") && !c.contains_key("b") && c.contains_key("c"));
        *c.get_mut("c").unwrap() += 1;
        assert_eq!(c.peek("c"), Some(&5));
        // One client's stream of new texts keeps what the others use.
        for i in 0..1000 {
            c.get("a");
            c.insert(format!("new-{i}"), i);
        }
        assert!(c.contains_key("a"));
    }
}
