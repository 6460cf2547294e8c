//! A store failure as every layer reports it (the HTTP layer, the in-flight
//! layer's fallback, tonic's per-message limits): one WARN at most every
//! 10 s whatever the traffic, the failures held back counted in the next,
//! and every failure in `tollgate_store_errors_total`. A binary of its own:
//! the throttle is one per process.
#![cfg(feature = "metrics")]

use tollgate::{NamedLimit, Policy};
use tollgate_tests::logs::Captured;
use tollgate_tests::metrics::Counts;

#[test]
fn an_outage_is_logged_once_and_counted_in_full() {
    let (logs, _guard) = Captured::install();
    let counts = Counts::default();
    let policy = Policy::new(vec![NamedLimit::new("api", "10/s".parse().unwrap())]);
    metrics::with_local_recorder(&counts, || {
        for _ in 0..500 {
            tollgate::store::report_failure(&policy, &"connection refused");
        }
    });
    let lines = logs.lines();
    let warns: Vec<_> = lines.iter().filter(|l| l.starts_with("WARN")).collect();
    assert_eq!(warns.len(), 1, "{lines:#?}");
    assert!(warns[0].contains("connection refused"), "{lines:#?}");
    assert!(warns[0].contains("held_back=0"), "{lines:#?}");
    assert_eq!(counts.get("tollgate_store_errors_total{limits=api}"), 500);
}
