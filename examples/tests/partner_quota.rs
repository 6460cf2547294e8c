//! The strict outbound recipe (`examples/partner_quota.rs`) against its
//! partner, an API on loopback that counts each request when it arrives
//! in a sliding log and refuses the one past its quota: calls made
//! through `DirectLimiter::at_most(..).call(..)` from several tasks, each
//! held up on its way for a random time (a network whose delays vary),
//! are never refused; GCRA's limiter of the same quota, in the same run,
//! is (its burst and its refill in one period).

#[allow(dead_code)] // its `main` is the example's, not the test's
#[path = "../examples/partner_quota.rs"]
mod example;

use example::{Partner, get_page};
use std::time::Duration;
use tollgate::DirectLimiter;
use tollgate_core::Quota;
use tollgate_tests::random::Lcg;

// A second: a call (0–40 ms held up, a loopback round trip) stays well
// within it on a busy machine, as `call` asks.
const PERIOD: Duration = Duration::from_secs(1);
const LIMIT: u64 = 5;

/// `tasks` tasks making `calls` calls each through `limiter`, each call
/// held up for 0–40 ms (drawn at random) between its admission and its
/// request: the partner's refusals.
async fn refused<St: tollgate::Store>(
    limiter: DirectLimiter<St>,
    tasks: u64,
    calls: u64,
    seed: u64,
) -> u64 {
    let partner = Partner::start(LIMIT as usize, PERIOD).await.unwrap();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (limiter, addr) = (limiter.clone(), partner.addr);
            tokio::spawn(async move {
                let mut random = Lcg(seed.wrapping_add(task));
                for _ in 0..calls {
                    let delay = Duration::from_millis(random.below(41));
                    limiter
                        .call(async {
                            tokio::time::sleep(delay).await;
                            get_page(addr).await
                        })
                        .await
                        .expect("the store refunds and debits")
                        .expect("the partner answers");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(partner.accepted() + partner.refused(), tasks * calls);
    partner.refused()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_in_any_period_is_never_refused_by_a_sliding_log_partner() {
    for seed in [1, 2] {
        let limiter = DirectLimiter::at_most(Quota::new(LIMIT, PERIOD).unwrap());
        assert_eq!(refused(limiter, 3, 5, seed).await, 0, "seed {seed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_of_the_same_quota_is_refused_by_it() {
    // The control: GCRA lets its burst (5) out at once and refills one
    // every 200 ms, about 9 in the first second, which the partner refuses.
    let limiter = DirectLimiter::new(Quota::new(LIMIT, PERIOD).unwrap());
    assert!(refused(limiter, 3, 5, 1).await > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_too_and_a_store_that_cannot_move_a_charge_is_refused_first() {
    // The same limit in Redis, as a fleet sharing one partner would count it.
    let redis = tollgate_tests::redis::RedisServer::start();
    let store = tollgate_redis::RedisStore::connect(redis.url().as_str())
        .await
        .unwrap();
    let quota = Quota::new(LIMIT, PERIOD).unwrap();
    let limiter = DirectLimiter::builder()
        .quota("partner", quota)
        .algorithm(tollgate_core::Algorithm::SlidingLog)
        .store(store)
        .direct()
        .unwrap();
    assert_eq!(refused(limiter, 3, 5, 7).await, 0);

    // A store that can only check (a store of one's own that does not
    // say it can give charges back): refused before any call.
    let limiter = DirectLimiter::builder()
        .quota("partner", quota)
        .algorithm(tollgate_core::Algorithm::SlidingLog)
        .store(CheckOnly(tollgate::MemoryStore::new()))
        .direct()
        .unwrap();
    let error = limiter.call(async { unreachable!() }).await.unwrap_err();
    assert!(
        error.to_string().contains("CheckOnly") && error.to_string().contains("refund"),
        "{error}"
    );
}

/// A store of one's own that implements only `check`.
#[derive(Clone)]
struct CheckOnly(tollgate::MemoryStore);

impl tollgate::Store for CheckOnly {
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<tollgate::PolicyDecision, Self::Error>>;

    fn check(
        &self,
        policy: &std::sync::Arc<tollgate::Policy>,
        key: &tollgate::Key,
        cost: u32,
    ) -> tollgate::StoreReply<Self::Future, Self::Error> {
        tollgate::StoreReply::Ready(Ok(self.0.check_now(policy, key, cost)))
    }
}

/// `call` through every wrapper a store may sit behind (a timeout, a
/// fallback, a block cache, a penalty box): one call leaves exactly one
/// charge (moved, neither lost nor doubled), and the partner refuses
/// nothing; the local-first store, which cannot decide a sliding log, is
/// refused when the limiter is built, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_keeps_the_count_through_every_wrapper_and_local_first_is_refused_at_build() {
    use tollgate::MemoryStore;
    use tollgate::store::{BlockCache, Fallback, Penalty, PenaltyBox, Timeout};
    async fn check<St: tollgate::Store>(store: St, name: &str) {
        let build = |store: St| {
            DirectLimiter::builder()
                .quota("partner", Quota::new(LIMIT, PERIOD).unwrap())
                .algorithm(tollgate_core::Algorithm::SlidingLog)
                .store(store)
                .direct()
                .unwrap()
        };
        let limiter = build(store.clone());
        limiter.call(async {}).await.unwrap();
        let left = limiter.peek().await.unwrap().remaining();
        assert_eq!(left, LIMIT - 1, "{name}: one call, one charge");
        let limiter = build(store).with_key(tollgate::Key::from("fresh"));
        assert_eq!(refused(limiter, 2, 5, 3).await, 0, "{name}");
    }
    let slow = Duration::from_secs(1);
    check(Timeout::new(MemoryStore::new(), slow), "Timeout").await;
    check(
        Fallback::new(MemoryStore::new(), MemoryStore::new()),
        "Fallback",
    )
    .await;
    check(BlockCache::new(MemoryStore::new()), "BlockCache").await;
    // Waiting its turn is refused now and then: a box that blocks only
    // a flood.
    let penalty = Penalty::new(1_000, Duration::from_secs(60), Duration::from_secs(60));
    check(PenaltyBox::new(MemoryStore::new(), penalty), "PenaltyBox").await;

    let redis = tollgate_tests::redis::RedisServer::start();
    let store = tollgate_redis::RedisStore::connect(redis.url().as_str())
        .await
        .unwrap();
    for mode in [
        tollgate_local::LocalMode::Exact,
        tollgate_local::LocalMode::Periodic {
            sync_interval: Duration::from_millis(100),
        },
    ] {
        let local = tollgate_local::LocalFirst::builder(store.clone(), mode).build();
        let error = DirectLimiter::builder()
            .quota("partner", Quota::new(LIMIT, PERIOD).unwrap())
            .algorithm(tollgate_core::Algorithm::SlidingLog)
            .store(local)
            .direct()
            .unwrap_err()
            .to_string();
        assert!(error.contains("sliding"), "{mode:?}: {error}");
    }
}
