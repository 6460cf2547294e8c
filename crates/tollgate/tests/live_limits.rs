//! Limits changed while a layer runs (`quotas::LiveLimits`): each key
//! keeps its usage across a change, and no request is charged under the
//! new limits before its key's usage is carried, on paused tokio time.
#![cfg(feature = "quotas")]

mod common;

use common::send;
use http::{Request, Response};
use std::convert::Infallible;
use tollgate::quotas::LiveLimits;
use tollgate::{GlobalKey, MemoryStore, NamedLimit, RateLimitLayer};
use tollgate_core::{Algorithm, Quota, TokioClock};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::new()))
}

/// A service limited to `api` = 10/min on one global key, whose limits
/// `limits` changes.
fn service(limits: &LiveLimits) -> BoxCloneService<Request<()>, Response<String>, Infallible> {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .key(GlobalKey)
        .store(MemoryStore::builder().clock(TokioClock::new()).build())
        .live_limits(limits.clone())
        .build();
    BoxCloneService::new(ServiceBuilder::new().layer(layer).service_fn(ok))
}

fn field<'a>(response: &'a Response<String>, name: &str) -> &'a str {
    response.headers()[name].to_str().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_change_keeps_each_keys_usage() {
    let limits = LiveLimits::new();
    let mut service = service(&limits);
    for _ in 0..8 {
        assert!(
            send(&mut service, Request::new(()))
                .await
                .status()
                .is_success()
        );
    }
    // 8 used of 10/min; at 5/min they are over the limit: refused, with
    // the time the new pace takes to bring one unit back (8 used, 4 to
    // come back at 12 s each: 48 s).
    limits.set_quota("api", Quota::per_minute(5)).unwrap();
    let refused = send(&mut service, Request::new(())).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(field(&refused, "ratelimit-policy"), "\"api\";q=5;w=60");
    assert_eq!(field(&refused, "retry-after"), "48");
    // At 20/min instead: 8 used and this one, 11 left.
    limits.set_quota("api", Quota::per_minute(20)).unwrap();
    let admitted = send(&mut service, Request::new(())).await;
    assert_eq!(admitted.status(), 200);
    assert_eq!(field(&admitted, "ratelimit-policy"), "\"api\";q=20;w=60");
    assert!(
        field(&admitted, "ratelimit").starts_with("\"api\";r=11;"),
        "{:?}",
        admitted.headers()
    );
    assert_eq!(limits.limits()[0].quota(), Quota::per_minute(20));
}

#[tokio::test(start_paused = true)]
async fn requests_at_the_swaps_instant_are_not_over_admitted() {
    let limits = LiveLimits::new();
    let service = service(&limits);
    for _ in 0..6 {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert!(response.status().is_success());
    }
    // 6 used of 10; at 8/min, 2 are left. 20 requests at the same instant,
    // as the change lands.
    limits.set_quota("api", Quota::per_minute(8)).unwrap();
    let calls = (0..20).map(|_| tokio::spawn(service.clone().oneshot(Request::new(()))));
    let mut admitted = 0;
    for call in calls {
        admitted += usize::from(call.await.unwrap().unwrap().status().is_success());
    }
    assert_eq!(admitted, 2);
}

#[tokio::test(start_paused = true)]
async fn the_built_layer_hands_out_its_handle() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .key(GlobalKey)
        .store(MemoryStore::builder().clock(TokioClock::new()).build())
        .live_limits(LiveLimits::new())
        .build();
    let handle = layer.live_limits().expect("built with live limits").clone();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    handle.set_quota("api", Quota::per_minute(3)).unwrap();
    let response = send(&mut service, Request::new(())).await;
    assert_eq!(field(&response, "ratelimit-policy"), "\"api\";q=3;w=60");
    let plain = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .build();
    assert!(plain.live_limits().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_algorithm_changes_and_a_bad_change_changes_nothing() {
    let limits = LiveLimits::new();
    let mut service = service(&limits);
    assert!(
        send(&mut service, Request::new(()))
            .await
            .status()
            .is_success()
    );
    limits.set_algorithm("api", Algorithm::FixedWindow).unwrap();
    assert_eq!(
        limits.limits()[0].limiter().algorithm(),
        Algorithm::FixedWindow
    );
    let error = limits.set_quota("nope", Quota::per_minute(1)).unwrap_err();
    assert!(
        error.to_string().contains("no limit is called \"nope\""),
        "{error}"
    );
    let twice = vec![
        NamedLimit::new("a", Quota::per_minute(1)),
        NamedLimit::new("a", Quota::per_minute(2)),
    ];
    assert!(limits.set(twice).is_err());
    assert!(limits.set(Vec::new()).is_err());
    assert_eq!(limits.limits().len(), 1);
    assert_eq!(limits.limits()[0].name(), "api");
}
