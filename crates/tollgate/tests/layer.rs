//! The layer end to end, in process: admission under concurrency, the HTTP
//! contract, the behaviours, and store failures.

mod common;

use common::{BrokenStore, Later, send};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate::store::{BoxStore, Fallback, Timeout};
use tollgate::{
    GlobalKey, HeaderKey, Key, MemoryStore, NamedLimit, OnMissingKey, OnStoreError, Policy,
    RateLimitLayer, headers::HeaderStyle,
};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

type Body = String;

async fn ok(_: Request<()>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn frozen_store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(ManualClock::new(1_700_000_000_000_000_000))
        .build()
}

fn header(response: &Response<Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_admit_exactly_the_limit_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_second(100))
            .algorithm(algorithm)
            .key(GlobalKey)
            .store(frozen_store())
            .build();
        let service = ServiceBuilder::new().layer(layer).service_fn(ok);
        let admitted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let mut service = service.clone();
                let admitted = admitted.clone();
                tokio::spawn(async move {
                    for _ in 0..4 {
                        let response = send(&mut service, Request::new(())).await;
                        if response.status() == StatusCode::OK {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 100, "{algorithm}");
    }
}

#[tokio::test]
async fn limited_responses_carry_exact_fields() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(100))
        .key(GlobalKey)
        .store(frozen_store())
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let first = send(&mut service, Request::new(())).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy").as_deref(),
        Some("\"api\";q=100;w=60")
    );
    // GCRA: one request occupies 600 ms of the minute; t rounds up.
    assert_eq!(
        header(&first, "ratelimit").as_deref(),
        Some("\"api\";r=99;t=1")
    );
    assert_eq!(header(&first, "retry-after"), None);
    for _ in 0..99 {
        send(&mut service, Request::new(())).await;
    }
    let limited = send(&mut service, Request::new(())).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    // t: the next unit is back in 600 ms, rounded up (the whole minute
    // would be back in 60 s); never more than Retry-After.
    assert_eq!(
        header(&limited, "ratelimit").as_deref(),
        Some("\"api\";r=0;t=1")
    );
    // The next request fits in 600 ms: Retry-After rounds up to 1, never 0.
    assert_eq!(header(&limited, "retry-after").as_deref(), Some("1"));
    assert_eq!(header(&limited, "x-ratelimit-limit"), None);
}

/// The header styles: what allowed and limited responses carry. `NONE`
/// takes the layer's bare path for allowed requests.
#[tokio::test]
async fn header_styles_choose_the_fields_of_allowed_and_limited_responses() {
    // (style, draft on allowed, legacy on allowed, draft on limited,
    // legacy on limited)
    let cases = [
        (HeaderStyle::NONE, false, false, false, false),
        (HeaderStyle::DRAFT, true, false, true, false),
        (
            HeaderStyle::DRAFT.only_on_rejections(),
            false,
            false,
            true,
            false,
        ),
        (HeaderStyle::LEGACY, false, true, false, true),
        (HeaderStyle::BOTH, true, true, true, true),
    ];
    for (style, draft_allowed, legacy_allowed, draft_on_limited, legacy_on_limited) in cases {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(2))
            .key(GlobalKey)
            .store(frozen_store())
            .headers(style)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        let allowed = send(&mut service, Request::new(())).await;
        assert_eq!(allowed.status(), StatusCode::OK, "{style:?}");
        for name in ["ratelimit", "ratelimit-policy"] {
            assert_eq!(
                header(&allowed, name).is_some(),
                draft_allowed,
                "{style:?} {name}"
            );
        }
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert_eq!(
                header(&allowed, name).is_some(),
                legacy_allowed,
                "{style:?} {name}"
            );
        }
        assert_eq!(header(&allowed, "retry-after"), None);

        send(&mut service, Request::new(())).await;
        let limited = send(&mut service, Request::new(())).await;
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS, "{style:?}");
        // Retry-After on every rejection, whatever the style.
        assert_eq!(header(&limited, "retry-after").as_deref(), Some("30"));
        assert_eq!(
            header(&limited, "ratelimit").is_some(),
            draft_on_limited,
            "{style:?}"
        );
        assert_eq!(
            header(&limited, "x-ratelimit-limit").is_some(),
            legacy_on_limited,
            "{style:?}"
        );
    }
}

