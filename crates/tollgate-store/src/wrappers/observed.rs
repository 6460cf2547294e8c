//! [`Observed`]: the pending answer of the store behind a wrapper, handed
//! to the wrapper's [`Observer`] when it comes: one future for every
//! wrapper that decides here or asks, then learns from the answer (the
//! block cache learns a refusal, the penalty box counts an offence, the
//! breaker settles its circuit).

use crate::PolicyDecision;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// What a wrapper does with the answer of the store behind it, when it
/// comes. An observer dropped unused (the future was dropped first) does
/// what its own `Drop` says.
pub(crate) trait Observer<E> {
    /// The wrapper's error.
    type Error;

    /// Learns from `answer`, and gives the wrapper's.
    fn observe(self, answer: Result<PolicyDecision, E>) -> Result<PolicyDecision, Self::Error>;

    /// The wrapper's error for an answer no observer looks at (a
    /// forwarded operation's, such as a peek).
    fn pass(error: E) -> Self::Error;
}

pin_project! {
    /// The store behind's future `F`, its answer given to the observer `O`
    /// (none: passed on as it is).
    #[derive(Debug)]
    pub(crate) struct Observed<F, O> {
        #[pin]
        inner: F,
        observer: Option<O>,
    }
}

impl<F, O> Observed<F, O> {
    /// `inner`, its answer given to `observer`.
    pub(crate) fn new(inner: F, observer: O) -> Self {
        Observed {
            inner,
            observer: Some(observer),
        }
    }

    /// `inner`, its answer passed on as it is.
    pub(crate) fn unobserved(inner: F) -> Self {
        Observed {
            inner,
            observer: None,
        }
    }
}

impl<F, O, E> Future for Observed<F, O>
where
    F: Future<Output = Result<PolicyDecision, E>>,
    O: Observer<E>,
{
    type Output = Result<PolicyDecision, O::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = ready!(this.inner.poll(cx));
        Poll::Ready(match this.observer.take() {
            Some(observer) => observer.observe(answer),
            None => answer.map_err(O::pass),
        })
    }
}
