//! What a client and an operator are told of a store outage when the layer
//! fails closed: every `503` carries `Retry-After` (an open breaker's time
//! until it asks the store again, else 1 s), and the outage's end is logged
//! at its start's level (WARN) whether a breaker stands in front of the
//! store or not. A binary of its own: the log lines are throttled once per
//! process.

mod breaker_common;

use breaker_common::Flaky;
use http::{Request, Response, StatusCode};
use std::time::Duration;
use tollgate::store::Breaker;
use tollgate::{GlobalKey, OnStoreError, RateLimitLayer};
use tollgate_core::{ManualClock, Quota};
use tollgate_tests::app::{App, behind};
use tollgate_tests::logs::Captured;
use tower::{Service, ServiceExt};

fn app<St: tollgate::Store>(store: St) -> App {
    behind(
        RateLimitLayer::builder()
            .quota("api", Quota::per_second(1_000))
            .key(GlobalKey)
            .store(store)
            .on_store_error(OnStoreError::Closed)
            .build(),
    )
}

async fn send(app: &mut App) -> Response<String> {
    let response = app.ready().await.expect("ready");
    match response.call(Request::new(())).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The status and `Retry-After` of one request.
async fn answer(app: &mut App) -> (StatusCode, Option<String>) {
    let response = send(app).await;
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .map(|value| value.to_str().expect("ASCII").to_owned());
    (response.status(), retry_after)
}

#[tokio::test]
async fn a_fail_closed_503_says_when_to_retry_and_the_outage_end_is_logged() {
    let (logs, _guard) = Captured::install();

    // No breaker: 1 s, the next request asks the store again.
    let flaky = Flaky::default();
    let mut plain = app(flaky.clone());
    flaky.set_down(true);
    for _ in 0..3 {
        let got = answer(&mut plain).await;
        assert_eq!(got, (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
    }
    flaky.set_down(false);
    for _ in 0..3 {
        assert_eq!(answer(&mut plain).await.0, StatusCode::OK);
    }
    let lines = logs.lines();
    let ends: Vec<_> = lines
        .iter()
        .filter(|line| line.contains("answers again"))
        .collect();
    assert_eq!(ends.len(), 1, "one line for the end: {lines:#?}");
    assert!(
        ends[0].starts_with("WARN"),
        "at the start's level: {ends:?}"
    );
    assert!(ends[0].contains("failures=3"), "{ends:?}");
    let starts = lines
        .iter()
        .filter(|line| line.starts_with("WARN") && line.contains("rate-limit store failed"))
        .count();
    assert_eq!(starts, 1, "{lines:#?}");

    // An open breaker: the time until its probe, rounded up to seconds.
    let (flaky, clock) = (Flaky::default(), ManualClock::new(1));
    let breaker = Breaker::new(flaky.clone())
        .failures(2)
        .cool_down(Duration::from_secs(5))
        .clock(clock.clone());
    let mut guarded = app(breaker);
    flaky.set_down(true);
    // Two failures open it; the store's own failures say 1 s.
    for _ in 0..2 {
        let got = answer(&mut guarded).await;
        assert_eq!(got, (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
    }
    let got = answer(&mut guarded).await;
    assert_eq!(got, (StatusCode::SERVICE_UNAVAILABLE, Some("5".into())));
    clock.advance(Duration::from_millis(2_500));
    let got = answer(&mut guarded).await;
    assert_eq!(got, (StatusCode::SERVICE_UNAVAILABLE, Some("3".into())));
    assert_eq!(flaky.calls(), 2, "the breaker asked nothing while open");
}

/// The in-flight limit's slot store (Redis) down and back: 503s with
/// `Retry-After` while it fails closed, and one WARN when it answers again.
// On the test's thread (current-thread runtime): the log capture is the
// thread's.
#[tokio::test]
async fn an_in_flight_slot_store_outage_ends_in_a_warn_too() {
    use tollgate::InFlightLayer;
    let (logs, _guard) = Captured::install();
    let mut redis = tollgate_tests::redis::RedisServer::start();
    let slots = tollgate_redis::RedisSlots::connect(redis.url())
        .await
        .unwrap();
    let layer = InFlightLayer::builder()
        .max_in_flight(4)
        .key(GlobalKey)
        .slots(slots)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(500))
        .build();
    let service = tower::Layer::layer(
        &layer,
        tower::service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }),
    );
    let app = service;
    let answer = status_of;
    assert_eq!(answer(&app).await.0, StatusCode::OK);
    redis.kill();
    for _ in 0..2 {
        let got = answer(&app).await;
        assert_eq!(got, (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
    }
    redis.restart();
    // The client reconnects on its own: bounded retries.
    let mut answered = false;
    for _ in 0..100 {
        if answer(&app).await.0 == StatusCode::OK {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered, "the slot store answered again");
    let lines = logs.lines();
    let ends: Vec<_> = lines
        .iter()
        .filter(|line| line.contains("slot store answers again"))
        .collect();
    assert_eq!(ends.len(), 1, "{lines:#?}");
    assert!(ends[0].starts_with("WARN"), "{ends:?}");
}

/// The status and `Retry-After` of one request through `service` (the
/// response, and an in-flight slot with it, dropped at once).
async fn status_of<S, B>(service: &S) -> (StatusCode, Option<String>)
where
    S: Service<Request<()>, Response = Response<B>, Error = std::convert::Infallible> + Clone,
{
    let response = service.clone().oneshot(Request::new(())).await;
    let response = response.unwrap_or_else(|never| match never {});
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .map(|value| value.to_str().expect("ASCII").to_owned());
    (response.status(), retry_after)
}
