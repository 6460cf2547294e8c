//! What an operator's handle on a store answers: [`AdminFuture`], the
//! future of [`Store::reset`](super::Store::reset) and
//! [`Store::unblock`](super::Store::unblock), and [`AdminError`].
//!
//! Why a boxed future rather than an associated type: the trait's
//! defaults must name a type, and an associated type cannot have a
//! default on stable Rust; an operator's call is rare (an admin route, a
//! support tool), so one allocation per call costs nothing that matters,
//! while a new associated type would be one more thing every store, and
//! every wrapper's signature, has to spell out. A check stays unboxed.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Why an operator's call on a store failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AdminError {
    /// The store does not offer this operation (a store of your own that
    /// keeps the trait's default `reset`).
    Unsupported {
        /// The operation asked for: `"reset"`.
        operation: &'static str,
    },
    /// The store failed (Redis away, a timeout).
    Store(Box<dyn std::error::Error + Send + Sync>),
}

impl AdminError {
    /// A store's failure.
    pub fn store(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        AdminError::Store(Box::new(error))
    }
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Unsupported { operation } => {
                write!(f, "this store does not support `{operation}`")
            }
            AdminError::Store(error) => write!(f, "the store failed: {error}"),
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdminError::Unsupported { .. } => None,
            AdminError::Store(error) => Some(&**error),
        }
    }
}

/// The future of an operator's call ([`Store::reset`](super::Store::reset),
/// [`Store::unblock`](super::Store::unblock)): ready at once from the
/// memory store, after a round trip from Redis. `Send` and `'static`, so
/// an axum handler can `await` it.
#[must_use = "an operator's call may do nothing unless awaited"]
pub struct AdminFuture(Pin<Box<dyn Future<Output = Result<(), AdminError>> + Send>>);

impl AdminFuture {
    /// A call done already, with `result`.
    pub fn ready(result: Result<(), AdminError>) -> Self {
        AdminFuture(Box::pin(std::future::ready(result)))
    }

    /// A call that completes with `future`.
    pub fn new(future: impl Future<Output = Result<(), AdminError>> + Send + 'static) -> Self {
        AdminFuture(Box::pin(future))
    }

    /// Both calls, one after the other; the first error, but the second
    /// runs even when the first failed (a reset of two stores should reach
    /// both).
    pub fn and(self, then: AdminFuture) -> Self {
        AdminFuture::new(async move {
            let first = self.await;
            let second = then.await;
            first.and(second)
        })
    }
}

impl Future for AdminFuture {
    type Output = Result<(), AdminError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for AdminFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminFuture")
    }
}
