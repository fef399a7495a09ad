//! Fair shares that conserve work ([`Fair`]): a part of the pool per owner,
//! loans past it while nobody waits, and loans taken back when an owner
//! within its share finds no connection free.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// A job's hold on what it borrowed past its token's share: fired when the
/// loan is taken back (the job's query is interrupted and runs again from
/// its token's own queue), or settled once its answer began (a loan is
/// never taken back from a client that is reading rows).
#[derive(Debug, Clone, Default)]
pub struct Reclaim(Arc<ReclaimState>);

#[derive(Debug, Default)]
struct ReclaimState {
    /// [`OPEN`], [`SETTLED`] or [`RECLAIMED`].
    state: AtomicU8,
    /// Fires when reclaimed.
    token: CancellationToken,
}

const OPEN: u8 = 0;
const SETTLED: u8 = 1;
const RECLAIMED: u8 = 2;

impl Reclaim {
    /// A hold on nothing yet, open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires when what the job borrowed is taken back.
    pub fn token(&self) -> CancellationToken {
        self.0.token.clone()
    }

    /// The job's answer began: what it borrowed is kept until it ends.
    /// False when it was taken back first (the answer is being interrupted).
    pub fn settle(&self) -> bool {
        match self
            .0
            .state
            .compare_exchange(OPEN, SETTLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == SETTLED,
        }
    }

    /// Whether what the job borrowed was taken back.
    pub fn reclaimed(&self) -> bool {
        self.0.state.load(Ordering::Acquire) == RECLAIMED
    }

    /// Takes the loan back, unless the answer began or it was taken
    /// already: whether this call took it.
    pub fn take_back(&self) -> bool {
        let taken = self
            .0
            .state
            .compare_exchange(OPEN, RECLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if taken {
            self.0.token.cancel();
        }
        taken
    }
}

/// A loan given out: its owner and its job's hold.
struct LoanEntry {
    id: u64,
    owner: Arc<str>,
    reclaim: Reclaim,
}

/// Fair shares of some capacity (the pool's connections, or the async
/// statements' share of them) among tokens, conserving work: each token
/// is guaranteed `share` at once (a semaphore of its own: its work waits
/// there, in its own queue, never in front of another token's); past it,
/// a token borrows capacity that is free and nobody waits for, and gives
/// it back when a token within its share finds none free
/// ([`Fair::reclaim_for`]). The capacity itself is its caller's.
pub struct Fair {
    /// What one token is guaranteed; `None`: no per-token bound.
    share: Option<usize>,
    /// Each token's guaranteed share.
    gates: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
    /// Loans out now, oldest first.
    loans: Mutex<Vec<LoanEntry>>,
    /// Numbers loans.
    next: AtomicU64,
    /// Wakes tokens waiting past their share when capacity comes back.
    freed: Notify,
}

/// Why [`Fair::part`] gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairError {
    /// The token's share stayed taken by its own work for the whole wait,
    /// and nothing was free to borrow.
    Timeout,
    /// Shutting down.
    Closed,
}

/// A token's part of the capacity: a permit of its share, or a loan past
/// it (given back when dropped), or nothing to hold (no per-token bound).
#[derive(Default)]
pub struct Part {
    _permit: Option<OwnedSemaphorePermit>,
    loan: Option<Loan>,
}

impl Part {
    /// Whether this is within the token's share (not a loan).
    pub fn guaranteed(&self) -> bool {
        self.loan.is_none()
    }
}

/// A loan out: forgotten when dropped (the capacity came back).
struct Loan {
    fair: Arc<Fair>,
    id: u64,
}

impl Drop for Loan {
    fn drop(&mut self) {
        let mut loans = self.fair.loans.lock().unwrap_or_else(|p| p.into_inner());
        loans.retain(|l| l.id != self.id);
    }
}

impl std::fmt::Debug for Fair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let loans = self.loans.lock().map(|l| l.len()).unwrap_or_default();
        f.debug_struct("Fair")
            .field("share", &self.share)
            .field("loans", &loans)
            .finish()
    }
}

impl Fair {
    /// Shares of `share` per token (`None`: unbounded).
    pub fn new(share: Option<usize>) -> Arc<Self> {
        Arc::new(Fair {
            share,
            gates: Default::default(),
            loans: Default::default(),
            next: Default::default(),
            freed: Notify::new(),
        })
    }

    /// What one token is guaranteed (`None`: no per-token bound).
    pub fn share(&self) -> Option<usize> {
        self.share
    }

