//! Plans that change, on a real redis-server: a key moved to another
//! per-key quota keeps its usage, for GCRA, the fixed window and the
//! sliding window, through the Redis store and the local-first store in
//! both modes (each plan's state is kept under its own keys, and
//! `Store::carry` moves the usage once); and two instances that both see
//! the change carry it once.

use http::{Request, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tollgate::quotas::KeyQuotas;
use tollgate::{Key, Store};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::app::App;
use tollgate_tests::random::Lcg;
use tollgate_tests::redis::RedisServer;
use tower::ServiceExt;

mod plans_common;
use plans_common::{Plans, app, app_in_mode, debt_is_kept, send, statuses};

const SECOND: u64 = 1_000_000_000;

/// The scenario on one store kind: 4 used of 5/h moved to 100/h leaves 95
/// after the next request; 50 used of 100/h moved to 5/h is refused with a
/// Retry-After, still refused a second before it, admitted at it.
async fn carries(
    name: &str,
    algorithm: Algorithm,
    app: &App,
    quotas: &KeyQuotas,
    plans: &Plans,
    clock: &ManualClock,
) {
    let case = format!("{name} {algorithm}");
    plans.set("up", "5/h");
    plans.set("down", "100/h");
    assert_eq!(statuses(app, "up", 4).await, [StatusCode::OK; 4], "{case}");
    assert_eq!(
        statuses(app, "down", 50).await,
        [StatusCode::OK; 50],
        "{case}"
    );
    plans.set("up", "100/h");
    plans.set("down", "5/h");
    quotas.invalidate(&Key::from("up"));
    quotas.invalidate(&Key::from("down"));
    let (status, r, _) = send(app, "up").await;
    assert_eq!((status, r), (StatusCode::OK, 95), "{case}: upgraded");
    let (status, _, retry) = send(app, "down").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{case}: downgraded");
    let retry = retry.expect("a Retry-After");
    assert!(retry > 60, "{case}: Retry-After {retry}");
    clock.advance(Duration::from_secs(retry - 1));
    assert_eq!(
        send(app, "down").await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "{case}: early"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        send(app, "down").await.0,
        StatusCode::OK,
        "{case}: at Retry-After"
    );
}

const ALGORITHMS: [Algorithm; 3] = [
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
];

async fn redis(server: &RedisServer, clock: &ManualClock, prefix: &str) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(prefix)
        .test_clock(clock.clone())
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_carries_over_a_plan_change_on_the_redis_store() {
    let server = RedisServer::start();
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let plans = Plans::default();
        let quotas = plans.quotas();
        let store = redis(&server, &clock, &format!("plain-{algorithm}")).await;
        let app = app(store, algorithm, &quotas);
        carries("redis", algorithm, &app, &quotas, &plans, &clock).await;
    }
}

/// Two instances over one Redis, each with its own cache of the plans:
/// both see the change (each carries), the usage moves once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_carry_a_change_once() {
    let server = RedisServer::start();
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let plans = Plans::default();
    plans.set("up", "5/h");
    let (one, two) = (plans.quotas(), plans.quotas());
    let first = app(redis(&server, &clock, "twice").await, Algorithm::Gcra, &one);
    let second = app(redis(&server, &clock, "twice").await, Algorithm::Gcra, &two);
    assert_eq!(statuses(&first, "up", 2).await, [StatusCode::OK; 2]);
    assert_eq!(statuses(&second, "up", 2).await, [StatusCode::OK; 2]);
    plans.set("up", "100/h");
    one.invalidate(&Key::from("up"));
    two.invalidate(&Key::from("up"));
    assert_eq!(
        send(&first, "up").await.1,
        95,
        "4 used, carried, and this one"
    );
    assert_eq!(send(&second, "up").await.1, 94, "carried once, not twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_carries_over_a_plan_change_on_the_local_first_store() {
    let server = RedisServer::start();
    for (name, mode) in [
        ("exact", LocalMode::Exact),
        ("periodic", LocalMode::periodic()),
    ] {
        for algorithm in ALGORITHMS {
            let clock = ManualClock::new(1_700_000_000 * SECOND);
            let plans = Plans::default();
            let quotas = plans.quotas();
            let prefix = format!("local-{name}-{algorithm}");
            let store = LocalFirst::builder(redis(&server, &clock, &prefix).await, mode).build();
            let app = app(store, algorithm, &quotas);
            carries(name, algorithm, &app, &quotas, &plans, &clock).await;
        }
    }
}

