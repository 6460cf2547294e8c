//! [`CasFuture`]: one call of a compare-and-swap store, as a state
//! machine — read, decide, write if the version is unchanged; after a
//! lost race, a pause and again.

use super::error::CasError;
use super::shared::Shared;
use super::step::{self, Op, Step};
use super::{CasBackend, Snapshot, Swap};
use crate::Policy;
use crate::store::PolicyDecision;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::time::Sleep;

pin_project! {
    /// The future of a [`CasStore`](super::CasStore) call: reads the
    /// key's value, decides, writes the new states if the value's version
    /// is still the one read; after a lost race, pauses (see
    /// [`CasStoreBuilder::backoff`](super::CasStoreBuilder::backoff)) and
    /// does it again, at most
    /// [`max_attempts`](super::CasStoreBuilder::max_attempts) writes in
    /// all. No allocation of its own beyond the backend's futures; it
    /// pauses on tokio's timer.
    #[must_use = "futures do nothing unless polled"]
    pub struct CasFuture<B: CasBackend> {
        shared: Arc<Shared<B>>,
        policy: Arc<Policy>,
        name: Arc<str>,
        op: Op,
        // For a late check: how long its caller waits, from `started`.
        within: Option<Duration>,
        started: Instant,
        // Races lost so far.
        lost: u32,
        #[pin]
        phase: Phase<B::Read, B::Write>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<R, W> {
        Reading { #[pin] read: R },
        Writing { #[pin] write: W, answer: PolicyDecision },
        Pausing { #[pin] pause: Sleep },
        Done,
    }
}

impl<B: CasBackend> CasFuture<B> {
    /// `op` on the value `name` of a key of `policy`; a check whose caller
    /// waits only `within` writes nothing after that.
    pub(super) fn start(
        shared: Arc<Shared<B>>,
        policy: Arc<Policy>,
        name: Arc<str>,
        op: Op,
        within: Option<Duration>,
    ) -> Self {
        let read = shared.backend.read(&name);
        CasFuture {
            shared,
            policy,
            name,
            op,
            within,
            started: Instant::now(),
            lost: 0,
            phase: Phase::Reading { read },
        }
    }
}

impl<B: CasBackend> Future for CasFuture<B> {
    type Output = Result<PolicyDecision, CasError<B::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase.as_mut().project() {
                PhaseProj::Reading { read } => {
                    let snapshot = match ready!(read.poll(cx)) {
                        Ok(snapshot) => snapshot,
                        Err(error) => {
                            this.phase.set(Phase::Done);
                            return Poll::Ready(Err(CasError::Backend(error)));
                        }
                    };
                    let next = match step::decide(this.policy, this.name, this.op, &snapshot) {
                        Ok(Step::Answer(answer)) => Err(Ok(answer)),
                        Ok(Step::Write {
                            bytes,
                            expires_at,
                            answer,
                        }) => match deadline(*this.within, *this.started, &snapshot) {
                            Ok(deadline) => {
                                let expected = snapshot.value.as_ref().map(|value| value.version);
                                let swap = Swap {
                                    bytes,
                                    version: this.shared.version(expected),
                                    expected,
                                    expires_at,
                                    deadline,
                                };
                                Ok((swap, answer))
                            }
                            Err(()) => Err(Err(CasError::Late {
                                key: this.name.clone(),
                            })),
                        },
                        Err(error) => Err(Err(error)),
                    };
                    match next {
                        Ok((swap, answer)) => {
                            let write = this.shared.backend.write(this.name, swap);
                            this.phase.set(Phase::Writing { write, answer });
                        }
                        Err(done) => {
                            this.phase.set(Phase::Done);
                            return Poll::Ready(done);
                        }
                    }
                }
                PhaseProj::Writing { write, answer } => {
                    let written = ready!(write.poll(cx));
                    let done = match written {
                        Ok(true) => Some(Ok(answer.clone())),
                        Err(error) => Some(Err(CasError::Backend(error))),
                        // Not written, and the caller has stopped waiting
                        // (the backend may have refused it for its
                        // deadline): late, not a lost race.
                        Ok(false) if is_past(*this.within, *this.started) => {
                            Some(Err(CasError::Late {
                                key: this.name.clone(),
                            }))
                        }
                        Ok(false) => {
                            *this.lost += 1;
                            this.shared.lost_race(this.policy.label());
                            if *this.lost >= this.shared.retry.max_attempts {
                                this.shared.gave_up(this.policy.label());
                                Some(Err(CasError::Contended {
                                    key: this.name.clone(),
                                    attempts: *this.lost,
                                }))
                            } else {
                                None
                            }
                        }
                    };
                    if let Some(done) = done {
                        this.phase.set(Phase::Done);
                        return Poll::Ready(done);
                    }
                    let pause = this.shared.pause(*this.lost);
                    // Without a runtime to sleep on (a caller polling by
                    // hand), read again at once.
                    if pause.is_zero() || tokio::runtime::Handle::try_current().is_err() {
                        let read = this.shared.backend.read(this.name);
                        this.phase.set(Phase::Reading { read });
                    } else {
                        this.phase.set(Phase::Pausing {
                            pause: tokio::time::sleep(pause),
                        });
                    }
                }
                PhaseProj::Pausing { pause } => {
                    ready!(pause.poll(cx));
                    let read = this.shared.backend.read(this.name);
                    this.phase.set(Phase::Reading { read });
                }
                // Polled again after it completed.
                PhaseProj::Done => return Poll::Pending,
            }
        }
    }
}

/// The backend-clock moment after which a write for a caller waiting
/// `within` from `started` must not be made: the read's time plus what is
/// left of the wait, measured here (never later than the caller's own
/// deadline: the read's time was taken before its answer arrived).
/// `Err` when nothing is left.
fn deadline(
    within: Option<Duration>,
    started: Instant,
    snapshot: &Snapshot,
) -> Result<Option<u64>, ()> {
    let Some(within) = within else {
        return Ok(None);
    };
    match within.checked_sub(started.elapsed()) {
        Some(left) if !left.is_zero() => {
            let left = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
            Ok(Some(snapshot.now.saturating_add(left)))
        }
        _ => Err(()),
    }
}

/// Whether a caller waiting `within` from `started` has stopped waiting.
fn is_past(within: Option<Duration>, started: Instant) -> bool {
    within.is_some_and(|within| started.elapsed() >= within)
}
