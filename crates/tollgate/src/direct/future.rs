//! The futures of the direct and keyed limiters: [`Check`] (one store
//! call) and [`UntilReady`] (checks and sleeps until a call is admitted).

use crate::Policy;
use crate::key::Key;
use crate::store::Watched;
use crate::store::{PolicyDecision, Store, StoreReply};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::Sleep;
use tollgate_core::{Decision, DecisionFields};

pin_project! {
    /// The answer of [`check`](super::KeyedLimiter::check),
    /// [`check_n`](super::KeyedLimiter::check_n) or [`peek`](super::KeyedLimiter::peek):
    /// ready at once from the memory store, after a round trip from Redis.
    #[must_use = "a check does nothing unless awaited"]
    pub struct Check<F, E> {
        #[pin]
        state: CheckState<F, E>,
        // A peek (`Store::peek`, a call of cost 0), read as one of cost 1.
        peek: bool,
    }
}

pin_project! {
    #[project = CheckStateProj]
    enum CheckState<F, E> {
        Ready { result: Option<Result<PolicyDecision, E>> },
        Pending { #[pin] future: F },
    }
}

impl<F, E> Check<F, E> {
    pub(crate) fn new(reply: StoreReply<F, E>, peek: bool) -> Self {
        let state = match reply {
            StoreReply::Ready(result) => CheckState::Ready {
                result: Some(result),
            },
            StoreReply::Pending(future) => CheckState::Pending { future },
        };
        Check { state, peek }
    }
}

impl<F, E> Future for Check<F, E>
where
    F: Future<Output = Result<PolicyDecision, E>>,
{
    type Output = Result<Decision, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = match this.state.project() {
            // Polled again after it finished: a caller's mistake, answered
            // as a refusal that never passes rather than a panic.
            CheckStateProj::Ready { result } => result.take().unwrap_or_else(|| {
                Ok(PolicyDecision::single(Decision::from(DecisionFields {
                    retry_after_nanos: Decision::NEVER_NANOS,
                    ..DecisionFields::default()
                })))
            }),
            CheckStateProj::Pending { future } => ready!(future.poll(cx)),
        };
        let peek = *this.peek;
        Poll::Ready(result.map(|verdict| {
            if peek {
                peeked(verdict.merged())
            } else {
                verdict.merged()
            }
        }))
    }
}

/// The decision of a call of cost 0 read as the answer to one of cost 1:
/// allowed iff a unit remains, and if not, retry when the next one is back.
pub(crate) fn peeked(decision: Decision) -> Decision {
    let fields = decision.fields();
    let allowed = fields.remaining >= 1;
    DecisionFields {
        allowed,
        retry_after_nanos: if allowed {
            0
        } else {
            fields.replenish_after_nanos
        },
        wait_nanos: 0,
        ..fields
    }
    .into()
}

pin_project! {
    /// Waits until a call is admitted, then charges it: the future of
    /// [`until_ready`](super::KeyedLimiter::until_ready) and
    /// [`until_n_ready`](super::KeyedLimiter::until_n_ready). A refused check
    /// sleeps until the limit says a retry can pass, then checks again;
    /// an admitted one that must be held (the leaky bucket) sleeps out the
    /// hold. Dropping it before it resolves stops waiting: a check under
    /// way is heard out and its admission given back
    /// ([`Watched`](crate::store::Watched)); a call already admitted and
    /// held (the leaky bucket's wait) stays charged.
    #[must_use = "waiting does nothing unless awaited"]
    pub struct UntilReady<St: Store> {
        store: St,
        policy: Arc<Policy>,
        key: Key,
        cost: u32,
        #[pin]
        state: WaitState<Watched<St>, St::Error>,
    }
}

pin_project! {
    #[project = WaitStateProj]
    enum WaitState<F, E> {
        Checking { #[pin] check: Check<F, E> },
        // `admitted`: the call was charged and this sleep is its hold; the
        // decision is what to resolve to once it is over.
        Sleeping { #[pin] sleep: Sleep, admitted: Option<Decision> },
    }
}

impl<St: Store> UntilReady<St> {
    pub(crate) fn new(store: St, policy: Arc<Policy>, key: Key, cost: u32) -> Self {
        let reply = store.check(&policy, &key, cost);
        let check = Check::new(reply.watched(&store, &policy, &key, cost), false);
        UntilReady {
            store,
            policy,
            key,
            cost,
            state: WaitState::Checking { check },
        }
    }
}

impl<St: Store> Future for UntilReady<St> {
    type Output = Result<Decision, UntilReadyError<St::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                WaitStateProj::Checking { check } => {
                    let decision = ready!(check.poll(cx)).map_err(UntilReadyError::Store)?;
                    if decision.allowed() {
                        if decision.wait().is_zero() {
                            return Poll::Ready(Ok(decision));
                        }
                        WaitState::Sleeping {
                            sleep: tokio::time::sleep(decision.wait()),
                            admitted: Some(decision),
                        }
                    } else if decision.can_ever_pass() {
                        WaitState::Sleeping {
                            sleep: tokio::time::sleep(decision.retry_after()),
                            admitted: None,
                        }
                    } else {
                        return Poll::Ready(Err(UntilReadyError::NeverAdmitted {
                            cost: *this.cost,
                        }));
                    }
                }
                WaitStateProj::Sleeping { sleep, admitted } => {
                    ready!(sleep.poll(cx));
                    if let Some(decision) = admitted.take() {
                        return Poll::Ready(Ok(decision));
                    }
                    let reply = this.store.check(this.policy, this.key, *this.cost);
                    let reply = reply.watched(this.store, this.policy, this.key, *this.cost);
                    WaitState::Checking {
                        check: Check::new(reply, false),
                    }
                }
            };
            this.state.set(next);
        }
    }
}

/// Why [`until_ready`](super::KeyedLimiter::until_ready) gave up.
#[derive(Debug)]
#[non_exhaustive]
pub enum UntilReadyError<E> {
    /// The store failed (Redis unreachable, a timeout from
    /// [`store::Timeout`](crate::store::Timeout)).
    Store(E),
    /// A call of this cost is more than the limits can admit at once: it
    /// would wait forever.
    NeverAdmitted {
        /// The call's cost.
        cost: u32,
    },
    /// The store cannot do what the wait needs
    /// ([`KeyedLimiter::call`](super::KeyedLimiter::call): give charges
    /// back and charge into debt); it names the store and the operation.
    Unsupported(crate::store::MissingCapability),
}

impl<E: fmt::Display> fmt::Display for UntilReadyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UntilReadyError::Store(error) => write!(f, "the rate-limit store failed: {error}"),
            UntilReadyError::NeverAdmitted { cost } => write!(
                f,
                "a call of cost {cost} is more than the limit can ever admit at once: \
                 split it into smaller calls or raise the limit's burst"
            ),
            UntilReadyError::Unsupported(missing) => missing.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for UntilReadyError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UntilReadyError::Store(error) => Some(error),
            UntilReadyError::NeverAdmitted { .. } => None,
            // Its message is this error's own.
            UntilReadyError::Unsupported(_) => None,
        }
    }
}
