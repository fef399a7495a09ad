//! What a Flight SQL client holds between calls: results waiting for their
//! `DoGet` and prepared statements, each under an opaque random handle and
//! bound to the identity that made it. Bounded in number (all identities
//! together, and each identity to its share, so that no one identity fills
//! the table and locks the others out) and in age; an expired result is
//! dropped, which interrupts its query. The lock is never held across an
//! await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tonic::Status;

use crate::engine::queries::Running;
use crate::engine::Param;
use crate::flight::results::Started;

/// An opaque handle: 16 random bytes.
pub type Handle = [u8; 16];

/// A prepared statement: its SQL, and the parameter rows last bound.
#[derive(Clone)]
pub struct Prepared {
    /// The statement's text.
    pub sql: String,
    /// Rows of parameters from the last DoPut (none: run without).
    pub params: Vec<Vec<Param>>,
    /// SHA-256 of the bearer that made it (never the bearer itself): the
    /// same bearer may close it once it no longer opens anything else (a
    /// JWT past its expiry), see [`Tickets::close_by_bearer`].
    pub bearer: [u8; 32],
}

/// The digest a prepared statement keeps of the bearer that made it.
pub fn bearer_digest(bearer: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bearer).into()
}

enum Item {
    /// A running statement whose batches wait for their DoGet.
    Result(Box<Started>),
    /// A prepared statement.
    Prepared(Prepared),
}

struct Entry {
    /// The identity that made it.
    owner: Arc<str>,
    /// When it was made or last used.
    touched: Instant,
    item: Item,
}

/// A fetched result's owner and query, while it streams.
type Streaming = (Arc<str>, Weak<Running>);

/// The handles of every identity.
pub struct Tickets {
    /// Entries kept at once.
    max: usize,
    /// Entries one identity may keep at once (`None`: all of `max`, when
    /// only one party calls).
    share: Option<usize>,
    /// How long an entry lasts unused.
    ttl: Duration,
    entries: Mutex<HashMap<Handle, Entry>>,
    /// Results fetched and streaming, by their handle, for a cancel.
    streaming: Mutex<HashMap<Handle, Streaming>>,
}

/// A new random handle.
pub fn new_handle() -> Handle {
    uuid::Uuid::new_v4().into_bytes()
}

/// The handle in a client's bytes.
pub fn parse(bytes: &[u8]) -> Result<Handle, Status> {
    bytes
        .try_into()
        .map_err(|_| Status::not_found("no such ticket or statement handle"))
}

fn gone() -> Status {
    Status::not_found(
        "no such ticket or statement handle: fetched already, closed, expired (DUCKGATE_FLIGHT_TICKET_TTL_MS) or never issued",
    )
}

fn not_yours() -> Status {
    Status::permission_denied("the ticket or statement handle belongs to another identity")
}

