//! The S3 spool: a finished result's Arrow IPC file is uploaded under the
//! configured prefix and read back by any replica, so results outlive the
//! replica that computed them.
//!
//! Why aws-sdk-s3 with the rotator's installed credentials rather than
//! DuckDB's httpfs: the spool file is written by the gateway itself (Arrow
//! IPC through arrow-rs), not by a DuckDB COPY, and httpfs has no way to
//! upload or fetch arbitrary bytes; running that traffic through pooled
//! connections would also take connections from clients. The SDK is the
//! well-kept S3 client, and built per call from the credentials the rotator
//! installed last (`Rotator::credentials_for`), it signs with exactly what
//! DuckDB uses, rotated on the same schedule, inside the same secret scope.

use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use tokio::io::AsyncWriteExt;

use crate::credentials::source::expose;
use crate::credentials::Rotator;
use crate::engine::execute::{QueryError, StoreFault};
use crate::engine::sink::SinkError;
use crate::state::Dependency;

/// A failure of the S3 spool, classified: whose it is decides the status a
/// client sees (410 missing, 503 unavailable, 502 refused).
fn fault<E>(what: &str, e: &SdkError<E, HttpResponse>) -> QueryError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let code = e.as_service_error().and_then(|s| s.code()).unwrap_or("");
    let fault = match (status, code) {
        (_, "NoSuchBucket" | "AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch") => {
            StoreFault::Refused
        }
        (Some(404), _) | (_, "NoSuchKey") => StoreFault::Missing,
        (_, "SlowDown" | "RequestTimeout" | "ExpiredToken") => StoreFault::Unavailable,
        (Some(408 | 429), _) => StoreFault::Unavailable,
        (Some(s), _) if s >= 500 => StoreFault::Unavailable,
        (Some(_), _) => StoreFault::Refused,
        // No answer: a timeout, a reset, a refused connection.
        (None, _) => StoreFault::Unavailable,
    };
    QueryError::RemoteStore {
        store: "spool",
        fault,
        cause: format!("{what}: {}", DisplayErrorContext(e)),
    }
}

fn unavailable(cause: String) -> QueryError {
    QueryError::RemoteStore {
        store: "spool",
        fault: StoreFault::Unavailable,
        cause,
    }
}

/// One object in the S3 spool.
#[derive(Debug, Clone)]
pub struct SpoolObject {
    /// Its `s3://` URL.
    pub url: String,
    /// Its size.
    pub bytes: u64,
    /// When it was written.
    pub modified: std::time::SystemTime,
}

/// An `s3://bucket/prefix/` spool.
pub struct S3Spool {
    /// The configured URL, `s3://bucket/prefix/`.
    pub url: String,
    bucket: String,
    prefix: String,
    rotator: Arc<Rotator>,
    /// Its state for the probes: every upload, copy and removal reports.
    pub dependency: Arc<Dependency>,
}

impl std::fmt::Debug for S3Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Spool").field("url", &self.url).finish()
    }
}

