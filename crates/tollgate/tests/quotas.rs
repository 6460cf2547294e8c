//! Per-key quotas: each key's limits from a source, through the cache,
//! from its first request (which waits for the lookup); a slow or failing
//! source stalls no request but a key's first, and that one at most the
//! lookup timeout.
#![cfg(feature = "quotas")]

mod common;

use common::send;
use http::{Request, Response, StatusCode};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::quotas::{KeyQuotas, QuotaAnswer, StaticQuotas, quota_fn, quota_fn_async};
use tollgate::{HeaderKey, NamedLimit, RateLimitLayer};
use tollgate_core::Quota;
use tower::{Service, ServiceBuilder};

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

fn from(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

/// The service under test: `default` for every key, and `quotas` per key,
/// keys read from `x-api-key`.
fn keyed(
    default: Quota,
    quotas: KeyQuotas,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    let layer = RateLimitLayer::builder()
        .quota("api", default)
        .key(HeaderKey::new("x-api-key"))
        .quota_source(quotas)
        .build();
    ServiceBuilder::new().layer(layer).service_fn(ok)
}

/// Sends `n` requests for `key`; the statuses.
async fn statuses<S>(service: &mut S, key: &str, n: usize) -> Vec<u16>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(send(service, from(key)).await.status().as_u16());
    }
    out
}

/// Lets background lookups that are ready run to completion.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn each_key_gets_its_own_quota_and_unknown_keys_the_default() {
    let source = StaticQuotas::new()
        .with("paid", "5/min".parse().unwrap())
        .with("internal", QuotaAnswer::Unlimited)
        .with("two", "3/min;2/s".parse().unwrap());
    let quotas = KeyQuotas::new(source);
    let mut service = keyed(Quota::per_minute(2), quotas.clone());

    // A key's first request waits for its quota's lookup and is charged
    // its own quota, as every later one: exactly 5 pass.
    let first = send(&mut service, from("paid")).await;
    assert_eq!(first.headers()["ratelimit-policy"], "\"api\";q=5;w=60");
    assert_eq!(first.headers()["ratelimit"], "\"api\";r=4;t=12");
    assert_eq!(
        statuses(&mut service, "paid", 5).await,
        [200, 200, 200, 200, 429]
    );

    assert_eq!(statuses(&mut service, "internal", 50).await, [200; 50]);
    let two = send(&mut service, from("two")).await;
    assert_eq!(
        two.headers()["ratelimit-policy"],
        "\"api\";q=3;w=60, \"api-2\";q=2;w=1"
    );
    assert_eq!(statuses(&mut service, "nobody", 3).await, [200, 200, 429]);
    assert_eq!(quotas.lookups(), 4);
    assert_eq!(quotas.errors(), 0);
}

/// A source whose answers an test changes, answering after `delay`, or
/// failing while `failing` is set.
#[derive(Clone, Default)]
struct Plans {
    answers: Arc<Mutex<HashMap<String, String>>>,
    failing: Arc<Mutex<bool>>,
}

impl Plans {
    fn set(&self, key: &str, quota: &str) {
        self.answers
            .lock()
            .unwrap()
            .insert(key.into(), quota.into());
    }

    fn fail(&self, failing: bool) {
        *self.failing.lock().unwrap() = failing;
    }

