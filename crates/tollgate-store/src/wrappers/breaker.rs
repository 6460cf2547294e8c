//! [`Breaker`]: a circuit breaker in front of a store that fails, so that
//! an outage costs each request nothing rather than a timeout.

use super::observed::{Observed, Observer};
use crate::key::Key;
use crate::policy::Policy;
use crate::{PolicyDecision, Store, StoreReply, StoreWrapper};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate_core::{Clock, MonotonicClock};

/// A store in front of `S` that stops calling it once it keeps failing.
///
/// *Closed* (the usual state): every call goes to `S`. After
/// [`failures`](Self::failures) consecutive failures (errors, or timeouts
/// of a [`Timeout`](crate::Timeout) inside the breaker), it *opens*: for a
/// cool-down every call fails at once with [`BreakerError::Open`] (saying
/// when it will ask again: [`CircuitOpen::retry_after`]), which
/// the layer answers by its store-error behaviour (`OnStoreError`), or a
/// [`Fallback`](crate::Fallback) around the breaker by its secondary. When
/// the cool-down ends, one call is let through as a probe (*half-open*;
/// the others still fail at once): if it succeeds the breaker closes, if
/// it fails the breaker opens again for twice as long, up to
/// [`max_cool_down`](Self::max_cool_down).
///
/// It logs with `tracing` once per outage, never per request: a WARN when
/// it opens, and another WARN when it closes (an outage's end as
/// visible as its start); the probes in between at DEBUG. With
/// the `metrics` feature, the gauge `tollgate_breaker_state{store}` is 0
/// closed, 1 half-open, 2 open, and `tollgate_breaker_opened_total{store}`
/// counts the outages; `store` is the type of the store behind
/// (`RedisStore`).
///
/// Defaults suit a web service in front of Redis: 5 consecutive failures
/// open it, for 1 s at first, growing to at most 30 s. Put a `Timeout`
/// inside it (so that a stalled store counts as failing) and the breaker
/// inside a `Fallback` if requests should be decided locally meanwhile:
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::MemoryStore;
/// use tollgate_store::{Breaker, Fallback, Timeout};
///
/// # let redis = MemoryStore::new(); // a RedisStore in practice
/// let store = Fallback::new(
///     Breaker::new(Timeout::new(redis, Duration::from_millis(50))),
///     MemoryStore::new(),
/// );
/// # let _ = store;
/// ```
///
/// While open it asks nothing inside it: a [`BlockCache`](crate::BlockCache),
/// a [`PenaltyBox`](crate::PenaltyBox) or a store's own block list
/// (the Redis store's) *inside* the breaker goes unasked for the whole
/// outage, and every request of a key they would refuse gets the
/// store-error behaviour (fail-open lets it through). Put them in front
/// of the breaker, where they answer whatever the store does, and the
/// block cache then also bounds what fail-open lets through for a key it
/// knew at its limit ([`BlockList::failed`](crate::BlockList::failed)):
///
/// ```
/// use std::time::Duration;
/// use tollgate_store::MemoryStore;
/// use tollgate_store::{BlockCache, Breaker, Timeout};
///
/// # let redis = MemoryStore::new(); // a RedisStore, its own block cache off
/// let store = BlockCache::new(Breaker::new(Timeout::new(redis, Duration::from_millis(50))));
/// # let _ = store;
/// ```
///
/// Answers from a block cache in front never reach the breaker either, so
/// they do not count as the successes that reset its count of consecutive
/// failures (a flood of refused requests on one key would otherwise keep
/// it from opening while every other call times out).
///
/// Refunds, debits and an operator's calls are forwarded whatever the
/// state (a refund of a charge the store made should reach it if it can).
#[derive(Clone, Debug)]
pub struct Breaker<S, C = MonotonicClock> {
    inner: S,
    circuit: Arc<Circuit>,
    clock: C,
}

/// The state every clone of a breaker shares.
#[derive(Debug)]
struct Circuit {
    /// Consecutive failures that open it.
    failures: u32,
    /// The first cool-down, and the longest (ns).
    cool_down: u64,
    max_cool_down: u64,
    /// `CLOSED`, `HALF_OPEN` or `OPEN`.
    phase: AtomicU8,
    /// Consecutive failures so far (closed).
    failed: AtomicU32,
    /// When the cool-down ends (clock ns; open).
    open_until: AtomicU64,
    /// The cool-down that the next opening after a failed probe doubles.
    current_cool_down: AtomicU64,
    /// The store behind, as logs and metrics name it.
    store: Arc<str>,
    /// Held while it opens.
    opening: std::sync::Mutex<()>,
}

