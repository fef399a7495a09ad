//! One way to run a statement, whatever door it came through.
//!
//! A door (HTTP's `/query`, `/statements`, Flight SQL, the PostgreSQL wire
//! protocol) turns its protocol into an [`Identity`] (decided once per call
//! by [`crate::identity::Authenticator`]) and a [`Request`], calls
//! [`Core::run`] (or [`Core::submit`] for an async statement), and turns the
//! answer back into its protocol. Everything in between happens here, once:
//!
//! - the SQL's size and presence;
//! - registration among the running queries (listed in `GET /queries`,
//!   cancellable, one audit line naming the door), and the id reserved on
//!   every replica when the client chose it;
//! - the guard's rules for the identity (its grants, read-only where the
//!   door or the request says so);
//! - the limits: the time limit and row cap asked for, clamped to the
//!   gateway's, then to the identity's roles' (`QueryJob::new`);
//! - admission (the identity's share of the pool, its roles', S3's),
//!   execution and the retry with fresh credentials when S3 says they
//!   expired ([`crate::credentials::retry`]).
//!
//! A job is built in one place, [`Core::job`]. Nothing here knows a
//! protocol: errors are [`Error`]s, whose problem (slug, status,
//! `Retry-After`) each door translates.

pub mod answer;
pub mod catalog;
pub mod state;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::LimitsConfig;
use crate::credentials::retry::with_fresh_credentials;
use crate::encode::{ArrowCodec, Format};
use crate::engine::admission::Reclaim;
use crate::engine::execute::describe::DescribeSlot;
use crate::engine::execute::{self, Param, QueryOutput, RunLimits};
use crate::engine::queries::{Registration, Running};
use crate::engine::sink::BatchSink;
use crate::engine::QueryJob;
use crate::identity::Identity;
use crate::statements::submit::{Submission, Submitted};

pub use crate::statements::Error;

/// How an answer leaves.
#[derive(Clone)]
pub enum Leave {
    /// Encoded in `Format` as it runs (a body, a stream of Arrow messages).
    Encoded(Format),
    /// Encoded as an Arrow IPC stream whose buffers are compressed with
    /// the codec (Arrow's own compression, which the client asked for).
    CompressedArrow(ArrowCodec),
    /// Described, not run: its result's and parameters' schemas.
    Described(DescribeSlot),
}

/// One statement as a door received it, its options not yet clamped.
pub struct Request {
    /// One SQL statement.
    pub sql: String,
    /// Values for its placeholders, in order.
    pub params: Vec<Param>,
    /// The time limit asked for (clamped to the gateway's and the roles').
    pub timeout_ms: Option<u64>,
    /// The rows asked for at most (a cut there is the client's).
    pub max_rows: Option<u64>,
    /// Only statements that read (a GET, a request that asked for it).
    pub read_only: bool,
    /// Its id, if the door has one for it (else one is made).
    pub id: Option<String>,
    /// Whether the client chose `id` (it is then reserved on every
    /// replica: ids are unique per identity across the fleet).
    pub client_chose_id: bool,
    /// The door, as the registry and the audit line name it (`query`,
    /// `flight`, `flight-describe`, `pg`, `statement`).
    pub door: &'static str,
    /// When the request arrived: its deadline counts from here.
    pub started: Instant,
}

impl Request {
    /// A request of `door` for `sql`, with no option, arriving now.
    pub fn new(door: &'static str, sql: String) -> Self {
        Self {
            sql,
            params: Vec::new(),
            timeout_ms: None,
            max_rows: None,
            read_only: false,
            id: None,
            client_chose_id: false,
            door,
            started: Instant::now(),
        }
    }
}

/// A statement that runs: its answer to come.
pub struct Ran {
    /// Its entry among the running queries: the audit line is written
    /// when it is dropped (the door keeps it while the answer leaves).
    pub registration: Registration,
    /// The statement's kind and its answer.
    pub output: QueryOutput,
    /// The credential epoch it ran under.
    pub epoch: u64,
    /// Whether it ran again after a credential refresh.
    pub retried: bool,
}

/// What the core needs of the gateway: the statement domain's context
/// (registry, engine, rotator, health, shutdown, statements) and the limits.
#[derive(Clone)]
pub struct Core {
    /// The statements and the machinery they run on.
    pub ctx: crate::statements::Context,
    /// Every setting (the limits are read from it).
    pub config: Arc<crate::config::Config>,
}

impl Core {
    fn limits(&self) -> &LimitsConfig {
        &self.config.limits
    }

    /// The SQL's size and presence, checked before anything else.
    pub fn admit_sql(&self, sql: &str) -> Result<(), Error> {
        if sql.len() as u64 > self.limits().max_sql_bytes {
            return Err(Error::SqlTooLarge {
                limit: self.limits().max_sql_bytes,
            });
        }
        if sql.trim().is_empty() {
            return Err(Error::NoSql);
        }
        Ok(())
    }

    /// The guard's rules for `who`: its grants, read-only when asked.
    fn rules(&self, who: &Identity, read_only: bool) -> Arc<crate::engine::guard::Rules> {
        let rules = self.ctx.runner.engine.rules_for(who.access.clone());
        if read_only {
            crate::engine::guard::read_only(rules)
        } else {
            rules
        }
    }

