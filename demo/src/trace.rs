//! The traffic the demo offers every algorithm, and how to measure what got
//! through.

use tollgate_core::{Algorithm, Limiter, Quota};

/// A bursty trace of arrivals against one quota, laid out in periods of the
/// quota so that its window boundaries are known in advance.
///
/// With `P` the period and `L` the limit:
///
/// - **steady**: `4L` requests evenly over `[0, 2P)`, twice the rate;
/// - **burst**: `2L` requests at once at `2.5P`;
/// - **pause** until `3.8P`;
/// - **boundary burst**: `L` requests at `3.8P`, just before the window
///   boundary at `4P`, and `L` at `4.02P`, just after it.
///
/// The first half of the boundary burst is sent a fifth of a period early
/// so that a slow scheduler cannot push it past the boundary; the second
/// half is sent after the boundary, which a timer never reaches early.
/// Time 0 must lie on a window boundary of the server's clock (see
/// [`aligned_start`]).
#[derive(Clone, Debug)]
pub struct Trace {
    /// The quota every algorithm enforces.
    pub quota: Quota,
    /// When each request is sent, in nanoseconds from the start, sorted.
    pub arrivals: Vec<u64>,
}

impl Trace {
    /// The trace for `quota` (see the type's documentation).
    pub fn bursty(quota: Quota) -> Trace {
        let period = quota.period_nanos();
        let limit = quota.limit();
        // `num / den` of a period, in integers: no float rounding in the times.
        let at = |num: u64, den: u64| {
            u64::try_from(u128::from(period) * u128::from(num) / u128::from(den))
                .unwrap_or(u64::MAX)
        };
        let mut arrivals = Vec::new();
        // Steady: 4L over two periods, one every P / 2L.
        let step = period / (2 * limit);
        arrivals.extend((0..4 * limit).map(|i| i * step));
        // A burst of 2L at once.
        arrivals.extend(std::iter::repeat_n(at(5, 2), 2 * limit as usize));
        // After a pause, L before the boundary at 4P and L after it.
        arrivals.extend(std::iter::repeat_n(at(19, 5), limit as usize));
        arrivals.extend(std::iter::repeat_n(at(201, 50), limit as usize));
        arrivals.sort_unstable();
        Trace { quota, arrivals }
    }

    /// A load below the limit, then a flood: `L` requests evenly over
    /// `[0, 2P)` (half the quota's rate), then `3L` evenly over `[2P, 3P)`
    /// (three times it). The local-first part of `demo --redis` uses it:
    /// the first half shows the Redis calls a store makes while requests
    /// pass, the second the calls it makes while they are refused.
    pub fn under_then_flood(quota: Quota) -> Trace {
        let period = quota.period_nanos();
        let limit = quota.limit();
        let under = (0..limit).map(|i| i * (2 * period / limit));
        let flood = (0..3 * limit).map(|i| 2 * period + i * (period / (3 * limit)));
        Trace {
            quota,
            arrivals: under.chain(flood).collect(),
        }
    }

    /// The window boundary that the last burst straddles, in nanoseconds
    /// from the start.
    pub fn boundary(&self) -> u64 {
        4 * self.quota.period_nanos()
    }

    /// When the last request is sent, in nanoseconds from the start.
    pub fn last_arrival(&self) -> u64 {
        self.arrivals.last().copied().unwrap_or(0)
    }

    /// A one-line description of the trace, for the demo's header.
    pub fn describe(&self) -> String {
        let period = self.quota.period();
        let limit = self.quota.limit();
        let secs = |periods: f64| format!("{:.2} s", period.as_secs_f64() * periods);
        // Twice the quota's rate, written the way quotas are (`20/s`).
        let steady = Quota::new(2 * limit, period).map_or_else(
            |_| format!("{} per {period:?}", 2 * limit),
            |q| q.to_string(),
        );
        format!(
            "{} requests: steady at {steady} until {}, {} at once at {}, a pause, \
             then {limit} at {} and {limit} at {} (a window boundary at {})",
            self.arrivals.len(),
            secs(2.0),
            2 * limit,
            secs(2.5),
            secs(3.8),
            secs(4.02),
            secs(4.0),
        )
    }
}

