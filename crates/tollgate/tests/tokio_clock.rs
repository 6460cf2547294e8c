//! Testing an app as a user would: a memory store on `TokioClock`, under a
//! paused runtime, where `tokio::time::advance` moves the limits and no
//! test waits real time.

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tollgate::core::{Algorithm, Quota, TokioClock};
use tollgate::{GlobalKey, MemoryStore, RateLimitLayer};
use tower::{ServiceBuilder, ServiceExt};

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn header<'a>(response: &'a Response<String>, name: &str) -> &'a str {
    response.headers()[name].to_str().unwrap()
}

#[tokio::test(start_paused = true)]
async fn advance_moves_the_limit_and_no_real_time_passes() {
    let real = Instant::now();
    let store = MemoryStore::builder().clock(TokioClock::new()).build();
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_second(10).with_burst(20).unwrap())
        .key(GlobalKey)
        .store(store)
        .build();
    let app = ServiceBuilder::new().layer(layer).service_fn(ok);
    let send = || app.clone().oneshot(Request::new(()));

    for n in 1..=20 {
        assert_eq!(
            send().await.unwrap().status(),
            StatusCode::OK,
            "request {n}"
        );
    }
    let refused = send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // One unit comes back every 100 ms: a retry passes in 100 ms, which
    // `Retry-After` rounds up to a whole second.
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(header(&refused, "ratelimit"), "\"api\";r=0;t=1");

    tokio::time::advance(Duration::from_millis(99)).await;
    assert_eq!(
        send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // A sleep in a paused test moves the limits at once too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in 1..=20 {
        assert_eq!(
            send().await.unwrap().status(),
            StatusCode::OK,
            "request {n}"
        );
    }
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
}

/// Every algorithm but the leaky bucket (a shaper, below) refuses once its
/// quota is spent and admits the whole quota again two periods later (the
/// sliding window counter still weighs the previous window's count one
/// period later), from a clock that starts at 0.
#[tokio::test(start_paused = true)]
async fn every_algorithm_follows_tokio_time() {
    let real = Instant::now();
    for algorithm in Algorithm::ALL {
        if algorithm == Algorithm::LeakyBucket {
            continue;
        }
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_second(10))
            .algorithm(algorithm)
            .key(GlobalKey)
            .store(MemoryStore::builder().clock(TokioClock::new()).build())
            .build();
        let app = ServiceBuilder::new().layer(layer).service_fn(ok);
        for round in 0..3 {
            let mut admitted = 0;
            while app
                .clone()
                .oneshot(Request::new(()))
                .await
                .unwrap()
                .status()
                == StatusCode::OK
            {
                admitted += 1;
                assert!(admitted <= 10, "{algorithm}, round {round}");
            }
            assert_eq!(admitted, 10, "{algorithm}, round {round}");
            tokio::time::advance(Duration::from_secs(2)).await;
        }
    }
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
}

/// The leaky bucket holds admitted requests until their slot with tokio's
/// timer: under a paused runtime they are spaced in tokio time, and the
/// test waits none.
#[tokio::test(start_paused = true)]
async fn the_leaky_bucket_holds_requests_in_tokio_time() {
    let real = Instant::now();
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_second(10))
        .algorithm(Algorithm::LeakyBucket)
        .key(GlobalKey)
        .store(MemoryStore::builder().clock(TokioClock::new()).build())
        .build();
    let app = ServiceBuilder::new().layer(layer).service_fn(ok);
    let start = tokio::time::Instant::now();
    for _ in 0..5 {
        let response = app.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // The first leaves at once, the next four 100 ms apart.
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert!(
        real.elapsed() < Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
}
