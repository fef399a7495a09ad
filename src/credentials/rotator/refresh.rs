//! One refresh of one secret: decide (is it due, are its credentials
//! usable), fetch and install, publish, and back off after failures.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::expired::any_expired;
use super::{Managed, Refreshed, RotationError, Rotator};
use crate::credentials::source::{key_id_suffix, Credentials};
use crate::credentials::sql;
use crate::state::CredentialsView;

/// Longest pause between retries after failures.
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// First pause after a failure.
const BACKOFF_BASE: Duration = Duration::from_millis(500);

impl Rotator {
    /// One refresh of secret `idx`, single-flight. Without `force`, it only
    /// acts if the credentials are due (the interval task's path).
    pub async fn refresh(&self, idx: usize, force: bool) -> Result<Refreshed, RotationError> {
        let m = &self.secrets[idx];
        let seen = m.attempts.load(Ordering::Acquire);
        let _flight = m.flight.lock().await;
        if m.attempts.load(Ordering::Acquire) != seen {
            // A refresh ran while we waited: it is ours too.
            return m
                .last_result
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .map(|_| Refreshed::Rotated);
        }

        // 1. Decide, from the snapshot alone.
        if !force && !self.due(idx, SystemTime::now()) {
            return Ok(Refreshed::Fresh);
        }

        // 2. Fetch, then install on the control connection.
        let started = Instant::now();
        let result = self.fetch_and_install(idx).await;
        let elapsed = started.elapsed();

        // 3. Publish.
        let outcome = match result {
            Ok(creds) => {
                self.rotated(idx, creds, elapsed);
                Ok(())
            }
            Err(class) => {
                self.failed(idx, &class);
                Err(class)
            }
        };
        *m.last_result.lock().unwrap_or_else(|p| p.into_inner()) = outcome.clone();
        m.attempts.fetch_add(1, Ordering::Release);
        outcome.map(|_| Refreshed::Rotated)
    }

    /// Fetches credentials from the secret's source and, when usable,
    /// installs them on the control connection.
    async fn fetch_and_install(&self, idx: usize) -> Result<Credentials, RotationError> {
        let m = &self.secrets[idx];
        match m.source.fetch().await {
            Ok(creds) => match self.usable(idx, &creds, SystemTime::now()) {
                Ok(()) => self.install(m, creds.clone()).await.map(|_| creds),
                Err(why) => {
                    metrics::counter!("duckgate_sts_unusable_answers_total").increment(1);
                    Err(RotationError::Unusable(why))
                }
            },
            Err(e) => Err(RotationError::Fetch(e)),
        }
    }

    /// Publishes a rotation that took `elapsed`: failures cleared, the
    /// lifetime and the current credentials recorded, counted and logged.
    fn rotated(&self, idx: usize, creds: Credentials, elapsed: Duration) {
        let m = &self.secrets[idx];
        m.failures.store(0, Ordering::Relaxed);
        *m.not_before.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *m.lifetime.lock().unwrap_or_else(|p| p.into_inner()) = creds
            .expires_at
            .and_then(|e| e.duration_since(SystemTime::now()).ok())
            .map(|d| d + elapsed);
        self.publish_success(idx, &creds);
        *m.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(creds.clone());
        metrics::counter!("duckgate_rotations_total", "secret" => m.spec.name.clone(), "outcome" => "ok")
            .increment(1);
        metrics::histogram!("duckgate_rotation_duration_seconds").record(elapsed.as_secs_f64());
        tracing::info!(
            secret = %m.spec.name,
            key_id = %key_id_suffix(&creds.key_id),
            elapsed_ms = elapsed.as_millis() as u64,
            "S3 credentials rotated"
        );
    }

