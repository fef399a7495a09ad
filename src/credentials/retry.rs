//! The expired-token retry: a query S3 rejected because its credentials
//! expired early (revoked, clock skew) triggers one refresh, single-flight
//! with the rotator's own, and runs once more. The refresh respects the
//! rotator's backoff and the query's deadline, so with STS down the client
//! hears so promptly (`CredentialsExpired`, 503). A failed statement changed
//! nothing, so running it again is safe.

use std::future::Future;
use std::time::Instant;

use crate::credentials::Rotator;
use crate::engine::QueryError;
use crate::state::Health;

/// Runs `attempt(false)`; when S3 rejected the credentials as expired,
/// refreshes them (within `deadline`) and runs `attempt(true)`. Returns the
/// answer and whether it was the second run.
pub async fn with_fresh_credentials<T, Fut>(
    rotator: &Rotator,
    // The refresh says itself whether the implicated secrets are fresh
    // (another tenant's expiry is no reason to refuse this query).
    _health: &Health,
    deadline: Instant,
    mut attempt: impl FnMut(bool) -> Fut,
) -> Result<(T, bool), QueryError>
where
    Fut: Future<Output = Result<T, QueryError>>,
{
    match attempt(false).await {
        Err(e) if e.is_expired_token() && !rotator.is_empty() && rotator.enabled() => {
            tracing::warn!("S3 rejected the credentials as expired; rotating and retrying once");
            let left = deadline.saturating_duration_since(Instant::now());
            // Only the secrets that may have served it (never every
            // tenant's), and only theirs must be fresh for the retry.
            let refreshed =
                tokio::time::timeout(left, rotator.rotate_for_expired_token(&e.to_string()))
                    .await
                    .unwrap_or(false);
            if !refreshed {
                return Err(QueryError::CredentialsExpired);
            }
            match attempt(true).await {
                Err(e) if e.is_expired_token() => Err(QueryError::CredentialsExpired),
                other => other.map(|t| (t, true)),
            }
        }
        Err(e) if e.is_expired_token() => Err(QueryError::CredentialsExpired),
        other => other.map(|t| (t, false)),
    }
}
