//! Clocks: where `now` comes from.
//!
//! Every algorithm takes `now` as integer nanoseconds; a [`Clock`] supplies
//! it. Production code uses [`MonotonicClock`] (never goes backwards, and
//! counts from the Unix epoch so fixed windows line up across machines);
//! tests use [`ManualClock`] and move time by hand, or (feature `tokio`)
//! `TokioClock`, which follows a paused tokio runtime's time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time, in nanoseconds.
///
/// Implementations must be cheap: the rate limiter reads the clock once per
/// request.
pub trait Clock: Send + Sync + 'static {
    /// The current time in nanoseconds since this clock's origin.
    fn now(&self) -> u64;

    /// The current time, for a caller that acts on it at once and needs no
    /// order between this reading and what it read before: the reading may
    /// be taken up to some tens of nanoseconds ahead of the instructions
    /// that precede it, so it can be that much earlier than a time another
    /// thread published and this one read first. [`now`](Self::now) is
    /// never earlier.
    ///
    /// The stores read the clock this way for a check (and for a refund or
    /// a debit, which could as well have come a moment earlier). A check's
    /// time needs no such order: two threads' checks reach a key's state in
    /// no fixed order anyway (a thread can be paused between reading the
    /// clock and updating the state), so every algorithm judges a time
    /// earlier than the one its state was last updated at conservatively
    /// (see [`RateAlgorithm`](crate::RateAlgorithm)); a reading a few
    /// nanoseconds early is a request that arrived that much earlier.
    /// Defaults to [`now`](Self::now); [`MonotonicClock`] saves the fence
    /// its `now` needs on the time-stamp counter.
    #[inline]
    fn now_relaxed(&self) -> u64 {
        self.now()
    }
}

/// The wall clock: nanoseconds since the Unix epoch, as the system reports
/// them.
///
/// Use it where windows must line up with other machines' windows and a
/// clock step is acceptable. A time before the epoch reads as 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    #[inline]
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, saturating_nanos)
    }
}

/// A monotonic clock whose origin is the Unix epoch.
///
/// It reads the wall clock once per process and from then on advances with a
/// monotonic source, so it never jumps when the system clock is stepped, and
/// yet its windows (minute boundaries, for example) line up with other
/// machines' up to their clock skew at start. All `MonotonicClock` values in a
/// process share one origin and agree, and no thread ever reads a time
/// earlier than one another thread has read before it.
///
/// The monotonic source ([`MonotonicClock::source`]) is chosen once:
///
/// - the CPU's time-stamp counter, through `quanta` (about 10 ns a reading,
///   fenced so that it is never read ahead of the instructions before it;
///   the stores' checks read it unfenced, see [`Clock::now_relaxed`]),
///   only where the operating system vouches that every core's counter
///   agrees: on Linux, when the kernel's clocksource is `tsc`
///   (`cat /sys/devices/system/clocksource/clocksource0/current_clocksource`),
///   which the kernel selects only after checking the cores are in step;
/// - the operating system's monotonic clock ([`Instant`], about 25 ns)
///   everywhere else: other clocksources (a virtual machine's `kvm-clock`,
///   `hpet`), other systems, or without the `quanta` feature.
///
/// Counters out of step between cores make a clock read on one core run
/// behind one read on another; for GCRA that shrinks the burst by the step
/// (the failure governor's users meet on such machines). Set the
/// environment variable `TOLLGATE_CLOCK=os` to use the operating system's
/// clock whatever the kernel says.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

/// Where [`MonotonicClock`] reads its time from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// The CPU's time-stamp counter, which the OS vouches is in step
    /// across cores.
    TimeStampCounter,
    /// The operating system's monotonic clock.
    OsMonotonic,
}

impl std::fmt::Display for ClockSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockSource::TimeStampCounter => "the time-stamp counter",
            ClockSource::OsMonotonic => "the operating system's monotonic clock",
        })
    }
}

impl MonotonicClock {
    /// The source this process's `MonotonicClock` reads (chosen at the
    /// first reading).
    ///
    /// ```
    /// use tollgate_core::{ClockSource, MonotonicClock};
    ///
    /// let source = MonotonicClock::source();
    /// assert!(matches!(source, ClockSource::TimeStampCounter | ClockSource::OsMonotonic));
    /// ```
    pub fn source() -> ClockSource {
        match anchor().source {
            #[cfg(feature = "quanta")]
            Source::Counter { .. } => ClockSource::TimeStampCounter,
            Source::Os { .. } => ClockSource::OsMonotonic,
        }
    }
}

