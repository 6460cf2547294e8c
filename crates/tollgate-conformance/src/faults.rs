//! [`Faults`]: a [`CasBackend`] in front of another that answers as a real
//! network does — late, with jitter; a write made just before its
//! deadline and answered after it; a write held until its deadline has
//! passed; a backend restarting — and keeps the ledger the racing kit's
//! checker reads.

use super::ledger::{FaultError, Ledger, Shared};
use super::trace::Rng;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_cas::{CasBackend, Snapshot, Swap};

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A [`CasBackend`] in front of yours that injects the faults of a real
/// network and of a real server, with seeded randomness: what the racing
/// kit ([`Race::cas`](super::Race::cas)) puts in front of a backend.
///
/// Each call draws its fault (the draws are seeded, their order is the
/// order of the calls, which the scheduler decides):
///
/// - **Latency with jitter**: every read and write travels to the backend
///   and back, each way at once (a turn of the scheduler) half the time,
///   else a random time up to [`latency`](Self::latency) (on tokio's
///   timer, which rounds it up to its 1 ms tick).
/// - **Late replies** ([`late_replies`](Self::late_replies), percent of
///   writes): the write is made at once, before its deadline, and its
///   reply held back until a few milliseconds after the deadline
///   ([`Swap::deadline`]) has passed on the backend's clock: a caller that stopped waiting never hears that
///   it was charged (one that hears checks out, as the layer does, learns
///   it and gives it back).
/// - **Held writes** ([`held_writes`](Self::held_writes), percent of
///   writes with a deadline): the write reaches the backend only once its
///   deadline has passed on the backend's clock (read to make sure): a
///   backend that keeps the contract does not make it. One that does is
///   counted ([`Ledger::made_past_deadline`]). A deadline more than
///   250 ms away is not waited for: the write is made 250 ms late.
/// - **Restarts** ([`restarts`](Self::restarts)): now and then the backend
///   restarts, and for a while every call sent to it is refused at once
///   ([`FaultError::Restarting`], as a connection refused), having reached
///   nothing. What it holds is kept, and a write sent before the restart
///   is made (a server restarted cleanly finishes what it received).
///   [`restart`](Self::restart) restarts it on demand.
///
/// A write reaches the backend on a task of its own: a caller that drops
/// the write's future (stops waiting) does not take back what was sent,
/// as with a real connection. The [`Ledger`] counts, per key, the writes
/// made whose reply no caller received, so that the checker can tell a
/// charge nobody heard of from one that should not stand.
///
/// What it does not inject: a reply lost after the write was made (an
/// error for a write that landed). No store can tell what such a write
/// did without asking again; a [`CasStore`](tollgate_cas::CasStore)
/// answers it with a store error and the charge stands.
///
/// Its futures sleep on tokio's timer and its writes run on spawned tasks:
/// use it in a Tokio runtime with time enabled.
///
/// ```
/// use tollgate_conformance::Faults;
/// use tollgate_cas::{CasStore, MemoryBackend};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let faults = Faults::new(MemoryBackend::new())
///     .seed(7)
///     .latency(Duration::from_millis(1))
///     .held_writes(30);
/// // Two "processes" over one backend.
/// let (a, b) = (CasStore::new(faults.clone()), CasStore::new(faults.clone()));
/// # let _ = (a, b);
/// assert_eq!(faults.ledger().made_past_deadline(), 0);
/// # }
/// ```
pub struct Faults<B> {
    inner: B,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
}

impl<B: Clone> Clone for Faults<B> {
    fn clone(&self) -> Self {
        Faults {
            inner: self.inner.clone(),
            settings: self.settings.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for Faults<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("inner", &self.inner)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What faults a [`Faults`] injects, shared by its clones.
#[derive(Clone, Debug)]
struct Settings {
    seed: u64,
    latency: Duration,
    late_replies: u64,
    held_writes: u64,
    /// Restarts per thousand calls.
    restarts: u64,
    restart_for: Duration,
    /// No faults at all (a direct instance: see `Faults::calm`).
    calm: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seed: 0x7011_6a7e,
            latency: Duration::from_millis(1),
            late_replies: 15,
            held_writes: 20,
            restarts: 2,
            restart_for: Duration::from_millis(5),
            calm: false,
        }
    }
}

impl<B: CasBackend + Clone> Faults<B> {
    /// `inner`, behind the default faults: latency up to 1 ms each way
    /// (none half the time),
    /// 15 % of writes answered after their deadline, 20 % of writes with a
    /// deadline held past it, a restart of up to 5 ms twice in a
    /// thousand calls; seed `0x7011_6a7e`.
    pub fn new(inner: B) -> Self {
        Faults {
            inner,
            settings: Arc::new(Settings::default()),
            shared: Arc::default(),
        }
    }

    fn set(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(Arc::make_mut(&mut self.settings));
        self
    }

    /// The seed of the draws.
    pub fn seed(self, seed: u64) -> Self {
        self.set(|s| s.seed = seed)
    }

