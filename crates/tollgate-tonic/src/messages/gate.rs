//! The part both bodies share: find each message in the chunks, check it
//! against the store, hold it or refuse it.

use super::framer::Framer;
use crate::rejection::limited_status;
use bytes::Bytes;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;
use tollgate::store::Watched;
use tollgate::{
    Key, OnStoreError, Policy, PolicyDecision, Store, StoreReply, headers::HeaderStyle,
};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

/// What the layer's calls share: the limits, the store and how to answer.
pub(crate) struct Limits<St> {
    pub store: St,
    pub policy: Arc<Policy>,
    pub store_timeout: Duration,
    pub on_store_error: OnStoreError,
    pub headers: HeaderStyle,
    /// In shadow: the log of the messages the limits would have refused
    /// (they pass); `None` when the limits are enforced.
    pub shadow: Option<tollgate::__private::ShadowLog>,
}

/// One call's account in one direction: the limits, and the key its
/// messages are counted under.
pub(crate) struct Tally<St> {
    limits: Arc<Limits<St>>,
    key: Key,
}

impl<St> Clone for Tally<St> {
    fn clone(&self) -> Self {
        Tally {
            limits: self.limits.clone(),
            key: self.key.clone(),
        }
    }
}

impl<St> fmt::Debug for Tally<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tally")
            .field("policy", &self.limits.policy.label())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// What a message gets.
enum Verdict {
    /// Forward it now.
    Pass,
    /// Forward it after this long (delay mode: it was charged already).
    Hold(Duration),
    /// End the stream with this status instead.
    Refuse(Box<Status>),
}

impl<St: Store> Tally<St> {
    pub(crate) fn new(limits: Arc<Limits<St>>, key: Key) -> Self {
        Tally { limits, key }
    }

    /// Asks the store about one message.
    fn check(&self) -> StoreReply<St::Future, St::Error> {
        let limits = &*self.limits;
        limits
            .store
            .check_within(&limits.policy, &self.key, 1, limits.store_timeout)
    }

    /// `check`, heard out if the gate stops waiting on it (its store
    /// timeout, the stream dropped): a late admission is given back.
    fn watch(&self, check: St::Future) -> Watched<St> {
        let limits = &*self.limits;
        Watched::new(check, limits.store.clone(), &limits.policy, &self.key, 1)
    }

    /// What a store's answer (or its failure) means for the message.
    fn judge(&self, answer: Result<PolicyDecision, Failure<St::Error>>) -> Verdict {
        let limits = &*self.limits;
        if answer.is_ok() {
            tollgate::store::report_answer(&limits.policy);
        }
        match answer {
            Ok(verdict) if verdict.merged().allowed() => match verdict.merged().wait() {
                // In shadow nothing is held either.
                wait if wait.is_zero() || limits.shadow.is_some() => Verdict::Pass,
                wait => Verdict::Hold(wait),
            },
            Ok(verdict) if limits.shadow.is_some() => {
                if let Some(log) = &limits.shadow {
                    log.refused(&limits.policy, &verdict);
                }
                Verdict::Pass
            }
            Ok(verdict) => {
                let metadata = MetadataMap::from_headers(tollgate::__private::fields_for(
                    limits.headers,
                    &limits.policy,
                    &verdict,
                    &self.key,
                ));
                Verdict::Refuse(Box::new(limited_status(
                    Code::ResourceExhausted,
                    "message rate limit exceeded",
                    &limits.policy,
                    &self.key,
                    &verdict,
                    metadata,
                )))
            }
            Err(failure) => {
                // As the layer logs it: once in a while, not per message.
                tollgate::store::report_failure(&limits.policy, &failure);
                match limits.on_store_error {
                    OnStoreError::Open => Verdict::Pass,
                    OnStoreError::Closed => {
                        Verdict::Refuse(Box::new(crate::rejection::store_failed_status(
                            "the rate limiter is unavailable; retry later",
                            failure.retry_after(),
                        )))
                    }
                }
            }
        }
    }
}

/// A store that failed, or did not answer in time.
enum Failure<E> {
    Store(E),
    Late(Duration),
}

impl<E: std::error::Error + 'static> Failure<E> {
    /// How long a client refused for it is told to wait.
    fn retry_after(&self) -> Duration {
        match self {
            Failure::Store(error) => tollgate::store::retry_after(error),
            Failure::Late(_) => None,
        }
        // Zero while the breaker's probe is out: its answer is not known.
        .filter(|wait| !wait.is_zero())
        .unwrap_or(tollgate::STORE_FAILED_RETRY_AFTER)
    }
}

impl<E: fmt::Display> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Store(error) => error.fmt(f),
            Failure::Late(timeout) => write!(f, "no answer within {timeout:?}"),
        }
    }
}

/// What the gate has for its body next.
pub(crate) enum Step {
    /// These bytes, to forward.
    Forward(Bytes),
    /// Nothing until the next chunk of the inner body
    /// ([`Gate::push`]).
    NeedData,
    /// The message at the start of what is left was refused: end the body
    /// with this status. Everything before it has been forwarded.
    Refused(Box<Status>),
}

pin_project! {
    /// Finds the messages in a body's chunks and lets each through when
    /// its limits say so. Without a tally, passes every chunk as it is.
    pub(crate) struct Gate<St: Store> {
        tally: Option<Tally<St>>,
        framer: Framer,
        // The bytes of the current chunk not forwarded yet...
        chunk: Bytes,
        // ...of which the framer has read this many.
        read: usize,
        refused: Option<Box<Status>>,
        #[pin]
        wait: Wait<Watched<St>>,
    }
}