    /// The semaphore of `owner`'s share, if shares are bounded.
    fn gate(&self, owner: &Arc<str>) -> Option<Arc<Semaphore>> {
        let share = self.share?;
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        forget_idle_gates(&mut gates);
        Some(
            gates
                .entry(owner.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(share)))
                .clone(),
        )
    }

    /// Waits at most `wait` for `owner`'s part: a permit of its share, or,
    /// past it, a loan as soon as `free()` says capacity is free and nobody
    /// waits for it, if the job can give a loan back (`reclaim`; work that
    /// cannot, and anonymous work, only waits for its share).
    pub async fn part(
        self: &Arc<Self>,
        owner: Option<&Arc<str>>,
        reclaim: Option<&Reclaim>,
        wait: Duration,
        free: impl Fn() -> bool,
    ) -> Result<Part, FairError> {
        let Some((owner, gate)) = owner.and_then(|o| Some((o, self.gate(o)?))) else {
            return Ok(Part::default());
        };
        let give_up = tokio::time::sleep(wait);
        tokio::pin!(give_up);
        loop {
            // Registered before looking, so a release in between wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match gate.clone().try_acquire_owned() {
                Ok(p) => {
                    return Ok(Part {
                        _permit: Some(p),
                        loan: None,
                    })
                }
                Err(tokio::sync::TryAcquireError::Closed) => return Err(FairError::Closed),
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            if let Some(reclaim) = reclaim.filter(|_| free()) {
                return Ok(Part {
                    _permit: None,
                    loan: Some(self.lend(owner, reclaim)),
                });
            }
            tokio::select! {
                p = gate.clone().acquire_owned() => {
                    return p
                        .map(|p| Part { _permit: Some(p), loan: None })
                        .map_err(|_| FairError::Closed);
                }
                _ = freed => {}
                _ = &mut give_up => return Err(FairError::Timeout),
            }
        }
    }

    fn lend(self: &Arc<Self>, owner: &Arc<str>, reclaim: &Reclaim) -> Loan {
        metrics::counter!("duckgate_share_loans_total").increment(1);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.loans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LoanEntry {
                id,
                owner: owner.clone(),
                reclaim: reclaim.clone(),
            });
        Loan {
            fair: self.clone(),
            id,
        }
    }

    /// `owner`, within its share, found no capacity free: takes back the
    /// youngest loan of another token whose answer has not begun. Whether
    /// one was taken back (its capacity comes back once its query stops).
    pub fn reclaim_for(&self, owner: &Arc<str>) -> bool {
        let loans = self.loans.lock().unwrap_or_else(|p| p.into_inner());
        let taken = loans
            .iter()
            .rev()
            .filter(|l| l.owner != *owner)
            .any(|l| l.reclaim.take_back());
        if taken {
            metrics::counter!("duckgate_share_reclaims_total").increment(1);
        }
        taken
    }

    /// Capacity came back: tokens waiting past their share look again.
    pub fn freed(&self) {
        self.freed.notify_waiters();
    }
}

/// Past this many owners' gates, the idle ones are forgotten.
const GATES_KEPT: usize = 1024;

/// Forgets the gates no one holds or waits for, once there are more than
/// [`GATES_KEPT`]: OIDC identities are not a fixed list, and each one that
/// ever queried would otherwise keep a gate for the life of the process.
/// A gate only the map holds has all its permits (every permit and waiter
/// holds a clone), so it is the same as a new one.
pub(crate) fn forget_idle_gates(gates: &mut HashMap<Arc<str>, Arc<Semaphore>>) {
    if gates.len() > GATES_KEPT {
        gates.retain(|_, gate| Arc::strong_count(gate) > 1);
    }
}

/// How the pool is shared, as configured: known before the pool exists
/// (no setting after construction).
#[derive(Debug, Clone, Default)]
pub struct Shares {
    /// `DUCKGATE_MAX_QUERIES_PER_TOKEN`.
    pub per_token: Option<usize>,
    /// How many query tokens there are (a fair share needs two).
    pub tokens: usize,
    /// `DUCKGATE_MAX_S3_QUERIES`.
    pub s3: Option<usize>,
    /// Operator-declared catalogs (lakes): their tables are read from S3.
    pub lakes: Vec<String>,
}

impl Shares {
    /// How many queries one token is guaranteed at once in a pool of
    /// `size` (past it, it borrows what nobody else waits for, see
    /// [`Fair`]): the setting, else with two or more tokens a fair share
    /// (the size over the tokens, rounded up), never the whole pool, at
    /// least one; with fewer tokens, no bound.
    pub fn per_token_of(&self, size: usize) -> Option<usize> {
        match self.per_token {
            Some(n) => Some(n.clamp(1, size)),
            None if self.tokens >= 2 => Some(
                size.div_ceil(self.tokens)
                    .min(size.saturating_sub(1))
                    .max(1),
            ),
            None => None,
        }
    }

    /// How many queries that read S3 may hold connections of a pool of
    /// `size` at once: the setting (at most the pool), else all but one
    /// connection, so a slow or stalled S3 never takes the connection
    /// local work needs (a pool of one has nothing to spare).
    pub fn s3_of(&self, size: usize) -> usize {
        self.s3.unwrap_or(size.saturating_sub(1)).clamp(1, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_gates_are_forgotten_past_the_bound() {
        let mut gates = HashMap::new();
        for i in 0..=GATES_KEPT {
            gates.insert(
                Arc::<str>::from(format!("oidc:{i}")),
                Arc::new(Semaphore::new(1)),
            );
        }
        // A gate someone holds (a permit, or a waiter) stays.
        let held = gates.get("oidc:7").cloned().unwrap();
        forget_idle_gates(&mut gates);
        assert_eq!(gates.len(), 1);
        assert!(Arc::ptr_eq(&gates["oidc:7"], &held));
        // Below the bound nothing is scanned or dropped.
        gates.insert(Arc::from("oidc:x"), Arc::new(Semaphore::new(1)));
        forget_idle_gates(&mut gates);
        assert_eq!(gates.len(), 2);
    }
}
