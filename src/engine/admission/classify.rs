//! Which queries read S3, by DuckDB's parse of their text, remembered per
//! text.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::Admission;
use crate::engine::cache::{sha256_hex, BoundedCache};
use crate::engine::ffi::RawConnection;

/// The share of the pool that queries reading S3 may use, and what tells
/// such queries apart (fixed at start, see [`Shares`]).
pub(super) struct S3Share {
    /// `share` permits: S3 queries that may hold a connection at once.
    pub(super) gate: Arc<Semaphore>,
    /// Operator-declared catalogs (lakes): their tables live on S3.
    pub(super) lakes: Vec<String>,
}

/// Texts whose S3 classification is remembered (a pure parse: it never goes
/// stale, the lakes being fixed at start).
pub(super) const CLASSIFIED_TEXTS: usize = 1024;
/// Longer texts are remembered by their SHA-256 (the memory stays bounded;
/// hashing is far cheaper than DuckDB's parse of the same bytes).
const CLASSIFIED_TEXT_BYTES: usize = 4096;

/// The S3 classifier's parse connection, and what it already classified:
/// short texts by themselves, longer ones by their digest.
pub(super) struct Classifier {
    pub(super) raw: RawConnection,
    pub(super) seen: BoundedCache<bool>,
    pub(super) seen_long: BoundedCache<bool>,
}

impl Classifier {
    /// Whether `sql` is kept by its digest, and its key.
    pub(super) fn key(sql: &str) -> (bool, std::borrow::Cow<'_, str>) {
        if sql.len() <= CLASSIFIED_TEXT_BYTES {
            return (false, std::borrow::Cow::Borrowed(sql));
        }
        (true, std::borrow::Cow::Owned(sha256_hex(sql, 32)))
    }

    pub(super) fn cache(&mut self, long: bool) -> &mut BoundedCache<bool> {
        if long {
            &mut self.seen_long
        } else {
            &mut self.seen
        }
    }
}

/// Whether a text reads S3, and, when this is its first reading, DuckDB's
/// parse of it: the first layer of the guard's verdict, handed on so the
/// guard judges that parse instead of parsing the text again.
pub struct Classified {
    /// The text reads S3 (it waits for the S3 share).
    pub s3: bool,
    /// The parse the class came from; `None` when the class was remembered.
    pub parsed: Option<crate::engine::guard::Parsed>,
}

impl Admission {
    /// Whether `sql` reads S3 by DuckDB's parse of it (an `s3://` path, or a
    /// table of a lake). Unparsable SQL is not: the guard refuses it on its
    /// connection. A text classified before is not parsed again; a new one
    /// is parsed here, once, and its parse goes on to the guard
    /// ([`crate::engine::guard::check_parsed`]).
    pub fn classify(&self, sql: &str) -> Classified {
        let mut classifier = self.classifier.lock().unwrap_or_else(|p| p.into_inner());
        let (long, key) = Classifier::key(sql);
        if let Some(&s3) = classifier.cache(long).get(&key) {
            return Classified { s3, parsed: None };
        }
        let parsed = crate::engine::guard::parse(&classifier.raw, sql);
        let s3 = parsed.reads_s3(&self.s3.lakes);
        classifier.cache(long).insert(key.into_owned(), s3);
        Classified {
            s3,
            parsed: Some(parsed),
        }
    }
}
