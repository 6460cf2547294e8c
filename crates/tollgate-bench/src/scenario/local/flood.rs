//! Part 3 of the local scenario: instances flooding one key, and how far
//! their admissions run past what the algorithm allows, at the end and at
//! the worst moment.

use super::setup::{
    FLOOD, GCRA_BURST, INSTANCES, RATE, TASKS, YIELD_EVERY, decide, decide_on, instances, limit,
    total,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate::Key;
use tollgate_core::Algorithm;
use tollgate_redis::LocalMode;

/// Part 3: one flood.
#[derive(Clone, Debug)]
pub struct Flood {
    /// `None`: exact mode; `Some(ms)`: periodic mode at that interval.
    pub interval_ms: Option<u64>,
    /// GCRA or the fixed window.
    pub algorithm: Algorithm,
    /// How long it lasted, s.
    pub seconds: f64,
    /// Requests admitted, all instances.
    pub admitted: u64,
    /// Decisions, all instances.
    pub decisions: u64,
    /// Fixed windows the flood reached (1 s each, from its start to the stop).
    pub windows: u64,
    /// What the algorithm allows over the flood.
    pub allowed: u64,
    /// The most admitted beyond what the algorithm allowed by then, at any
    /// admission during the flood.
    pub peak: i64,
    /// Exact mode: units granted by reservations (0 in periodic mode).
    pub reserved: u64,
    /// Exact mode: units that lapsed unspent.
    pub lapsed: u64,
}

impl Flood {
    /// admitted − allowed (negative: capacity left unused).
    pub fn over(&self) -> i64 {
        self.admitted as i64 - self.allowed as i64
    }

    /// Exact mode: units still held, reserved and neither spent nor lapsed.
    pub fn unspent(&self) -> u64 {
        self.reserved.saturating_sub(self.admitted + self.lapsed)
    }
}

/// What `algorithm` (at `RATE`, GCRA with `GCRA_BURST`) allows over
/// `seconds` from the start of a flood that has reached its `windows`th
/// fixed window: GCRA, `burst + rate × seconds` (a full bucket at the
/// start, then one request per emission interval); the fixed window,
/// `limit × windows`.
pub fn allowed(algorithm: Algorithm, seconds: f64, windows: u64) -> u64 {
    match algorithm {
        Algorithm::FixedWindow => RATE * windows,
        _ => GCRA_BURST + (RATE as f64 * seconds).floor() as u64,
    }
}

/// Part 3: [`INSTANCES`] × 16 tasks deciding as fast as they can on one key
/// for [`FLOOD`], in exact mode (`interval_ms` `None`) or periodic mode.
///
/// In periodic mode each instance's tick (one per store, started by its
/// first request) is set going first, on another key, a quarter of the
/// interval after the one before: instances started at different times
/// sync out of step, as in a deployment. The flood starts 50 ms after a
/// whole second (a fixed window's start) and ends within the next window.
pub(super) async fn flood(
    url: &str,
    prefix: &str,
    interval_ms: Option<u64>,
    algorithm: Algorithm,
) -> Flood {
    let mode = match interval_ms {
        None => LocalMode::Exact,
        Some(ms) => LocalMode::Periodic {
            sync_interval: Duration::from_millis(ms),
        },
    };
    let stores = instances(url, prefix, mode).await;
    let policy = limit(algorithm, true);
    if let Some(ms) = interval_ms {
        let apart = Duration::from_millis(ms) / INSTANCES as u32;
        for store in &stores {
            let started = tokio::time::Instant::now();
            decide_on(store, &policy, &Key::from_bytes(b"tick")).await;
            tokio::time::sleep_until(started + apart).await;
        }
    }
    // Windows start on whole seconds since 1970, by the server's clock
    // (this machine's).
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    let into_second = Duration::from_nanos(u64::from(since_epoch.subsec_nanos()));
    let to_next = Duration::from_secs(1) - into_second + Duration::from_millis(50);
    tokio::time::sleep(to_next).await;
    let first_window = window_now();
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicI64::new(i64::MIN));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = stores[t % INSTANCES].clone();
            let (policy, stop) = (policy.clone(), stop.clone());
            let (admitted, peak) = (admitted.clone(), peak.clone());
            tokio::spawn(async move {
                let mut decisions = 0u64;
                'run: loop {
                    for _ in 0..YIELD_EVERY {
                        if stop.load(Ordering::Relaxed) {
                            break 'run;
                        }
                        if decide(&store, &policy).await {
                            // Over what the algorithm allows by now.
                            let n = admitted.fetch_add(1, Ordering::Relaxed) + 1;
                            let windows = window_now() - first_window + 1;
                            let allowed =
                                allowed(algorithm, started.elapsed().as_secs_f64(), windows);
                            peak.fetch_max(n as i64 - allowed as i64, Ordering::Relaxed);
                        }
                        decisions += 1;
                    }
                    tokio::task::yield_now().await;
                }
                decisions
            })
        })
        .collect();
    tokio::time::sleep(FLOOD).await;
    stop.store(true, Ordering::Relaxed);
    let windows = window_now() - first_window + 1;
    let mut decisions = 0;
    for task in tasks {
        decisions += task.await.expect("a task ends");
    }
    // Until every task ended: a decision in flight at the stop still
    // counts, so the time it may have taken is allowed too.
    let seconds = started.elapsed().as_secs_f64();
    let stats = total(&stores);
    Flood {
        interval_ms,
        algorithm,
        seconds,
        admitted: admitted.load(Ordering::Relaxed),
        decisions,
        windows,
        allowed: allowed(algorithm, seconds, windows),
        peak: peak.load(Ordering::Relaxed),
        reserved: stats.reserved_units,
        lapsed: stats.lapsed_units,
    }
}

/// The fixed window (of one second) the clock is in now.
fn window_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_follows_each_algorithm() {
        assert_eq!(allowed(Algorithm::Gcra, 1.9, 2), GCRA_BURST + 1_900);
        assert_eq!(allowed(Algorithm::FixedWindow, 1.9, 2), 2 * RATE);
    }

    #[test]
    fn over_admission_and_unspent_units() {
        let f = Flood {
            interval_ms: None,
            algorithm: Algorithm::Gcra,
            seconds: 1.9,
            admitted: 1_990,
            decisions: 10_000,
            windows: 2,
            allowed: 2_000,
            peak: -1,
            reserved: 2_000,
            lapsed: 4,
        };
        assert_eq!(f.over(), -10);
        assert_eq!(f.unspent(), 6);
    }
}
