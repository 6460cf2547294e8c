//! Clocks: where `now` comes from.
//!
//! Every algorithm takes `now` as integer nanoseconds; a [`Clock`] supplies
//! it. Production code uses [`MonotonicClock`] (never goes backwards, and
//! counts from the Unix epoch so fixed windows line up across machines);
//! tests use [`ManualClock`] and move time by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
#[cfg(not(feature = "quanta"))]
use std::time::Instant;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time, in nanoseconds.
///
/// Implementations must be cheap: the rate limiter reads the clock once per
/// request.
pub trait Clock: Send + Sync + 'static {
    /// The current time in nanoseconds since this clock's origin.
    fn now(&self) -> u64;
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
/// process share one origin and agree.
///
/// The monotonic source is the CPU's time-stamp counter through `quanta`
/// (feature `quanta`, on by default; quanta falls back to the OS clock where
/// the counter cannot be trusted), about 10 ns a reading; without the
/// feature, [`Instant`](std::time::Instant), about 25 ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

struct Anchor {
    wall_nanos: u64,
    #[cfg(feature = "quanta")]
    counter: quanta::Clock,
    #[cfg(feature = "quanta")]
    start: u64,
    #[cfg(not(feature = "quanta"))]
    start: Instant,
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        #[cfg(feature = "quanta")]
        {
            let counter = quanta::Clock::new();
            Anchor {
                wall_nanos: WallClock.now(),
                start: counter.raw(),
                counter,
            }
        }
        #[cfg(not(feature = "quanta"))]
        Anchor {
            wall_nanos: WallClock.now(),
            start: Instant::now(),
        }
    })
}

impl Anchor {
    #[inline]
    fn elapsed_nanos(&self) -> u64 {
        #[cfg(feature = "quanta")]
        return self.counter.delta_as_nanos(self.start, self.counter.raw());
        #[cfg(not(feature = "quanta"))]
        return saturating_nanos(self.start.elapsed());
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        let anchor = anchor();
        anchor.wall_nanos.saturating_add(anchor.elapsed_nanos())
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
