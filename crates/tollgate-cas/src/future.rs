//! [`CasFuture`]: one call of a compare-and-swap store, as a state
//! machine — its key's turn in this process, then read, decide, write if
//! the version is unchanged; after a lost race, a pause and again.

use super::backend::{CasBackend, Swap};
use super::error::CasError;
use super::shared::Shared;
use super::step::{self, Op, Reply, Step};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::sync::{AcquireError, OwnedSemaphorePermit};
use tokio::time::Sleep;
use tollgate_store::Policy;
use tollgate_store::PolicyDecision;

/// Waiting for a key's turn, when another call of this process has it.
type Queued = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

pin_project! {
    /// One call of a [`CasStore`](super::CasStore): waits for its
    /// key's turn while another call of the same store has it (calls of
    /// one process on one key go one after the other, so they never race
    /// one another), reads the key's value, decides, writes the new states
    /// if the value's version is still the one read (another process may
    /// have written); after a lost race, pauses (see
    /// [`CasStoreBuilder::backoff`](super::CasStoreBuilder::backoff)) and
    /// does it again, at most
    /// [`max_attempts`](super::CasStoreBuilder::max_attempts) writes in
    /// all. No allocation of its own beyond the backend's futures, but
    /// for the wait of a key whose turn is taken; it pauses on tokio's
    /// timer.
    #[must_use = "futures do nothing unless polled"]
    pub(super) struct Call<B: CasBackend> {
        shared: Arc<Shared<B>>,
        policy: Arc<Policy>,
        name: Arc<str>,
        op: Op,
        // For a late check: how long its caller waits, from `started`,
        // and, from the first read, the moment on the backend's clock
        // after which no write may land.
        within: Option<Duration>,
        started: Instant,
        deadline: Option<u64>,
        // Writes not made so far.
        lost: u32,
        // The last write was not made, and whether it lost a race or was
        // refused for its deadline is for the next read to say.
        unsettled: bool,
        // The version the write in flight expects, and, once it was not
        // made, the version it expected: a read that finds that version
        // again shows that no other writer changed it.
        expected: Option<u64>,
        refused: Option<u64>,
        // The key's turn, held until the call is over.
        turn: Option<OwnedSemaphorePermit>,
        #[pin]
        phase: Phase<B::Read, B::Write>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<R, W> {
        Start,
        Queued { acquire: Queued },
        Reading { #[pin] read: R },
        Writing { #[pin] write: W, answer: Reply },
        Pausing { #[pin] pause: Sleep },
        Done,
    }
}

impl<B: CasBackend> Call<B> {
    /// `op` on the value `name` of a key of `policy`; a check whose caller
    /// waits only `within` writes nothing after that.
    pub(super) fn start(
        shared: Arc<Shared<B>>,
        policy: Arc<Policy>,
        name: Arc<str>,
        op: Op,
        within: Option<Duration>,
    ) -> Self {
        Call {
            shared,
            policy,
            name,
            op,
            within,
            started: Instant::now(),
            deadline: None,
            lost: 0,
            unsettled: false,
            expected: None,
            refused: None,
            turn: None,
            // Nothing is asked for before the first poll: a future made
            // and not polled holds no turn.
            phase: Phase::Start,
        }
    }
}

impl<B: CasBackend> Future for Call<B> {
    type Output = Result<Reply, CasError<B::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase.as_mut().project() {
                PhaseProj::Start => {
                    let semaphore = this.shared.turn(this.name);
                    match semaphore.clone().try_acquire_owned() {
                        Ok(turn) => {
                            *this.turn = Some(turn);
                            let read = this.shared.backend.read(this.name);
                            this.phase.set(Phase::Reading { read });
                        }
                        Err(_) => {
                            let acquire = Box::pin(semaphore.clone().acquire_owned());
                            this.phase.set(Phase::Queued { acquire });
                        }
                    }
                }
                PhaseProj::Queued { acquire } => {
                    // The semaphores are never closed: an error cannot
                    // come, and would only mean going on without a turn.
                    *this.turn = ready!(acquire.as_mut().poll(cx)).ok();
                    let read = this.shared.backend.read(this.name);
                    this.phase.set(Phase::Reading { read });
                }
                PhaseProj::Reading { read } => {
                    let snapshot = match ready!(read.poll(cx)) {
                        Ok(snapshot) => snapshot,
                        Err(error) => {
                            this.phase.set(Phase::Done);
                            *this.turn = None;
                            return Poll::Ready(Err(CasError::Backend(error)));
                        }
                    };
                    if this.deadline.is_none() {
                        *this.deadline = deadline(*this.within, *this.started, snapshot.now);
                    }
                    let late = is_past(*this.within, *this.started)
                        || this
                            .deadline
                            .is_some_and(|deadline| snapshot.now > deadline);
                    let found = snapshot.value.as_ref().map(|value| value.version);
                    if let Some(version) = this.refused.take()
                        && found == Some(version)
                        && !late
                    {
                        // A write over this very version was not made, and
                        // no writer has changed it since (versions are
                        // random and never come back): no race was lost.
                        // The backend's read and write disagree about what
                        // the key holds; trying again would only fail again.
                        this.phase.set(Phase::Done);
                        *this.turn = None;
                        return Poll::Ready(Err(CasError::Disagreeing {
                            key: this.name.clone(),
                            version,
                        }));
                    }
                    if std::mem::take(this.unsettled) && !late {
                        // The write before was not made, and not for its
                        // deadline: a race lost.
                        this.shared.lost_race(this.policy.label());
                    }
                    let next = match step::decide(this.policy, this.name, this.op, &snapshot) {
                        Ok(Step::Answer(answer)) => Err(Ok(answer)),
                        // No write may land now: nothing charged.
                        Ok(Step::Write { .. }) if late => Err(Err(CasError::Late {
                            key: this.name.clone(),
                        })),
                        Ok(Step::Write {
                            bytes,
                            expires_at,
                            answer,
                        }) => {
                            let expected = found;
                            *this.expected = expected;
                            let swap = Swap {
                                bytes,
                                version: this.shared.version(expected),
                                expected,
                                expires_at,
                                deadline: *this.deadline,
                            };
                            Ok((swap, answer))
                        }
                        Err(error) => Err(Err(error)),
                    };
                    match next {
                        Ok((swap, answer)) => {
                            let write = this.shared.backend.write(this.name, swap);
                            this.phase.set(Phase::Writing { write, answer });
                        }
                        Err(done) => {
                            this.phase.set(Phase::Done);
                            *this.turn = None;
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
                            *this.refused = *this.expected;
                            if *this.lost >= this.shared.retry.max_attempts {
                                this.shared.lost_race(this.policy.label());
                                this.shared.gave_up(this.policy.label());
                                Some(Err(CasError::Contended {
                                    key: this.name.clone(),
                                    attempts: *this.lost,
                                }))
                            } else if this.deadline.is_some() {
                                // Lost, or refused for its deadline: the
                                // next read's time tells.
                                *this.unsettled = true;
                                None
                            } else {
                                this.shared.lost_race(this.policy.label());
                                None
                            }
                        }
                    };
                    if let Some(done) = done {
                        this.phase.set(Phase::Done);
                        *this.turn = None;
                        return Poll::Ready(done);
                    }
                    let pause = this.shared.pause(*this.lost);
                    // Without a runtime to sleep on (a caller polling by
                    // hand), read again at once.
                    if pause.is_zero() || tokio::runtime::Handle::try_current().is_err() {
                        let read = this.shared.backend.read(this.name);
                        this.phase.set(Phase::Reading { read });
                    } else {
                        // The turn is kept while pausing: given to the next
                        // call of this process, it would race this one's
                        // next try (measured: four processes on one key
                        // lost 2 races a decision that way, 0.14 this way).
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

pin_project! {
    /// The future of a [`CasStore`](super::CasStore)'s check: one call
    /// (its key's turn in this process, a read, a decision, a conditional
    /// write, again after a lost race; see the store's documentation),
    /// answering the limits' decision.
    #[must_use = "futures do nothing unless polled"]
    pub struct CasFuture<B: CasBackend> {
        #[pin]
        call: Call<B>,
    }
}

impl<B: CasBackend> CasFuture<B> {
    pub(super) fn new(call: Call<B>) -> Self {
        CasFuture { call }
    }
}

impl<B: CasBackend> Future for CasFuture<B> {
    type Output = Result<PolicyDecision, CasError<B::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .call
            .poll(cx)
            .map(|reply| reply.map(|reply| reply.decision))
    }
}

/// The moment on the backend's clock after which no write may land for a
/// caller waiting `within` from `started`: the first read's time plus
/// what was left of the wait when it arrived (never later than the
/// caller's own deadline: the backend read its clock before its answer
/// arrived). `None` when the caller waits for as long as it takes.
fn deadline(within: Option<Duration>, started: Instant, now: u64) -> Option<u64> {
    let left = within?.saturating_sub(started.elapsed());
    Some(now.saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)))
}

/// Whether a caller waiting `within` from `started` has stopped waiting.
fn is_past(within: Option<Duration>, started: Instant) -> bool {
    within.is_some_and(|within| started.elapsed() >= within)
}
