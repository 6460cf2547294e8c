//! RedisStore decides as tollgate-core does: the same arrival trace through
//! the core on a manual clock and through the scripts (given the same times)
//! yields the same decisions, field by field, for every algorithm (the
//! sliding log at its entry bound too), for
//! several limits charged together, on one server and on a 3-master Cluster.
//! The scripts are compared with the store's block cache off; with it on,
//! the same trace is admitted and refused request by request as the core
//! says, with fewer calls.

mod common;

use common::{decide, in_micros};
use std::sync::Arc;
use std::time::Duration;
use tollgate::store::PolicyRefund;
use tollgate::{Key, NamedLimit, Policy};
use tollgate_core::{
    Algorithm, Decision, Limiter, ManualClock, Quota, Refill, SlidingLog, TokenBucket, check_all,
};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::{RedisCluster, RedisServer};

/// Gaps between arrivals in milliseconds, and each request's cost.
fn trace() -> Vec<(u64, u32)> {
    let mut trace = vec![(0, 1); 12];
    trace.extend((0..30).map(|i| (50, 1 + i % 3)));
    trace.push((2_000, 1));
    trace.extend([(0, 2); 15]);
    trace.extend((0..20).map(|i| (130, if i == 7 { 9 } else { 1 })));
    trace.push((999, 1));
    trace.extend([(1, 1); 10]);
    trace.push((61_000, 1));
    trace.extend([(0, 0), (0, 3), (250, 1)]);
    trace
}

/// The limits under test: every algorithm on a quota whose intervals are
/// whole microseconds (the scripts' unit), a token bucket of each refill
/// style, GCRA in delay mode, and two policies of several limits.
fn policies() -> Vec<Vec<NamedLimit>> {
    let quota = Quota::per_second(8).with_burst(4).unwrap();
    let mut policies: Vec<Vec<NamedLimit>> = Algorithm::ALL
        .iter()
        .map(|&a| vec![NamedLimit::new("api", quota).with_algorithm(a)])
        .collect();
    // The interval bucket built by hand rather than by name
    // (`Algorithm::TokenBucketInterval`, above): the same Redis state name,
    // so another limit name keeps the two apart.
    let interval = TokenBucket::new(quota).with_refill(Refill::Interval);
    policies.push(vec![
        NamedLimit::new("refill", quota).with_limiter(Limiter::TokenBucket(interval)),
    ]);
    // A sliding log at a small bound: its oldest entries are merged.
    let bounded = SlidingLog::new(quota).with_max_entries(3);
    policies.push(vec![
        NamedLimit::new("api", quota).with_limiter(Limiter::SlidingLog(bounded)),
    ]);
    let delayed = Limiter::new(Algorithm::Gcra, quota).with_max_delay(Duration::from_millis(300));
    policies.push(vec![NamedLimit::new("api", quota).with_limiter(delayed)]);
    // A limiter built on another quota than the name was given: the limit
    // takes the limiter's quota, on both sides.
    let generous = Quota::per_second(1_000);
    policies.push(vec![
        NamedLimit::new("rebuilt", generous)
            .with_limiter(Limiter::new(Algorithm::FixedWindow, quota)),
    ]);
    let per_10s: Quota = "20/10s".parse().unwrap();
    policies.push(vec![
        NamedLimit::new("burst", quota),
        NamedLimit::new("steady", per_10s).with_algorithm(Algorithm::SlidingWindow),
    ]);
    policies.push(vec![
        NamedLimit::new("a", quota).with_algorithm(Algorithm::FixedWindow),
        NamedLimit::new("b", per_10s).with_algorithm(Algorithm::SlidingLog),
        NamedLimit::new("c", "4/s".parse().unwrap()).with_algorithm(Algorithm::LeakyBucket),
    ]);
    policies
}

/// Runs every policy's trace through the core and through `url`, asserting
/// equal decisions; returns how many requests were admitted in all.
async fn assert_conforms(url: &str, key: &Key) -> usize {
    assert_conforms_with(url, key, Cache::Off, Refunds::None).await
}