    fn source(&self, delay: Duration) -> KeyQuotas {
        let plans = self.clone();
        KeyQuotas::new(quota_fn_async(move |key| {
            let plans = plans.clone();
            async move {
                tokio::time::sleep(delay).await;
                if *plans.failing.lock().unwrap() {
                    return Err(tollgate::BoxError::from("plans database is down"));
                }
                let key = String::from_utf8(key.to_bytes())?;
                let text = plans.answers.lock().unwrap().get(&key).cloned();
                Ok(text.unwrap_or_default().parse::<QuotaAnswer>()?)
            }
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn only_a_key_s_first_request_waits_for_the_source() {
    let plans = Plans::default();
    plans.set("user:241531", "3/min");
    let quotas = plans
        .source(Duration::from_millis(200))
        .ttl(Duration::from_secs(1))
        .error_ttl(Duration::from_secs(2));
    let mut service = keyed(Quota::per_minute(100), quotas.clone());
    let timed_for = async |service: &mut _, key: &str| {
        // Time is paused: it moves only when every task waits on a timer,
        // so a request that waited on the source takes 200 ms here.
        let start = tokio::time::Instant::now();
        let response: Response<String> = send(service, from(key)).await;
        (start.elapsed(), response)
    };
    let timed = async |service: &mut _| timed_for(service, "user:241531").await;

    // The first request waits for the 200 ms lookup, and gets its quota.
    let (took, first) = timed(&mut service).await;
    assert_eq!(took, Duration::from_millis(200));
    assert_eq!(first.headers()["ratelimit-policy"], "\"api\";q=3;w=60");
    let (took, hit) = timed(&mut service).await;
    assert_eq!(took, Duration::ZERO);
    assert_eq!(hit.headers()["ratelimit-policy"], "\"api\";q=3;w=60");

    // Past the TTL, with the source failing: the stale answer is served,
    // at once, and the failure counted.
    plans.fail(true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    for _ in 0..3 {
        let (took, stale) = timed(&mut service).await;
        assert_eq!(took, Duration::ZERO);
        assert_eq!(stale.headers()["ratelimit-policy"], "\"api\";q=3;w=60");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        quotas.errors(),
        1,
        "one lookup per error TTL, not per request"
    );

    // A key never seen, with the source down: its first request waits
    // for the failed lookup, then the default, counted; the next ones do
    // not wait (the failure is remembered for the error TTL).
    let (took, unknown) = timed_for(&mut service, "user:7").await;
    assert_eq!(took, Duration::from_millis(200));
    assert_eq!(unknown.headers()["ratelimit-policy"], "\"api\";q=100;w=60");
    let (took, unknown) = timed_for(&mut service, "user:7").await;
    assert_eq!(took, Duration::ZERO);
    assert_eq!(unknown.status(), StatusCode::OK);
    assert_eq!(unknown.headers()["ratelimit-policy"], "\"api\";q=100;w=60");
    assert_eq!(quotas.errors(), 2);
}

/// A lowered quota applies within the TTL, and the key's usage goes with
/// it: 9 used of 10 a minute, lowered to 3 a minute, stays refused (not 3
/// more) until the usage has come back at the new pace.
#[tokio::test(start_paused = true)]
async fn a_changed_quota_applies_within_the_ttl_and_a_lowered_one_is_never_exceeded() {
    let plans = Plans::default();
    plans.set("tenant", "10/min");
    let ttl = Duration::from_secs(5);
    let mut service = keyed(
        Quota::per_minute(100),
        plans.source(Duration::from_millis(10)).ttl(ttl),
    );
    assert_eq!(statuses(&mut service, "tenant", 9).await, [200; 9]);

    // Lowered to 3 a minute. After the TTL, the next request starts the
    // refresh (and is still charged the old quota); once the lookup is
    // back, the new quota holds, with the usage carried over.
    plans.set("tenant", "3/min");
    tokio::time::sleep(ttl).await;
    send(&mut service, from("tenant")).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let after = statuses(&mut service, "tenant", 10).await;
    assert_eq!(after, [429; 10]);
    let last = send(&mut service, from("tenant")).await;
    assert_eq!(last.headers()["ratelimit-policy"], "\"api\";q=3;w=60");
}

/// `r` of a `RateLimit` field's first item.
fn remaining(response: &Response<String>) -> u64 {
    let field = response.headers()["ratelimit"].to_str().unwrap();
    let r = field.split(';').find_map(|p| p.trim().strip_prefix("r="));
    r.expect("r=").parse().unwrap()
}

/// A plan change carries the key's usage, the same for GCRA, the fixed
/// window and the sliding window, on the memory store: 4 used of 5 an
/// hour, moved to 100 an hour, leaves 96 (95 after the next request); 50
/// used of 100 an hour, moved to 5 an hour, is refused with a
/// `Retry-After` after which a retry passes (the usage came back at the
/// new pace). Tokio's paused time moves the store's clock.
#[tokio::test(start_paused = true)]
async fn usage_carries_over_a_plan_change_for_every_algorithm() {
    use tollgate::MemoryStore;
    use tollgate::core::{Algorithm, TokioClock};
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ] {
        let plans = Plans::default();
        plans.set("up", "5/h");
        plans.set("down", "100/h");
        let quotas = plans
            .source(Duration::ZERO)
            .ttl(Duration::from_secs(86_400));
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(1000))
            .algorithm(algorithm)
            .key(HeaderKey::new("x-api-key"))
            .store(MemoryStore::builder().clock(TokioClock::new()).build())
            .quota_source(quotas.clone())
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        assert_eq!(
            statuses(&mut service, "up", 4).await,
            [200; 4],
            "{algorithm}"
        );
        assert_eq!(
            statuses(&mut service, "down", 50).await,
            [200; 50],
            "{algorithm}"
        );

        plans.set("up", "100/h");
        plans.set("down", "5/h");
        quotas.invalidate(&tollgate::Key::from("up"));
        quotas.invalidate(&tollgate::Key::from("down"));

        let up = send(&mut service, from("up")).await;
        assert_eq!(up.headers()["ratelimit-policy"], "\"api\";q=100;w=3600");
        assert_eq!(
            (up.status().as_u16(), remaining(&up)),
            (200, 95),
            "{algorithm}"
        );

        let down = send(&mut service, from("down")).await;
        assert_eq!(down.status(), StatusCode::TOO_MANY_REQUESTS, "{algorithm}");
        let retry: u64 = down.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry > 60, "{algorithm}: Retry-After {retry}");
        tokio::time::sleep(Duration::from_secs(retry - 1)).await;
        let early = send(&mut service, from("down")).await;
        assert_eq!(
            early.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm}: early"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let retried = send(&mut service, from("down")).await;
        assert_eq!(
            retried.status(),
            StatusCode::OK,
            "{algorithm}: after {retry} s"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_in_use_sees_a_change_within_the_ttl() {
    let plans = Plans::default();
    plans.set("tenant", "50/min");
    let ttl = Duration::from_secs(4);
    let mut service = keyed(
        Quota::per_minute(100),
        plans.source(Duration::from_millis(50)).ttl(ttl),
    );
    send(&mut service, from("tenant")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // A request every 500 ms; the quota changes; within the TTL of the
    // change every response shows the new quota.
    plans.set("tenant", "20/min");
    let changed = tokio::time::Instant::now();
    let mut seen_at = None;
    while changed.elapsed() <= ttl + Duration::from_secs(2) {
        let response = send(&mut service, from("tenant")).await;
        let policy = response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        match (&seen_at, policy.as_str()) {
            (None, "\"api\";q=20;w=60") => seen_at = Some(changed.elapsed()),
            (Some(_), other) => assert_eq!(other, "\"api\";q=20;w=60", "never back"),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seen_at = seen_at.expect("the change reached the key");
    assert!(seen_at <= ttl, "seen after {seen_at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_source_that_never_answers_times_out_and_counts_as_an_error() {
    let quotas = KeyQuotas::new(quota_fn_async(|_| std::future::pending()))
        .lookup_timeout(Duration::from_secs(1));
    let mut service = keyed(Quota::per_minute(2), quotas.clone());
    // The first request waits for the lookup until it times out, then is
    // charged the default.
    let start = tokio::time::Instant::now();
    assert_eq!(statuses(&mut service, "k", 1).await, [200]);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(quotas.errors(), 1);
    // The key keeps the default: one more of 2, then limited.
    assert_eq!(statuses(&mut service, "k", 2).await, [200, 429]);
}

#[tokio::test]
async fn a_synchronous_closure_is_a_source() {
    let source = quota_fn(|key| match key.to_bytes().starts_with(b"internal:") {
        true => QuotaAnswer::Unlimited,
        false => QuotaAnswer::Default,
    });
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(1))
        .path("/login", [NamedLimit::new("login", Quota::per_minute(3))])
        .key(HeaderKey::new("x-api-key"))
        .quota_source(KeyQuotas::new(source))
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    assert_eq!(statuses(&mut service, "internal:batch", 5).await, [200; 5]);
    assert_eq!(statuses(&mut service, "customer", 2).await, [200, 429]);
    // A route keeps its own limits, whatever the key's quota.
    let login = Request::builder()
        .uri("/login")
        .header("x-api-key", "internal:batch")
        .body(())
        .unwrap();
    let login = send(&mut service, login).await;
    assert_eq!(login.headers()["ratelimit-policy"], "\"login\";q=3;w=60");
}

/// A layer with no limits of its own limits only the keys that have quotas.
#[tokio::test]
async fn without_default_limits_only_keys_with_quotas_are_limited() {
    let source = StaticQuotas::new().with("metered", "2/min".parse().unwrap());
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new("x-api-key"))
        .quota_source(KeyQuotas::new(source))
        .build();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    assert_eq!(statuses(&mut service, "metered", 3).await, [200, 200, 429]);
    assert_eq!(statuses(&mut service, "free", 5).await, [200; 5]);
}

/// A source that panics is a failed lookup, not a key stuck on the default
/// (nor a request stuck waiting): the request that waited for it gets the
/// default, the next request asks again.
#[tokio::test]
async fn a_source_that_panics_is_asked_again() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let source = quota_fn(move |_| {
        if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("a bug in the quota source (expected by this test)");
        }
        "1/min".parse().unwrap()
    });
    let mut service = keyed(Quota::per_minute(100), KeyQuotas::new(source));
    let first = send(&mut service, from("k")).await;
    assert_eq!(first.headers()["ratelimit-policy"], "\"api\";q=100;w=60");
    let second = send(&mut service, from("k")).await;
    assert_eq!(second.headers()["ratelimit-policy"], "\"api\";q=1;w=60");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(statuses(&mut service, "k", 1).await, [429]);
}

/// An answer with more quotas than a key may have is a failed lookup: the
/// default applies, and the error is counted.
#[tokio::test]
async fn an_answer_with_too_many_quotas_is_an_error() {
    let source = quota_fn(|_| QuotaAnswer::Quotas(vec![Quota::per_minute(5); 17]));
    let quotas = KeyQuotas::new(source);
    let mut service = keyed(Quota::per_minute(100), quotas.clone());
    let response = send(&mut service, from("k")).await;
    assert_eq!(response.headers()["ratelimit-policy"], "\"api\";q=100;w=60");
    assert_eq!(quotas.errors(), 1);
}

/// Outside any tokio runtime nothing can look quotas up: every key gets the
/// default limits, and the source is never asked.
#[test]
fn outside_a_runtime_keys_get_the_default_limits() {
    let quotas = KeyQuotas::new(StaticQuotas::new().with("paid", "5/min".parse().unwrap()));
    let mut service = keyed(Quota::per_minute(2), quotas.clone());
    // The memory store and the inner service answer at once, so each
    // request completes on its first poll, no executor needed.
    let status = |service: &mut _| {
        let mut future = std::pin::pin!(send(service, from("paid")));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(response) => response.status().as_u16(),
            std::task::Poll::Pending => panic!("a request outside a runtime did not complete"),
        }
    };
    let statuses: Vec<u16> = (0..4).map(|_| status(&mut service)).collect();
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(quotas.lookups(), 0);
}

/// In a runtime without time, a lookup cannot be timed: its task panics,
/// the key stays on the default limits, and its next request looks it up
/// again.
#[test]
fn in_a_runtime_without_time_keys_stay_on_the_default_limits() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let quotas = KeyQuotas::new(StaticQuotas::new().with("paid", "5/min".parse().unwrap()));
    let mut service = keyed(Quota::per_minute(2), quotas.clone());
    let statuses = runtime.block_on(async {
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(send(&mut service, from("paid")).await.status().as_u16());
            settle().await;
        }
        out
    });
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(quotas.lookups(), 4);
}

/// A plan changed at the source and invalidated applies from the key's
/// very next request, whatever the TTL; a lookup that was running when the
/// plan changed is made again, so its old answer is not kept.
#[tokio::test(start_paused = true)]
async fn an_invalidated_key_gets_its_new_plan_on_its_next_request() {
    let plans = Plans::default();
    plans.set("tenant", "10/min");
    let quotas = plans
        .source(Duration::from_millis(50))
        .ttl(Duration::from_secs(3600));
    let mut service = keyed(Quota::per_minute(100), quotas.clone());
    let first = send(&mut service, from("tenant")).await;
    assert_eq!(first.headers()["ratelimit-policy"], "\"api\";q=10;w=60");

    plans.set("tenant", "3/min");
    quotas.invalidate(&tollgate::Key::from("tenant"));
    let next = send(&mut service, from("tenant")).await;
    assert_eq!(next.headers()["ratelimit-policy"], "\"api\";q=3;w=60");

    // A lookup under way when the plan changes: its answer is not kept.
    plans.set("other", "10/min");
    let mut waiting = service.clone();
    let request = tokio::spawn(async move { send(&mut waiting, from("other")).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    plans.set("other", "4/min");
    quotas.invalidate_all();
    let answered = request.await.unwrap();
    assert_eq!(answered.headers()["ratelimit-policy"], "\"api\";q=4;w=60");
    assert_eq!(
        quotas.lookups(),
        3,
        "tenant twice, other once (asked twice)"
    );
}

/// The layer's default quotas replaced at run time, and back: every key
/// takes the new default from its next request, its usage kept.
#[tokio::test]
async fn default_quotas_replaced_at_run_time_keep_every_key_s_usage() {
    let quotas = KeyQuotas::new(StaticQuotas::new().with("vip", QuotaAnswer::Unlimited));
    let mut service = keyed(Quota::per_minute(10), quotas.clone());
    let remaining = |response: &Response<String>| {
        let field = response.headers()["ratelimit"].to_str().unwrap().to_owned();
        let r = field
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .unwrap()
            .to_owned();
        (
            response.headers()["ratelimit-policy"]
                .to_str()
                .unwrap()
                .to_owned(),
            r,
        )
    };
    assert_eq!(statuses(&mut service, "tenant", 4).await, [200; 4]);

    quotas.set_default_quotas(vec![Quota::per_minute(100)]);
    let moved = send(&mut service, from("tenant")).await;
    assert_eq!(
        remaining(&moved),
        ("\"api\";q=100;w=60".into(), "95".into())
    );
    let fresh = send(&mut service, from("newcomer")).await;
    assert_eq!(
        remaining(&fresh),
        ("\"api\";q=100;w=60".into(), "99".into())
    );
    assert_eq!(
        statuses(&mut service, "vip", 20).await,
        [200; 20],
        "its own answer stands"
    );

    quotas.set_default_quotas(Vec::new());
    let back = send(&mut service, from("tenant")).await;
    assert_eq!(
        remaining(&back),
        ("\"api\";q=10;w=60".into(), "4".into()),
        "5 used, and this one"
    );
}