struct Anchor {
    wall_nanos: u64,
    source: Source,
}

enum Source {
    #[cfg(feature = "quanta")]
    Counter {
        counter: quanta::Clock,
        start: u64,
    },
    Os {
        start: Instant,
    },
}

/// Whether the operating system vouches that the time-stamp counter agrees
/// across cores, and nobody asked for the OS clock.
#[cfg(feature = "quanta")]
fn counter_is_vouched_for() -> bool {
    if std::env::var("TOLLGATE_CLOCK").is_ok_and(|v| v.eq_ignore_ascii_case("os")) {
        return false;
    }
    cfg!(target_os = "linux")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        #[cfg(feature = "quanta")]
        if counter_is_vouched_for() {
            let counter = quanta::Clock::new();
            return Anchor {
                wall_nanos: WallClock.now(),
                source: Source::Counter {
                    start: counter.raw(),
                    counter,
                },
            };
        }
        Anchor {
            wall_nanos: WallClock.now(),
            source: Source::Os {
                start: Instant::now(),
            },
        }
    })
}

impl Anchor {
    /// Nanoseconds since the anchor; `ordered`: the reading is not taken
    /// ahead of the instructions before it (see [`Clock::now_relaxed`]).
    #[inline(always)]
    fn elapsed_nanos(&self, ordered: bool) -> u64 {
        match &self.source {
            #[cfg(feature = "quanta")]
            Source::Counter { counter, start } => {
                if ordered {
                    ordered_before_counter();
                }
                counter.delta_as_nanos(*start, counter.raw())
            }
            // The OS clock orders its own reads.
            Source::Os { start } => saturating_nanos(start.elapsed()),
        }
    }

    #[inline(always)]
    fn now(&self, ordered: bool) -> u64 {
        self.wall_nanos.saturating_add(self.elapsed_nanos(ordered))
    }
}

/// Keeps the counter's reading after every earlier instruction. The CPU
/// may otherwise read the time-stamp counter before the loads that precede
/// it in the program (`rdtsc` is not ordered), and a thread that first
/// reads a time another thread published, then the clock, could read a
/// time earlier than the published one (by up to 50 ns, measured here: 9
/// runs in 10 of the test in `tests/tests/clock.rs` failed without it).
/// The kernel's own clock fences its reads the same way.
#[cfg(feature = "quanta")]
#[inline(always)]
fn ordered_before_counter() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: LFENCE is part of SSE2, which every x86_64 CPU has; it only
    // orders instructions and touches no memory.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_lfence();
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        anchor().now(true)
    }

    #[inline]
    fn now_relaxed(&self) -> u64 {
        anchor().now(false)
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Clock, ManualClock};
///
/// let clock = ManualClock::new(0);
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(shared.now(), 1_500_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `nanos`.
    pub fn new(nanos: u64) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(nanos)),
        }
    }

    /// Sets the time.
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Release);
    }

    /// Moves the time forward (saturating at `u64::MAX`).
    #[inline]
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        // One atomic update: a reader never sees a wrapped (earlier) time.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