pin_project! {
    #[project = WaitProj]
    enum Wait<F> {
        // Nothing to wait for.
        Idle,
        // The store's answer about the message just read, under the
        // store timeout.
        Checking { #[pin] check: F, #[pin] deadline: Sleep },
        // Delay mode: the message just read was charged and is held.
        Holding { #[pin] hold: Sleep },
    }
}

impl<St: Store> Gate<St> {
    pub(crate) fn new(tally: Option<Tally<St>>) -> Self {
        Gate {
            tally,
            framer: Framer::default(),
            chunk: Bytes::new(),
            read: 0,
            refused: None,
            wait: Wait::Idle,
        }
    }

    /// Whether the gate counts anything.
    pub(crate) fn counts(&self) -> bool {
        self.tally.is_some()
    }

    /// Whether the gate holds nothing: no bytes, no wait, no refusal.
    pub(crate) fn is_empty(&self) -> bool {
        self.chunk.is_empty() && self.refused.is_none() && matches!(self.wait, Wait::Idle)
    }

    /// The next chunk of the inner body; only after [`Step::NeedData`].
    pub(crate) fn push(self: Pin<&mut Self>, data: Bytes) {
        let this = self.project();
        debug_assert!(this.chunk.is_empty());
        *this.chunk = data;
        *this.read = 0;
    }

    /// The next step: bytes to forward (up to the next message that must
    /// wait or is refused), a refusal, or a request for more data.
    pub(crate) fn poll_step(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Step> {
        let mut this = self.project();
        loop {
            // The message just read: its answer, then its hold.
            match this.wait.as_mut().project() {
                WaitProj::Idle => {}
                WaitProj::Checking { check, deadline } => {
                    let answer = match check.poll(cx) {
                        Poll::Ready(answer) => answer.map_err(Failure::Store),
                        Poll::Pending => {
                            ready!(deadline.poll(cx));
                            let timeout = this.tally.as_ref().map(|t| t.limits.store_timeout);
                            Err(Failure::Late(timeout.unwrap_or_default()))
                        }
                    };
                    let verdict = match this.tally.as_ref() {
                        Some(tally) => tally.judge(answer),
                        None => Verdict::Pass,
                    };
                    this.wait.set(Wait::Idle);
                    settle(
                        verdict,
                        this.wait.as_mut(),
                        this.chunk,
                        this.read,
                        this.refused,
                    );
                    continue;
                }
                WaitProj::Holding { hold } => {
                    ready!(hold.poll(cx));
                    this.wait.set(Wait::Idle);
                }
            }
            if let Some(status) = this.refused.take() {
                if !this.chunk.is_empty() {
                    *this.refused = Some(status);
                    *this.read = 0;
                    return Poll::Ready(Step::Forward(std::mem::take(this.chunk)));
                }
                return Poll::Ready(Step::Refused(status));
            }
            if this.chunk.is_empty() {
                return Poll::Ready(Step::NeedData);
            }
            let Some(tally) = this.tally.as_ref() else {
                return Poll::Ready(Step::Forward(std::mem::take(this.chunk)));
            };
            // Read on to the next message that cannot go at once.
            while *this.read < this.chunk.len() {
                let fed = this.framer.feed(&this.chunk[*this.read..]);
                *this.read += fed.read;
                if !fed.message {
                    continue;
                }
                let verdict = match tally.check() {
                    StoreReply::Ready(answer) => tally.judge(answer.map_err(Failure::Store)),
                    StoreReply::Pending(check) => {
                        let deadline = tokio::time::sleep(tally.limits.store_timeout);
                        let check = tally.watch(check);
                        this.wait.set(Wait::Checking { check, deadline });
                        // Forward what came before the message; the
                        // message waits for the store.
                        break;
                    }
                };
                if matches!(verdict, Verdict::Pass) {
                    continue;
                }
                settle(
                    verdict,
                    this.wait.as_mut(),
                    this.chunk,
                    this.read,
                    this.refused,
                );
                break;
            }
            if matches!(this.wait.as_ref().get_ref(), Wait::Idle) && this.refused.is_none() {
                // Every message read so far may go.
                *this.read = 0;
                return Poll::Ready(Step::Forward(std::mem::take(this.chunk)));
            }
            // A message waits or is refused: forward the bytes before it
            // (its flag byte is the last one read).
            let before = this.read.saturating_sub(1);
            if before > 0 && this.refused.is_none() {
                *this.read -= before;
                return Poll::Ready(Step::Forward(this.chunk.split_to(before)));
            }
        }
    }
}

/// Carries out a verdict on the message whose flag byte is the last byte
/// read of `chunk`.
fn settle<F>(
    verdict: Verdict,
    mut wait: Pin<&mut Wait<F>>,
    chunk: &mut Bytes,
    read: &mut usize,
    refused: &mut Option<Box<Status>>,
) {
    match verdict {
        Verdict::Pass => {}
        Verdict::Hold(hold) => wait.set(Wait::Holding {
            hold: tokio::time::sleep(hold),
        }),
        Verdict::Refuse(status) => {
            // The message and everything after it are never forwarded.
            chunk.truncate(read.saturating_sub(1));
            *read = chunk.len();
            *refused = Some(status);
        }
    }
}