const CLOSED: u8 = 0;
const HALF_OPEN: u8 = 1;
const OPEN: u8 = 2;

impl<S> Breaker<S> {
    /// `inner` behind a breaker with the defaults: 5 consecutive failures
    /// open it for 1 s, doubled while probes fail, at most 30 s.
    pub fn new(inner: S) -> Self {
        crate::set_up_default_clock();
        let store: Arc<str> = Arc::from(crate::short_type_name::<S>());
        // Closed, and never opened, from the start.
        crate::observe::breaker_built(&store);
        Breaker {
            inner,
            circuit: Arc::new(Circuit {
                failures: 5,
                cool_down: 1_000_000_000,
                max_cool_down: 30_000_000_000,
                phase: AtomicU8::new(CLOSED),
                failed: AtomicU32::new(0),
                open_until: AtomicU64::new(0),
                current_cool_down: AtomicU64::new(1_000_000_000),
                store,
                opening: std::sync::Mutex::new(()),
            }),
            clock: MonotonicClock,
        }
    }
}

impl<S, C> Breaker<S, C> {
    /// How many consecutive failures open it (default 5; at least 1).
    pub fn failures(self, failures: u32) -> Self {
        self.with(|c| c.failures = failures.max(1))
    }

    /// The first cool-down (default 1 s; at least 1 ms).
    pub fn cool_down(self, cool_down: Duration) -> Self {
        let nanos = nanos(cool_down).max(1_000_000);
        self.with(|c| {
            c.cool_down = nanos;
            c.max_cool_down = c.max_cool_down.max(nanos);
            c.current_cool_down = AtomicU64::new(nanos);
        })
    }

    /// The longest cool-down, which failed probes double up to (default
    /// 30 s; at least the first).
    pub fn max_cool_down(self, max: Duration) -> Self {
        self.with(|c| c.max_cool_down = nanos(max).max(c.cool_down))
    }

    /// Measures cool-downs on `clock` (a
    /// [`ManualClock`](tollgate_core::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> Breaker<S, C2> {
        Breaker {
            inner: self.inner,
            circuit: self.circuit,
            clock,
        }
    }

    /// The store behind.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Whether it is open now (calls fail at once), half-open (a probe is
    /// out) or closed.
    pub fn state(&self) -> BreakerState {
        match self.circuit.phase.load(Ordering::Acquire) {
            CLOSED => BreakerState::Closed,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::Open,
        }
    }

    /// The settings are the circuit's: changed before any clone shares it.
    fn with(mut self, change: impl FnOnce(&mut Circuit)) -> Self {
        if let Some(circuit) = Arc::get_mut(&mut self.circuit) {
            change(circuit);
        }
        self
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A breaker's state (see [`Breaker`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the store.
    Closed,
    /// One call, a probe, is out; the others fail at once.
    HalfOpen,
    /// Calls fail at once until the cool-down ends.
    Open,
}

/// Why a [`Breaker`] gave no verdict.
#[derive(Debug)]
pub enum BreakerError<E> {
    /// The breaker is open: the store was not asked. Its source is the
    /// [`CircuitOpen`] that says when the breaker asks again, which
    /// [`retry_after`](crate::retry_after) finds through any wrapper.
    Open(CircuitOpen),
    /// The store behind failed.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for BreakerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerError::Open(open) => write!(
                f,
                "the store `{}` was not asked: its circuit breaker is open",
                open.store
            ),
            BreakerError::Inner(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BreakerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BreakerError::Open(open) => Some(open),
            BreakerError::Inner(error) => Some(error),
        }
    }
}

/// An open [`Breaker`]: which store it stands in front of, and how long
/// until it lets a probe through.
#[derive(Clone, Debug)]
pub struct CircuitOpen {
    store: Arc<str>,
    retry_after: Duration,
}

impl CircuitOpen {
    /// The store behind the breaker, by its type (`RedisStore`).
    pub fn store(&self) -> &str {
        &self.store
    }

