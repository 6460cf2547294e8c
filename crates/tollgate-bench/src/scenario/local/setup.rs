//! What the local scenario's parts share: its constants, the four kinds
//! of store that parts 1 and 4 compare, the limit of parts 2 and 3 with
//! the app instances that share it, and one decision (the same for every
//! part, so that every figure measures the same work).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, LocalStats, RedisStore};

/// Concurrent tasks in parts 1 and 4 (one instance) and in parts 2 and 3
/// (all instances together).
pub(super) const TASKS: usize = 64;
/// App instances sharing one limit in parts 2 and 3.
pub(super) const INSTANCES: usize = 4;
/// A task yields to the runtime after this many decisions in a row.
pub const YIELD_EVERY: u32 = 32;
/// Part 1's limit: far above any rate reached here.
pub(super) const HOT_RATE: u64 = 1_000_000_000;
/// Periodic mode's interval in parts 1, 2 and 4.
pub(super) const PERIODIC_MS: u64 = 100;
/// The limit of parts 2 and 3: 1,000 a second.
pub(super) const RATE: u64 = 1_000;
/// Part 3's GCRA burst (a tenth of a second's rate; see BENCHMARKS.md).
pub(super) const GCRA_BURST: u64 = 100;
/// Part 3's sync intervals.
pub const INTERVALS_MS: [u64; 5] = [10, 50, 100, 500, 1_000];
/// How long a flood lasts (part 3): inside two whole windows of the fixed
/// window, which it starts 50 ms into.
pub(super) const FLOOD: Duration = Duration::from_millis(1_900);

/// The four stores of parts 1 and 4, in the order of their figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Memory,
    Exact,
    Periodic,
    Redis,
}

impl Kind {
    pub(super) const ALL: [Kind; 4] = [Kind::Memory, Kind::Exact, Kind::Periodic, Kind::Redis];

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Memory => "MemoryStore",
            Kind::Exact => "LocalFirst exact",
            Kind::Periodic => "LocalFirst periodic 100 ms",
            Kind::Redis => "RedisStore (1 call per request)",
        }
    }
}

/// The limit of parts 2 and 3 for `algorithm`: 1,000/s; GCRA's burst is
/// [`GCRA_BURST`] in part 3 (`burst`), the limit in part 2.
pub(super) fn limit(algorithm: Algorithm, burst: bool) -> Arc<Policy> {
    let mut quota = Quota::per_second(RATE);
    if burst && algorithm == Algorithm::Gcra {
        quota = quota.with_burst(GCRA_BURST).expect("a valid burst");
    }
    Arc::new(Policy::new(vec![
        NamedLimit::new("api", quota).with_algorithm(algorithm),
    ]))
}

/// [`INSTANCES`] local-first stores in `mode`, each with its own
/// connection, over the same keys.
pub(super) async fn instances(
    url: &str,
    prefix: &str,
    mode: LocalMode,
) -> Vec<LocalFirst<RedisStore>> {
    let mut stores = Vec::new();
    for _ in 0..INSTANCES {
        let redis = RedisStore::builder(url)
            .prefix(prefix)
            .connect()
            .await
            .expect("connect to the redis-server");
        stores.push(LocalFirst::builder(redis, mode).build());
    }
    stores
}

/// The instances' counts, summed.
pub(super) fn total(stores: &[LocalFirst<RedisStore>]) -> LocalStats {
    let mut sum = LocalStats::default();
    for s in stores.iter().map(LocalFirst::stats) {
        sum.redis_calls += s.redis_calls;
        sum.reserved_units += s.reserved_units;
        sum.lapsed_units += s.lapsed_units;
        sum.local_decisions += s.local_decisions;
        sum.waited += s.waited;
    }
    sum
}

/// One decision of cost 1 on `key`: the reply, awaited if pending.
pub(super) async fn decide_on<S: Store>(store: &S, policy: &Arc<Policy>, key: &Key) -> bool {
    let decision = match store.check(policy, key, 1) {
        StoreReply::Ready(result) => result,
        StoreReply::Pending(future) => future.await,
    }
    .expect("the store answers");
    let allowed = decision.merged().allowed();
    black_box(&decision);
    allowed
}

/// One decision of cost 1 on the hot key, `Key::GLOBAL`.
pub(super) async fn decide<S: Store>(store: &S, policy: &Arc<Policy>) -> bool {
    decide_on(store, policy, &Key::GLOBAL).await
}