/// `Store::carry` on the Redis store against the core alone, as
/// `crates/tollgate/tests/carry.rs` checks the memory store: random moves
/// between quotas whose intervals are whole microseconds (the scripts'
/// unit), every algorithm the scripts run, random costs and times on a
/// manual clock; after the move the key is decided exactly as a fresh state
/// of the new quota charged what the old one had used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_key_is_decided_by_redis_as_the_core_reference() {
    use tollgate::{NamedLimit, Policy};
    use tollgate_core::Limiter;
    let server = RedisServer::start();
    let algorithms = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowBuckets,
    ];
    let limits = [1, 2, 4, 5, 8, 10, 20, 25, 50, 100];
    let seconds = [1, 2, 5, 10, 60];
    let mut rng = Lcg(42);
    for case in 0..60 {
        let algorithm = algorithms[rng.below(7) as usize];
        let mut pick = || {
            let limit = limits[rng.below(10) as usize];
            let period = seconds[rng.below(5) as usize];
            Quota::new(limit, Duration::from_secs(period)).unwrap()
        };
        let (old_quota, new_quota) = (pick(), pick());
        let policy = |quota| {
            Arc::new(Policy::new(vec![
                NamedLimit::new(format!("c{case}"), quota).with_algorithm(algorithm),
            ]))
        };
        let (from, to) = (policy(old_quota), policy(new_quota));
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let store = RedisStore::builder(server.url())
            .prefix(format!("prop{case}"))
            .test_clock(clock.clone())
            .block_cache(false)
            .connect()
            .await
            .unwrap();
        // The two plans' states must be apart in Redis, as per-key plans'
        // are: distinct prefixes stand in for the plan in the key name.
        let to_store = RedisStore::builder(server.url())
            .prefix(format!("prop{case}-to"))
            .test_clock(clock.clone())
            .block_cache(false)
            .connect()
            .await
            .unwrap();
        let (old, new) = (
            Limiter::new(algorithm, old_quota),
            Limiter::new(algorithm, new_quota),
        );
        let key = Key::from("tenant");
        let mut old_state = old.new_state();
        let now = || tollgate_core::Clock::now(&clock);
        for _ in 0..rng.below(12) {
            clock.advance(Duration::from_millis(rng.below(3_000)));
            let cost = 1 + rng.below(3) as u32;
            let expected = old.check(&mut old_state, now(), cost);
            let got = store
                .check(&from, &key, cost)
                .resolve()
                .await
                .unwrap()
                .merged();
            assert_eq!(got.allowed(), expected.allowed(), "case {case}");
        }
        clock.advance(Duration::from_millis(250));
        let used = tollgate_core::used(&old, &old_state, now());
        let mut new_state = tollgate_core::carried(&old, &old_state, &new, now());
        // The move, as `Store::carry` makes it, across the two stores.
        let peeked = store.peek(&from, &key).resolve().await.unwrap().each()[0];
        assert_eq!(
            peeked.limit() - peeked.remaining(),
            used,
            "case {case}: the usage read, {algorithm} {old_quota:?} {peeked:?}"
        );
        store.reset(&from, &key).await.unwrap();
        if used > 0 {
            to_store
                .debit(&to, &key, tollgate::store::PolicyDebit::new(used as u32))
                .landed()
                .await;
        }
        for _ in 0..rng.below(12) {
            clock.advance(Duration::from_millis(rng.below(3_000)));
            let cost = 1 + rng.below(3) as u32;
            let expected = new.check(&mut new_state, now(), cost);
            let got = to_store
                .check(&to, &key, cost)
                .resolve()
                .await
                .unwrap()
                .merged();
            assert_eq!(
                (got.allowed(), got.remaining()),
                (expected.allowed(), expected.remaining()),
                "case {case}: {algorithm} {old_quota:?} → {new_quota:?}, used {used}"
            );
        }
    }
}