    /// The longest time a call takes each way (default 1 ms): half the
    /// calls take none, the others a random time up to it.
    pub fn latency(self, latency: Duration) -> Self {
        self.set(|s| s.latency = latency)
    }

    /// The percentage of writes made at once whose reply is held back
    /// until their deadline has passed (default 15).
    pub fn late_replies(self, percent: u8) -> Self {
        self.set(|s| s.late_replies = u64::from(percent.min(100)))
    }

    /// The percentage of writes with a deadline that reach the backend
    /// only once it has passed (default 20).
    pub fn held_writes(self, percent: u8) -> Self {
        self.set(|s| s.held_writes = u64::from(percent.min(100)))
    }

    /// How often the backend restarts (per thousand calls, default 2) and
    /// for how long at most (default 5 ms; each restart a random time up
    /// to it). `restarts(0, _)`: never on its own.
    pub fn restarts(self, per_thousand: u16, at_most: Duration) -> Self {
        self.set(|s| {
            s.restarts = u64::from(per_thousand.min(1000));
            s.restart_for = at_most;
        })
    }

    /// Restarts the backend now: every call of this `Faults` and its
    /// clones is refused for `down`.
    pub fn restart(&self, down: Duration) {
        let mut until = self
            .shared
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *until = Some(Instant::now() + down);
    }

    /// A clone that injects nothing, sharing the backend and the ledger
    /// (for a direct look at the backend: the checker's peeks).
    pub fn calm(&self) -> Self {
        let mut calm = self.clone();
        Arc::make_mut(&mut calm.settings).calm = true;
        calm
    }

    /// The same backend and settings with a fresh ledger and fresh draws
    /// from `seed` (the racing kit's runs each start so).
    pub fn reseeded(&self, seed: u64) -> Self {
        let mut fresh = self.clone().seed(seed);
        fresh.shared = Arc::default();
        fresh
    }

    /// The backend behind.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// What it and its clones saw so far.
    pub fn ledger(&self) -> Ledger {
        Ledger::of(self.shared.clone())
    }