    /// How long until the breaker lets a call through to the store again
    /// (zero while a probe is already out): what a refused client is told
    /// to wait (`Retry-After`, gRPC's `RetryInfo`).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the circuit breaker in front of `{}` opened after consecutive failures; \
             it lets a probe through in {} ms",
            self.store,
            self.retry_after.as_millis()
        )
    }
}

impl std::error::Error for CircuitOpen {}

/// What a call let through is: an ordinary one (closed), or the probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Closed,
    Probe,
}

impl Circuit {
    /// Whether a call may go to the store at `now`, and as what.
    fn admit(&self, now: u64) -> Option<Pass> {
        match self.phase.load(Ordering::Acquire) {
            CLOSED => Some(Pass::Closed),
            HALF_OPEN => None,
            _ => {
                if now < self.open_until.load(Ordering::Acquire) {
                    return None;
                }
                // One caller wins the probe; the others stay refused.
                self.phase
                    .compare_exchange(OPEN, HALF_OPEN, Ordering::AcqRel, Ordering::Acquire)
                    .ok()
                    .map(|_| {
                        self.observe_phase(HALF_OPEN);
                        tracing::debug!(store = &*self.store, "circuit breaker half-open: probing");
                        Pass::Probe
                    })
            }
        }
    }

    /// What a call refused at `now` is told: how long until a probe goes
    /// out (none while one is out already).
    fn refusal(&self, now: u64) -> CircuitOpen {
        let until = match self.phase.load(Ordering::Acquire) {
            OPEN => self.open_until.load(Ordering::Acquire),
            _ => now,
        };
        CircuitOpen {
            store: self.store.clone(),
            retry_after: Duration::from_nanos(until.saturating_sub(now)),
        }
    }

    /// What a call let through as `pass` came back with, at `now`.
    fn settle(&self, pass: Pass, ok: bool, now: u64) {
        match (pass, ok) {
            (Pass::Closed, true) => {
                // A write only when there is something to forget: the
                // hot path of a healthy store reads one word.
                if self.failed.load(Ordering::Relaxed) != 0 {
                    self.failed.store(0, Ordering::Relaxed);
                }
            }
            (Pass::Closed, false) => {
                let failed = self.failed.fetch_add(1, Ordering::AcqRel) + 1;
                if failed >= self.failures {
                    self.open(now);
                }
            }
            (Pass::Probe, true) => self.close(),
            (Pass::Probe, false) => self.reopen(now, true),
        }
    }

    /// Closed → open, once per outage: the one WARN. Only from closed: a
    /// call let through before it opened, failing after, changes nothing
    /// (nor does one failing while a probe is out).
    fn open(&self, now: u64) {
        if self.phase.load(Ordering::Acquire) != CLOSED {
            return;
        }
        // Calls failing together all get here; one opens it.
        let _opening = self
            .opening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.phase.load(Ordering::Acquire) != CLOSED {
            return;
        }
        let cool_down = self.cool_down;
        self.current_cool_down.store(cool_down, Ordering::Release);
        // Before the phase: a caller that sees it open sees until when.
        self.open_until
            .store(now.saturating_add(cool_down), Ordering::Release);
        self.phase.store(OPEN, Ordering::Release);
        self.observe_phase(OPEN);
        crate::observe::breaker_opened(&self.store);
        tracing::warn!(
            store = &*self.store,
            failures = self.failures,
            cool_down_ms = cool_down / 1_000_000,
            "circuit breaker open: the store failed {} times in a row; not asking it until \
             a probe succeeds (requests get the store-error behaviour meanwhile)",
            self.failures
        );
    }

    /// Half-open → open: the probe failed (`longer`: the cool-down
    /// doubles) or was dropped before it came back (the next call probes).
    fn reopen(&self, now: u64, longer: bool) {
        let cool_down = if longer {
            let doubled = self
                .current_cool_down
                .load(Ordering::Acquire)
                .saturating_mul(2)
                .min(self.max_cool_down);
            self.current_cool_down.store(doubled, Ordering::Release);
            doubled
        } else {
            0
        };
        self.open_until
            .store(now.saturating_add(cool_down), Ordering::Release);
        self.phase.store(OPEN, Ordering::Release);
        self.observe_phase(OPEN);
        tracing::debug!(
            store = &*self.store,
            cool_down_ms = cool_down / 1_000_000,
            "circuit breaker stays open: the probe failed"
        );
    }

