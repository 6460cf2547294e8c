//! The builders share their common settings: the same setters, defaults
//! and checks in the rate-limit layer's, the in-flight layer's, the
//! direct limiter's and the message limit's builders.

use std::time::Duration;
use tollgate::core::{Algorithm, Quota};
use tollgate::in_flight::InFlightLayer;
use tollgate::settings::DEFAULT_STORE_TIMEOUT;
use tollgate::{DirectLimiter, HeaderStyle, OnMissingKey, OnStoreError, RateLimitLayer};
use tollgate_tonic::MessageLimitLayer;

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

#[test]
fn the_common_setters_take_the_same_values_in_every_builder() {
    // Each builder takes each common setting; the settings build.
    RateLimitLayer::builder()
        .quota("api", Quota::per_second(5))
        .algorithm(Algorithm::SlidingWindow)
        .max_delay(Duration::from_millis(10))
        .headers(HeaderStyle::NONE)
        .on_missing_key(OnMissingKey::Skip)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(5))
        .try_build()
        .expect("a rate-limit layer");
    InFlightLayer::builder()
        .headers(HeaderStyle::NONE)
        .on_missing_key(OnMissingKey::Skip)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(5))
        .try_build()
        .expect("an in-flight layer");
    MessageLimitLayer::builder()
        .quota("messages", Quota::per_second(5))
        .algorithm(Algorithm::SlidingWindow)
        .max_delay(Duration::from_millis(10))
        .headers(HeaderStyle::NONE)
        .on_missing_key(OnMissingKey::Skip)
        .on_store_error(OnStoreError::Closed)
        .store_timeout(Duration::from_millis(5))
        .try_build()
        .expect("a message limit");
    let limiter = DirectLimiter::builder()
        .quota("api", Quota::per_second(5))
        .algorithm(Algorithm::SlidingWindow)
        .direct()
        .expect("a direct limiter");
    assert!(limiter.check_now().allowed());
}