/// The first moment on a clock reading `now` (ns) that is a multiple of
/// `period` and at least `lead` ahead: a trace started there has its
/// periods on the fixed window's boundaries, which are multiples of the
/// period from the clock's origin.
pub fn aligned_start(now: u64, period: u64, lead: u64) -> u64 {
    let earliest = now.saturating_add(lead);
    earliest.div_ceil(period).saturating_mul(period)
}

/// When `algorithm` alone, at the trace's exact times, admits each request
/// it admits (in ns from the start, the leaky bucket's hold included), the
/// trace starting at `origin` on the limiter's clock: what a server should
/// see when nothing is late.
pub fn ideal_admissions(algorithm: Algorithm, trace: &Trace, origin: u64) -> Vec<u64> {
    ideal_admissions_at(algorithm, trace.quota, &trace.arrivals, origin)
}

/// [`ideal_admissions`] at the moments `arrivals` (ns from the start,
/// sorted): the times requests were really sent, say.
pub fn ideal_admissions_at(
    algorithm: Algorithm,
    quota: Quota,
    arrivals: &[u64],
    origin: u64,
) -> Vec<u64> {
    let limiter = Limiter::new(algorithm, quota);
    let mut state = limiter.new_state();
    arrivals
        .iter()
        .filter_map(|&at| {
            let decision = limiter.check(&mut state, origin.saturating_add(at), 1);
            decision.allowed().then_some(at + decision.wait_nanos())
        })
        .collect()
}

/// The most of `times` (sorted or not) that fall in any half-open window
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn the_boundary_burst_shows_the_fixed_window_at_twice_the_limit() {
        let trace = Trace::bursty(Quota::per_second(10));
        assert_eq!(trace.arrivals.len(), 80);
        let origin = aligned_start(1_700_000_000 * SECOND + 123, SECOND, SECOND / 5);
        assert_eq!(origin % SECOND, 0);
        let fixed = ideal_admissions(Algorithm::FixedWindow, &trace, origin);
        assert_eq!(max_in_window(&fixed, SECOND), 20);
        let log = ideal_admissions(Algorithm::SlidingLog, &trace, origin);
        assert_eq!(max_in_window(&log, SECOND), 10);
        for algorithm in Algorithm::ALL {
            let admitted = ideal_admissions(algorithm, &trace, origin).len();
            assert!(
                admitted < trace.arrivals.len(),
                "{algorithm} limited nothing"
            );
        }
    }

    #[test]
    fn under_then_flood_is_half_the_rate_then_three_times_it() {
        let trace = Trace::under_then_flood(Quota::per_second(100));
        assert_eq!(trace.arrivals.len(), 400);
        assert!(trace.arrivals.is_sorted());
        let under = trace.arrivals.iter().filter(|&&t| t < 2 * SECOND).count();
        assert_eq!(under, 100);
        assert_eq!(max_in_window(&trace.arrivals[..100], SECOND), 50);
        assert_eq!(max_in_window(&trace.arrivals[100..], SECOND), 300);
        assert!(trace.last_arrival() < 3 * SECOND);
    }

    #[test]
    fn max_in_window_counts_a_half_open_window() {
        assert_eq!(max_in_window(&[0, 5, 9, 10, 19], 10), 3);
        assert_eq!(max_in_window(&[], 10), 0);
    }

    #[test]
    fn aligned_start_is_the_next_boundary_after_the_lead() {
        assert_eq!(aligned_start(950, 100, 20), 1000);
        assert_eq!(aligned_start(980, 100, 20), 1000);
        assert_eq!(aligned_start(981, 100, 20), 1100);
    }
}
