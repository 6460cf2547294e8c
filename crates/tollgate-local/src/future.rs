//! [`LocalFuture`]: what a [`LocalFirst`](crate::LocalFirst) store's check
//! returns when it cannot answer at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tollgate_store::PolicyDecision;

/// A boxed decision: a request waiting for a reservation or a reading, or
/// a call made for it.
type Boxed<E> = Pin<Box<dyn Future<Output = Result<PolicyDecision, E>> + Send>>;

/// The answer of a [`LocalFirst`](crate::LocalFirst) store that is not
/// ready at once: the shared store's own check (a policy or a peek it
/// decides directly), or a request waiting here for the call in flight.
///
/// Both are boxed, so that the store's reply stays two words and a tag
/// whatever the shared store's future: a reply is moved on every request,
/// and most are ready at once (a compare-and-swap store's future, a
/// state machine over its backend's read and write, is hundreds of bytes:
/// unboxed, every local decision copied it).
pub struct LocalFuture<F, E> {
    kind: Kind<F, E>,
}

enum Kind<F, E> {
    Store { future: Pin<Box<F>> },
    Waiting { future: Boxed<E> },
}

impl<F, E> LocalFuture<F, E> {
    /// The shared store's own check.
    pub(crate) fn store(future: F) -> Self {
        LocalFuture {
            kind: Kind::Store {
                future: Box::pin(future),
            },
        }
    }

    /// Anything else this store waits for.
    pub(crate) fn boxed(
        future: impl Future<Output = Result<PolicyDecision, E>> + Send + 'static,
    ) -> Self {
        LocalFuture {
            kind: Kind::Waiting {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, E> Future for LocalFuture<F, E>
where
    F: Future<Output = Result<PolicyDecision, E>>,
{
    type Output = Result<PolicyDecision, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Both kinds are boxed: the future itself is `Unpin`.
        match &mut self.get_mut().kind {
            Kind::Store { future } => future.as_mut().poll(cx),
            Kind::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, E> fmt::Debug for LocalFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalFuture").finish_non_exhaustive()
    }
}
