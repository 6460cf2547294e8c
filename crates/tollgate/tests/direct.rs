//! The direct and keyed limiters (`tollgate::direct`) and the client-side
//! `ThrottleLayer`, on the memory store: every algorithm admits its
//! capacity and no more, a peek charges nothing and tells the truth, and
//! waiting resolves exactly when the limit says (on tokio's paused clock,
//! which the store reads too).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::direct::UntilReadyError;
use tollgate::{DirectLimiter, Key, KeyedLimiter, MemoryStore, ThrottleLayer};
use tollgate_core::{Algorithm, Clock, ManualClock, Quota};
use tower::{Layer, Service, ServiceExt, service_fn};

/// Tokio's clock, as a store's clock: with time paused, sleeps end at once
/// and the store sees exactly the time they slept.
#[derive(Clone, Copy)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        // Far from 0, as a real clock is.
        1_000_000_000_000 + u64::try_from(self.0.elapsed().as_nanos()).unwrap()
    }
}

fn on_tokio_clock(quota: Quota, algorithm: Algorithm) -> DirectLimiter<MemoryStore<TokioClock>> {
    DirectLimiter::builder()
        .quota("api", quota)
        .algorithm(algorithm)
        .store(
            MemoryStore::builder()
                .clock(TokioClock(tokio::time::Instant::now()))
                .build(),
        )
        .direct()
        .unwrap()
}

fn on_manual_clock(
    quota: Quota,
    algorithm: Algorithm,
    clock: &ManualClock,
) -> DirectLimiter<MemoryStore<ManualClock>> {
    DirectLimiter::builder()
        .quota("api", quota)
        .algorithm(algorithm)
        .store(MemoryStore::builder().clock(clock.clone()).build())
        .direct()
        .unwrap()
}

#[test]
fn every_algorithm_admits_its_capacity_and_a_peek_charges_nothing() {
    let quota = Quota::per_minute(4);
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(7 * 60 * 1_000_000_000 + 123);
        let limiter = on_manual_clock(quota, algorithm, &clock);
        let capacity = limiter.keyed().policy().limiters()[0].capacity();
        for admitted in 0..capacity {
            let peek = limiter.peek_now();
            assert!(peek.allowed(), "{algorithm}: peek before call {admitted}");
            assert_eq!(peek.remaining(), capacity - admitted, "{algorithm}");
            assert!(
                limiter.check_now().allowed(),
                "{algorithm}: call {admitted}"
            );
        }
        for _ in 0..3 {
            let peek = limiter.peek_now();
            assert!(!peek.allowed(), "{algorithm}: peek when spent");
            assert_eq!(peek.remaining(), 0, "{algorithm}");
            assert_eq!(peek.retry_after(), peek.replenish_after(), "{algorithm}");
        }
        let refused = limiter.check_now();
        assert!(!refused.allowed(), "{algorithm}: over capacity");
        // The peek's retry time is when a call of cost 1 passes again.
        let retry = limiter.peek_now().retry_after();
        assert!(retry > Duration::ZERO, "{algorithm}");
        assert!(retry <= refused.retry_after(), "{algorithm}");
        clock.advance(retry);
        assert!(
            limiter.peek_now().allowed(),
            "{algorithm}: peek at the retry time"
        );
        assert!(
            limiter.check_now().allowed(),
            "{algorithm}: call at the retry time"
        );
    }
}

#[test]
fn a_keyed_limiter_counts_each_key_apart_and_clones_share_counters() {
    let limiter = KeyedLimiter::new(Quota::per_minute(2));
    let clone = limiter.clone();
    let (alice, bob) = (Key::from("alice"), Key::from("bob"));
    assert!(limiter.check_now(&alice).allowed());
    assert!(clone.check_now(&alice).allowed());
    assert!(!limiter.check_now(&alice).allowed());
    assert!(clone.check_n_now(&bob, 2).allowed());
    assert!(!limiter.peek_now(&bob).allowed());
}

