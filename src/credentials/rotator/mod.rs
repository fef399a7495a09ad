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
use crate::credentials::source::{CredentialSource, Credentials};
use crate::state::{CredentialsView, Health, SecretState};

mod expired;
mod refresh;

use refresh::backoff;

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
