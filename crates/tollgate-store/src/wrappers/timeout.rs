//! [`Timeout`]: a store whose answers are awaited for a bounded time.

use crate::key::Key;
use crate::policy::Policy;
use crate::{PolicyDecision, Store, StoreReply, StoreWrapper, Watched};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// A store in front of `St` that gives up on an answer after `timeout`
/// with [`TimeoutError::Elapsed`], and asks `St` to charge nothing for a
/// decision it makes later ([`Store::check_within`]). A check it gave up
/// on is heard out, and an admission that comes late is given back
/// through `St` ([`Watched`](crate::Watched); see [`late`](crate::late)). Put it under a
/// [`Fallback`](crate::Fallback) to decide locally when the shared store
/// is slow; the layer's own `store_timeout` still bounds every check.
///
/// Answers that `St` gives at once pass through untouched. A store that
/// waits is timed with tokio's timer (a runtime with time enabled).
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::MemoryStore;
/// use tollgate_store::Timeout;
///
/// let store = Timeout::new(MemoryStore::new(), Duration::from_millis(20));
/// assert_eq!(store.timeout(), Duration::from_millis(20));
/// ```
#[derive(Clone, Debug)]
pub struct Timeout<St> {
    inner: St,
    timeout: Duration,
}

impl<St> Timeout<St> {
    /// `inner`, waited for `timeout` at most.
    pub fn new(inner: St, timeout: Duration) -> Self {
        Timeout { inner, timeout }
    }

    /// How long an answer is awaited.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store behind.
    pub fn get_ref(&self) -> &St {
        &self.inner
    }
}

/// Why a [`Timeout`] store gave no verdict.
#[derive(Debug)]
pub enum TimeoutError<E> {
    /// The store behind failed.
    Inner(E),
    /// The store behind did not answer in time.
    Elapsed(Duration),
}

impl<E: fmt::Display> fmt::Display for TimeoutError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeoutError::Inner(error) => error.fmt(f),
            TimeoutError::Elapsed(after) => write!(
                f,
                "the store did not answer within {after:?} (is it overloaded or unreachable?)"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for TimeoutError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimeoutError::Inner(error) => Some(error),
            TimeoutError::Elapsed(_) => None,
        }
    }
}

pin_project! {
    /// The future of a [`Timeout`] check: the store behind's check,
    /// [`Watched`] so that it is heard out once given up on.
    pub struct TimeoutFuture<St: Store> {
        inner: Watched<St>,
        #[pin]
        deadline: Sleep,
        after: Duration,
    }
}

impl<St: Store> fmt::Debug for TimeoutFuture<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutFuture")
            .field("inner", &self.inner)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl<St: Store> Future for TimeoutFuture<St> {
    type Output = Result<PolicyDecision, TimeoutError<St::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = Pin::new(&mut *this.inner).poll(cx) {
            return Poll::Ready(answer.map_err(TimeoutError::Inner));
        }
        match this.deadline.poll(cx) {
            Poll::Ready(()) => {
                this.inner.give_up();
                Poll::Ready(Err(TimeoutError::Elapsed(*this.after)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<St: Store> StoreWrapper for Timeout<St> {
    type Inner = St;
    type Error = TimeoutError<St::Error>;
    type Future = TimeoutFuture<St>;

    fn inner(&self) -> &St {
        &self.inner
    }

    /// The store behind's check, given up on after the timeout (or
    /// `within`, if shorter), which the store behind is told.
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        let after = within.min(self.timeout);
        let reply = self.inner.check_within(policy, key, cost, after);
        self.bound(reply, policy, key, cost, after)
    }

    /// A forwarded operation's answer (a peek), given up on after the
    /// timeout.
    fn relay(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        reply: StoreReply<St::Future, St::Error>,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.bound(reply, policy, key, 0, self.timeout)
    }

    // `refund` and `debit`: forwarded, unbounded here; the layer waits for
    // them at most its `store_timeout`, and they land on their own.

    /// The store behind's reset, given up on after the timeout (it may
    /// still complete: a reset that reached Redis is not undone).
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        bounded(self.inner.reset(policy, key), self.timeout)
    }

    /// The store behind's unblock, given up on after the timeout.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        bounded(self.inner.unblock(policy, key), self.timeout)
    }

    /// The store behind's plan change, given up on after the timeout (a
    /// store that is away does not hold it, or the plan's next lookup,
    /// forever; what reached the store before is not undone).
    fn carry(&self, from: &Arc<Policy>, to: &Arc<Policy>, key: &Key) -> crate::AdminFuture {
        bounded(self.inner.carry(from, to, key), self.timeout)
    }
}

impl<St: Store> Timeout<St> {
    /// `reply` (a check of `cost` for `key` under `policy`), waited for
    /// `after` at most.
    fn bound(
        &self,
        reply: StoreReply<St::Future, St::Error>,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        after: Duration,
    ) -> StoreReply<TimeoutFuture<St>, TimeoutError<St::Error>> {
        match reply.watched(&self.inner, policy, key, cost) {
            StoreReply::Ready(answer) => StoreReply::Ready(answer.map_err(TimeoutError::Inner)),
            StoreReply::Pending(inner) => StoreReply::Pending(TimeoutFuture {
                inner,
                deadline: tokio::time::sleep(after),
                after,
            }),
        }
    }
}

/// `call`, failed with [`TimeoutError::Elapsed`] if it is not done after
/// `after`.
fn bounded(call: crate::AdminFuture, after: Duration) -> crate::AdminFuture {
    crate::AdminFuture::new(async move {
        match tokio::time::timeout(after, call).await {
            Ok(done) => done,
            Err(_) => Err(crate::AdminError::store(TimeoutError::<
                std::convert::Infallible,
            >::Elapsed(after))),
        }
    })
}