/// A clock that follows tokio's time ([`tokio::time::Instant`]): in a test
/// under a paused runtime (`#[tokio::test(start_paused = true)]`),
/// `tokio::time::advance` moves every limit that reads it, and a
/// `tokio::time::sleep` moves them at once too (tokio's auto-advance), so a
/// test of a rate-limited app waits no real time.
///
/// It counts the nanoseconds since the moment it was made (its origin,
/// which its clones share), saturating at `u64::MAX`: it starts at 0, and
/// fixed windows start with it. It is meant for tests; in production use
/// [`MonotonicClock`], whose windows line up with other machines'.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::{Algorithm, Clock, Limiter, TokioClock};
///
/// #[tokio::main(flavor = "current_thread", start_paused = true)]
/// async fn main() {
///     let clock = TokioClock::new();
///     let limiter = Limiter::new(Algorithm::Gcra, "10/s".parse().unwrap());
///     let mut state = limiter.new_state();
///     let passed = (0..20).filter(|_| limiter.check(&mut state, clock.now(), 1).allowed()).count();
///     assert_eq!(passed, 10);
///
///     tokio::time::advance(Duration::from_millis(99)).await;
///     assert!(!limiter.check(&mut state, clock.now(), 1).allowed());
///     tokio::time::advance(Duration::from_millis(1)).await;
///     assert!(limiter.check(&mut state, clock.now(), 1).allowed());
///     assert_eq!(clock.now(), 100_000_000);
/// }
/// ```
///
/// # Read it inside the runtime
///
/// The clock reads [`tokio::time::Instant::now`], which reads the clock of
/// the tokio runtime of the calling thread only when tokio's `test-util`
/// feature is on (the feature `start_paused` and `advance` need, usually
/// enabled in a project's dev-dependencies); in every other case it reads
/// the operating system's monotonic clock ([`std::time::Instant`]):
///
/// - without `test-util` (a release build, say), always the real clock: the
///   clock is then an ordinary monotonic clock that counts from its
///   creation;
/// - with `test-util`, on a thread outside any runtime (a thread of your
///   own, a `Drop` after the runtime is gone), the real clock, without an
///   error or a panic;
/// - with `test-util`, in a runtime, that runtime's clock: the real one
///   until the runtime is paused, and from then on a clock that moves only
///   with `advance` and auto-advance.
///
/// So read it where it was made: in the same runtime (the stores read the
/// clock as the layer checks a request, which a test does inside its
/// runtime), or make it before the runtime and read it inside. A paused
/// runtime runs ahead of the real clock once advanced; a reading from
/// outside it then comes out earlier than the readings inside it (at worst
/// 0, never below the origin), and a clock that runs back lets a GCRA admit
/// less than its burst. Each runtime has a clock of its own: two paused
/// runtimes' times are unrelated. With `test-util`, as tokio's own
/// `Instant::now`, it panics if read while the thread's thread-locals are
/// being torn down.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose origin (its reading 0) is tokio's time now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

/// [`TokioClock::new`].
#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> u64 {
        saturating_nanos(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }
}

impl<C: Clock> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }

    #[inline]
    fn now_relaxed(&self) -> u64 {
        (**self).now_relaxed()
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_is_near_the_wall_clock_and_never_goes_back() {
        let wall = WallClock.now();
        let mut last = MonotonicClock.now();
        assert!(last.abs_diff(wall) < 60_000_000_000, "within a minute");
        for _ in 0..1000 {
            let now = MonotonicClock.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn a_saturated_manual_clock_never_reads_earlier() {
        let clock = Arc::new(ManualClock::new(u64::MAX - 1));
        let writer = {
            let clock = Arc::clone(&clock);
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    clock.advance(Duration::from_secs(1));
                }
            })
        };
        for _ in 0..200_000 {
            assert!(clock.now() >= u64::MAX - 1);
        }
        writer.join().unwrap();
        assert_eq!(clock.now(), u64::MAX);
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_a_paused_runtime_and_its_clones_share_the_origin() {
        let clock = TokioClock::new();
        assert_eq!(clock.now(), 0);
        tokio::time::advance(Duration::from_millis(1500)).await;
        let clone = clock;
        let later = TokioClock::new();
        assert_eq!(
            (clock.now(), clone.now(), later.now()),
            (1_500_000_000, 1_500_000_000, 0)
        );
        let real = Instant::now();
        // Auto-advance: nothing else to run, so time jumps to the timer.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), 3_601_500_000_000);
        assert_eq!(later.now(), 3_600_000_000_000);
        assert!(real.elapsed() < Duration::from_secs(1));
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn tokio_clock_reads_the_real_clock_outside_a_runtime_and_never_below_its_origin() {
        // Made outside any runtime: it runs with the real clock.
        let clock = TokioClock::default();
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(clock.now() >= start + 5_000_000);

        // In a runtime that is not paused: the real clock too.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (inside, real) = runtime.block_on(async {
            let clock = TokioClock::new();
            let real = Instant::now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            (clock.now(), real.elapsed())
        });
        assert!(inside >= 5_000_000 && real >= Duration::from_millis(5));
        drop(runtime);

        // Made in a paused runtime an hour ahead, read outside it: 0.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let ahead = runtime.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            TokioClock::new()
        });
        drop(runtime);
        assert_eq!(ahead.now(), 0);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now(), 5);
        clock.advance(Duration::from_nanos(10));
        assert_eq!(clock.now(), 15);
        clock.set(u64::MAX - 1);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), u64::MAX);
    }
}
