//! Helpers shared by the Redis test files (`mod common;` in each). They
//! name `tollgate` types, so they cannot live in the `tollgate-tests`
//! library, which `tollgate`'s own tests depend on.

// Each test file uses some of these.
#![allow(dead_code)]

use std::sync::Arc;
use tollgate::{Key, Policy, PolicyDecision, Store, StoreReply};
use tollgate_core::{Decision, DecisionFields};

/// `store`'s decision for one request of `cost`, awaited if it is not
/// immediate; panics if the store fails (these tests need a working one).
pub async fn decide<S: Store>(
    store: &S,
    policy: &Arc<Policy>,
    key: &Key,
    cost: u32,
) -> PolicyDecision {
    match store.check(policy, key, cost) {
        StoreReply::Pending(future) => future.await.expect("the store answers"),
        StoreReply::Ready(result) => result.expect("the store answers"),
    }
}

/// A core decision at the scripts' resolution: times rounded up to whole
/// microseconds (the leaky bucket's "1 ns later" is "1 µs later" there).
pub fn in_micros(d: Decision) -> Decision {
    let up = |nanos: u64| {
        if nanos == Decision::NEVER_NANOS {
            nanos
        } else {
            nanos.div_ceil(1_000) * 1_000
        }
    };
    Decision::from(DecisionFields {
        reset_after_nanos: up(d.reset_after_nanos()),
        retry_after_nanos: up(d.retry_after_nanos()),
        wait_nanos: up(d.wait_nanos()),
        replenish_after_nanos: up(d.replenish_after_nanos()),
        ..d.fields()
    })
    .with_over_limit(d.over_limit())
}

/// The login limiter of the late-answer tests: 3 wrong passwords a minute
/// per user (`x-user`), `charge_when` 401 (a correct password counts
/// nothing), over `store`, whose answers the layer waits for
/// `store_timeout` at most (failing open past it, the default).
pub fn login_app<St: Store>(
    store: St,
    store_timeout: std::time::Duration,
) -> tollgate_tests::app::App {
    use http::{Request, Response, StatusCode};
    use tower::Layer;
    let layer = tollgate::RateLimitLayer::builder()
        .quota("login", tollgate_core::Quota::per_minute(3))
        .key(tollgate::HeaderKey::new("x-user"))
        .store(store)
        .charge_when(tollgate::settings::ChargeWhen::statuses("401").unwrap())
        .store_timeout(store_timeout)
        .try_build()
        .unwrap();
    let handler = tower::service_fn(|request: Request<()>| async move {
        let right = request
            .headers()
            .get("x-password")
            .is_some_and(|p| p == "right");
        let mut response = Response::new(String::new());
        if !right {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, std::convert::Infallible>(response)
    });
    tower::util::BoxCloneSyncService::new(
        layer.layer(tower::util::BoxCloneSyncService::new(handler)),
    )
}

/// One login of `user` through `app`, with the right password or not.
pub async fn login(
    app: &mut tollgate_tests::app::App,
    user: &str,
    right: bool,
) -> http::StatusCode {
    let request = http::Request::get("/login")
        .header("x-user", user)
        .header("x-password", if right { "right" } else { "wrong" })
        .body(())
        .unwrap();
    tollgate_tests::app::status(app, request).await
}

/// Waits (at most the late-check bound and a little more) until no check
/// the layers stopped waiting on is still being heard out in this process.
pub async fn late_checks_settled() {
    let bound = tollgate::store::late::LATE_CHECK_BOUND + std::time::Duration::from_secs(5);
    let started = std::time::Instant::now();
    while tollgate::store::late::late_checks_in_progress() > 0 {
        assert!(
            started.elapsed() < bound,
            "late checks not settled within {bound:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The scenario of issue 47: for each of `users` users, five correct
/// passwords through `slow` (a layer whose store's replies are held back
/// past its timeout at random), then three wrong ones through `direct` (a
/// layer over the same counters, not held back): every wrong one is
/// answered 401, never 429 — no success stayed charged.
pub async fn successes_never_stay_charged(
    slow: &mut tollgate_tests::app::App,
    direct: &mut tollgate_tests::app::App,
    users: usize,
    label: &str,
) {
    successes_never_stay_charged_after(slow, direct, users, label, std::time::Duration::ZERO).await;
}

/// [`successes_never_stay_charged`], the wrong passwords sent `lag` after
/// the late checks are settled: for a store whose instances see one
/// another's give-backs only after a while (local-first periodic: an
/// interval).
pub async fn successes_never_stay_charged_after(
    slow: &mut tollgate_tests::app::App,
    direct: &mut tollgate_tests::app::App,
    users: usize,
    label: &str,
    lag: std::time::Duration,
) {
    for user in 0..users {
        let user = format!("{label}-user-{user}");
        // A user's logins a little apart (as people type): a late answer
        // (40 ms at most) is in before the next login asks.
        for _ in 0..5 {
            assert_eq!(login(slow, &user, true).await, http::StatusCode::OK);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    late_checks_settled().await;
    tokio::time::sleep(lag).await;
    for user in 0..users {
        let user = format!("{label}-user-{user}");
        let statuses = [
            login(direct, &user, false).await,
            login(direct, &user, false).await,
            login(direct, &user, false).await,
        ];
        assert_eq!(
            statuses.map(|s| s.as_u16()),
            [401; 3],
            "{label}: {user}'s three wrong passwords (a 429 means a success stayed charged)"
        );
    }
}