/// What changes charges after the checks, on both sides.
#[derive(Clone, Copy, PartialEq)]
enum Refunds {
    None,
    /// Every third request's admission, refunded after the next gap
    /// (`Limiter::refund` in the core, `refund.lua` in Redis).
    EveryThird,
    /// Every fifth request is followed by a forced charge of 3 units
    /// (pay after: `Limiter::debit` in the core, `debit.lua` in Redis),
    /// into debt where the limit is spent.
    DebtsEveryFifth,
}

/// An admission to give back: when, its cost, the core's decisions and
/// Redis's.
struct Admission {
    at: u64,
    cost: u32,
    core: Vec<Decision>,
    redis: tollgate::PolicyDecision,
}

/// Whether the store's block cache is on, and so what must agree.
#[derive(Clone, Copy, PartialEq)]
enum Cache {
    /// Off: every decision is the script's, figure by figure the core's.
    Off,
    /// On: a refusal may be the cache's (its figures those of an earlier
    /// refusal, moved on by the time since), but each request is admitted
    /// or refused as the core says.
    On,
}

async fn assert_conforms_with(url: &str, key: &Key, cache: Cache, refunds: Refunds) -> usize {
    let start = 1_700_000_000_000_000_000 + 250_000_000;
    let mut admitted = 0;
    for limits in policies() {
        let clock = ManualClock::new(start);
        let store = RedisStore::builder(url)
            .prefix(format!(
                "conformance-{}{}{}",
                limits_label(&limits),
                if cache == Cache::On { "-cached" } else { "" },
                match refunds {
                    Refunds::None => "",
                    Refunds::EveryThird => "-refunds",
                    Refunds::DebtsEveryFifth => "-debts",
                }
            ))
            .block_cache(cache == Cache::On)
            .test_clock(clock.clone())
            .connect()
            .await
            .expect("connect");
        let policy = Arc::new(Policy::new(limits.clone()));
        let limiters: Vec<Limiter> = limits.iter().map(|l| *l.limiter()).collect();
        let mut states: Vec<_> = limiters.iter().map(Limiter::new_state).collect();
        let mut now = start;
        let mut seen = [0usize; 2];
        let mut to_refund: Option<Admission> = None;
        for (i, (gap, cost)) in trace().into_iter().enumerate() {
            clock.advance(Duration::from_millis(gap));
            now += gap * 1_000_000;
            if let Some(admission) = to_refund.take() {
                for (k, limiter) in limiters.iter().enumerate() {
                    let refund = tollgate_core::Refund {
                        at: admission.at,
                        cost: admission.cost,
                        reset_after: Some(admission.core[k].reset_after_nanos()),
                    };
                    limiter.refund(&mut states[k], refund, now);
                }
                let ago = Duration::from_nanos(now - admission.at);
                let refund = PolicyRefund::of(&admission.redis, admission.cost, ago);
                let landed = tollgate::Store::refund(&store, &policy, key, refund)
                    .landed()
                    .await;
                assert!(landed, "refunded");
            }
            let mut expected_each = vec![Decision::default(); limiters.len()];
            let mut pairs: Vec<_> = limiters.iter().zip(states.iter_mut()).collect();
            let expected = in_micros(check_all(&mut pairs, now, cost, &mut expected_each));
            let expected_each: Vec<Decision> = expected_each.into_iter().map(in_micros).collect();
            let got = decide(&store, &policy, key, cost).await;
            let label = limits_label(&limits);
            if refunds == Refunds::EveryThird && i % 3 == 0 && expected.allowed() {
                assert_eq!(
                    got.charged_at(),
                    Some(now),
                    "{label}, request {i}: the charge's time"
                );
                to_refund = Some(Admission {
                    at: now,
                    cost,
                    core: expected_each.clone(),
                    redis: got.clone(),
                });
            }
            if cache == Cache::On {
                assert_eq!(
                    got.merged().allowed(),
                    expected.allowed(),
                    "{label}, request {i}, cached"
                );
                seen[usize::from(got.merged().allowed())] += 1;
                continue;
            }
            assert_eq!(got.each(), expected_each.as_slice(), "{label}, request {i}");
            assert_eq!(got.merged(), expected, "{label}, request {i}");
            seen[usize::from(got.merged().allowed())] += 1;
            if refunds == Refunds::DebtsEveryFifth && i % 5 == 2 {
                for (limiter, state) in limiters.iter().zip(states.iter_mut()) {
                    limiter.debit(state, now, 3);
                }
                store.charge_debt(&policy, key, 3).await.expect("charged");
            }
        }
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "the trace must both pass and limit"
        );
        admitted += seen[1];
    }
    admitted
}

