//! The direct limiter on a real redis-server, for every algorithm: it
//! admits the limit's capacity and no more, a peek (a check of cost 0 in
//! the scripts) charges nothing, and waiting resolves no earlier than the
//! limit allows. Two limiters on one server with the same limit name and
//! key share one counter, as two processes would.

use std::time::{Duration, Instant};
use tollgate::{DirectLimiter, Key, ThrottleLayer};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;
use tower::{Layer, ServiceExt, service_fn};

async fn limiter(
    server: &RedisServer,
    quota: Quota,
    algorithm: Algorithm,
) -> DirectLimiter<RedisStore> {
    let store = RedisStore::connect(server.url()).await.unwrap();
    DirectLimiter::builder()
        .quota("partner-api", quota)
        .algorithm(algorithm)
        .store(store)
        .direct()
        .unwrap()
        .with_key(Key::from(algorithm.name()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_admits_its_capacity_and_a_peek_charges_nothing() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let limiter = limiter(&server, Quota::per_hour(4), algorithm).await;
        let capacity = limiter.keyed().policy().limiters()[0].capacity();
        let mut admitted = 0;
        loop {
            let peek = limiter.peek().await.unwrap();
            let check = limiter.check().await.unwrap();
            assert_eq!(
                peek.allowed(),
                check.allowed(),
                "{algorithm}: call {admitted}"
            );
            if !check.allowed() {
                break;
            }
            // The call took the unit the peek saw.
            assert_eq!(check.remaining() + 1, peek.remaining(), "{algorithm}");
            admitted += 1;
            assert!(admitted <= capacity + 1, "{algorithm}: admits without end");
        }
        // The server's clock moves between calls: the leaky bucket's first
        // call has left by the time the queue is full, so once any time has
        // passed its queue of `burst` takes one more (core does the same).
        if algorithm == Algorithm::LeakyBucket {
            assert!((capacity..=capacity + 1).contains(&admitted), "{admitted}");
        } else {
            assert_eq!(admitted, capacity, "{algorithm}");
        }
        for _ in 0..3 {
            let peek = limiter.peek().await.unwrap();
            assert!(!peek.allowed(), "{algorithm}: peek when spent");
            assert_eq!(peek.remaining(), 0, "{algorithm}");
        }
        let refused = limiter.check().await.unwrap();
        assert!(!refused.allowed(), "{algorithm}: over capacity");
        let peek = limiter.peek().await.unwrap();
        assert!(peek.retry_after() > Duration::ZERO, "{algorithm}");
        assert!(peek.retry_after() <= refused.retry_after(), "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_in_two_processes_share_one_counter() {
    let server = RedisServer::start();
    let quota = Quota::per_hour(3);
    let (a, b) = (
        limiter(&server, quota, Algorithm::Gcra).await,
        limiter(&server, quota, Algorithm::Gcra).await,
    );
    assert!(a.check().await.unwrap().allowed());
    assert!(b.check().await.unwrap().allowed());
    assert!(a.check().await.unwrap().allowed());
    assert!(!b.check().await.unwrap().allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_redis_is_never_early() {
    let server = RedisServer::start();
    // 20 a second, a burst of 1: one call every 50 ms.
    let quota = Quota::per_second(20).with_burst(1).unwrap();
    let limiter = limiter(&server, quota, Algorithm::Gcra).await;
    let start = Instant::now();
    for _ in 0..4 {
        limiter.until_ready().await.unwrap();
    }
    // Three waits of 50 ms after the first call (less the round trips of
    // the first check, at most a few ms on loopback).
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(140), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // The same through the client-side layer.
    let client = ThrottleLayer::new(limiter).layer(service_fn(|n: u32| async move {
        Ok::<_, std::convert::Infallible>(n)
    }));
    let start = Instant::now();
    for n in 0..3 {
        assert_eq!(client.clone().oneshot(n).await.unwrap(), n);
    }
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(90), "{elapsed:?}");
}