    /// A generator for one call's draws: the seed and the call's number.
    fn draws(&self) -> Rng {
        let n = self.shared.draws.fetch_add(1, Ordering::Relaxed);
        let mut rng = Rng::new(self.settings.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.next();
        rng
    }

    /// A time up to the latency: none half the time.
    fn jitter(&self, rng: &mut Rng) -> Duration {
        let most = u64::try_from(self.settings.latency.as_nanos()).unwrap_or(u64::MAX);
        match rng.chance(50) {
            true => Duration::ZERO,
            false => Duration::from_nanos(rng.below(most.saturating_add(1))),
        }
    }

    /// Whether the backend is restarting now (and, drawn, whether this
    /// call restarts it).
    fn restarting(&self, rng: &mut Rng) -> bool {
        let now = Instant::now();
        let mut until = self
            .shared
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until.is_some_and(|until| now < until) {
            return true;
        }
        if self.settings.restarts > 0 && rng.below(1000) < self.settings.restarts {
            let most = u64::try_from(self.settings.restart_for.as_nanos()).unwrap_or(u64::MAX);
            *until = Some(now + Duration::from_nanos(1 + rng.below(most.max(1))));
            return true;
        }
        false
    }
}

/// How one write travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// There and back, each way up to the latency.
    Prompt,
    /// Made at once, answered once the deadline has passed.
    LateReply,
    /// Made once the deadline has passed.
    Held,
}

/// One write between its sending and its reply.
#[derive(Debug, Default)]
struct Delivery {
    /// Made (`Some(true)`), refused (`Some(false)`), failed (`None` with
    /// `done`).
    made: Option<bool>,
    done: bool,
    /// Its future was dropped before it gave the reply.
    gone: bool,
    /// The reply was given.
    heard: bool,
    /// It was held until past its deadline.
    held: bool,
}

/// A call's way there or back: `time` on tokio's timer (which rounds it
/// up to its 1 ms tick), or, for none, a turn of the scheduler.
async fn travel(time: Duration) {
    match time.is_zero() {
        true => tokio::task::yield_now().await,
        false => tokio::time::sleep(time).await,
    }
}

/// The backend's clock, read through `inner` (a read changes nothing).
async fn clock_of<B: CasBackend>(inner: &B, key: &str) -> Option<u64> {
    inner.read(key).await.ok().map(|snapshot| snapshot.now)
}

/// Waits until the backend's clock is past `deadline` (checked every
/// half millisecond, at most `bound`): whether it is.
async fn past<B: CasBackend>(inner: &B, key: &str, deadline: u64, bound: Duration) -> bool {
    let started = Instant::now();
    loop {
        match clock_of(inner, key).await {
            Some(now) if now > deadline => return true,
            None => return false,
            Some(_) => {}
        }
        if started.elapsed() >= bound {
            return false;
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

/// How long after its deadline a late reply comes back, at least: beyond
/// a tick of tokio's timer (1 ms), so that a caller waiting until the
/// deadline has stopped waiting.
const REPLY_MARGIN: Duration = Duration::from_millis(3);

/// How long a held write or reply waits at most for its deadline to pass
/// (a caller that waits longer, a layer's `store_timeout` of seconds,
/// sees a write or a reply this late, not one past its deadline).
const DEADLINE_BOUND: Duration = Duration::from_millis(250);

impl<B: CasBackend + Clone> CasBackend for Faults<B> {
    type Error = FaultError<B::Error>;
    type Read = Boxed<Result<Snapshot, Self::Error>>;
    type Write = Boxed<Result<bool, Self::Error>>;

    fn read(&self, key: &str) -> Self::Read {
        let inner = self.inner.clone();
        let key = key.to_owned();
        if self.settings.calm {
            return Box::pin(async move { inner.read(&key).await.map_err(FaultError::Backend) });
        }
        let mut rng = self.draws();
        let (there, back) = (self.jitter(&mut rng), self.jitter(&mut rng));
        let this = self.clone();
        Box::pin(async move {
            travel(there).await;
            if this.restarting(&mut rng) {
                this.shared.note(&key, |k| k.refused += 1);
                return Err(FaultError::Restarting);
            }
            let snapshot = inner.read(&key).await.map_err(FaultError::Backend)?;
            travel(back).await;
            Ok(snapshot)
        })
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        let inner = self.inner.clone();
        let key = key.to_owned();
        // Calm, or no runtime to send it on: straight through.
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !self.settings.calm => runtime,
            _ => {
                return Box::pin(async move {
                    inner.write(&key, swap).await.map_err(FaultError::Backend)
                });
            }
        };
        let mut rng = self.draws();
        if self.restarting(&mut rng) {
            self.shared.note(&key, |k| k.refused += 1);
            return Box::pin(std::future::ready(Err(FaultError::Restarting)));
        }
        let roll = rng.below(100);
        let route = match swap.deadline {
            Some(_) if roll < self.settings.held_writes => Route::Held,
            _ if rng.below(100) < self.settings.late_replies => Route::LateReply,
            _ => Route::Prompt,
        };
        let (there, back) = (self.jitter(&mut rng), self.jitter(&mut rng));
        let deadline = swap.deadline;
        let delivery = Arc::new(Mutex::new(Delivery::default()));
        let (reply, answer) = tokio::sync::oneshot::channel();
        let shared = self.shared.clone();
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        {
            let (inner, key, delivery) = (inner.clone(), key.clone(), delivery.clone());
            runtime.spawn(async move {
                travel(there).await;
                let held = match (route, deadline) {
                    (Route::Held, Some(deadline)) => {
                        past(&inner, &key, deadline, DEADLINE_BOUND).await
                    }
                    _ => false,
                };
                let made = inner.write(&key, swap).await;
                {
                    let mut d = delivery.lock().unwrap_or_else(PoisonError::into_inner);
                    d.done = true;
                    d.held = held;
                    d.made = made.as_ref().ok().copied();
                    let landed = d.made == Some(true);
                    shared.note(&key, |k| {
                        k.held += u64::from(held);
                        k.made_past_deadline += u64::from(held && landed);
                        k.unheard += u64::from(d.gone && landed && !held);
                        k.late_replies += u64::from(route == Route::LateReply);
                    });
                }
                shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                let _ = reply.send(made);
            });
        }
        let tracker = Tracker {
            delivery,
            shared: self.shared.clone(),
            key: key.clone(),
        };
        Box::pin(async move {
            let tracker = tracker;
            let made = match answer.await {
                Ok(made) => made,
                // The task ended without a word: the runtime is shutting
                // down. Nothing to tell.
                Err(_) => return Ok(false),
            };
            if route == Route::LateReply
                && let Some(deadline) = deadline
            {
                past(&inner, &key, deadline, DEADLINE_BOUND).await;
                // Well after it: a caller's timer may fire a tick late.
                tokio::time::sleep(REPLY_MARGIN).await;
            }
            travel(back).await;
            tracker.heard();
            made.map_err(FaultError::Backend)
        })
    }
}

/// Notes, when a write's future is dropped before its reply was given,
/// that the write's outcome went unheard.
struct Tracker {
    delivery: Arc<Mutex<Delivery>>,
    shared: Arc<Shared>,
    key: String,
}

impl Tracker {
    fn heard(&self) {
        let mut d = self.delivery.lock().unwrap_or_else(PoisonError::into_inner);
        d.heard = true;
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let mut d = self.delivery.lock().unwrap_or_else(PoisonError::into_inner);
        if d.heard {
            return;
        }
        d.gone = true;
        // Made already (and not past its deadline, else it is counted so):
        // a charge nobody heard of. Not made yet: the task counts it.
        if d.done && d.made == Some(true) && !d.held {
            self.shared.note(&self.key, |k| k.unheard += 1);
        }
    }
}
