//! Shared pieces of the example programs: the traffic trace the demo drives
//! through every algorithm, and the figures it reports.

use std::time::Duration;
use tollgate_core::{Algorithm, Decision, Limiter, Quota};

/// One offered request: when it arrives, in nanoseconds from the trace start.
pub type Arrival = u64;

const MS: u64 = 1_000_000;

/// A bursty trace over `seconds` (at least 4): steady load at twice `rate`
/// per second, a burst of `burst` at once, a pause, and a second burst
/// straddling a one-second boundary (half just before it, half just after).
pub fn bursty_trace(rate: u64, burst: u64, seconds: u64) -> Vec<Arrival> {
    let second = 1_000 * MS;
    let mut arrivals = Vec::new();
    // Steady: 2·rate per second for the first second.
    let step = second / (2 * rate).max(1);
    arrivals.extend((0..2 * rate).map(|i| i * step));
    // A burst at 1.5 s.
    arrivals.extend(std::iter::repeat_n(second + 500 * MS, burst as usize));
    // A pause, then a burst across the boundary at (seconds − 1) s.
    let boundary = (seconds.max(4) - 1) * second;
    arrivals.extend(std::iter::repeat_n(boundary - MS, burst as usize / 2));
    arrivals.extend(std::iter::repeat_n(
        boundary,
        burst as usize - burst as usize / 2,
    ));
    arrivals.sort_unstable();
    arrivals
}

/// What one algorithm did with a trace.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests offered.
    pub offered: usize,
    /// Requests admitted.
    pub admitted: usize,
    /// The most requests admitted in any window of one period (sliding).
    pub max_in_any_period: usize,
    /// Every request's arrival and decision, in order.
    pub decisions: Vec<(Arrival, Decision)>,
}

/// Drives `trace` through one key of `algorithm` with `quota`, starting at
/// `origin` ns on the limiter's clock.
pub fn run_trace(algorithm: Algorithm, quota: Quota, origin: u64, trace: &[Arrival]) -> Outcome {
    let limiter = Limiter::new(algorithm, quota);
    let mut state = limiter.new_state();
    let decisions: Vec<_> = trace
        .iter()
        .map(|&at| (at, limiter.check(&mut state, origin + at, 1)))
        .collect();
    let admitted_at: Vec<u64> = decisions
        .iter()
        .filter(|(_, d)| d.allowed)
        .map(|(at, d)| at + duration_nanos(d.wait()))
        .collect();
    Outcome {
        algorithm,
        offered: trace.len(),
        admitted: admitted_at.len(),
        max_in_any_period: max_in_window(&admitted_at, quota.period_nanos()),
        decisions,
    }
}

/// The most timestamps (sorted or not) that fall in any half-open window
/// `[t, t + width)`.
pub fn max_in_window(times: &[u64], width: u64) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut best = 0;
    let mut start = 0;
    for end in 0..sorted.len() {
        while sorted[end] - sorted[start] >= width {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000 * MS;

    #[test]
    fn fixed_window_admits_up_to_twice_the_limit_across_a_boundary() {
        let quota = Quota::per_second(10);
        let trace = bursty_trace(10, 20, 4);
        let fixed = run_trace(Algorithm::FixedWindow, quota, 1_000 * SECOND, &trace);
        assert_eq!(fixed.max_in_any_period, 20);
        let log = run_trace(Algorithm::SlidingLog, quota, 1_000 * SECOND, &trace);
        assert!(log.max_in_any_period <= 10);
        for algorithm in Algorithm::ALL {
            let outcome = run_trace(algorithm, quota, 1_000 * SECOND, &trace);
            assert_eq!(outcome.offered, trace.len());
            assert!(
                outcome.admitted < outcome.offered,
                "{algorithm} limited nothing"
            );
        }
    }

    #[test]
    fn max_in_window_counts_a_half_open_window() {
        assert_eq!(max_in_window(&[0, 5, 9, 10, 19], 10), 3);
        assert_eq!(max_in_window(&[], 10), 0);
    }
}