/// A plan of two quotas moved to another of two: each limit keeps its own
/// usage (8 used of 10 a minute and of 20 an hour, moved to 100 a minute
/// and 10 an hour: 91 and 1 left after the next request), on the Redis
/// store and the local-first store in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_of_a_plan_keeps_its_own_usage() {
    let server = RedisServer::start();
    for name in ["redis", "exact", "periodic"] {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let plans = Plans::default();
        let quotas = plans.quotas();
        let redis = redis(&server, &clock, &format!("two-{name}")).await;
        let app = app_in_mode(name, redis, Algorithm::Gcra, &quotas);
        plans.set("two", "10/min;20/h");
        assert_eq!(
            statuses(&app, "two", 8).await,
            [StatusCode::OK; 8],
            "{name}"
        );
        plans.set("two", "100/min;10/h");
        quotas.invalidate(&Key::from("two"));
        let request = Request::builder()
            .header("x-api-key", "two")
            .body(())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let field = response.headers()["ratelimit"].to_str().unwrap().to_owned();
        let remaining: Vec<&str> = field
            .split(',')
            .filter_map(|item| item.split(';').find_map(|p| p.trim().strip_prefix("r=")))
            .collect();
        let policy = response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            remaining,
            ["91", "1"],
            "{name}: {} {field} ({policy})",
            response.status()
        );
    }
}

/// A debt survives a downgrade and an upgrade on Redis and on the
/// local-first store over it in both modes, for every algorithm each
/// decides: 8 used of 10, lowered to 5, raised to 20 leaves 11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_survives_a_downgrade_and_an_upgrade() {
    let server = RedisServer::start();
    for name in ["redis", "exact", "periodic"] {
        for algorithm in plans_common::AT_ONCE {
            if name != "redis" && !algorithm.local_first() {
                continue;
            }
            let clock = ManualClock::new(1_700_000_000 * SECOND);
            let plans = Plans::default();
            let quotas = plans.quotas();
            let redis = redis(&server, &clock, &format!("debt-{name}-{algorithm}")).await;
            let app = app_in_mode(name, redis, algorithm, &quotas);
            let case = format!("{name} {algorithm}");
            debt_is_kept(&case, &app, &quotas, &plans, "debtor").await;
            plans_common::a_left_out_limit_keeps_its_usage(
                &case, &app, &quotas, &plans, "left-out",
            )
            .await;
        }
    }
}

/// A quota changed across a restart reads the stored usage as a live
/// change carries it (issue 58): each "process" is a fresh layer over a
/// fresh `RedisStore` on the same server, configured with another quota
/// for the same limit. 8 used of 10 an hour, restarted at 5: refused;
/// at 20: 10 left after the next request; and the GCRA figures
/// (10 used of 100/h restarted at 1,000/h: 989 left; at 5/h: refused for
/// 4,320 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage() {
    let server = RedisServer::start();
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let start = async |algorithm, per_hour| {
        let store = redis(&server, &clock, "restarts").await;
        plans_common::process(store, algorithm, Quota::per_hour(per_hour))
    };
    plans_common::debt_survives_restarts("redis", start, "debtor").await;
    plans_common::gcra_figures("redis", start, "tenant").await;
    let store = async |_| redis(&server, &clock, "restarts").await;
    plans_common::leaky_bucket_survives_restarts("redis", store, "leaky").await;
}

/// The values of a raw RESP reply (the harness's `command`): a simple
/// string's text, a bulk string's value, an array's members.
fn reply_values(reply: &str) -> Vec<String> {
    reply
        .split("\r\n")
        .filter(|line| !line.is_empty() && !line.starts_with(['$', '*', ':']))
        .map(|line| line.strip_prefix('+').unwrap_or(line).to_owned())
        .collect()
}