impl S3Spool {
    /// The spool at `url`, which a configured secret's scope must hold.
    pub fn new(
        url: &str,
        rotator: Arc<Rotator>,
        dependency: Arc<Dependency>,
    ) -> Result<Self, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url} is not an s3:// URL"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{url} names no bucket"));
        }
        if !rotator.in_scope(url) {
            return Err(format!(
                "{url} is outside the scope of every configured S3 secret: the spool is written with a secret's rotated credentials"
            ));
        }
        Ok(S3Spool {
            url: url.to_string(),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            rotator,
            dependency,
        })
    }

    /// The URL of the object named `name` under the prefix.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}{name}", self.url)
    }

    /// The key of `url` if it lies under this spool's prefix (never
    /// anything else: a URL read from the shared state is checked).
    fn key_of(&self, url: &str) -> Result<String, String> {
        url.strip_prefix(&self.url)
            .filter(|k| !k.is_empty() && !k.contains(".."))
            .map(|k| format!("{}{k}", self.prefix))
            .ok_or_else(|| "a spool URL outside the spool's prefix".to_string())
    }

    /// A client signing with the credentials installed now.
    fn client(&self) -> Result<aws_sdk_s3::Client, String> {
        let (spec, creds) = self
            .rotator
            .credentials_for(&self.url)
            .ok_or("no S3 credentials are installed for the spool's scope")?;
        let credentials = aws_credential_types::Credentials::new(
            creds.key_id.clone(),
            expose(&creds.secret).to_string(),
            creds.session_token.as_ref().map(|t| expose(t).to_string()),
            creds.expires_at,
            "duckgate-rotator",
        );
        let mut config = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .http_client(crate::credentials::http::client())
            .region(aws_sdk_s3::config::Region::new(spec.region.clone()))
            .credentials_provider(credentials)
            // Checksums only where S3 requires them: streaming uploads then
            // go as plain signed PUTs, which S3-compatible stores accept too.
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            );
        if let Some(endpoint) = &spec.endpoint {
            let scheme = if spec.use_ssl { "https" } else { "http" };
            config = config.endpoint_url(format!("{scheme}://{endpoint}"));
        }
        if spec.url_style.as_deref() == Some("path") {
            config = config.force_path_style(true);
        }
        Ok(aws_sdk_s3::Client::from_conf(config.build()))
    }

    /// Records how a use of the store went: the probes see only
    /// unavailability (a missing object is a statement's fault, not the
    /// store's).
    fn report<T>(&self, r: Result<T, QueryError>) -> Result<T, QueryError> {
        match &r {
            Ok(_) => self.dependency.ok(),
            Err(QueryError::RemoteStore { fault, cause, .. }) => {
                if *fault == StoreFault::Missing {
                    self.dependency.ok();
                } else {
                    self.dependency.failed(cause);
                }
                tracing::warn!(store = "spool", fault = ?fault, error.cause = %cause, "the S3 spool failed");
            }
            Err(_) => {}
        }
        r
    }

    /// Uploads the local file `path` to `url` within `limit`: a stalled
    /// store ends the upload at the statement's deadline, never after it.
    pub async fn upload(&self, path: &Path, url: &str, limit: Duration) -> Result<(), QueryError> {
        let upload = async {
            let key = self.key_of(url).map_err(QueryError::Internal)?;
            let body = ByteStream::from_path(path)
                .await
                .map_err(|e| QueryError::Internal(format!("reading the spool file: {e}")))?;
            self.client()
                .map_err(unavailable)?
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .body(body)
                .send()
                .await
                .map_err(|e| fault("uploading to the S3 spool", &e))?;
            Ok(())
        };
        let r = match tokio::time::timeout(limit, upload).await {
            Ok(r) => r,
            Err(_) => Err(unavailable(format!(
                "uploading to the S3 spool took longer than the statement's remaining {} ms",
                limit.as_millis()
            ))),
        };
        self.report(r)
    }

    /// Fetches `url` into the local file `dest` within `limit` (written
    /// beside it, then renamed, so a half-fetched file is never read). A
    /// failed fetch leaves nothing behind: on a full disk the partial file
    /// would keep the disk full.
    pub async fn download(
        &self,
        url: &str,
        dest: &Path,
        limit: Duration,
    ) -> Result<(), QueryError> {
        let partial = dest.with_extension("part");
        let fetched = match tokio::time::timeout(limit, self.fetch(url, &partial, dest)).await {
            Ok(r) => r,
            Err(_) => Err(unavailable(format!(
                "reading the S3 spool took longer than {} ms",
                limit.as_millis()
            ))),
        };
        if fetched.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        self.report(fetched)
    }

    async fn fetch(&self, url: &str, partial: &Path, dest: &Path) -> Result<(), QueryError> {
        let key = self.key_of(url).map_err(QueryError::Internal)?;
        let mut object = self
            .client()
            .map_err(unavailable)?
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| fault("reading the S3 spool", &e))?;
        let written = |e: std::io::Error| {
            QueryError::from(match SinkError::from_io(&e) {
                SinkError::Io(m) => SinkError::Io(format!("writing the spool copy: {m}")),
                other => other,
            })
        };
        let mut file = tokio::fs::File::create(partial).await.map_err(written)?;
        while let Some(chunk) = object
            .body
            .try_next()
            .await
            .map_err(|e| unavailable(format!("reading the S3 spool: {e}")))?
        {
            file.write_all(&chunk).await.map_err(written)?;
        }
        file.flush().await.map_err(written)?;
        drop(file);
        tokio::fs::rename(partial, dest).await.map_err(written)
    }

    /// Every object under the prefix: its URL, size and when it was
    /// written (for the orphan sweep and the bytes gauge).
    pub async fn list(&self) -> Result<Vec<SpoolObject>, QueryError> {
        let listed = async {
            let client = self.client().map_err(unavailable)?;
            let mut pages = client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&self.prefix)
                .into_paginator()
                .send();
            let mut all = Vec::new();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| fault("listing the S3 spool", &e))?;
                for o in page.contents() {
                    let (Some(key), Some(modified)) = (o.key(), o.last_modified()) else {
                        continue;
                    };
                    let Some(name) = key.strip_prefix(self.prefix.as_str()) else {
                        continue;
                    };
                    // A time that does not convert is taken as now: an
                    // object is removed only once it is known to be old.
                    all.push(SpoolObject {
                        url: self.url_of(name),
                        bytes: o.size().unwrap_or(0).max(0) as u64,
                        modified: std::time::SystemTime::try_from(*modified)
                            .unwrap_or_else(|_| std::time::SystemTime::now()),
                    });
                }
            }
            Ok(all)
        };
        let r = match tokio::time::timeout(Duration::from_secs(60), listed).await {
            Ok(r) => r,
            Err(_) => Err(unavailable("listing the S3 spool took over 60 s".into())),
        };
        self.report(r)
    }

    /// Removes `url` (expiry, DELETE); a missing object is no error.
    pub async fn delete(&self, url: &str) -> Result<(), QueryError> {
        let key = self.key_of(url).map_err(QueryError::Internal)?;
        let r = self
            .client()
            .map_err(unavailable)?
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| fault("removing from the S3 spool", &e));
        self.report(r)
    }
}
