//! With the `metrics` feature, the Redis stores count their calls, the
//! block cache its hits, and the local-first store its decisions, waits,
//! reservations and syncs, against a real redis-server; each figure is
//! checked against what the traffic must have caused.
#![cfg(feature = "metrics")]

use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::{GlobalKey, RateLimitLayer, Store};
use tollgate_core::Quota;
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::app::{App, behind, status};
use tollgate_tests::metrics::Counts;
use tollgate_tests::redis::RedisServer;

/// What `traffic` counts, on a recorder of its own: a runtime on this one
/// thread, so that the store's spawned calls are counted too.
fn counted<F: std::future::Future<Output = ()>>(traffic: F) -> Counts {
    let counts = Counts::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&counts, || runtime.block_on(traffic));
    counts
}

fn app<St: Store>(quota: Quota, store: St) -> App {
    behind(
        RateLimitLayer::builder()
            .quota("api", quota)
            .key(GlobalKey)
            .store(store)
            .build(),
    )
}

/// `n` requests one after another; how many passed.
async fn send(app: &App, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        if status(&mut app.clone(), Request::new(())).await == StatusCode::OK {
            passed += 1;
        }
    }
    passed
}

#[test]
fn the_plain_store_counts_its_calls_and_the_block_cache_its_hits() {
    let server = RedisServer::start();
    let counts = counted(async {
        let store = RedisStore::builder(server.url())
            .prefix("metrics-plain")
            .connect()
            .await
            .unwrap();
        let app = app(Quota::per_minute(2), store.clone());
        assert_eq!(send(&app, 5).await, 2);
        // Two admissions and the first refusal reach Redis; the block
        // cache answers the other two.
        assert_eq!(store.calls(), 3);
    });
    assert_eq!(counts.get("tollgate_redis_calls_total{call=check}"), 3);
    assert_eq!(counts.get("tollgate_block_cache_hits_total{limits=api}"), 2);
}

#[test]
fn exact_mode_counts_decisions_waits_and_reservations() {
    let server = RedisServer::start();
    let mut stats = None;
    let counts = counted(async {
        let redis = RedisStore::builder(server.url())
            .prefix("metrics-exact")
            .connect()
            .await
            .unwrap();
        let store = LocalFirst::builder(redis, LocalMode::Exact).build();
        let app = app(Quota::per_minute(3), store.clone());
        assert_eq!(send(&app, 6).await, 3);
        stats = Some(store.stats());
    });
    let stats = stats.unwrap();
    let get = |name: &str| counts.get(name);
    // Every request is a local decision or a wait; what Redis refused is
    // then refused here, with no call, until its retry time.
    assert_eq!(
        get("tollgate_local_decisions_total{mode=exact}")
            + get("tollgate_local_waits_total{mode=exact}"),
        6
    );
    assert!(get("tollgate_local_waits_total{mode=exact}") >= 1);
    assert_eq!(
        get("tollgate_local_blocked_total{mode=exact}"),
        stats.blocked
    );
    assert!(stats.blocked >= 1, "{stats:?}");
    assert_eq!(
        get("tollgate_redis_calls_total{call=reserve}"),
        stats.redis_calls
    );
    assert!(stats.redis_calls >= 1, "{stats:?}");
    // The three admitted were granted, and nothing more could be.
    assert_eq!(get("tollgate_local_reserved_units_total{}"), 3);
    assert_eq!(stats.reserved_units, 3);
    assert_eq!(get("tollgate_redis_calls_total{call=check}"), 0);
}

