//! The S3 errors of expired credentials: which secrets an error implicates,
//! and the one refresh it triggers.

use std::time::{Instant, SystemTime};

use super::Rotator;
use crate::state::CredentialsView;

impl Rotator {
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
}

pub(super) fn any_expired(view: &CredentialsView, now: SystemTime) -> bool {
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
}