#[tokio::test]
async fn several_limits_merge_into_one_field_of_each_kind() {
    let layer = RateLimitLayer::builder()
        .quota("burst", "2/s".parse().unwrap())
        .limit(
            NamedLimit::new("hourly", "500/h".parse().unwrap())
                .with_algorithm(Algorithm::SlidingLog),
        )
        .key(GlobalKey)
        .store(frozen_store())
        .headers(HeaderStyle::BOTH)
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let response = send(&mut service, Request::new(())).await;
    assert_eq!(
        header(&response, "ratelimit-policy").as_deref(),
        Some("\"burst\";q=2;w=1, \"hourly\";q=500;w=3600")
    );
    assert_eq!(
        header(&response, "ratelimit").as_deref(),
        Some("\"burst\";r=1;t=1, \"hourly\";r=499;t=3600")
    );
    assert_eq!(header(&response, "x-ratelimit-limit").as_deref(), Some("2"));
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("1")
    );
    assert_eq!(header(&response, "x-ratelimit-reset").as_deref(), Some("1"));
    assert_eq!(response.headers().get_all("ratelimit").iter().count(), 1);
    send(&mut service, Request::new(())).await;
    let limited = send(&mut service, Request::new(())).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    // All-or-nothing: the rejected request was not charged to "hourly".
    assert_eq!(
        header(&limited, "ratelimit").as_deref(),
        Some("\"burst\";r=0;t=1, \"hourly\";r=498;t=3600")
    );
}

#[tokio::test]
async fn shadow_mode_never_rejects_and_leaves_responses_as_they_are() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .store(frozen_store())
        .shadow(true)
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    for _ in 0..5 {
        let response = send(&mut service, Request::new(())).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = send(&mut service, Request::new(())).await;
    // No field, no Retry-After: what it would have done is in metrics and
    // logs (tests/tests/shadow.rs), not in the response.
    assert!(response.headers().is_empty(), "{:?}", response.headers());
}

#[tokio::test]
async fn allow_list_and_503_and_missing_keys() {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(1))
        .key(HeaderKey::new("x-api-key"))
        .store(frozen_store())
        .allow(|req| req.uri.path() == "/health")
        .rejection_status(StatusCode::SERVICE_UNAVAILABLE)
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let with_key = |key: &str, path: &str| {
        Request::builder()
            .uri(path)
            .header("x-api-key", key)
            .body(())
            .unwrap()
    };
    assert_eq!(
        send(&mut service, with_key("a", "/")).await.status(),
        StatusCode::OK
    );
    let limited = send(&mut service, with_key("a", "/")).await;
    assert_eq!(limited.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&limited, "retry-after").is_some());
    assert_eq!(
        send(&mut service, with_key("b", "/")).await.status(),
        StatusCode::OK
    );
    for _ in 0..3 {
        assert_eq!(
            send(&mut service, with_key("a", "/health")).await.status(),
            StatusCode::OK
        );
    }
    // Allow-listed requests are not counted either: key "c" still has its
    // one request after three to /health.
    for _ in 0..3 {
        send(&mut service, with_key("c", "/health")).await;
    }
    assert_eq!(
        send(&mut service, with_key("c", "/")).await.status(),
        StatusCode::OK
    );
    // No key: by default all keyless requests share one bucket.
    assert_eq!(
        send(&mut service, Request::new(())).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut service, Request::new(())).await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );

    for (missing, expected) in [
        (OnMissingKey::Skip, StatusCode::OK),
        (
            OnMissingKey::Reject(StatusCode::UNAUTHORIZED),
            StatusCode::UNAUTHORIZED,
        ),
    ] {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(1))
            .key(HeaderKey::new("x-api-key"))
            .on_missing_key(missing)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..3 {
            assert_eq!(
                send(&mut service, Request::new(())).await.status(),
                expected
            );
        }
    }
}