#[test]
fn a_limiter_needs_a_limit() {
    let error = DirectLimiter::builder().direct().unwrap_err();
    assert!(error.to_string().contains("at least one limit"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn the_async_answers_are_the_sync_ones() {
    let limiter = on_tokio_clock(Quota::per_second(2), Algorithm::Gcra);
    assert_eq!(limiter.peek().await.unwrap(), limiter.peek_now());
    assert!(limiter.check().await.unwrap().allowed());
    assert!(limiter.check_n(1).await.unwrap().allowed());
    let refused = limiter.check().await.unwrap();
    assert!(!refused.allowed());
    assert_eq!(refused.retry_after(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn until_ready_resolves_exactly_when_the_limit_admits() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
    ] {
        let quota = match algorithm {
            // Two a second: each admission frees its slot a second later.
            Algorithm::SlidingLog => Quota::per_second(2),
            // 10 a second, a burst of 2: two at once, then one every 100 ms.
            _ => Quota::per_second(10).with_burst(2).unwrap(),
        };
        let limiter = on_tokio_clock(quota, algorithm);
        let start = tokio::time::Instant::now();
        let mut times = Vec::new();
        for _ in 0..5 {
            limiter.until_ready().await.unwrap();
            times.push(start.elapsed().as_millis());
        }
        let expected: &[u128] = match algorithm {
            Algorithm::SlidingLog => &[0, 0, 1000, 1000, 2000],
            _ => &[0, 0, 100, 200, 300],
        };
        assert_eq!(times, expected, "{algorithm}");
    }
}

#[tokio::test(start_paused = true)]
async fn until_ready_waits_out_the_leaky_buckets_hold() {
    // Calls leave every 100 ms; the queue holds 5.
    let quota = Quota::per_second(10).with_burst(5).unwrap();
    let limiter = on_tokio_clock(quota, Algorithm::LeakyBucket);
    let start = tokio::time::Instant::now();
    let mut times = Vec::new();
    for _ in 0..4 {
        let admitted = limiter.until_ready().await.unwrap();
        assert!(admitted.allowed());
        times.push(start.elapsed().as_millis());
    }
    assert_eq!(times, [0, 100, 200, 300]);
}

#[tokio::test(start_paused = true)]
async fn a_call_too_big_to_ever_pass_fails_at_once() {
    let limiter = on_tokio_clock(Quota::per_second(10), Algorithm::Gcra);
    let start = tokio::time::Instant::now();
    match limiter.until_n_ready(11).await {
        Err(UntilReadyError::NeverAdmitted { cost: 11 }) => {}
        other => panic!("expected NeverAdmitted, got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Nothing was charged.
    assert_eq!(limiter.peek_now().remaining(), 10);
}

/// An inner client service that records when each call reached it.
fn recording_client(
    calls: Arc<Mutex<Vec<u128>>>,
    start: tokio::time::Instant,
) -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone {
    service_fn(move |request: u32| {
        let calls = calls.clone();
        async move {
            calls.lock().unwrap().push(start.elapsed().as_millis());
            Ok::<_, Infallible>(request + 1)
        }
    })
}

#[tokio::test(start_paused = true)]
async fn the_throttle_layer_makes_calls_wait_their_turn() {
    let limiter = on_tokio_clock(
        Quota::per_second(10).with_burst(1).unwrap(),
        Algorithm::Gcra,
    );
    let start = tokio::time::Instant::now();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let client = ThrottleLayer::new(limiter).layer(recording_client(calls.clone(), start));
    // Three concurrent callers on clones of one client share the limit.
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.oneshot(i).await.unwrap() })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers.sort();
    assert_eq!(answers, [1, 2, 3]);
    let mut times = calls.lock().unwrap().clone();
    times.sort();
    assert_eq!(times, [0, 100, 200]);
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_could_never_end_and_an_inner_failure_are_errors() {
    // The layer charges 1 per call, which always fits; a direct wait of
    // cost 2 on a burst of 1 shows the error the layer would return.
    let limiter = on_tokio_clock(Quota::per_second(1), Algorithm::Gcra);
    let error = limiter.until_n_ready(2).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("more than the limit can ever admit"),
        "{error}"
    );
    // Through the layer, an inner error surfaces as the call's error.
    let failing = service_fn(|_: u32| async { Err::<u32, _>(std::io::Error::other("down")) });
    let error = ThrottleLayer::new(limiter)
        .layer(failing)
        .oneshot(1)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "down");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_holds_none_of_the_inner_services_capacity() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    /// Counts how often it is asked whether it is ready.
    #[derive(Clone)]
    struct Counting(Arc<AtomicUsize>);
    impl Service<u32> for Counting {
        type Response = u32;
        type Error = Infallible;
        type Future = std::future::Ready<Result<u32, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, n: u32) -> Self::Future {
            std::future::ready(Ok(n))
        }
    }

    let limiter = on_tokio_clock(
        Quota::per_second(10).with_burst(1).unwrap(),
        Algorithm::Gcra,
    );
    assert!(limiter.check_now().allowed()); // the burst is spent
    let polled = Arc::new(AtomicUsize::new(0));
    let client = ThrottleLayer::new(limiter).layer(Counting(polled.clone()));
    let call = tokio::spawn(client.oneshot(7));
    // Halfway through the 100 ms wait, the inner service was never asked.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(polled.load(Ordering::SeqCst), 0);
    assert_eq!(call.await.unwrap().unwrap(), 7);
    assert_eq!(polled.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_dropped_during_its_hold_leaves_the_call_charged() {
    // Calls leave every 100 ms; the first leaves at once, the second is
    // admitted and held for 100 ms.
    let quota = Quota::per_second(10).with_burst(5).unwrap();
    let limiter = on_tokio_clock(quota, Algorithm::LeakyBucket);
    limiter.until_ready().await.unwrap();
    let held = tokio::time::timeout(Duration::from_millis(10), limiter.until_ready()).await;
    assert!(
        held.is_err(),
        "the second call is held, so the timeout drops it"
    );
    // Both calls are charged: a third gets the slot at 200 ms, 190 ms
    // after now (the timeout's 10 ms have passed).
    assert_eq!(limiter.check_now().wait(), Duration::from_millis(190));
}

/// A direct limiter on `store` counting under `key`.
fn direct_in(
    store: &MemoryStore<ManualClock>,
    algorithm: Algorithm,
    key: &str,
) -> DirectLimiter<MemoryStore<ManualClock>> {
    DirectLimiter::builder()
        .quota("api", Quota::per_minute(4))
        .algorithm(algorithm)
        .store(store.clone())
        .direct()
        .unwrap()
        .with_key(Key::from(key))
}

#[tokio::test]
async fn a_direct_limiter_and_its_keyed_counterpart_count_on_one_state() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(7 * 60 * 1_000_000_000 + 123);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let limiter = direct_in(&store, algorithm, "partner");
        let (keyed, key) = (limiter.keyed(), limiter.key());
        let capacity = keyed.policy().limiters()[0].capacity();
        // Charged through the limiter, seen through the keyed one, the
        // store, and back; synchronous and asynchronous alike.
        assert!(limiter.check_now().allowed(), "{algorithm}");
        assert_eq!(keyed.peek_now(key).remaining(), capacity - 1, "{algorithm}");
        assert!(keyed.check_now(key).allowed(), "{algorithm}");
        assert!(keyed.check(key).await.unwrap().allowed(), "{algorithm}");
        assert_eq!(limiter.peek_now().remaining(), capacity - 3, "{algorithm}");
        assert_eq!(limiter.peek().await.unwrap(), limiter.peek_now());
        store.debit_now(keyed.policy(), key, u32::try_from(capacity - 3).unwrap());
        assert!(!limiter.check_now().allowed(), "{algorithm}: debited");
        assert!(!keyed.check_now(key).allowed(), "{algorithm}");
        // A reset in the store is a reset for the limiter.
        store.reset_now(keyed.policy(), key);
        for call in 0..capacity {
            assert!(limiter.check_now().allowed(), "{algorithm}: call {call}");
        }
        assert!(!keyed.check_now(key).allowed(), "{algorithm}: spent");
        assert_eq!(store.len(), 1, "{algorithm}: one key, held apart");
    }
}

#[test]
fn clones_share_the_count_whenever_they_were_made() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow] {
        let store = MemoryStore::builder()
            .clock(ManualClock::new(1_000_000_000_000))
            .build();
        let limiter = direct_in(&store, algorithm, "partner");
        let before = limiter.clone();
        assert!(limiter.check_now().allowed());
        let after = limiter.clone();
        assert!(before.check_now().allowed());
        assert!(after.check_n_now(2).allowed());
        assert!(!limiter.check_now().allowed(), "{algorithm}");
        assert!(!before.check_now().allowed(), "{algorithm}");
        // Another key of the same limits counts apart.
        let other = limiter.clone().with_key(Key::from("other"));
        assert!(other.check_now().allowed(), "{algorithm}");
    }
}

