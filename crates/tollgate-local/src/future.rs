//! [`LocalFuture`]: what a [`LocalFirst`](crate::LocalFirst) store's check
//! returns when it cannot answer at once.

use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tollgate::PolicyDecision;

/// A boxed decision: a request waiting for a reservation or a reading, or
/// a call made for it.
type Boxed<E> = Pin<Box<dyn Future<Output = Result<PolicyDecision, E>> + Send>>;

pin_project! {
    /// The answer of a [`LocalFirst`](crate::LocalFirst) store that is not
    /// ready at once: the shared store's own check (a policy or a peek it
    /// decides directly, without a second box), or a request waiting here
    /// for the call in flight.
    #[project = LocalFutureProj]
    pub struct LocalFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        Store { #[pin] future: F },
        Waiting { future: Boxed<E> },
    }
}

impl<F, E> LocalFuture<F, E> {
    /// The shared store's own check.
    pub(crate) fn store(future: F) -> Self {
        LocalFuture {
            kind: Kind::Store { future },
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
        match self.project().kind.project() {
            KindProj::Store { future } => future.poll(cx),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, E> fmt::Debug for LocalFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalFuture").finish_non_exhaustive()
    }
}
