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

use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use tokio::io::AsyncWriteExt;

use crate::credentials::source::expose;
use crate::credentials::Rotator;
use crate::engine::sink::SinkError;

/// An `s3://bucket/prefix/` spool.
pub struct S3Spool {
    /// The configured URL, `s3://bucket/prefix/`.
    pub url: String,
    bucket: String,
    prefix: String,
    rotator: Arc<Rotator>,
}

impl std::fmt::Debug for S3Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Spool").field("url", &self.url).finish()
    }
}

impl S3Spool {
    /// The spool at `url`, which a configured secret's scope must hold.
    pub fn new(url: &str, rotator: Arc<Rotator>) -> Result<Self, String> {
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

    /// Uploads the local file `path` to `url`.
    pub async fn upload(&self, path: &Path, url: &str) -> Result<(), String> {
        let key = self.key_of(url)?;
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| format!("reading the spool file: {e}"))?;
        self.client()?
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("uploading to the S3 spool: {}", DisplayErrorContext(&e)))?;
        Ok(())
    }

    /// Fetches `url` into the local file `dest` (written beside it, then
    /// renamed, so a half-fetched file is never read). A failed fetch
    /// leaves nothing behind: on a full disk the partial file would keep
    /// the disk full.
    pub async fn download(&self, url: &str, dest: &Path) -> Result<(), SinkError> {
        let partial = dest.with_extension("part");
        let fetched = self.fetch(url, &partial, dest).await;
        if fetched.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        fetched
    }

    async fn fetch(&self, url: &str, partial: &Path, dest: &Path) -> Result<(), SinkError> {
        let key = self.key_of(url).map_err(SinkError::Io)?;
        let mut object = self
            .client()
            .map_err(SinkError::Io)?
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                SinkError::Io(format!("reading the S3 spool: {}", DisplayErrorContext(&e)))
            })?;
        let written = |e: std::io::Error| match SinkError::from_io(&e) {
            SinkError::Io(m) => SinkError::Io(format!("writing the spool copy: {m}")),
            other => other,
        };
        let mut file = tokio::fs::File::create(partial).await.map_err(written)?;
        while let Some(chunk) = object
            .body
            .try_next()
            .await
            .map_err(|e| SinkError::Io(format!("reading the S3 spool: {e}")))?
        {
            file.write_all(&chunk).await.map_err(written)?;
        }
        file.flush().await.map_err(written)?;
        drop(file);
        tokio::fs::rename(partial, dest).await.map_err(written)
    }

    /// Removes `url` (expiry, DELETE); a missing object is no error.
    pub async fn delete(&self, url: &str) -> Result<(), String> {
        let key = self.key_of(url)?;
        self.client()?
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| format!("removing from the S3 spool: {}", DisplayErrorContext(&e)))?;
        Ok(())
    }
}