#[test]
fn a_dropped_direct_limiter_leaves_its_count_in_the_store() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingLog] {
        let store = MemoryStore::builder()
            .clock(ManualClock::new(1_000_000_000_000))
            .build();
        let limiter = direct_in(&store, algorithm, "partner");
        let (keyed, key) = (limiter.keyed().clone(), limiter.key().clone());
        assert!(limiter.check_n_now(4).allowed());
        let clone = limiter.clone();
        drop(limiter);
        assert!(!clone.check_now().allowed(), "{algorithm}: a clone lives");
        drop(clone);
        assert!(!keyed.check_now(&key).allowed(), "{algorithm}: still spent");
        assert_eq!(store.len(), 1, "{algorithm}");
    }
}

#[test]
fn a_direct_limiters_key_is_never_evicted_and_the_store_stays_bounded() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingWindow] {
        let clock = ManualClock::new(1_000_000_000_000);
        let store = MemoryStore::builder()
            .shards(1)
            .max_keys(4)
            .clock(clock.clone())
            .build();
        let limiter = direct_in(&store, algorithm, "partner");
        assert!(limiter.check_n_now(4).allowed());
        // A flood of other keys of the same limits, none at rest.
        for n in 0..100u64 {
            limiter.keyed().check_now(&Key::from(n));
        }
        // The bound, and the one key held apart.
        assert!(store.len() <= 4 + 1, "{algorithm}: {} keys", store.len());
        assert!(!limiter.check_now().allowed(), "{algorithm}: forgotten");
        // Limiters made and dropped, each with a key of its own, leave the
        // store no larger than its bound.
        for n in 0..100u64 {
            let other = limiter.clone().with_key(Key::from(1_000 + n));
            assert!(other.check_now().allowed(), "{algorithm}");
        }
        assert!(store.len() <= 4 + 1, "{algorithm}: {} keys", store.len());
        assert!(!limiter.check_now().allowed(), "{algorithm}: forgotten");
    }
}