    /// Publishes a failed refresh: the pause before the next one (growing
    /// with failures but under half the check interval, so the tick after
    /// STS comes back refreshes: recovery within one check interval),
    /// counted and logged.
    fn failed(&self, idx: usize, class: &RotationError) {
        let m = &self.secrets[idx];
        let failures = m.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let pause = backoff(failures).min(self.timing.check_interval / 2);
        *m.not_before.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + pause);
        self.publish_failure(idx, &class.to_string(), failures, pause);
        metrics::counter!("duckgate_rotations_total", "secret" => m.spec.name.clone(), "outcome" => "error")
            .increment(1);
        tracing::warn!(
            secret = %m.spec.name,
            error = %class,
            consecutive_failures = failures,
            retry_in_ms = pause.as_millis() as u64,
            "S3 credential refresh failed; serving with the current credentials until they expire"
        );
    }

    /// Installs the secret on the control connection, off the async workers,
    /// through DuckDB's secret manager (no SQL text holds the credentials),
    /// then checks that DuckDB's logging is still off.
    pub(super) async fn install(
        &self,
        m: &Managed,
        creds: Credentials,
    ) -> Result<(), RotationError> {
        let spec = m.spec.clone();
        let control = self.control.clone();
        let stall = if self.started.load(Ordering::Relaxed) {
            self.test_stall
        } else {
            Duration::ZERO
        };
        tokio::task::spawn_blocking(move || {
            let conn = control.lock().unwrap_or_else(|p| p.into_inner());
            if !stall.is_zero() {
                std::thread::sleep(stall);
            }
            let options = sql::secret_options(&spec, &creds);
            crate::engine::secrets::install_s3(&conn, &spec.name, &options, &spec.scope)
                .map_err(RotationError::Install)?;
            crate::engine::secrets::logging_off(&conn).map_err(|what| {
                RotationError::Install(format!("DuckDB's logging must stay off: {what}"))
            })
        })
        .await
        .map_err(|_| RotationError::InstallTask)?
    }

    /// Whether `creds`, fetched for secret `idx`, may replace what is
    /// installed: a plausible key id, a secret, and for expiring
    /// credentials a session token and an expiry in the future, no earlier
    /// than the installed credentials' own. The reason names no value.
    pub(super) fn usable(
        &self,
        idx: usize,
        creds: &Credentials,
        now: SystemTime,
    ) -> Result<(), &'static str> {
        let key = creds.key_id.as_str();
        if !(16..=128).contains(&key.len()) || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err("the access key id is not an AWS key id");
        }
        if crate::credentials::source::expose(&creds.secret).is_empty() {
            return Err("no secret access key");
        }
        let Some(expires) = creds.expires_at else {
            return Ok(()); // static credentials
        };
        if creds
            .session_token
            .as_ref()
            .is_none_or(|t| crate::credentials::source::expose(t).is_empty())
        {
            return Err("temporary credentials without a session token");
        }
        if expires <= now {
            return Err("the credentials expire in the past");
        }
        let view = self.health.credentials.load();
        let installed = view.secrets.get(idx).and_then(|s| s.expires_at_system);
        if installed.is_some_and(|current| expires < current) {
            return Err("the credentials expire before the installed ones");
        }
        Ok(())
    }

    /// Whether secret `idx` should be refreshed now: never installed, or its
    /// remaining lifetime is under the threshold, and no backoff pause runs.
    pub(super) fn due(&self, idx: usize, now: SystemTime) -> bool {
        let m = &self.secrets[idx];
        if let Some(nb) = *m.not_before.lock().unwrap_or_else(|p| p.into_inner()) {
            if Instant::now() < nb {
                return false;
            }
        }
        let view = self.health.credentials.load();
        let Some(state) = view.secrets.get(idx) else {
            return false;
        };
        if state.epoch == 0 {
            return true;
        }
        let Some(expires) = state.expires_at_system else {
            return false; // static credentials
        };
        let lifetime = m
            .lifetime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .or_else(|| m.source_duration())
            .unwrap_or(Duration::from_secs(900));
        let remaining = expires.duration_since(now).unwrap_or(Duration::ZERO);
        remaining < self.timing.refresh_threshold(lifetime)
    }

    pub(super) fn publish_success(&self, idx: usize, creds: &Credentials) {
        let now = SystemTime::now();
        self.health.credentials.rcu(|view| {
            let mut v = CredentialsView::clone(view);
            if let Some(s) = v.secrets.get_mut(idx) {
                s.epoch += 1;
                s.expires_at_system = creds.expires_at;
                s.expires_at = creds
                    .expires_at
                    .map(|t| humantime::format_rfc3339_seconds(t).to_string());
                s.rotated_at = Some(humantime::format_rfc3339_seconds(now).to_string());
                s.key_id_suffix = Some(key_id_suffix(&creds.key_id));
                s.last_error = None;
                s.consecutive_failures = 0;
                s.next_attempt_at = None;
                s.rotations += 1;
            }
            v.epoch = v.secrets.iter().map(|s| s.epoch).sum();
            v.any_expired = any_expired(&v, now);
            v
        });
    }

    pub(super) fn publish_failure(&self, idx: usize, class: &str, failures: u32, pause: Duration) {
        let now = SystemTime::now();
        self.health.credentials.rcu(|view| {
            let mut v = CredentialsView::clone(view);
            if let Some(s) = v.secrets.get_mut(idx) {
                s.last_error = Some(class.to_string());
                s.consecutive_failures = failures;
                s.next_attempt_at = Some(now + pause);
            }
            v.any_expired = any_expired(&v, now);
            v
        });
    }

    /// Re-evaluates expiry so the query path can read it without a clock.
    pub(super) fn refresh_expiry_flag(&self) {
        let now = SystemTime::now();
        let view = self.health.credentials.load();
        let expired = any_expired(&view, now);
        if expired != view.any_expired {
            self.health.credentials.rcu(|v| {
                let mut v = CredentialsView::clone(v);
                v.any_expired = any_expired(&v, now);
                v
            });
            if expired {
                tracing::error!(
                    "S3 credentials have expired; S3 queries fail until a refresh succeeds"
                );
            }
        }
    }
}

/// Capped exponential backoff with jitter (between half and the full pause).
pub(super) fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let capped = exp.min(BACKOFF_CAP);
    capped.mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for _ in 0..100 {
            let b1 = backoff(1);
            assert!(b1 >= BACKOFF_BASE / 2 && b1 <= BACKOFF_BASE);
            let b20 = backoff(20);
            assert!(b20 <= BACKOFF_CAP && b20 >= BACKOFF_CAP / 2);
        }
    }
}