impl Tickets {
    /// At most `max` entries, `share` of them one identity's, each kept
    /// `ttl` unused.
    pub fn new(max: usize, share: Option<usize>, ttl: Duration) -> Self {
        Self {
            max,
            share,
            ttl,
            entries: Mutex::new(HashMap::new()),
            streaming: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Handle, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether another entry of `owner`'s would be kept now: checked
    /// before a statement runs, so a full table (or share) refuses it
    /// before it takes a connection.
    pub fn room(&self, owner: &str) -> Result<(), Status> {
        let dropped = {
            let mut entries = self.lock();
            let dropped = self.expire(&mut entries);
            self.fits(&entries, owner)?;
            dropped
        };
        drop(dropped);
        Ok(())
    }

    /// Whether `entries` take one more of `owner`'s.
    fn fits(&self, entries: &HashMap<Handle, Entry>, owner: &str) -> Result<(), Status> {
        if let Some(share) = self.share {
            let held = entries.values().filter(|e| &*e.owner == owner).count();
            if held >= share {
                return Err(Status::resource_exhausted(format!(
                    "this identity keeps {held} Flight SQL results and prepared statements, its share of DUCKGATE_FLIGHT_MAX_TICKETS ({}); fetch or close some",
                    self.max
                )));
            }
        }
        if entries.len() >= self.max {
            return Err(self.full());
        }
        Ok(())
    }

    fn full(&self) -> Status {
        Status::resource_exhausted(format!(
            "{} Flight SQL results and prepared statements are kept (DUCKGATE_FLIGHT_MAX_TICKETS); fetch or close some, or retry later",
            self.max
        ))
    }

    fn insert(&self, owner: Arc<str>, item: Item) -> Result<Handle, Status> {
        let handle = new_handle();
        let dropped = {
            let mut entries = self.lock();
            let dropped = self.expire(&mut entries);
            self.fits(&entries, &owner)?;
            entries.insert(
                handle,
                Entry {
                    owner,
                    touched: Instant::now(),
                    item,
                },
            );
            dropped
        };
        // Dropped outside the lock: a result's drop interrupts its query.
        drop(dropped);
        Ok(handle)
    }

    /// Removes expired entries from `entries`, returning them to be dropped.
    fn expire(&self, entries: &mut HashMap<Handle, Entry>) -> Vec<Entry> {
        let now = Instant::now();
        let old: Vec<Handle> = entries
            .iter()
            .filter(|(_, e)| now.duration_since(e.touched) > self.ttl)
            .map(|(h, _)| *h)
            .collect();
        old.iter().filter_map(|h| entries.remove(h)).collect()
    }

    /// Drops what has expired (a result's query is interrupted).
    pub fn sweep(&self) {
        let dropped = {
            let mut entries = self.lock();
            self.expire(&mut entries)
        };
        if !dropped.is_empty() {
            tracing::info!(
                count = dropped.len(),
                "Flight SQL tickets expired unfetched or unused"
            );
        }
        drop(dropped);
        self.streaming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, (_, r)| r.strong_count() > 0);
    }

    /// Drops everything (the listener stopped).
    pub fn clear(&self) {
        let all: Vec<Entry> = self.lock().drain().map(|(_, e)| e).collect();
        drop(all);
    }

    /// Keeps a started result for its DoGet.
    pub fn keep_result(&self, owner: Arc<str>, started: Started) -> Result<Handle, Status> {
        self.insert(owner, Item::Result(Box::new(started)))
    }

    /// Takes the result of `handle` for `owner`.
    pub fn take_result(&self, handle: &Handle, owner: &str) -> Result<Started, Status> {
        let mut entries = self.lock();
        match entries.get(handle) {
            None => return Err(gone()),
            Some(e) if &*e.owner != owner => return Err(not_yours()),
            Some(e) if !matches!(e.item, Item::Result(_)) => return Err(gone()),
            Some(_) => {}
        }
        let Some(Entry {
            owner: o,
            item: Item::Result(started),
            ..
        }) = entries.remove(handle)
        else {
            return Err(gone());
        };
        drop(entries);
        self.streaming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(*handle, (o, Arc::downgrade(&started.running)));
        Ok(*started)
    }

    /// Cancels the result of `handle` for `owner`, waiting or streaming:
    /// whether there was one to cancel.
    pub fn cancel(&self, handle: &Handle, owner: &str) -> Result<bool, Status> {
        let waiting = {
            let mut entries = self.lock();
            match entries.get(handle) {
                Some(e) if &*e.owner != owner => return Err(not_yours()),
                Some(e) if matches!(e.item, Item::Result(_)) => entries.remove(handle),
                _ => None,
            }
        };
        if let Some(Entry {
            item: Item::Result(started),
            ..
        }) = waiting
        {
            started.running.cancel.cancel();
            return Ok(true);
        }
        let streaming = self.streaming.lock().unwrap_or_else(|p| p.into_inner());
        match streaming.get(handle) {
            Some((o, _)) if &**o != owner => Err(not_yours()),
            Some((_, running)) => match running.upgrade() {
                Some(r) => {
                    r.cancel.cancel();
                    Ok(true)
                }
                None => Ok(false),
            },
            None => Ok(false),
        }
    }

    /// Keeps a prepared statement made by `owner` with the bearer whose
    /// digest is `bearer`.
    pub fn prepare(
        &self,
        owner: Arc<str>,
        sql: String,
        bearer: [u8; 32],
    ) -> Result<Handle, Status> {
        self.insert(
            owner,
            Item::Prepared(Prepared {
                sql,
                params: Vec::new(),
                bearer,
            }),
        )
    }

    /// The prepared statement of `handle` for `owner` (its use renews it).
    pub fn prepared(&self, handle: &Handle, owner: &str) -> Result<Prepared, Status> {
        let mut entries = self.lock();
        match entries.get_mut(handle) {
            Some(e) if &*e.owner != owner => Err(not_yours()),
            Some(Entry {
                item: Item::Prepared(p),
                touched,
                ..
            }) => {
                *touched = Instant::now();
                Ok(p.clone())
            }
            _ => Err(gone()),
        }
    }

    /// Binds parameter rows to the prepared statement of `handle`.
    pub fn bind(
        &self,
        handle: &Handle,
        owner: &str,
        params: Vec<Vec<Param>>,
    ) -> Result<(), Status> {
        let mut entries = self.lock();
        match entries.get_mut(handle) {
            Some(e) if &*e.owner != owner => Err(not_yours()),
            Some(Entry {
                item: Item::Prepared(p),
                touched,
                ..
            }) => {
                *touched = Instant::now();
                p.params = params;
                Ok(())
            }
            _ => Err(gone()),
        }
    }

    /// Closes the prepared statement of `handle` for a caller no longer
    /// authenticated (its JWT expired) that presents the very bearer that
    /// made it: whether it was closed. Closing only frees what that bearer
    /// made; it opens nothing.
    pub fn close_by_bearer(&self, handle: &Handle, bearer: &[u8; 32]) -> bool {
        let mut entries = self.lock();
        let made_by_it = matches!(
            entries.get(handle),
            Some(Entry { item: Item::Prepared(p), .. }) if p.bearer == *bearer
        );
        if made_by_it {
            entries.remove(handle);
        }
        made_by_it
    }

    /// Closes the prepared statement of `handle`.
    pub fn close(&self, handle: &Handle, owner: &str) -> Result<(), Status> {
        let mut entries = self.lock();
        match entries.get(handle) {
            Some(e) if &*e.owner != owner => Err(not_yours()),
            Some(Entry {
                item: Item::Prepared(_),
                ..
            }) => {
                entries.remove(handle);
                Ok(())
            }
            _ => Err(gone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_that_prepared_a_statement_closes_it_unauthenticated() {
        let tickets = Tickets::new(8, None, Duration::from_secs(60));
        let mine = bearer_digest(b"Bearer eyJ.expired.jwt");
        let h = tickets
            .prepare(Arc::from("oidc:carol"), "SELECT 1".into(), mine)
            .unwrap();
        assert!(!tickets.close_by_bearer(&h, &bearer_digest(b"Bearer eyJ.other.jwt")));
        assert!(tickets.prepared(&h, "oidc:carol").is_ok());
        assert!(tickets.close_by_bearer(&h, &mine));
        assert!(tickets.prepared(&h, "oidc:carol").is_err());
        assert!(!tickets.close_by_bearer(&h, &mine));
    }
}
