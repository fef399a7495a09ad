//! A connection's task polled again at once when it wakes itself.
//!
//! hyper's dispatcher polls the handler inside its own poll. Handing a
//! request body's bytes to the handler, and the handler taking them, wake
//! the dispatcher's task while that task runs. tokio reschedules a task
//! woken during its own poll as a yield: to the back of the worker's queue,
//! with a wake-up for an idle worker to come and steal it. On a short
//! `POST /query` that other worker wakes, finds nothing (or takes the
//! connection away from the warm one) and parks again; measured, it was a
//! fifth of the request's CPU.
//!
//! [`Repoll`] gives the inner future a waker of its own. A wake that
//! arrives while the inner future is being polled is kept here and the
//! inner future is polled again before this poll returns, a few times at
//! most ([`MAX_REPOLLS`]): a task that keeps waking itself (a spent
//! cooperative budget, hyper's own yield after 16 pipelined requests) still
//! yields to the runtime. A wake at any other time goes to the runtime's
//! waker, as it would without this.
//!
//! Each poll of the inner future is a [`crate::telemetry::turn`]: the log
//! lines a request leaves for after its answer are emitted once the poll
//! that wrote the answer ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls of the inner future within one poll of the task, at most.
pub const MAX_REPOLLS: usize = 4;

#[derive(Default)]
struct Shared {
    /// The inner future is being polled now.
    polling: AtomicBool,
    /// A wake arrived since the inner poll began.
    woken: AtomicBool,
    /// The runtime's waker of the task.
    outer: AtomicWaker,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, SeqCst);
        // During the inner poll the poller sees `woken` and polls again.
        // After it (in the total order of these SeqCst operations) this
        // reads `false` and the runtime hears of it.
        if !self.polling.load(SeqCst) {
            self.outer.wake();
        }
    }
}

/// `inner`, polled again at once when it wakes itself (see the module).
pub struct Repoll<F> {
    inner: Pin<Box<F>>,
    shared: Arc<Shared>,
    waker: Waker,
}

impl<F: Future> Repoll<F> {
    /// Wraps `inner`.
    pub fn new(inner: F) -> Self {
        let shared = Arc::new(Shared::default());
        Self {
            inner: Box::pin(inner),
            waker: Waker::from(shared.clone()),
            shared,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.shared.outer.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_REPOLLS {
            this.shared.woken.store(false, SeqCst);
            this.shared.polling.store(true, SeqCst);
            let polled = crate::telemetry::turn(|| this.inner.as_mut().poll(&mut inner_cx));
            this.shared.polling.store(false, SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.shared.woken.swap(false, SeqCst) {
                return Poll::Pending;
            }
        }
        // It kept waking itself: a turn of the runtime, as tokio gives it.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts how often the runtime's waker is woken.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    /// A future that wakes itself `n` times during its polls, then ends,
    /// counting its polls.
    struct SelfWaking {
        left: usize,
        polls: Arc<AtomicUsize>,
    }
    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, SeqCst);
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn poll_once<F: Future>(f: Pin<&mut Repoll<F>>, count: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(count.clone());
        f.poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_wake_during_the_poll_polls_again_without_the_runtime() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = Box::pin(Repoll::new(SelfWaking {
            left: 2,
            polls: polls.clone(),
        }));
        assert!(poll_once(f.as_mut(), &count).is_ready());
        assert_eq!(polls.load(SeqCst), 3);
        assert_eq!(count.0.load(SeqCst), 0, "the runtime was not woken");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = Box::pin(Repoll::new(SelfWaking {
            left: usize::MAX,
            polls: polls.clone(),
        }));
        assert!(poll_once(f.as_mut(), &count).is_pending());
        assert_eq!(polls.load(SeqCst), MAX_REPOLLS);
        assert_eq!(count.0.load(SeqCst), 1, "one turn of the runtime");
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_runtime() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let slot: Arc<std::sync::Mutex<Option<Waker>>> = Default::default();
        let kept = slot.clone();
        let mut f = Box::pin(Repoll::new(futures::future::poll_fn(move |cx| {
            *kept.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })));
        assert!(poll_once(f.as_mut(), &count).is_pending());
        assert_eq!(count.0.load(SeqCst), 0);
        let waker = slot.lock().unwrap().take().unwrap();
        std::thread::spawn(move || waker.wake()).join().unwrap();
        assert_eq!(count.0.load(SeqCst), 1);
    }
}
