//! The circuit breaker (`tollgate::store::Breaker`) in front of a store
//! that fails: it opens after consecutive failures and stops calling the
//! store, probes after a cool-down that doubles while probes fail, closes
//! when one succeeds; it logs one WARN when an outage starts and one when it
//! closes, never one per request; its state is in metrics.

mod breaker_common;

use breaker_common::Flaky;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tollgate::store::{Breaker, BreakerState, StoreWrapper, Timeout, error::BreakerError};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, PolicyDecision, Store, StoreReply};
use tollgate_core::{ManualClock, Quota};

fn policy() -> Arc<Policy> {
    Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(1_000),
    )]))
}

/// One check: `Ok(allowed)`, or whether the breaker answered without
/// asking the store (`Err(true)`) or the store failed (`Err(false)`).
fn check<St: Store<Error = BreakerError<E>>, E>(store: &St) -> Result<bool, bool> {
    match store.check(&policy(), &Key::from("k"), 1) {
        StoreReply::Ready(Ok(decision)) => Ok(decision.merged().allowed()),
        StoreReply::Ready(Err(BreakerError::Open { .. })) => Err(true),
        StoreReply::Ready(Err(BreakerError::Inner(_))) => Err(false),
        StoreReply::Pending(_) => panic!("the stores here answer at once"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn it_opens_after_five_failures_in_a_row_and_stops_asking_the_store() {
    let (flaky, clock) = (Flaky::default(), ManualClock::new(1));
    let breaker = Breaker::new(flaky.clone()).clock(clock.clone());
    // Four failures, a success: the count starts again.
    flaky.set_down(true);
    for _ in 0..4 {
        assert_eq!(check(&breaker), Err(false));
    }
    flaky.set_down(false);
    assert_eq!(check(&breaker), Ok(true));
    flaky.set_down(true);
    for _ in 0..4 {
        assert_eq!(check(&breaker), Err(false));
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    // The fifth in a row opens it.
    assert_eq!(check(&breaker), Err(false));
    assert_eq!(breaker.state(), BreakerState::Open);
    let asked = flaky.calls();
    for _ in 0..100 {
        assert_eq!(check(&breaker), Err(true));
    }
    assert_eq!(flaky.calls(), asked, "an open breaker asks nothing");
    // A cool-down of 1 s: still open 1 ns before its end.
    clock.advance(SECOND - Duration::from_nanos(1));
    assert_eq!(check(&breaker), Err(true));
    assert_eq!(flaky.calls(), asked);
}

#[test]
fn a_failed_probe_doubles_the_cool_down_and_a_good_one_closes_it() {
    let (flaky, clock) = (Flaky::default(), ManualClock::new(1));
    let breaker = Breaker::new(flaky.clone())
        .cool_down(SECOND)
        .max_cool_down(Duration::from_secs(3))
        .clock(clock.clone());
    flaky.set_down(true);
    for _ in 0..5 {
        let _ = check(&breaker);
    }
    let asked = flaky.calls();
    // After 1 s: one probe, which fails: open again, for 2 s.
    clock.advance(SECOND);
    assert_eq!(check(&breaker), Err(false));
    assert_eq!(flaky.calls(), asked + 1);
    assert_eq!(breaker.state(), BreakerState::Open);
    clock.advance(Duration::from_millis(1_999));
    assert_eq!(check(&breaker), Err(true));
    clock.advance(Duration::from_millis(1));
    assert_eq!(check(&breaker), Err(false), "the second probe");
    // Then 3 s, the most: not 4.
    clock.advance(Duration::from_millis(2_999));
    assert_eq!(check(&breaker), Err(true));
    clock.advance(Duration::from_millis(1));
    assert_eq!(check(&breaker), Err(false), "the third probe, after 3 s");
    clock.advance(Duration::from_secs(3));
    // The store is back: the probe passes and closes it.
    flaky.set_down(false);
    assert_eq!(check(&breaker), Ok(true));
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(check(&breaker), Ok(true));
    // Closed again from the start: the next outage waits the first
    // cool-down, 1 s.
    flaky.set_down(true);
    for _ in 0..5 {
        let _ = check(&breaker);
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    clock.advance(SECOND);
    flaky.set_down(false);
    assert_eq!(check(&breaker), Ok(true));
}

/// A probe that never comes back (the layer gave up on it, the client went
/// away) is dropped: the next call probes again, rather than the breaker
/// staying half-open for good.
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_lets_the_next_call_probe() {
    let hanging = HangingWhileDown(Flaky::default());
    hanging.0.set_down(true);
    let clock = ManualClock::new(1);
    let breaker =
        Breaker::new(Timeout::new(hanging.clone(), Duration::from_millis(10))).clock(clock.clone());
    for _ in 0..5 {
        let reply = breaker.check(&policy(), &Key::from("k"), 1);
        assert!(reply.resolve().await.is_err(), "timed out");
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    clock.advance(SECOND);
    let probe = breaker.check(&policy(), &Key::from("k"), 1);
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    // While it is out, the others are answered at once.
    assert!(matches!(
        breaker.check(&policy(), &Key::from("k"), 1),
        StoreReply::Ready(Err(BreakerError::Open { .. }))
    ));
    drop(probe);
    assert_eq!(breaker.state(), BreakerState::Open);
    hanging.0.set_down(false);
    let again = breaker.check(&policy(), &Key::from("k"), 1);
    assert!(again.resolve().await.unwrap().merged().allowed());
    assert_eq!(breaker.state(), BreakerState::Closed);
}

/// [`Flaky`] that hangs (a stalled server) rather than failing.
#[derive(Clone)]
struct HangingWhileDown(Flaky);

impl StoreWrapper for HangingWhileDown {
    type Inner = MemoryStore;
    type Error = Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<PolicyDecision, Infallible>> + Send>>;

    fn inner(&self) -> &MemoryStore {
        &self.0.store
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate::Policy>,
        _: &tollgate::Key,
        reply: tollgate::store::StoreReply<
            <Self::Inner as tollgate::Store>::Future,
            <Self::Inner as tollgate::Store>::Error,
        >,
    ) -> tollgate::store::StoreReply<Self::Future, Self::Error> {
        reply.map(|ready| Box::pin(ready) as Self::Future, |never| never)
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: Duration,
    ) -> StoreReply<Self::Future, Infallible> {
        if self.0.down.load(Ordering::Relaxed) {
            return StoreReply::Pending(Box::pin(std::future::pending()));
        }
        let decision = self.0.store.check_now(policy, key, cost);
        StoreReply::Pending(Box::pin(std::future::ready(Ok(decision))))
    }
}

/// An open breaker's error says how long until it asks the store again,
/// and `retry_after` finds it through a wrapper whose error wraps it (a
/// `Timeout` around the breaker) and a `BoxStore`'s boxed error.
#[tokio::test]
async fn an_open_breaker_says_when_it_asks_again_through_any_wrapper() {
    let (flaky, clock) = (Flaky::default(), ManualClock::new(1));
    let breaker = Breaker::new(flaky.clone())
        .failures(1)
        .cool_down(4 * SECOND)
        .clock(clock.clone());
    let outer = tollgate::store::BoxStore::new(Timeout::new(breaker, SECOND));
    flaky.set_down(true);
    let error = |store: &tollgate::store::BoxStore| {
        let reply = store.check(&policy(), &Key::from("k"), 1);
        async move { reply.resolve().await.expect_err("the store is down") }
    };
    // The store's own failure: nothing knows when it comes back.
    let failed = error(&outer).await;
    assert_eq!(tollgate::store::retry_after(&failed), None);
    // Open: 4 s, then 1.5 s after 2.5 s.
    let open = error(&outer).await;
    assert_eq!(tollgate::store::retry_after(&open), Some(4 * SECOND));
    clock.advance(Duration::from_millis(2_500));
    let open = error(&outer).await;
    assert_eq!(
        tollgate::store::retry_after(&open),
        Some(Duration::from_millis(1_500))
    );
    assert!(
        open.to_string().contains("circuit breaker is open"),
        "{open}"
    );
}
