//! The Redis server's clock as seen from this process, so that a call can
//! carry a deadline in the server's own time.
//!
//! Every reply of the script carries the server's time `R` (from `TIME`),
//! read while the script ran, which was before the reply arrived here at
//! local time `r`. So `R − r` is a lower bound of the offset between the two
//! clocks. The estimate is the largest such bound seen lately: the tightest
//! one (from the fastest round trip), and never above the true offset, so a
//! deadline made from it is never later than it should be. A call that runs
//! after its deadline charges nothing; one that runs just before it (within
//! the fastest round trip's uncertainty) may be refused as late too, which
//! the layer answers as it does a timeout.
//!
//! Clocks drift apart: bounds older than two windows are forgotten, so a
//! drifting clock moves the estimate by at most its drift over that time
//! (microseconds at the drift of an NTP-disciplined clock).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a window of samples lasts; the estimate uses this window and
/// the one before.
const WINDOW: Duration = Duration::from_secs(5);

/// The offset of the server's clock from this process's, estimated.
#[derive(Debug)]
pub(crate) struct ServerClock {
    origin: Instant,
    samples: Mutex<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    window_start: u64,
    current: Option<i64>,
    previous: Option<i64>,
}

impl ServerClock {
    pub(crate) fn new() -> Self {
        ServerClock {
            origin: Instant::now(),
            samples: Mutex::default(),
        }
    }

    /// Microseconds on this process's clock.
    fn local_micros(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Records the server's time, in µs, read in a reply that arrives now.
    pub(crate) fn observe(&self, server_micros: u64) {
        let local = self.local_micros();
        let bound = i64::try_from(server_micros)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(local).unwrap_or(i64::MAX));
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let window = u64::try_from(WINDOW.as_micros()).unwrap_or(u64::MAX);
        if local.saturating_sub(samples.window_start) >= window {
            samples.previous = samples.current.take();
            samples.window_start = local;
        }
        samples.current = Some(samples.current.map_or(bound, |c| c.max(bound)));
    }

    /// The server time, in µs, by which a call made now must have run for
    /// its caller, who waits `within`, to still be waiting; `None` before
    /// any reply was seen.
    pub(crate) fn deadline(&self, within: Duration) -> Option<u64> {
        let offset = {
            let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
            match (samples.current, samples.previous) {
                (Some(a), Some(b)) => a.max(b),
                (a, b) => a.or(b)?,
            }
        };
        let within = i64::try_from(within.as_micros()).unwrap_or(i64::MAX);
        let local = i64::try_from(self.local_micros()).unwrap_or(i64::MAX);
        u64::try_from(local.saturating_add(offset).saturating_add(within)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_tightest_lower_bound_of_the_offset() {
        let clock = ServerClock::new();
        assert_eq!(clock.deadline(Duration::from_millis(100)), None);
        // The server is 1 s ahead; replies seen 300 µs and 20 µs after the
        // server read its clock.
        let local = clock.local_micros();
        clock.observe(local + 1_000_000 - 300);
        clock.observe(clock.local_micros() + 1_000_000 - 20);
        let deadline = clock.deadline(Duration::from_millis(100)).unwrap();
        let expected = clock.local_micros() + 1_000_000 + 100_000;
        // Never later than the true deadline, and within the fastest
        // sample's 20 µs (plus the time this test takes) of it.
        assert!(deadline <= expected, "{deadline} > {expected}");
        assert!(expected - deadline < 5_000, "{}", expected - deadline);
    }
}
