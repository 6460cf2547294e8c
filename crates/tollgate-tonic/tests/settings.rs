//! The builders share their common settings: the same setters, defaults
//! and checks in the rate-limit layer's, the in-flight layer's, the
//! direct limiter's and the message limit's builders.

use http::{Request, Response};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::core::{Algorithm, Quota};
use tollgate::in_flight::InFlightLayer;
use tollgate::settings::DEFAULT_STORE_TIMEOUT;
use tollgate::{DirectLimiter, OnMissingKey, OnStoreError, RateLimitLayer, headers::HeaderStyle};
use tollgate_tonic::MessageLimitLayer;
use tower::{Layer, Service, ServiceExt, service_fn};

#[test]
fn every_layer_refuses_a_zero_store_timeout_with_the_same_words() {
    let per_second = Quota::per_second(5);
    let errors = [
        RateLimitLayer::builder()
            .quota("api", per_second)
            .store_timeout(Duration::ZERO)
            .try_build()
            .err()
            .map(|e| e.to_string()),
        InFlightLayer::builder()
            .store_timeout(Duration::ZERO)
            .try_build()
            .err()
            .map(|e| e.to_string()),
        MessageLimitLayer::builder()
            .quota("messages", per_second)
            .store_timeout(Duration::ZERO)
            .try_build()
            .err()
            .map(|e| e.to_string()),
    ];
    let first = errors[0].clone().expect("a zero store timeout is refused");
    assert!(first.contains("store_timeout is zero"), "{first}");
    for error in &errors {
        assert_eq!(error.as_deref(), Some(first.as_str()));
    }
}

#[test]
fn the_message_limit_s_default_store_timeout_is_every_layer_s() {
    assert_eq!(
        tollgate_tonic::messages::DEFAULT_STORE_TIMEOUT,
        DEFAULT_STORE_TIMEOUT
    );
    assert_eq!(DEFAULT_STORE_TIMEOUT, Duration::from_millis(100));
}

/// Whether the response of one request through `service` carries the
/// `RateLimit-Policy` field.
async fn has_fields<S, B>(mut service: S) -> bool
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let response = service
        .ready()
        .await
        .expect("ready")
        .call(Request::new(()))
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    response.headers().contains_key("ratelimit-policy")
}

fn ok()
-> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
{
    service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

#[tokio::test]
async fn the_shared_headers_setting_acts_in_both_http_layers() {
    let rate = |style: Option<HeaderStyle>| {
        let builder = RateLimitLayer::builder().quota("api", Quota::per_second(5));
        match style {
            Some(style) => builder.headers(style).build(),
            None => builder.build(),
        }
    };
    let in_flight = |style: Option<HeaderStyle>| {
        let builder = InFlightLayer::builder();
        match style {
            Some(style) => builder.headers(style).build(),
            None => builder.build(),
        }
    };
    // The default (the draft's fields) and the same default set by hand...
    for style in [None, Some(HeaderStyle::DRAFT)] {
        assert!(has_fields(rate(style).layer(ok())).await, "{style:?}");
        assert!(has_fields(in_flight(style).layer(ok())).await, "{style:?}");
    }
    // ...and none.
    assert!(!has_fields(rate(Some(HeaderStyle::NONE)).layer(ok())).await);
    assert!(!has_fields(in_flight(Some(HeaderStyle::NONE)).layer(ok())).await);
}

#[test]
fn every_builder_takes_the_limit_settings() {
    // The message limit and the direct limiter take the same limit
    // setters as the rate-limit layer; the direct limiter's policy has the
    // overridden algorithm, and it limits.
    MessageLimitLayer::builder()
        .quota("messages", Quota::per_second(5))
        .algorithm(Algorithm::SlidingWindow)
        .max_delay(Duration::from_millis(10))
        .on_missing_key(OnMissingKey::Skip)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(5))
        .try_build()
        .expect("a message limit");
    let limiter = DirectLimiter::builder()
        .quota("api", Quota::per_second(2))
        .algorithm(Algorithm::SlidingWindow)
        .direct()
        .expect("a direct limiter");
    let algorithm = limiter.keyed().policy().limits()[0].limiter().algorithm();
    assert_eq!(algorithm, Algorithm::SlidingWindow);
    let decisions: Vec<bool> = (0..3).map(|_| limiter.check_now().allowed()).collect();
    assert_eq!(decisions, [true, true, false]);
}
