//! The issuer's keys: fetched on an interval and on an unknown `kid` (one
//! fetch at a time, at most once per cooldown), and the dependency's health.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::super::jwks::{self, Key};
use super::{KeySet, Verifier};
use crate::config::oidc::JwksLocation;

impl Verifier {
    /// The keys once a token named a `kid` of none of them (`seen`: the
    /// generation it looked at): fetched again unless another fetch ended
    /// meanwhile or the last one began within the cooldown. One fetch at a
    /// time; those who waited for it take its keys.
    pub(super) async fn keys_after_unknown_kid(&self, seen: u64) -> Arc<KeySet> {
        let mut source = self.source.lock().await;
        let now = self.keys.load_full();
        if now.generation != seen {
            return now;
        }
        let recent = self
            .status()
            .last_attempt
            .is_some_and(|t| t.elapsed() < self.settings.cooldown);
        if recent {
            return now;
        }
        let _ = self.fetch_locked(&mut source, "unknown kid").await;
        self.keys.load_full()
    }

    /// Fetches the keys now (waiting for a fetch under way first); a
    /// failure keeps the last good keys. `trigger` is for the log.
    pub async fn refresh(&self, trigger: &'static str) -> Result<(), String> {
        let mut source = self.source.lock().await;
        self.fetch_locked(&mut source, trigger).await
    }

    async fn fetch_locked(
        &self,
        source: &mut jwks::Source,
        trigger: &'static str,
    ) -> Result<(), String> {
        self.status().last_attempt = Some(Instant::now());
        let outcome = source.fetch().await;
        match &outcome {
            Ok(keys) => {
                let old = self.keys.load_full();
                let kids = |ks: &[Key]| -> Vec<String> {
                    ks.iter()
                        .map(|k| k.kid.clone().unwrap_or_else(|| "-".into()))
                        .collect()
                };
                let (before, after) = (kids(&old.keys), kids(keys));
                if before != after {
                    // Key ids are public names, not key material.
                    tracing::info!(trigger, kids = ?after, "the issuer's keys changed");
                }
                self.keys.store(Arc::new(KeySet {
                    keys: keys.clone(),
                    fetched: Some(Instant::now()),
                    generation: old.generation + 1,
                }));
                let mut st = self.status();
                st.failures = 0;
                st.last_error = None;
                drop(st);
                metrics::counter!("duckgate_oidc_jwks_fetches_total", "outcome" => "ok")
                    .increment(1);
            }
            Err(e) => {
                let mut st = self.status();
                st.failures = st.failures.saturating_add(1);
                st.last_error = Some(e.clone());
                drop(st);
                metrics::counter!("duckgate_oidc_jwks_fetches_total", "outcome" => "error")
                    .increment(1);
                tracing::warn!(
                    trigger,
                    error.cause = %e,
                    "the issuer's keys could not be fetched; the last good keys stay in use"
                );
            }
        }
        self.publish_health();
        outcome.map(|_| ())
    }

    /// Publishes the keys' freshness as the dependency `oidc`: down while
    /// there are none, or they are older than the staleness bound.
    pub fn publish_health(&self) {
        let keys = self.keys.load();
        let stale_after = self.settings.stale_after;
        let last_error = self.status().last_error.clone();
        let because = last_error
            .map(|e| format!("; the last fetch failed: {e}"))
            .unwrap_or_default();
        match keys.fetched {
            Some(t) if t.elapsed() <= stale_after => self.health.ok(),
            Some(t) => self.health.failed(&format!(
                "the issuer's keys were last fetched {} s ago, past DUCKGATE_OIDC_JWKS_STALE_MS ({} s); tokens are still checked against them{because}",
                t.elapsed().as_secs(),
                stale_after.as_secs()
            )),
            None => self.health.failed(&format!(
                "no keys of the issuer yet: bearer JWTs are refused{because}"
            )),
        }
    }

    /// How long until the next scheduled fetch: the refresh period after a
    /// success; after failures, the cooldown doubled per failure, at most
    /// the refresh period.
    fn until_next_fetch(&self) -> Duration {
        let st = self.status();
        let s = &self.settings;
        let period = if st.failures == 0 {
            s.refresh
        } else {
            let doubled = s.cooldown.saturating_mul(1u32 << (st.failures - 1).min(16));
            doubled.min(s.refresh)
        };
        match st.last_attempt {
            Some(t) => period.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    /// How long until the keys turn stale, if they are fresh now.
    fn until_stale(&self) -> Option<Duration> {
        let fetched = self.keys.load().fetched?;
        (fetched + self.settings.stale_after).checked_duration_since(Instant::now())
    }

    /// Fetches the keys on the refresh schedule and publishes their
    /// freshness when they turn stale, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let next = self.until_next_fetch();
            // Wake when the keys turn stale too (a moment after), so the
            // health says so on time even with a long refresh period.
            let wait = match self.until_stale() {
                Some(s) => next.min(s + Duration::from_millis(5)),
                None => next,
            }
            .max(Duration::from_millis(10));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            if self.until_next_fetch().is_zero() {
                let _ = self.refresh("interval").await;
            } else {
                self.publish_health();
            }
        }
    }

    /// Whether the keys come from a file (a start-up failure to read it is
    /// the operator's to fix, not a service's to wait for).
    pub fn from_file(&self) -> bool {
        matches!(self.settings.jwks, JwksLocation::File(_))
    }
}
