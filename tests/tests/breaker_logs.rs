//! The circuit breaker's logs and metrics, in a test binary of its own:
//! `tracing` caches whether a call site is wanted, and another test hitting
//! the same call sites on another thread at the same moment can make a
//! thread-local capture miss an event.
#![cfg(feature = "metrics")]

mod breaker_common;

use breaker_common::Flaky;
use std::sync::Arc;
use std::time::Duration;
use tollgate::store::{Breaker, error::BreakerError};
use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{ManualClock, Quota};
use tollgate_tests::logs::Captured;
use tollgate_tests::metrics::Counts;

/// One check: whether it was answered.
fn check<St: Store<Error = BreakerError<E>>, E>(store: &St) -> bool {
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(1_000),
    )]));
    matches!(
        store.check(&policy, &Key::from("k"), 1),
        StoreReply::Ready(Ok(_))
    )
}

/// One WARN when it opens, one WARN when it closes, whatever the number of
/// requests in between; the state in metrics.
#[test]
fn an_outage_logs_twice_and_its_state_is_in_metrics() {
    let (logs, _guard) = Captured::install();
    let counts = Counts::default();
    let (flaky, clock) = (Flaky::default(), ManualClock::new(1));
    let breaker = Breaker::new(flaky.clone()).clock(clock.clone());
    let state = "tollgate_breaker_state{store=Flaky}";
    metrics::with_local_recorder(&counts, || {
        flaky.set_down(true);
        for _ in 0..100 {
            let _ = check(&breaker);
        }
        assert_eq!(counts.gauge(state), Some(2.0), "open");
        clock.advance(Duration::from_secs(1));
        let _ = check(&breaker); // a failed probe
        clock.advance(Duration::from_secs(2));
        flaky.set_down(false);
        for _ in 0..100 {
            assert!(check(&breaker));
        }
        assert_eq!(counts.gauge(state), Some(0.0), "closed");
    });
    assert_eq!(counts.get("tollgate_breaker_opened_total{store=Flaky}"), 1);
    let lines = logs.lines();
    let warns: Vec<_> = lines.iter().filter(|l| l.starts_with("WARN")).collect();
    let infos: Vec<_> = lines.iter().filter(|l| l.starts_with("INFO")).collect();
    // The end of the outage as visible as its start: both at WARN.
    assert_eq!(warns.len(), 2, "{lines:#?}");
    assert!(warns[0].contains("circuit breaker open"), "{lines:#?}");
    assert!(warns[1].contains("circuit breaker closed"), "{lines:#?}");
    assert!(infos.is_empty(), "{lines:#?}");
}