/// A state written by the version before states said their quota (its
/// parameters taken off the value as it is stored) still reads, as under
/// the quota of the process that reads it, for every algorithm; its next
/// write says the quota again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_written_before_states_said_their_quota_still_reads() {
    use tollgate::{NamedLimit, Policy};
    let server = RedisServer::start();
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    for algorithm in plans_common::AT_ONCE {
        let store = redis(&server, &clock, "old-format").await;
        let app = plans_common::process(store.clone(), algorithm, Quota::per_hour(10));
        let key = format!("old-{algorithm}");
        assert_eq!(statuses(&app, &key, 4).await, [StatusCode::OK; 4]);
        let policy = Policy::new(vec![
            NamedLimit::new("api", Quota::per_hour(10)).with_algorithm(algorithm),
        ]);
        let name = store.redis_keys(&policy, &Key::from(key.as_str()))[0].clone();
        let says_its_quota = || {
            let dump = match reply_values(&server.command(&["TYPE", &name]))[0].as_str() {
                "string" => server.command(&["GET", &name]),
                "hash" => server.command(&["HGETALL", &name]),
                _ => server.command(&["ZRANGE", &name, "0", "0"]),
            };
            dump.contains('|') || dump.contains("\r\nq\r\n")
        };
        assert!(says_its_quota(), "{algorithm}: a state says its quota");
        // The value as the version before wrote it.
        match reply_values(&server.command(&["TYPE", &name]))[0].as_str() {
            "string" => {
                let value = reply_values(&server.command(&["GET", &name]))[0].clone();
                let (old, _) = value.split_once('|').unwrap();
                server.command(&["SET", &name, old, "KEEPTTL"]);
            }
            "hash" => {
                server.command(&["HDEL", &name, "q"]);
            }
            _ => {
                let head = server.command(&["ZRANGE", &name, "0", "0", "WITHSCORES"]);
                let head = reply_values(&head);
                let (old, _) = head[0].split_once('|').unwrap();
                server.command(&["ZREM", &name, &head[0]]);
                server.command(&["ZADD", &name, &head[1], old]);
            }
        }
        assert!(!says_its_quota(), "{algorithm}: the old form");
        let restarted = plans_common::process(
            redis(&server, &clock, "old-format").await,
            algorithm,
            Quota::per_hour(10),
        );
        let (status, r, _) = send(&restarted, &key).await;
        assert_eq!(
            (status, r),
            (StatusCode::OK, 5),
            "{algorithm}: 5 used of 10"
        );
        assert!(says_its_quota(), "{algorithm}: said again once written");
    }
}

/// What a local-first store wrote to Redis says its quota too: a process
/// restarted with another quota, on the plain Redis store, reads it as
/// the usage Redis held under the old one (what the old process
/// reported or reserved), both modes, every algorithm local-first takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_what_a_local_first_store_wrote_under_its_quota() {
    use tollgate::{NamedLimit, Policy};
    let server = RedisServer::start();
    for (name, mode) in [
        ("exact", LocalMode::Exact),
        ("periodic", LocalMode::periodic()),
    ] {
        for algorithm in plans_common::AT_ONCE {
            if !algorithm.local_first() {
                continue;
            }
            let clock = ManualClock::new(1_700_000_000 * SECOND);
            let prefix = format!("lf-restart-{name}-{algorithm}");
            let local = LocalFirst::builder(redis(&server, &clock, &prefix).await, mode).build();
            let first = plans_common::process(local, algorithm, Quota::per_hour(10));
            assert_eq!(statuses(&first, "k", 8).await, [StatusCode::OK; 8]);
            drop(first);
            // What Redis holds under the old quota, read under it.
            let store = redis(&server, &clock, &prefix).await;
            let old = Arc::new(Policy::new(vec![
                NamedLimit::new("api", Quota::per_hour(10)).with_algorithm(algorithm),
            ]));
            let peek = store.peek(&old, &Key::from("k")).resolve().await.unwrap();
            let used = 10 - peek.merged().remaining();
            let restarted = plans_common::process(store, algorithm, Quota::per_hour(20));
            let (status, r, _) = send(&restarted, "k").await;
            let case = format!("{name} {algorithm}: {used} used of 10 read under 20");
            assert_eq!((status, r), (StatusCode::OK, 20 - used - 1), "{case}");
        }
    }
}

/// The same restarts on a Redis Cluster (three masters): the scripts that
/// read a state under another quota run on the node of the key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_another_quota_reads_the_same_usage_on_a_cluster() {
    let cluster = tollgate_tests::redis::RedisCluster::start(3);
    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let store = async || {
        RedisStore::builder(cluster.url())
            .prefix("restarts")
            .test_clock(clock.clone())
            .connect()
            .await
            .unwrap()
    };
    let start = async |algorithm, per_hour| {
        plans_common::process(store().await, algorithm, Quota::per_hour(per_hour))
    };
    plans_common::debt_survives_restarts("cluster", start, "debtor").await;
    plans_common::gcra_figures("cluster", start, "tenant").await;
    let leaky = async |_| store().await;
    plans_common::leaky_bucket_survives_restarts("cluster", leaky, "leaky").await;
}