fn limits_label(limits: &[NamedLimit]) -> String {
    let parts: Vec<String> = limits
        .iter()
        .map(|l| {
            let limiter = l.limiter();
            let style = match limiter {
                Limiter::TokenBucket(t) if t.refill() == Refill::Interval => "-interval",
                Limiter::Gcra(g) if !g.max_delay().is_zero() => "-delay",
                Limiter::SlidingLog(l) if l.max_entries() < SlidingLog::DEFAULT_MAX_ENTRIES => {
                    "-bounded"
                }
                _ => "",
            };
            format!("{}-{}{}", l.name(), limiter.algorithm(), style)
        })
        .collect();
    parts.join("+")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_decide_as_the_core_on_one_server() {
    let server = RedisServer::start();
    assert_conforms(&server.url(), &Key::from_bytes(b"alice")).await;
}

/// Refunds too: every third admission given back a step later leaves the
/// scripts' state where the core's refund leaves the core's, figure by
/// figure in every later decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_give_back_as_the_core_does() {
    let server = RedisServer::start();
    let key = Key::from_bytes(b"alice");
    let with = assert_conforms_with(&server.url(), &key, Cache::Off, Refunds::EveryThird).await;
    let without = assert_conforms(&server.url(), &key).await;
    assert!(
        with > without,
        "refunds let more through: {with} vs {without}"
    );
}

/// Debts too (pay after): a forced charge after every fifth request
/// leaves the scripts' state where the core's `debit` leaves the core's,
/// figure by figure in every later decision, refusals in debt included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_charge_debts_as_the_core_does() {
    let server = RedisServer::start();
    let key = Key::from_bytes(b"alice");
    let with =
        assert_conforms_with(&server.url(), &key, Cache::Off, Refunds::DebtsEveryFifth).await;
    let without = assert_conforms(&server.url(), &key).await;
    assert!(
        with < without,
        "debts let less through: {with} vs {without}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_block_cache_changes_no_decision_and_saves_calls() {
    let server = RedisServer::start();
    let key = Key::from_bytes(b"alice");
    let calls = || server.script_calls();
    let before = calls();
    let admitted = assert_conforms_with(&server.url(), &key, Cache::On, Refunds::None).await;
    let with_cache = calls() - before;
    let before = calls();
    assert_eq!(assert_conforms(&server.url(), &key).await, admitted);
    let without = calls() - before;
    let requests = (trace().len() * policies().len()) as u64;
    println!(
        "{requests} requests: {without} script calls without the block cache, {with_cache} with it"
    );
    assert_eq!(without, requests);
    assert!(with_cache < without, "{with_cache} calls with the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_master_cluster_decides_as_one_server() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    // Keys whose hash tags fall into different slots, and so (with three
    // masters holding a third of the slots each) on different masters.
    let mut keys: Vec<Key> = (0..10)
        .map(|i| Key::from_bytes(format!("user-{i}").as_bytes()))
        .collect();
    keys.push(Key::GLOBAL);
    keys.push(Key::from(
        "203.0.113.9".parse::<std::net::IpAddr>().unwrap(),
    ));
    let mut masters_used = std::collections::HashSet::new();
    for key in &keys {
        let standalone = assert_conforms(&server.url(), key).await;
        let clustered = assert_conforms(&cluster.url(), key).await;
        assert_eq!(standalone, clustered);
        for (i, node) in cluster.nodes().iter().enumerate() {
            if node.command(&["DBSIZE"]) != ":0\r\n" {
                masters_used.insert(i);
            }
        }
    }
    assert_eq!(masters_used.len(), 3, "the keys spread over every master");
}
