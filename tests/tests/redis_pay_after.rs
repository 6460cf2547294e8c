//! Pay after on Redis: a cost reported once the response is ready is
//! charged by `debit.lua` (into debt where the limit is spent), before the
//! response is handed on; the third request of 500 units against 1,000 a
//! minute is refused with a `Retry-After` that, honoured, is enough. A
//! real `redis-server`, the store on a manual clock (the scripts read it).

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::Store;
use tollgate::pay_after::Meter;
use tollgate::store::{PolicyDebit, PolicyRefund};
use tollgate::{GlobalKey, RateLimitLayer};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::logs::Captured;
use tollgate_tests::redis::RedisServer;
use tower::{Layer, ServiceExt, service_fn};

const MINUTE: u64 = 60_000_000_000;

/// A handler that reports 500 units through the request's meter.
async fn generate(request: Request<()>) -> Result<Response<String>, Infallible> {
    let meter = request.extensions().get::<Meter>().cloned();
    meter.expect("pay_after puts a meter in").add(500);
    Ok(Response::new("tokens".to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_units_against_a_thousand_a_minute_in_redis() {
    let server = RedisServer::start();
    // The leaky bucket shapes (it holds the third request rather than
    // refusing it): see tollgate-core's tests/debts.rs.
    let not_shaping = |a: &Algorithm| *a != Algorithm::LeakyBucket;
    for algorithm in Algorithm::ALL.into_iter().filter(not_shaping) {
        let clock = ManualClock::new(1_700_000_000 * 1_000_000_000 + 20 * MINUTE + MINUTE / 4);
        let store = RedisStore::builder(server.url())
            .prefix(format!("pay-after-{algorithm}"))
            .test_clock(clock.clone())
            .connect()
            .await
            .expect("connect");
        let layer = RateLimitLayer::builder()
            .quota("tokens", Quota::per_minute(1_000))
            .algorithm(algorithm)
            .key(GlobalKey)
            .store(store)
            .pay_after()
            .try_build()
            .unwrap();
        let service = layer.layer(service_fn(generate));
        let call = || async {
            let request = Request::builder().uri("/generate").body(()).unwrap();
            service.clone().oneshot(request).await.unwrap()
        };
        for request in 1..=2 {
            assert_eq!(
                call().await.status(),
                StatusCode::OK,
                "{algorithm}: {request}"
            );
        }
        let refused = call().await;
        assert_eq!(
            refused.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm}"
        );
        let retry: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (1..=61).contains(&retry),
            "{algorithm}: retry after {retry} s"
        );
        clock.advance(Duration::from_secs(retry));
        assert_eq!(
            call().await.status(),
            StatusCode::OK,
            "{algorithm}: honoured"
        );
    }
}

/// The local-first store charges debts too: periodic mode counts one at
/// once and reports it; exact mode pays it from the units held and sends
/// the rest to Redis. Either way the third request of 500 units against
/// 1,000 an hour is refused, and the debt is in Redis's counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_first_store_charges_debts() {
    let server = RedisServer::start();
    for (i, mode) in [LocalMode::Exact, LocalMode::periodic()]
        .into_iter()
        .enumerate()
    {
        let redis = RedisStore::builder(server.url())
            .prefix(format!("pay-after-local-{i}"))
            .connect()
            .await
            .expect("connect");
        let store = LocalFirst::builder(redis.clone(), mode).build();
        let layer = RateLimitLayer::builder()
            .quota("tokens", Quota::per_hour(1_000))
            .key(GlobalKey)
            .store(store)
            .pay_after()
            .try_build()
            .unwrap();
        let policy = layer.policy().clone();
        let service = layer.layer(service_fn(generate));
        let call = || async {
            let request = Request::builder().uri("/generate").body(()).unwrap();
            service.clone().oneshot(request).await.unwrap()
        };
        for request in 1..=2 {
            assert_eq!(call().await.status(), StatusCode::OK, "{mode:?}: {request}");
        }
        let refused = call().await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{mode:?}");
        assert!(refused.headers().contains_key("retry-after"), "{mode:?}");
        // The debt reaches Redis: at once (exact) or with the next report
        // (periodic, every sync interval).
        let mut left = u64::MAX;
        for _ in 0..100 {
            left = decide_peek(&redis, &policy).await;
            // An hour's bucket refills one unit every 3.6 s: the wait
            // may see one back.
            if left <= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(left <= 1, "{mode:?}: Redis still counts {left} remaining");
    }
}

/// What Redis says remains for the global key, charging nothing.
async fn decide_peek(redis: &RedisStore, policy: &std::sync::Arc<tollgate::Policy>) -> u64 {
    match redis.peek(policy, &tollgate::Key::GLOBAL) {
        tollgate::StoreReply::Ready(answer) => answer.unwrap().merged().remaining(),
        tollgate::StoreReply::Pending(answer) => answer.await.unwrap().merged().remaining(),
    }
}

/// A refund or a debit that cannot reach Redis is logged, saying what
/// became of the charge (a refund's charge stands; a debit's cost goes
/// uncharged), and its reply still completes: a call that waits for a
/// Redis that is down is given up after 5 s, so that an outage does not
/// pile up waiting tasks.
#[tokio::test]
async fn a_change_that_cannot_reach_redis_is_logged() {
    let (logs, _guard) = Captured::install();
    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .prefix("unreachable")
        .connect()
        .await
        .expect("connect");
    let policy = std::sync::Arc::new(tollgate::Policy::new(vec![tollgate::NamedLimit::new(
        "api",
        Quota::per_minute(10),
    )]));
    let key = tollgate::Key::from_bytes(b"k");
    server.kill();
    let refund = PolicyRefund::new(1, Duration::ZERO);
    let bound = Duration::from_secs(20);
    let refunded = store.refund(&policy, &key, refund).landed();
    tokio::time::timeout(bound, refunded)
        .await
        .expect("the refund's reply completes");
    let debited = store.debit(&policy, &key, PolicyDebit::new(5)).landed();
    tokio::time::timeout(bound, debited)
        .await
        .expect("the debit's reply completes");
    let lines = logs.lines();
    // A refund fails at once (the connection broke under it); the debit,
    // sent while the connection waits for Redis to come back, is given up.
    let logged = |change: &str, consequence: &str| {
        lines
            .iter()
            .any(|line| line.contains(&format!("a {change} ")) && line.contains(consequence))
    };
    assert!(logged("refund", "the charge stands"), "{lines:#?}");
    assert!(logged("debit", "the cost goes uncharged"), "{lines:#?}");
}
