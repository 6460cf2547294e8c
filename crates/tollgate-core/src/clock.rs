//! Clocks: where `now` comes from.
//!
//! Every algorithm takes `now` as integer nanoseconds; a [`Clock`] supplies
//! it. Production code uses [`MonotonicClock`] (never goes backwards, and
//! counts from the Unix epoch so fixed windows line up across machines);
//! tests use [`ManualClock`] and move time by hand.

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
