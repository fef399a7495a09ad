//! The rotator: keeps every S3 secret's credentials fresh on the control
//! connection, so no statement ever starts with credentials that could expire
//! before it ends.
//!
//! Each refresh has three steps, and holds nothing a query or a probe needs:
//! decide (read the snapshot), fetch and install (STS, then DDL on the control
//! connection), publish (swap a new snapshot in). Refreshes of one secret are
//! single-flight: the interval task, the admin endpoint, start-up and the
//! expired-token retry share one, and a second trigger waits for the one in
//! flight instead of calling STS again.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::config::s3::{RotationTiming, SecretSpec};
use crate::credentials::source::{key_id_suffix, CredentialSource, Credentials};
use crate::credentials::sql;
use crate::state::{CredentialsView, Health, SecretState};

/// Longest pause between retries after failures.
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// First pause after a failure.
const BACKOFF_BASE: Duration = Duration::from_millis(500);

/// One secret under the rotator's care.
struct Managed {
    spec: SecretSpec,
    source: CredentialSource,
    /// Held for the whole of one refresh: the single flight.
    flight: tokio::sync::Mutex<()>,
    /// Completed refresh attempts; a waiter that sees it move knows the flight
    /// it waited for has finished, and takes that flight's result.
    attempts: AtomicU64,
    /// Result of the last attempt (error class only).
    last_result: Mutex<Result<(), RotationError>>,
    /// Consecutive failures, for the backoff.
    failures: AtomicU32,
    /// No automatic attempt before this instant (backoff after a failure).
    not_before: Mutex<Option<Instant>>,
    /// Lifetime of the installed credentials, as issued.
    lifetime: Mutex<Option<Duration>>,
    /// The installed credentials, for the gateway's own S3 calls (the S3
    /// spool) made with exactly what DuckDB uses.
    current: Mutex<Option<Credentials>>,
}

/// Owns the credential lifecycle of every configured S3 secret.
pub struct Rotator {
    secrets: Vec<Arc<Managed>>,
    /// The control connection secrets are installed on (DuckDB's C++ API).
    control: Arc<Mutex<crate::engine::ffi::RawConnection>>,
    health: Arc<Health>,
    timing: RotationTiming,
    /// Test hook: hold the control connection this long during each install
    /// after start-up.
    test_stall: Duration,
    /// Set once start-up installed every secret.
    started: std::sync::atomic::AtomicBool,
}

/// Why a credential refresh failed. No message holds a secret: source
/// errors are reduced to their code, status and message, DuckDB's to its
/// class and text without the statement.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RotationError {
    /// The source (STS, a web identity, the environment) gave no credentials.
    #[error("{0}")]
    Fetch(crate::credentials::source::FetchError),
    /// DuckDB refused the secret on the control connection.
    #[error("{0}")]
    Install(String),
    /// The source answered with credentials that cannot be right (no key,
    /// no token, already expired, expiring before the installed ones):
    /// they replace nothing.
    #[error("the credential source answered with unusable credentials: {0}")]
    Unusable(&'static str),
    /// The blocking task that installs the secret ended abnormally.
    #[error("the install task failed")]
    InstallTask,
    /// `POST /admin/secrets/rotate?name=` named no configured secret.
    #[error("no secret named `{0}`")]
    UnknownSecret(String),
    /// A secret could not be installed at start-up.
    #[error("secret `{name}`: {error}")]
    StartUp {
        /// The secret's name.
        name: String,
        /// Why its last attempt failed.
        error: Box<RotationError>,
    },
}

/// What one refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// New credentials are installed.
    Rotated,
    /// Nothing to do: the installed ones are fresh enough.
    Fresh,
}