#[tokio::test]
async fn memory_store_holds_its_bound_under_a_flood_of_keys() {
    let store = MemoryStore::builder().max_keys(10_000).build();
    let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(10))]);
    for i in 0..1_000_000u64 {
        let verdict = store.check_now(&policy, &Key::from(i), 1);
        assert!(verdict.merged().allowed());
    }
    assert!(
        store.len() <= store.capacity(),
        "{} > {}",
        store.len(),
        store.capacity()
    );
    assert!(store.capacity() < 10_000 + 1024);
}

#[test]
fn by_default_the_memory_store_holds_a_million_keys() {
    let capacity = MemoryStore::new().capacity();
    // Rounded up to a whole number of keys per shard.
    assert!((1_000_000..1_001_024).contains(&capacity), "{capacity}");
}

#[tokio::test]
async fn store_failures_follow_the_configured_behaviour_within_the_timeout() {
    let timeout = Duration::from_millis(50);
    for store in [BrokenStore::Failing, BrokenStore::Hanging] {
        // The fallback is a store wrapping stores: the timeout inside, so
        // that the memory store answers before the layer's timeout fires.
        let fallback = || {
            let primary = Timeout::new(store.clone(), timeout / 2);
            BoxStore::new(Fallback::new(primary, MemoryStore::new()))
        };
        for (on_error, wrapped, expected) in [
            (OnStoreError::Open, false, [StatusCode::OK; 3]),
            (
                OnStoreError::Closed,
                false,
                [StatusCode::SERVICE_UNAVAILABLE; 3],
            ),
            (
                OnStoreError::Closed,
                true,
                [
                    StatusCode::OK,
                    StatusCode::OK,
                    StatusCode::TOO_MANY_REQUESTS,
                ],
            ),
        ] {
            let layer = RateLimitLayer::builder()
                .quota("api", Quota::per_minute(2))
                .key(GlobalKey)
                .store(if wrapped {
                    fallback()
                } else {
                    BoxStore::new(store.clone())
                })
                .on_store_error(on_error)
                .store_timeout(timeout)
                .build();
            let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
            for status in expected {
                let started = Instant::now();
                assert_eq!(send(&mut service, Request::new(())).await.status(), status);
                // A hanging store never answers: any bound shows the
                // timeout fired; a wide one holds on a loaded machine.
                assert!(started.elapsed() < timeout + Duration::from_secs(2));
            }
        }
    }
}

type Served = Arc<std::sync::Mutex<Vec<(usize, Instant)>>>;

/// An inner service that records which request (`/N`) it was called with,
/// and when: after the layer has held it, if it did.
fn recorder(
    served: Served,
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
{
    tower::service_fn(move |req: Request<()>| {
        let n = req.uri().path()[1..].parse().unwrap_or(usize::MAX);
        served.lock().unwrap().push((n, Instant::now()));
        std::future::ready(Ok(Response::new(String::new())))
    })
}

/// Calls `service` with `/0` … `/count−1` in order, all at once, and
/// returns each response's status, with the moment the calls were made.
async fn fire<S>(service: S, count: usize) -> (Vec<StatusCode>, Instant)
where
    S: Service<Request<()>, Response = Response<Body>, Error = Infallible> + Clone,
    S::Future: Send + 'static,
{
    let start = Instant::now();
    let mut calls = Vec::new();
    for n in 0..count {
        let mut service = service.clone();
        let request = Request::builder().uri(format!("/{n}")).body(()).unwrap();
        // Each call's slot is fixed when it is made, in this order.
        calls.push(tokio::spawn(service.ready().await.unwrap().call(request)));
    }
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap().unwrap().status());
    }
    (statuses, start)
}

