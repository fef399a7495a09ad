//! Running a statement in the background: its share of the pool, the
//! credentials retry, the spool or the S3 upload, and a loan given back when
//! its share is reclaimed.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::*;

impl Statements {
    /// Runs `statement` in the background: `job` (whose sink is `writer`)
    /// on the statements' share of the pool. `registration` ends (the audit
    /// line) when it does.
    pub fn start(
        self: &Arc<Self>,
        statement: Arc<Statement>,
        job: QueryJob,
        writer: Arc<SpoolWriter>,
        registration: Registration,
        runner: Runner,
    ) {
        let this = self.clone();
        let deadline = job.started + job.timeout;
        let limit = job.timeout;
        tokio::spawn(async move {
            let outcome = this.drive(&statement, job, &runner).await;
            let (state, result, error) = match outcome {
                Ok(retried) => {
                    statement.lock().retried = retried;
                    match writer.take_result() {
                        Some(r) => match this
                            .upload(&r, deadline, limit, &statement.running.cancel)
                            .await
                        {
                            Ok(meta) => {
                                statement.lock().shared_result = meta;
                                (State::Succeeded, Some(Arc::new(r)), None)
                            }
                            Err(QueryError::CancelledByRequest) => {
                                (State::Cancelled, None, Some(QueryError::CancelledByRequest))
                            }
                            Err(e) => (State::Failed, None, Some(e)),
                        },
                        None => (
                            State::Failed,
                            None,
                            Some(QueryError::Internal("the statement kept no result".into())),
                        ),
                    }
                }
                Err(QueryError::CancelledByRequest) => {
                    (State::Cancelled, None, Some(QueryError::CancelledByRequest))
                }
                Err(e) => (State::Failed, None, Some(e)),
            };
            drop(writer);
            registration.running.set_outcome(match &error {
                None => Outcome::ok(),
                Some(e) => crate::problems::outcome_of(e),
            });
            if let Some(r) = &result {
                registration
                    .running
                    .bytes
                    .store(r.bytes, std::sync::atomic::Ordering::Relaxed);
            }
            metrics::counter!("duckgate_statements_total", "outcome" => match &error {
                None => "ok",
                Some(e) => e.outcome(),
            })
            .increment(1);
            {
                let mut inner = statement.lock();
                inner.state = state;
                inner.result = result;
                inner.error = error;
                inner.finished = Some((Instant::now(), SystemTime::now()));
            }
            // The audit line.
            drop(registration);
            statement.done.cancel();
            Self::publish(&this.lock());
        });
    }