    /// Half-open → closed: a WARN too, as visible as the opening's, so
    /// that an operator who saw the outage start sees it end.
    fn close(&self) {
        self.failed.store(0, Ordering::Release);
        self.current_cool_down
            .store(self.cool_down, Ordering::Release);
        self.phase.store(CLOSED, Ordering::Release);
        self.observe_phase(CLOSED);
        tracing::warn!(
            store = &*self.store,
            "circuit breaker closed: the store answered again"
        );
    }

    fn observe_phase(&self, phase: u8) {
        crate::observe::breaker_state(&self.store, phase);
    }
}

pin_project! {
    /// The future of a [`Breaker`] check: the store's, whose outcome the
    /// breaker counts.
    pub struct BreakerFuture<F, C = MonotonicClock>
    where
        C: Clock,
    {
        #[pin]
        observed: Observed<F, Watch<C>>,
    }
}

/// What a pending call's outcome is counted with.
struct Watch<C: Clock> {
    circuit: Arc<Circuit>,
    pass: Pass,
    clock: C,
    /// Whether the outcome was counted.
    settled: bool,
}

impl<C: Clock, E> Observer<E> for Watch<C> {
    type Error = BreakerError<E>;

    fn observe(mut self, answer: Result<PolicyDecision, E>) -> Result<PolicyDecision, Self::Error> {
        self.circuit
            .settle(self.pass, answer.is_ok(), self.clock.now());
        self.settled = true;
        answer.map_err(BreakerError::Inner)
    }

    fn pass(error: E) -> Self::Error {
        BreakerError::Inner(error)
    }
}

impl<C: Clock> Drop for Watch<C> {
    // A probe dropped before it came back (the layer gave up on it, the
    // client went away) says nothing about the store: the next call
    // probes again, rather than the breaker staying half-open.
    fn drop(&mut self) {
        if !self.settled && self.pass == Pass::Probe {
            self.circuit.reopen(self.clock.now(), false);
        }
    }
}

impl<F, E, C> Future for BreakerFuture<F, C>
where
    F: Future<Output = Result<PolicyDecision, E>>,
    C: Clock,
{
    type Output = Result<PolicyDecision, BreakerError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().observed.poll(cx)
    }
}

impl<S, C> StoreWrapper for Breaker<S, C>
where
    S: Store,
    C: Clock + Clone + Sync + 'static,
{
    type Inner = S;
    type Error = BreakerError<S::Error>;
    type Future = BreakerFuture<S::Future, C>;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Fails at once while open; otherwise the store behind's check, whose
    /// outcome is counted.
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.guard(|| self.inner.check_within(policy, key, cost, within))
    }

    /// An answer the breaker did not guard counts for nothing.
    fn relay(
        &self,
        _: &Arc<Policy>,
        _: &Key,
        reply: StoreReply<S::Future, S::Error>,
    ) -> StoreReply<Self::Future, Self::Error> {
        reply.map(
            |inner| BreakerFuture {
                observed: Observed::unobserved(inner),
            },
            BreakerError::Inner,
        )
    }

    /// As a check: a peek is a call to the store.
    fn peek(&self, policy: &Arc<Policy>, key: &Key) -> StoreReply<Self::Future, Self::Error> {
        self.guard(|| self.inner.peek(policy, key))
    }
}

impl<S, C> Breaker<S, C>
where
    S: Store,
    C: Clock + Clone + Sync + 'static,
{
    /// `call`, if the breaker lets it through, with its outcome counted.
    fn guard(
        &self,
        call: impl FnOnce() -> StoreReply<S::Future, S::Error>,
    ) -> StoreReply<BreakerFuture<S::Future, C>, BreakerError<S::Error>> {
        let circuit = &self.circuit;
        let now = self.clock.now();
        let Some(pass) = circuit.admit(now) else {
            return StoreReply::Ready(Err(BreakerError::Open(circuit.refusal(now))));
        };
        match call() {
            StoreReply::Ready(answer) => {
                circuit.settle(pass, answer.is_ok(), self.clock.now());
                StoreReply::Ready(answer.map_err(BreakerError::Inner))
            }
            StoreReply::Pending(inner) => {
                let watch = Watch {
                    circuit: circuit.clone(),
                    pass,
                    clock: self.clock.clone(),
                    settled: false,
                };
                StoreReply::Pending(BreakerFuture {
                    observed: Observed::new(inner, watch),
                })
            }
        }
    }
}