/// The served requests came in order `0..n`, request `i` no earlier than
/// `i × spacing` after `start`.
fn assert_released_in_order(served: &Served, n: usize, spacing: Duration, start: Instant) {
    let served = served.lock().unwrap();
    let order: Vec<usize> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..n).collect::<Vec<_>>());
    for (i, (_, at)) in served.iter().enumerate() {
        let due = spacing * i as u32;
        let came = at.duration_since(start);
        assert!(came + Duration::from_millis(5) >= due, "{i} came early");
        // Late by more than a busy machine's scheduling: not at the rate.
        assert!(
            came <= due + Duration::from_millis(250),
            "{i} came {came:?}, due {due:?}"
        );
    }
}

#[tokio::test]
async fn leaky_bucket_releases_requests_in_order_at_its_rate() {
    let served = Served::default();
    let layer = RateLimitLayer::builder()
        .limit(
            NamedLimit::new(
                "shaped",
                "10/s".parse::<Quota>().unwrap().with_burst(5).unwrap(),
            )
            .with_algorithm(Algorithm::LeakyBucket),
        )
        .key(GlobalKey)
        .build();
    let (statuses, start) = fire(layer.layer(recorder(served.clone())), 5).await;
    assert_eq!(statuses, [StatusCode::OK; 5]);
    assert_released_in_order(&served, 5, Duration::from_millis(100), start);
}

#[tokio::test]
async fn delay_mode_releases_requests_in_arrival_order_at_the_rate() {
    let served = Served::default();
    let layer = RateLimitLayer::builder()
        .quota(
            "api",
            "10/s".parse::<Quota>().unwrap().with_burst(1).unwrap(),
        )
        .key(GlobalKey)
        .max_delay(Duration::from_millis(450))
        .build();
    let (statuses, start) = fire(layer.layer(recorder(served.clone())), 7).await;
    // One passes at once, four more fit within 450 ms (at 100, 200, 300,
    // 400 ms), the rest would wait longer and are rejected.
    assert_eq!(statuses[..5], [StatusCode::OK; 5]);
    assert_eq!(statuses[5..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    assert_released_in_order(&served, 5, Duration::from_millis(100), start);
}

#[tokio::test]
async fn delay_mode_keeps_rejecting_at_once_for_window_algorithms() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
    ] {
        let layer = RateLimitLayer::builder()
            .limit(NamedLimit::new("api", Quota::per_minute(2)).with_algorithm(algorithm))
            .key(GlobalKey)
            .store(frozen_store())
            .max_delay(Duration::from_secs(120))
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..2 {
            assert_eq!(
                send(&mut service, Request::new(())).await.status(),
                StatusCode::OK
            );
        }
        // A window has no later slot to reserve: the third is refused now,
        // not held (the frozen clock would hold it forever).
        let third =
            tokio::time::timeout(Duration::from_secs(5), send(&mut service, Request::new(())))
                .await
                .unwrap_or_else(|_| panic!("{algorithm}: the request was held"));
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS, "{algorithm}");
    }
}

