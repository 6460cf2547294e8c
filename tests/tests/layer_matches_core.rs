//! The layer decides exactly as the core does: the same arrival trace,
//! through `tollgate-core` directly and through a `RateLimitLayer` over a
//! `MemoryStore` on a manual clock, gives the same status for every request,
//! for every algorithm.

use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::{GlobalKey, MemoryStore, RateLimitLayer};
use tollgate_core::{Algorithm, Limiter, ManualClock, Quota};
use tollgate_tests::app::{behind, status};

/// Gaps between arrivals, in milliseconds: bursts, steady traffic, pauses.
fn trace() -> Vec<u64> {
    let mut gaps = vec![0; 12];
    gaps.extend([50; 30]);
    gaps.push(2_000);
    gaps.extend([0; 15]);
    gaps.extend([130; 20]);
    gaps.push(999);
    gaps.extend([1; 10]);
    gaps
}

// Tokio's clock is paused, so the leaky bucket's holds end at once.
#[tokio::test(start_paused = true)]
async fn every_algorithm_gives_the_same_decisions_through_the_layer() {
    let quota = Quota::per_second(8).with_burst(4).unwrap();
    for algorithm in Algorithm::ALL {
        // Start on a window boundary plus a bit, so windows are exercised.
        let start = 1_700_000_000_000_000_000 + 250_000_000;
        let clock = ManualClock::new(start);
        let layer = RateLimitLayer::builder()
            .quota("api", quota)
            .algorithm(algorithm)
            .key(GlobalKey)
            .store(MemoryStore::builder().clock(clock.clone()).build())
            .build();
        let mut service = behind(layer);

        let limiter = Limiter::new(algorithm, quota);
        let mut state = limiter.new_state();
        let mut now = start;
        let mut seen = [0usize; 2];
        for (i, gap) in trace().into_iter().enumerate() {
            clock.advance(Duration::from_millis(gap));
            now += gap * 1_000_000;
            let expected = limiter.check(&mut state, now, 1).allowed();
            let got = status(&mut service, Request::new(())).await == StatusCode::OK;
            assert_eq!(got, expected, "{algorithm}, request {i}");
            seen[usize::from(got)] += 1;
        }
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "{algorithm}: the trace must both pass and limit"
        );
    }
}