    /// Uploads a finished result to the S3 spool, if there is one, before
    /// the statement is seen to succeed: other replicas page it from there.
    /// Returns its metadata for them.
    /// The upload ends by the statement's `deadline`: a stalled store
    /// fails it as timed out, never lets it succeed late.
    async fn upload(
        &self,
        result: &SpoolResult,
        deadline: Instant,
        limit: std::time::Duration,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, QueryError> {
        let (Some(s3), Some(shared)) = (&self.s3, &self.shared) else {
            return Ok(None);
        };
        let name = result
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| QueryError::Internal("a spool file without a name".into()))?;
        let url = s3.url_of(&format!("{}/{name}", shared.replica));
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(QueryError::Timeout(limit));
        }
        s3.upload(&result.path, &url, left).await?;
        if cancel.is_cancelled() {
            // Deleted (or cancelled) while it uploaded: nobody will name
            // the object, so it goes now rather than at the orphan sweep.
            if let Err(e) = s3.delete(&url).await {
                tracing::warn!(error.cause = %e, "removing a discarded statement's result failed");
            }
            return Err(QueryError::CancelledByRequest);
        }
        serde_json::to_string(&result.meta(url))
            .map(Some)
            .map_err(|e| QueryError::Internal(e.to_string()))
    }

    /// Waits for a share of the pool, then runs the statement. `Ok(retried)`
    /// once its result is kept.
    async fn drive(
        &self,
        statement: &Statement,
        job: QueryJob,
        runner: &Runner,
    ) -> Result<bool, QueryError> {
        let deadline = job.started + job.timeout;
        loop {
            let reclaim = Reclaim::new();
            match self.drive_once(statement, &job, runner, &reclaim).await {
                // Taken back for a token within its part: it starts again
                // from its token's own queue.
                Err(_) if reclaim.reclaimed() && Instant::now() < deadline => {
                    statement.set_state(State::Queued);
                    Self::publish(&self.lock());
                }
                other => return other,
            }
        }
    }

    /// One run of [`Statements::drive`]: the token's part of the share (or
    /// a loan past it, given back through `reclaim`), then the share, then
    /// the run.
    async fn drive_once(
        &self,
        statement: &Statement,
        job: &QueryJob,
        runner: &Runner,
        reclaim: &Reclaim,
    ) -> Result<bool, QueryError> {
        let deadline = job.started + job.timeout;
        // The token's part first, then the statements' share: a token
        // whose statements hold its part waits in its own queue, never in
        // front of another token's; past its part it borrows the share's
        // free capacity nobody waits for.
        let free = || {
            self.share.available_permits() > 0
                && self
                    .share_waiting
                    .load(std::sync::atomic::Ordering::Relaxed)
                    == 0
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let part = self
            .fair
            .part(Some(&statement.running.owner), Some(reclaim), left, free);
        let part = match self.until_stopped(part, statement, job, runner).await? {
            Ok(part) => part,
            Err(FairError::Closed) => return Err(QueryError::ShuttingDown),
            Err(FairError::Timeout) => return Err(QueryError::Timeout(job.timeout)),
        };
        let permit = match self.share.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) if !part.guaranteed() => return Err(reclaimed(reclaim)),
            Err(_) => {
                self.fair.reclaim_for(&statement.running.owner);
                let _waiting = crate::state::CounterGuard::new(&self.share_waiting);
                let share = self.share.clone().acquire_owned();
                self.until_stopped(share, statement, job, runner)
                    .await?
                    .map_err(|_| QueryError::ShuttingDown)?
            }
        };
        let _permit = SharePermit {
            permit: Some(permit),
            fair: &self.fair,
        };
        statement.set_state(State::Running);
        Self::publish(&self.lock());
        // The engine waits for a connection as long as the deadline allows
        // (interactive queries may hold the rest of the pool).
        let run = async {
            let (output, retried) =
                with_fresh_credentials(&runner.rotator, &runner.health, deadline, |retried| {
                    let mut job = job.clone();
                    job.retried = retried;
                    job.reclaim = Some(reclaim.clone());
                    execute::run(&runner.engine.pool, job, runner.shutdown.clone())
                })
                .await?;
            // The body is empty: the result went to the spool. It ends with
            // an error if the statement failed late.
            let mut body = output.body.into_stream();
            while let Some(chunk) = body.next().await {
                if let Err(e) = chunk {
                    return Err(QueryError::Internal(e.to_string()));
                }
            }
            Ok(retried)
        };
        let ran = run.await;
        drop(part);
        ran
    }

    /// `wait` for `statement`, unless it is cancelled, the gateway stops,
    /// or its time limit passes first.
    async fn until_stopped<T>(
        &self,
        wait: impl std::future::Future<Output = T>,
        statement: &Statement,
        job: &QueryJob,
        runner: &Runner,
    ) -> Result<T, QueryError> {
        let deadline = job.started + job.timeout;
        tokio::select! {
            r = wait => Ok(r),
            _ = statement.running.cancel.cancelled() => Err(QueryError::CancelledByRequest),
            _ = runner.shutdown.cancelled() => Err(QueryError::ShuttingDown),
            _ = tokio::time::sleep_until(deadline.into()) => Err(QueryError::Timeout(job.timeout)),
        }
    }
}

/// A permit of the statements' share that tells the fair shares when it
/// is back (tokens past their part may borrow it).
struct SharePermit<'a> {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    fair: &'a Fair,
}

impl Drop for SharePermit<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.fair.freed();
    }
}

/// The error of a loan that found the capacity it was made for taken
/// meanwhile: it counts as taken back, and the statement waits again.
fn reclaimed(reclaim: &Reclaim) -> QueryError {
    reclaim.take_back();
    QueryError::TokenShare(Duration::ZERO)
}