#[tokio::test]
async fn a_boxed_store_passes_on_answers_later_and_failures() {
    let layer = |store: BoxStore| {
        RateLimitLayer::builder()
            .quota("api", Quota::per_minute(2))
            .key(GlobalKey)
            .store(store)
            .on_store_error(OnStoreError::Closed)
            .store_timeout(Duration::from_millis(50))
            .build()
    };
    let statuses = |service| async move {
        let mut service = ServiceBuilder::new().layer(service).service_fn(ok);
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(send(&mut service, Request::new(())).await.status());
        }
        out
    };
    let limited = [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    assert_eq!(
        statuses(layer(BoxStore::new(Later(MemoryStore::new())))).await,
        limited
    );
    assert_eq!(
        statuses(layer(BoxStore::new(MemoryStore::new()))).await,
        limited
    );
    for broken in [BrokenStore::Failing, BrokenStore::Hanging] {
        assert_eq!(
            statuses(layer(BoxStore::new(broken))).await,
            [StatusCode::SERVICE_UNAVAILABLE; 3]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn by_default_a_store_that_does_not_answer_within_100_ms_lets_the_request_pass() {
    // Nothing but the store is set: the documented defaults apply (fail
    // open, 100 ms). Paused time: the timeout fires exactly when due.
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .store(BrokenStore::Hanging)
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        assert_eq!(
            send(&mut service, Request::new(())).await.status(),
            StatusCode::OK
        );
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }
}

#[test]
#[should_panic(expected = "store_timeout is zero")]
fn a_zero_store_timeout_is_refused_when_the_layer_is_built() {
    let _ = RateLimitLayer::builder()
        .store_timeout(Duration::ZERO)
        .build();
}

#[test]
#[should_panic(expected = "max_keys is zero")]
fn a_memory_store_of_zero_keys_is_refused_when_built() {
    let _ = MemoryStore::builder().max_keys(0).build();
}

#[test]
fn try_build_reports_what_build_would_panic_with() {
    let error = RateLimitLayer::builder()
        .store_timeout(Duration::ZERO)
        .try_build()
        .unwrap_err();
    assert!(error.to_string().contains("100 ms"), "{error}");
    let error = MemoryStore::builder().max_keys(0).try_build().unwrap_err();
    assert!(error.to_string().contains("at least one key"), "{error}");
    assert!(
        RateLimitLayer::builder()
            .store_timeout(Duration::from_millis(1))
            .try_build()
            .is_ok()
    );
}

/// A layer on the plain path (one policy for every request, nothing else to
/// decide per request: `Engine::plain`) answers exactly as the same layer
/// sent down the general path by an allow-list that allows nothing: the
/// same statuses, fields and bodies, request by request, for every
/// algorithm, with and without fields, with keys present and missing
/// (shared, skipped, refused), the store answering at once or later.
/// Tokio's clock is paused: the leaky bucket's waits (on the frozen store
/// clock, whole intervals) pass at once.
#[tokio::test(start_paused = true)]
async fn the_plain_path_answers_as_the_general_path() {
    let missing_keys = [
        OnMissingKey::Shared(Key::from("anonymous")),
        OnMissingKey::Skip,
        OnMissingKey::Reject(StatusCode::UNAUTHORIZED),
    ];
    for algorithm in Algorithm::ALL {
        for headers in [HeaderStyle::NONE, HeaderStyle::DRAFT, HeaderStyle::BOTH] {
            for missing in &missing_keys {
                let case = format!("{algorithm}, {headers:?}, {missing:?}");
                plain_and_general_agree(frozen_store, algorithm, headers, missing, &case).await;
                let later = || Later(frozen_store());
                let case = format!("{case}, answered later");
                plain_and_general_agree(later, algorithm, headers, missing, &case).await;
            }
        }
    }
}

/// Sends the same requests through a plain layer and its general twin, each
/// over a store of its own from `store`, and compares every response.
async fn plain_and_general_agree<St: tollgate::Store>(
    store: impl Fn() -> St,
    algorithm: Algorithm,
    headers: HeaderStyle,
    missing: &OnMissingKey,
    case: &str,
) {
    let [mut plain, mut general] = [false, true].map(|general| {
        let builder = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(4))
            .algorithm(algorithm)
            .key(HeaderKey::new("x-api-key"))
            .headers(headers)
            .on_missing_key(missing.clone())
            .store(store());
        let layer = match general {
            true => builder.allow(|_| false).build(),
            false => builder.build(),
        };
        ServiceBuilder::new().layer(layer).service_fn(ok)
    });
    let mut refused = 0;
    // Two keys and no key, in turn: each key goes past its limit.
    for i in 0..15 {
        let request = || {
            let builder = Request::builder();
            let builder = match i % 3 {
                0 => builder.header("x-api-key", "a"),
                1 => builder.header("x-api-key", "b"),
                _ => builder,
            };
            builder.body(()).unwrap()
        };
        let a = send(&mut plain, request()).await;
        let b = send(&mut general, request()).await;
        assert_eq!(a.status(), b.status(), "{case}, request {i}");
        assert_eq!(a.headers(), b.headers(), "{case}, request {i}");
        assert_eq!(a.body(), b.body(), "{case}, request {i}");
        refused += usize::from(a.status() == StatusCode::TOO_MANY_REQUESTS);
    }
    // The refusing path was compared too, not only admissions.
    assert!(refused > 0, "{case}");
}