#[test]
fn periodic_mode_counts_its_syncs_and_their_lag() {
    let server = RedisServer::start();
    let mut stats = None;
    let counts = counted(async {
        let redis = RedisStore::builder(server.url())
            .prefix("metrics-periodic")
            .connect()
            .await
            .unwrap();
        let store = LocalFirst::builder(
            redis,
            LocalMode::Periodic {
                sync_interval: Duration::from_millis(20),
            },
        )
        .build();
        let app = app(Quota::per_minute(100), store.clone());
        assert_eq!(send(&app, 10).await, 10);
        // Time for a few ticks: the admissions are reported.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stats = Some(store.stats());
    });
    let stats = stats.unwrap();
    let get = |name: &str| counts.get(name);
    assert_eq!(
        get("tollgate_local_decisions_total{mode=periodic}")
            + get("tollgate_local_waits_total{mode=periodic}"),
        10
    );
    // The first request waits for the first reading.
    assert!(get("tollgate_local_waits_total{mode=periodic}") >= 1);
    assert_eq!(
        get("tollgate_redis_calls_total{call=sync}"),
        stats.redis_calls
    );
    assert!(stats.redis_calls >= 2, "{stats:?}");
    let lag = counts
        .gauge("tollgate_local_sync_lag_seconds{}")
        .expect("the lag was set at a tick");
    assert!((0.0..1.0).contains(&lag), "{lag}");
}

/// `tollgate_decisions_total` of the limit "api": allowed, limited,
/// shadow_limited.
fn decisions(counts: &Counts) -> [u64; 3] {
    ["allowed", "limited", "shadow_limited"].map(|d| {
        counts.get(&format!(
            "tollgate_decisions_total{{limit=api,decision={d}}}"
        ))
    })
}

#[test]
fn decisions_and_near_limit_admissions_are_counted_per_limit_over_redis() {
    let server = RedisServer::start();
    for (n, block_cache) in [(4, true), (9, true), (9, false)] {
        let counts = counted(async {
            let store = RedisStore::builder(server.url())
                .prefix(format!("metrics-decisions-{n}-{block_cache}"))
                .block_cache(block_cache)
                .connect()
                .await
                .unwrap();
            let app = app(Quota::per_minute(5), store);
            assert_eq!(send(&app, n).await, n.min(5));
        });
        let allowed = n.min(5) as u64;
        // A refusal by the block cache is a refusal of the limit.
        assert_eq!(
            decisions(&counts),
            [allowed, n as u64 - allowed, 0],
            "{n} requests, block cache {block_cache}"
        );
        // Admissions leaving 1 or 0 of 5 (20 % or less): the 4th and 5th.
        assert_eq!(
            counts.get("tollgate_near_limit_total{limit=api}"),
            allowed.saturating_sub(3)
        );
    }
}

#[test]
fn in_shadow_mode_over_redis_the_would_be_refusals_are_shadow_limited() {
    let server = RedisServer::start();
    let counts = counted(async {
        let store = RedisStore::builder(server.url())
            .prefix("metrics-shadow")
            .connect()
            .await
            .unwrap();
        let app = behind(
            RateLimitLayer::builder()
                .quota("api", Quota::per_minute(5))
                .key(GlobalKey)
                .store(store)
                .shadow(true)
                .build(),
        );
        assert_eq!(send(&app, 8).await, 8);
    });
    assert_eq!(decisions(&counts), [5, 0, 3]);
    assert_eq!(counts.get("tollgate_near_limit_total{limit=api}"), 2);
}

#[test]
fn with_redis_away_the_fallback_decides_and_is_counted() {
    use tollgate::MemoryStore;
    use tollgate::store::{Fallback, Timeout};
    let mut server = RedisServer::start();
    let url = server.url();
    let counts = counted(async move {
        let redis = RedisStore::builder(url)
            .prefix("metrics-fallback")
            .block_cache(false)
            .connect()
            .await
            .unwrap();
        let store = Fallback::new(
            Timeout::new(redis, Duration::from_secs(5)),
            MemoryStore::new(),
        );
        let app = app(Quota::per_minute(5), store);
        // Two through Redis, then Redis goes away: the memory store
        // decides, from what the fallback last knew of the key (3 left).
        assert_eq!(send(&app, 2).await, 2);
        server.kill();
        assert_eq!(send(&app, 6).await, 3);
    });
    assert_eq!(
        counts.get("tollgate_fallback_decisions_total{limits=api}"),
        6
    );
    assert_eq!(decisions(&counts), [5, 3, 0]);
    assert_eq!(counts.get("tollgate_store_errors_total{limits=api}"), 0);
}