    /// The one place a job is built: `req`'s statement for `who`, its time
    /// limit `timeout` and rows as asked (clamped to the gateway's; the
    /// roles' caps are applied by [`QueryJob`]'s constructor), leaving as
    /// `leave`, or kept in `spool` (an async statement).
    pub fn job(
        &self,
        who: &Identity,
        req: Request,
        timeout: Duration,
        tracker: Arc<Running>,
        leave: Result<Leave, Arc<dyn BatchSink>>,
    ) -> QueryJob {
        let limits = self.limits();
        let rules = self.rules(who, req.read_only);
        let (max_rows, rows_asked) = match &leave {
            Ok(Leave::Described(_)) => (limits.default_rows(), false),
            Ok(Leave::Encoded(_) | Leave::CompressedArrow(_)) => limits.rows(req.max_rows),
            // A kept result holds up to the gateway's cap unless asked.
            Err(_) => (
                req.max_rows
                    .map_or(limits.max_rows, |r| r.min(limits.max_rows)),
                req.max_rows.is_some_and(|r| r <= limits.max_rows),
            ),
        };
        let run_limits = RunLimits {
            started: req.started,
            timeout,
            max_rows,
            rows_asked,
            stall_timeout: Duration::from_millis(limits.send_stall_timeout_ms),
            max_value_bytes: limits.max_value_bytes,
        };
        match leave {
            Ok(Leave::Encoded(format)) => QueryJob::query(
                req.sql,
                req.params,
                rules,
                run_limits,
                tracker,
                format,
                limits.max_result_bytes,
            ),
            Ok(Leave::CompressedArrow(codec)) => {
                let mut job = QueryJob::query(
                    req.sql,
                    req.params,
                    rules,
                    run_limits,
                    tracker,
                    Format::Arrow,
                    limits.max_result_bytes,
                );
                job.arrow_compression = Some(codec);
                job
            }
            Ok(Leave::Described(slot)) => {
                QueryJob::describe(req.sql, rules, run_limits, tracker, slot)
            }
            Err(spool) => {
                QueryJob::statement(req.sql, req.params, rules, run_limits, tracker, spool)
            }
        }
    }

    /// Runs `req` for `who`: registered, its id reserved, admitted, run
    /// with the credentials retry; returns once the first rows (or the
    /// error) are known. A request that fails ends its registration with
    /// its outcome (the audit line).
    pub async fn run(&self, who: &Identity, req: Request, leave: Leave) -> Result<Ran, Error> {
        self.admit_sql(&req.sql)?;
        let ctx = &self.ctx;
        let epoch = ctx.runner.health.epoch();
        let mut registration = ctx.queries.register_as(
            req.door,
            req.id.as_deref(),
            who.name.clone(),
            who.roles.clone(),
            &req.sql,
            epoch,
        )?;
        let fail = |registration: Registration, e: Error| {
            registration.running.set_outcome(e.outcome());
            e
        };
        if let Err(e) =
            crate::statements::replication::reserve_id(ctx, &mut registration, req.client_chose_id)
                .await
        {
            return Err(fail(registration, e));
        }
        let timeout = Duration::from_millis(self.limits().query_timeout_ms(req.timeout_ms));
        let started = req.started;
        let tracker = registration.running.clone();
        let job = self.job(who, req, timeout, tracker, Ok(leave));
        // Expired credentials (revoked early, clock skew): the credentials
        // layer refreshes them and runs the statement once more.
        let deadline = started + job.timeout;
        let runner = &ctx.runner;
        let ran = loop {
            // Past its share the statement may borrow a free connection;
            // one taken back before its answer began runs again, from its
            // token's own queue (see `admission::Fair`).
            let reclaim = Reclaim::new();
            let ran =
                with_fresh_credentials(&runner.rotator, &runner.health, deadline, |retried| {
                    let mut job = job.clone();
                    job.retried = retried;
                    job.reclaim = Some(reclaim.clone());
                    execute::run(&runner.engine.pool, job, runner.shutdown.clone())
                })
                .await;
            match ran {
                Ok(ran) if reclaim.settle() => break Ok(ran),
                Err(_) | Ok(_) if reclaim.reclaimed() && Instant::now() < deadline => continue,
                other => break other,
            }
        };
        match ran {
            Ok((output, retried)) => Ok(Ran {
                registration,
                output,
                epoch: if retried {
                    runner.health.epoch()
                } else {
                    epoch
                },
                retried,
            }),
            Err(e) => Err(fail(registration, Error::Query(e))),
        }
    }

    /// Submits `req` for `who` as an async statement (kept in the spool,
    /// polled and paged later), waiting up to `wait_ms` for its end.
    pub async fn submit(
        &self,
        who: &Identity,
        req: Request,
        wait_ms: Option<u64>,
    ) -> Result<Submitted, Error> {
        self.admit_sql(&req.sql)?;
        let submission = Submission {
            id: req.id.clone(),
            client_chose_id: req.client_chose_id,
            owner: who.name.clone(),
            roles: who.roles.clone(),
            sql: req.sql.clone(),
            timeout_ms: req.timeout_ms,
            wait_ms,
            role_spool_quota: who.access.as_ref().and_then(|a| a.quota(|l| l.spool_bytes)),
        };
        let core = self.clone();
        let who = who.clone();
        crate::statements::submit::submit(&self.ctx, submission, move |timeout, tracker, spool| {
            core.job(&who, req, timeout, tracker, Err(spool))
        })
        .await
    }
}