impl Rotator {
    /// A rotator for `specs`; publishes every secret's state to `health`,
    /// none installed yet.
    pub async fn new(
        specs: Vec<SecretSpec>,
        control: Arc<Mutex<crate::engine::ffi::RawConnection>>,
        health: Arc<Health>,
        timing: RotationTiming,
        test_stall: Duration,
    ) -> Self {
        let mut secrets = Vec::new();
        let mut states = Vec::new();
        for spec in specs {
            let source = CredentialSource::new(&spec).await;
            states.push(SecretState {
                name: spec.name.clone(),
                source: source.kind().to_string(),
                scope: spec.scope.clone(),
                epoch: 0,
                expires_at: None,
                expires_at_system: None,
                rotated_at: None,
                key_id_suffix: None,
                last_error: None,
                consecutive_failures: 0,
                next_attempt_at: None,
                rotations: 0,
            });
            secrets.push(Arc::new(Managed {
                spec,
                source,
                flight: tokio::sync::Mutex::new(()),
                attempts: AtomicU64::new(0),
                last_result: Mutex::new(Ok(())),
                failures: AtomicU32::new(0),
                not_before: Mutex::new(None),
                lifetime: Mutex::new(None),
                current: Mutex::new(None),
            }));
        }
        health.credentials.store(Arc::new(CredentialsView {
            secrets: states,
            epoch: 0,
            any_expired: false,
        }));
        Self {
            secrets,
            control,
            health,
            timing,
            test_stall,
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether credentials are refreshed before they expire.
    pub fn enabled(&self) -> bool {
        self.timing.enabled
    }

    /// Whether no S3 secret is configured.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The secrets' names, in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.secrets.iter().map(|m| m.spec.name.clone()).collect()
    }

    /// Every S3 prefix any secret is scoped to (for the lockdown's allowed
    /// directories); a secret without scope allows all of S3.
    pub fn s3_prefixes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.secrets {
            if m.spec.scope.is_empty() {
                out.push("s3://".to_string());
            } else {
                out.extend(m.spec.scope.iter().cloned());
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The secret whose scope holds `url` (the longest matching prefix; a
    /// secret without scope holds every S3 path), with its installed
    /// credentials: what the gateway's own S3 calls use, so they rotate with
    /// DuckDB's.
    pub fn credentials_for(&self, url: &str) -> Option<(SecretSpec, Credentials)> {
        let m = self
            .secrets
            .iter()
            .filter_map(|m| {
                if m.spec.scope.is_empty() {
                    return Some((0, m));
                }
                m.spec
                    .scope
                    .iter()
                    .filter(|p| url.starts_with(p.as_str()))
                    .map(|p| p.len())
                    .max()
                    .map(|n| (n, m))
            })
            .max_by_key(|(n, _)| *n)?
            .1;
        let creds = m
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        Some((m.spec.clone(), creds))
    }

    /// Whether a configured secret's scope holds `url`.
    pub fn in_scope(&self, url: &str) -> bool {
        self.secrets.iter().any(|m| {
            m.spec.scope.is_empty() || m.spec.scope.iter().any(|p| url.starts_with(p.as_str()))
        })
    }

    /// Installs every secret at start-up, retrying briefly; fails if one
    /// cannot be installed, so a misconfigured gateway does not start.
    pub async fn install_all(&self, attempts: u32) -> Result<(), RotationError> {
        for (idx, m) in self.secrets.iter().enumerate() {
            let mut last = None;
            for attempt in 0..attempts.max(1) {
                if attempt > 0 {
                    // Between attempts only: after the last one, start-up
                    // fails at once.
                    tokio::time::sleep(backoff(attempt)).await;
                }
                match self.refresh(idx, true).await {
                    Ok(_) => {
                        last = None;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(secret = %m.spec.name, attempt = attempt + 1, error = %e, "installing S3 credentials failed");
                        last = Some(e);
                    }
                }
            }
            if let Some(error) = last {
                return Err(RotationError::StartUp {
                    name: m.spec.name.clone(),
                    error: Box::new(error),
                });
            }
        }
        self.started.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Refreshes now (the admin endpoint and the expired-token retry). `name`
    /// selects one secret; `None` means all.
    pub async fn rotate_now(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<Result<(), RotationError>>, RotationError> {
        let targets: Vec<usize> = match name {
            Some(n) => {
                let idx = self
                    .secrets
                    .iter()
                    .position(|m| m.spec.name == n)
                    .ok_or_else(|| RotationError::UnknownSecret(n.to_string()))?;
                vec![idx]
            }
            None => (0..self.secrets.len()).collect(),
        };
        let results =
            futures::future::join_all(targets.into_iter().map(|i| self.refresh(i, true))).await;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// The refresh a query asks for when S3 called its credentials expired
    /// (`error`: DuckDB's message, which names the object): only the
    /// secrets that may have served the request ([`Rotator::implicated`]),
    /// never every tenant's; a secret whose refresh is pausing after a
    /// failure (STS down) is not asked again, the backoff stands. Returns
    /// whether those secrets now hold credentials that have not expired.
    pub async fn rotate_for_expired_token(&self, error: &str) -> bool {
        let targets = self.implicated(error, SystemTime::now());
        let now = Instant::now();
        let pausing = targets.iter().any(|&i| {
            self.secrets[i]
                .not_before
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|nb| now < nb)
        });
        if pausing {
            return false;
        }
        let refreshed = futures::future::join_all(targets.iter().map(|&i| self.refresh(i, true)))
            .await
            .iter()
            .all(|r| r.is_ok());
        let now = SystemTime::now();
        let view = self.health.credentials.load();
        refreshed
            && targets.iter().all(|&i| {
                view.secrets
                    .get(i)
                    .and_then(|s| s.expires_at_system)
                    .is_none_or(|e| e > now)
            })
    }

    /// The secrets S3 may have refused as expired for a request that
    /// failed with `error`: the one whose scope holds the object the
    /// message names (the longest scope, as DuckDB picks its secret); else
    /// those whose credentials expired by this clock; else (revoked early,
    /// and no object named) every secret.
    pub fn implicated(&self, error: &str, now: SystemTime) -> Vec<usize> {
        let by_object = self
            .secrets
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                if m.spec.scope.is_empty() {
                    return Some((0, i));
                }
                m.spec
                    .scope
                    .iter()
                    .filter(|p| names_object_under(error, p))
                    .map(|p| p.len())
                    .max()
                    .map(|n| (n, i))
            })
            .max_by_key(|(n, _)| *n);
        if let Some((n, i)) = by_object {
            if n > 0 || self.secrets.len() == 1 {
                return vec![i];
            }
        }
        let view = self.health.credentials.load();
        let expired: Vec<usize> = (0..self.secrets.len())
            .filter(|&i| {
                view.secrets
                    .get(i)
                    .and_then(|s| s.expires_at_system)
                    .is_some_and(|e| e <= now)
            })
            .collect();
        if !expired.is_empty() {
            return expired;
        }
        (0..self.secrets.len()).collect()
    }

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
        let result = match m.source.fetch().await {
            Ok(creds) => match self.usable(idx, &creds, SystemTime::now()) {
                Ok(()) => self.install(m, creds.clone()).await.map(|_| creds),
                Err(why) => {
                    metrics::counter!("duckgate_sts_unusable_answers_total").increment(1);
                    Err(RotationError::Unusable(why))
                }
            },
            Err(e) => Err(RotationError::Fetch(e)),
        };
        let elapsed = started.elapsed();

        // 3. Publish.
        let outcome = match result {
            Ok(creds) => {
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
                metrics::histogram!("duckgate_rotation_duration_seconds")
                    .record(elapsed.as_secs_f64());
                tracing::info!(
                    secret = %m.spec.name,
                    key_id = %key_id_suffix(&creds.key_id),
                    elapsed_ms = elapsed.as_millis() as u64,
                    "S3 credentials rotated"
                );
                Ok(())
            }
            Err(class) => {
                let failures = m.failures.fetch_add(1, Ordering::Relaxed) + 1;
                // The pause grows with failures but stays under half the
                // check interval, so the tick after STS comes back refreshes:
                // recovery within one check interval.
                let pause = backoff(failures).min(self.timing.check_interval / 2);
                *m.not_before.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + pause);
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
                Err(class)
            }
        };
        *m.last_result.lock().unwrap_or_else(|p| p.into_inner()) = outcome.clone();
        m.attempts.fetch_add(1, Ordering::Release);
        outcome.map(|_| Refreshed::Rotated)
    }

    /// Installs the secret on the control connection, off the async workers,
    /// through DuckDB's secret manager (no SQL text holds the credentials),
    /// then checks that DuckDB's logging is still off.
    async fn install(&self, m: &Managed, creds: Credentials) -> Result<(), RotationError> {
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
    fn usable(&self, idx: usize, creds: &Credentials, now: SystemTime) -> Result<(), &'static str> {
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
    fn due(&self, idx: usize, now: SystemTime) -> bool {
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

    fn publish_success(&self, idx: usize, creds: &Credentials) {
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

    fn publish_failure(&self, idx: usize, class: &str, failures: u32, pause: Duration) {
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
    fn refresh_expiry_flag(&self) {
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

    /// One tick of the interval task.
    pub async fn tick(&self) {
        self.refresh_expiry_flag();
        if !self.timing.enabled {
            return;
        }
        let now = SystemTime::now();
        let due: Vec<usize> = (0..self.secrets.len())
            .filter(|&i| self.due(i, now))
            .collect();
        if due.is_empty() {
            return;
        }
        futures::future::join_all(due.into_iter().map(|i| self.refresh(i, false))).await;
        self.refresh_expiry_flag();
    }

    /// The interval task: ticks until shutdown.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if self.secrets.is_empty() {
            return;
        }
        let mut interval = tokio::time::interval(self.timing.check_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => self.tick().await,
                _ = shutdown.cancelled() => break,
            }
        }
        tracing::debug!("rotator stopped");
    }
}

impl Managed {
    fn source_duration(&self) -> Option<Duration> {
        self.spec.source.duration()
    }
}

fn any_expired(view: &CredentialsView, now: SystemTime) -> bool {
    view.secrets
        .iter()
        .any(|s| s.expires_at_system.is_some_and(|e| e <= now))
}

/// Whether DuckDB's `error` names an object under the S3 prefix `scope`
/// (`s3://bucket/prefix/`): as the `s3://` URL itself, or as the HTTP URL
/// httpfs requested, path style (`/bucket/prefix/...`) or virtual-host
/// style (`bucket.<endpoint>/prefix/...`).
fn names_object_under(error: &str, scope: &str) -> bool {
    let Some(rest) = scope.strip_prefix("s3://") else {
        return false;
    };
    if error.contains(scope) {
        return true;
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return false;
    }
    if error.contains(&format!("/{bucket}/{prefix}")) {
        return true;
    }
    // Virtual-host style: `//bucket.` then the host, then `/prefix`.
    error.match_indices(&format!("//{bucket}.")).any(|(at, m)| {
        let after = &error[at + m.len()..];
        after
            .find('/')
            .is_some_and(|slash| after[slash + 1..].starts_with(prefix))
    })
}

/// Capped exponential backoff with jitter (between half and the full pause).
fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let capped = exp.min(BACKOFF_CAP);
    capped.mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_the_object_of_one_scope() {
        let url =
            "HTTP Error: HTTP GET error on 'http://127.0.0.1:9000/b/tenants/acme/x.csv' (HTTP 400)";
        assert!(names_object_under(url, "s3://b/tenants/acme/"));
        assert!(!names_object_under(url, "s3://b/tenants/globex/"));
        assert!(names_object_under(url, "s3://b/"));
        let vhost = "HTTP GET error on 'https://b.s3.eu-west-1.amazonaws.com/tenants/acme/x.csv'";
        assert!(names_object_under(vhost, "s3://b/tenants/acme/"));
        assert!(!names_object_under(vhost, "s3://b/tenants/globex/"));
        assert!(!names_object_under(vhost, "s3://other/tenants/acme/"));
        assert!(names_object_under(
            "cannot read s3://b/tenants/acme/x.csv",
            "s3://b/tenants/acme/"
        ));
        assert!(!names_object_under("ExpiredToken", "s3://b/tenants/acme/"));
    }

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
