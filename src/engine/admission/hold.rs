//! How long a permit is held, on average, and the wait it predicts: what
//! sheds a request at once instead of after its whole timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use super::Fair;
use crate::state::Health;

/// The recent mean time a permit is held: an exponentially weighted moving
/// average (weight 1/8 per sample, as TCP smooths round-trip times), in
/// microseconds; 0 until the first permit comes back.
#[derive(Default)]
pub struct HoldTime(AtomicU64);

impl HoldTime {
    /// Folds one hold time into the mean.
    pub(super) fn record(&self, held: Duration, health: &Health) {
        let sample = (held.as_micros() as u64).max(1);
        let before = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(Self::fold(mean, sample))
            })
            .unwrap_or_default();
        // Published for the readiness probe (which reads atomics only).
        health
            .pool
            .hold_mean_us
            .store(Self::fold(before, sample), Ordering::Relaxed);
    }

    /// mean + (sample - mean) / 8, in integers; the first sample as it is.
    fn fold(mean: u64, sample: u64) -> u64 {
        if mean == 0 {
            sample
        } else {
            (mean * 7 + sample) / 8
        }
    }

    /// The mean, or `None` before any permit came back.
    pub(super) fn mean(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// A pool permit that records how long it was held when it goes back.
pub(crate) struct Held {
    pub(super) _permit: Option<OwnedSemaphorePermit>,
    pub(super) since: Instant,
    pub(super) hold: Arc<HoldTime>,
    pub(super) health: Arc<Health>,
    /// Told when the permit is back (tokens past their share may borrow it).
    pub(super) fair: Arc<Fair>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.hold.record(self.since.elapsed(), &self.health);
        self.health.pool.last_release_ms.store(
            self.health.started.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        drop(self._permit.take());
        self.fair.freed();
    }
}

/// The wait a request can expect for a permit with `ahead` requests queued
/// in front of it, permits held `mean` on average, and `size` of them: the
/// pool serves `size` requests every `mean`.
pub fn expected_wait(ahead: u64, mean: Duration, size: usize) -> Duration {
    mean.saturating_mul((ahead + 1).min(u32::MAX as u64) as u32) / (size.max(1) as u32)
}
