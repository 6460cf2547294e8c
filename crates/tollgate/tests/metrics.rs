//! With the `metrics` feature, decisions, store failures and block-cache
//! hits are counted.
#![cfg(feature = "metrics")]

mod common;

use common::{BrokenStore, send};
use http::{Request, Response};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tollgate::{GlobalKey, MemoryStore, NamedLimit, RateLimitLayer, Store};
use tollgate_core::Quota;
use tower::ServiceBuilder;

/// Counts every counter by name and labels.
#[derive(Default)]
struct Counts(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

struct Cell(Arc<AtomicU64>);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Counts {
    fn get(&self, name: &str) -> u64 {
        let map = self.0.lock().unwrap();
        map.get(name).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Whether the series `name` was registered (at 0 or counted).
    fn registered(&self, name: &str) -> bool {
        self.0.lock().unwrap().contains_key(name)
    }
}

impl Recorder for Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let cell = self.0.lock().unwrap().entry(name).or_default().clone();
        Counter::from_arc(Arc::new(Cell(cell)))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::new()))
}

/// A layer of one limit, "api", 2 per minute, on one global key.
fn api_layer<St: Store>(store: St) -> RateLimitLayer<GlobalKey, St> {
    RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .store(store)
        .build()
}

/// What `traffic` counts, on a recorder of its own.
fn counted<F: std::future::Future<Output = ()>>(traffic: F) -> Counts {
    let counts = Counts::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    metrics::with_local_recorder(&counts, || runtime.block_on(traffic));
    counts
}

#[test]
fn decisions_and_store_failures_are_counted_per_limit() {
    let counts = counted(async {
        let mut service = ServiceBuilder::new()
            .layer(api_layer(MemoryStore::new()))
            .service_fn(ok);
        for _ in 0..5 {
            send(&mut service, Request::new(())).await;
        }
        let mut service = ServiceBuilder::new()
            .layer(api_layer(BrokenStore::Failing))
            .service_fn(ok);
        send(&mut service, Request::new(())).await;
    });
    assert_eq!(
        counts.get("tollgate_decisions_total{limit=api,decision=allowed}"),
        2
    );
    assert_eq!(
        counts.get("tollgate_decisions_total{limit=api,decision=limited}"),
        3
    );
    assert_eq!(counts.get("tollgate_store_errors_total{limits=api}"), 1);
}

#[test]
fn a_limit_that_another_refused_counts_nothing() {
    let counts = counted(async {
        let layer = RateLimitLayer::builder()
            .quota("burst", Quota::per_minute(2))
            .quota("daily", Quota::per_day(100))
            .key(GlobalKey)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..5 {
            send(&mut service, Request::new(())).await;
        }
    });
    // "burst" admits 2 and refuses 3; "daily" was charged for the 2 only.
    let get = |limit: &str, outcome: &str| {
        counts.get(&format!(
            "tollgate_decisions_total{{limit={limit},decision={outcome}}}"
        ))
    };
    assert_eq!((get("burst", "allowed"), get("burst", "limited")), (2, 3));
    assert_eq!((get("daily", "allowed"), get("daily", "limited")), (2, 0));
}

#[test]
fn refusals_a_block_cache_answers_are_counted_as_its_hits() {
    use tollgate::store::BlockCache;
    let counts = counted(async {
        let mut service = ServiceBuilder::new()
            .layer(api_layer(BlockCache::new(MemoryStore::new())))
            .service_fn(ok);
        for _ in 0..6 {
            send(&mut service, Request::new(())).await;
        }
    });
    // 2 admitted, 4 refused: the store refused the first, the cache the
    // other 3; all 4 are limited as the layer counts.
    assert_eq!(
        counts.get("tollgate_decisions_total{limit=api,decision=limited}"),
        4
    );
    assert_eq!(counts.get("tollgate_block_cache_hits_total{limits=api}"), 3);
}

#[cfg(feature = "quotas")]
#[test]
fn failed_per_key_quota_lookups_are_counted() {
    use tollgate::HeaderKey;
    use tollgate::quotas::{KeyQuotas, QuotaAnswer, quota_fn_async};
    let counts = counted(async {
        let quotas = KeyQuotas::new(quota_fn_async(|_| async {
            Err::<QuotaAnswer, _>(tollgate::BoxError::from("plans db down"))
        }));
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(2))
            .key(HeaderKey::new("x-api-key"))
            .quota_source(quotas)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for key in ["a", "b", "c"] {
            let request = Request::builder()
                .header("x-api-key", key)
                .body(())
                .unwrap();
            // The request passes on the default quota meanwhile.
            assert!(send(&mut service, request).await.status().is_success());
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
    });
    assert_eq!(counts.get("tollgate_quota_errors_total{}"), 3);
}

#[test]
fn a_compare_and_swap_stores_lost_races_are_counted() {
    use tollgate_cas::{CasBackend, CasStore, MemoryBackend, Snapshot, Swap};

    /// Every write loses its race: another writer always got there first.
    struct AlwaysLoses(MemoryBackend);

    impl CasBackend for AlwaysLoses {
        type Error = Infallible;
        type Read = std::future::Ready<Result<Snapshot, Infallible>>;
        type Write = std::future::Ready<Result<bool, Infallible>>;

        fn read(&self, key: &str) -> Self::Read {
            self.0.read(key)
        }

        fn write(&self, _: &str, _: Swap) -> Self::Write {
            std::future::ready(Ok(false))
        }
    }

    let counts = counted(async {
        let store = CasStore::builder(AlwaysLoses(MemoryBackend::new()))
            .max_attempts(3)
            .backoff(
                std::time::Duration::from_micros(10),
                std::time::Duration::from_micros(100),
            )
            .build();
        // A store timeout no loaded machine reaches: given up on, the
        // check's last attempts would be heard out on a task that the
        // runtime may drop before they are counted.
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(2))
            .key(GlobalKey)
            .store(store)
            .store_timeout(std::time::Duration::from_secs(60))
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        send(&mut service, Request::new(())).await;
    });
    assert_eq!(
        counts.get("tollgate_store_cas_conflicts_total{limits=api}"),
        3
    );
    assert_eq!(
        counts.get("tollgate_store_cas_contended_total{limits=api}"),
        1
    );
    // The layer saw a store error (and let the request through).
    assert_eq!(counts.get("tollgate_store_errors_total{limits=api}"), 1);
}

/// The memory store, answering after `delay` (0: at once); when `refunds`
/// is false, a store that cannot give charges back.
#[derive(Clone)]
struct Delayed {
    memory: MemoryStore,
    delay: Arc<Mutex<std::time::Duration>>,
    refunds: bool,
}

impl Store for Delayed {
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<tollgate::PolicyDecision, Infallible>> + Send>,
    >;

    fn check(
        &self,
        policy: &Arc<tollgate::Policy>,
        key: &tollgate::Key,
        cost: u32,
    ) -> tollgate::StoreReply<Self::Future, Infallible> {
        let verdict = self.memory.check_now(policy, key, cost);
        let delay = *self.delay.lock().unwrap();
        if delay.is_zero() {
            return tollgate::StoreReply::Ready(Ok(verdict));
        }
        tollgate::StoreReply::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(verdict)
        }))
    }

    fn can(
        &self,
        capability: tollgate::store::Capability,
    ) -> Result<(), tollgate::store::MissingCapability> {
        if self.refunds {
            self.memory.can(capability)
        } else {
            Err(tollgate::store::MissingCapability::of::<Self>(capability))
        }
    }

    fn refund(
        &self,
        policy: &Arc<tollgate::Policy>,
        key: &tollgate::Key,
        refund: tollgate::store::PolicyRefund,
    ) -> tollgate::store::ChangeReply {
        self.memory.refund(policy, key, refund)
    }
}

#[test]
fn late_checks_are_counted_by_how_they_ended() {
    use std::time::Duration;
    let counts = Counts::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&counts, || {
        runtime.block_on(async {
            let late = |store: Delayed| {
                ServiceBuilder::new()
                    .layer(
                        RateLimitLayer::builder()
                            .quota("api", Quota::per_minute(2))
                            .key(GlobalKey)
                            .store(store)
                            .store_timeout(Duration::from_millis(10))
                            .build(),
                    )
                    .service_fn(ok)
            };
            let store = Delayed {
                memory: MemoryStore::new(),
                delay: Arc::new(Mutex::new(Duration::from_millis(30))),
                refunds: true,
            };
            let mut service = late(store.clone());
            // Two late admissions, given back.
            send(&mut service, Request::new(())).await;
            send(&mut service, Request::new(())).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Spent in time, then refused late: nothing to give back.
            *store.delay.lock().unwrap() = Duration::ZERO;
            send(&mut service, Request::new(())).await;
            send(&mut service, Request::new(())).await;
            *store.delay.lock().unwrap() = Duration::from_millis(30);
            send(&mut service, Request::new(())).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            // A store that cannot give back: the charge is kept.
            let mut service = late(Delayed {
                refunds: false,
                ..Delayed {
                    memory: MemoryStore::new(),
                    ..store.clone()
                }
            });
            send(&mut service, Request::new(())).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            // A store that never answers: abandoned after the bound.
            let mut service = ServiceBuilder::new()
                .layer(
                    RateLimitLayer::builder()
                        .quota("api", Quota::per_minute(2))
                        .key(GlobalKey)
                        .store(BrokenStore::Hanging)
                        .store_timeout(Duration::from_millis(10))
                        .build(),
                )
                .service_fn(ok);
            send(&mut service, Request::new(())).await;
            let bound = tollgate::store::late::LATE_CHECK_BOUND;
            tokio::time::sleep(bound - Duration::from_secs(1)).await;
            let abandoned = "tollgate_late_checks_total{outcome=abandoned}";
            assert_eq!(counts.get(abandoned), 0, "heard out until the bound");
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(counts.get(abandoned), 1, "abandoned at the bound");
        })
    });
    let get =
        |outcome: &str| counts.get(&format!("tollgate_late_checks_total{{outcome={outcome}}}"));
    assert_eq!(get("given_back"), 2);
    assert_eq!(get("not_charged"), 1);
    assert_eq!(get("kept"), 1);
    assert_eq!(get("abandoned"), 1);
}

/// `n` requests through a layer of one limit, "api", 5 per minute, on one
/// global key; `shadow`: the layer in shadow mode.
fn five_per_minute(n: usize, shadow: bool) -> Counts {
    counted(async move {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(5))
            .key(GlobalKey)
            .shadow(shadow)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..n {
            send(&mut service, Request::new(())).await;
        }
    })
}

fn decisions(counts: &Counts, limit: &str) -> [u64; 3] {
    ["allowed", "limited", "shadow_limited"].map(|d| {
        counts.get(&format!(
            "tollgate_decisions_total{{limit={limit},decision={d}}}"
        ))
    })
}

#[test]
fn n_requests_on_five_per_minute_are_five_allowed_and_the_rest_limited() {
    for n in [1, 5, 8, 13] {
        let counts = five_per_minute(n, false);
        let allowed = n.min(5) as u64;
        assert_eq!(
            decisions(&counts, "api"),
            [allowed, n as u64 - allowed, 0],
            "{n} requests"
        );
        // Admissions leaving 20 % of 5 or less (remaining 1 or 0): the
        // 4th and the 5th.
        assert_eq!(
            counts.get("tollgate_near_limit_total{limit=api}"),
            allowed.saturating_sub(3),
            "{n} requests"
        );
    }
}

#[test]
fn near_limit_counts_admissions_that_leave_a_fifth_or_less() {
    // 10 per minute: remaining after each admission 9, 8, …, 0; a fifth of
    // 10 is 2, so the admissions leaving 2, 1 and 0 are near the limit.
    let counts = counted(async {
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(10))
            .key(GlobalKey)
            .build();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        for _ in 0..10 {
            send(&mut service, Request::new(())).await;
        }
    });
    assert_eq!(counts.get("tollgate_near_limit_total{limit=api}"), 3);
    assert_eq!(decisions(&counts, "api"), [10, 0, 0]);
}

#[test]
fn shadow_mode_counts_its_would_be_refusals_as_shadow_limited() {
    let counts = five_per_minute(8, true);
    // Every request passed; the 3 the limit would have refused are
    // shadow_limited (uncharged), none limited.
    assert_eq!(decisions(&counts, "api"), [5, 0, 3]);
    assert_eq!(counts.get("tollgate_near_limit_total{limit=api}"), 2);
}

#[test]
fn requests_the_fallbacks_secondary_decided_are_counted() {
    use tollgate::store::Fallback;
    let counts = counted(async {
        // A secondary that answers at once, and one that answers through a
        // future (as a networked store would).
        let mut service = ServiceBuilder::new()
            .layer(api_layer(Fallback::new(
                BrokenStore::Failing,
                MemoryStore::new(),
            )))
            .service_fn(ok);
        for _ in 0..2 {
            send(&mut service, Request::new(())).await;
        }
        let mut service = ServiceBuilder::new()
            .layer(api_layer(Fallback::new(
                BrokenStore::Failing,
                common::Later(MemoryStore::new()),
            )))
            .service_fn(ok);
        send(&mut service, Request::new(())).await;
    });
    assert_eq!(
        counts.get("tollgate_fallback_decisions_total{limits=api}"),
        3
    );
    // The secondaries' decisions are the layers': the first admits 2, the
    // second 1.
    assert_eq!(decisions(&counts, "api"), [3, 0, 0]);
    // The layer saw no failure: the fallback answered.
    assert_eq!(counts.get("tollgate_store_errors_total{limits=api}"), 0);
}

/// Built, before any request: each series a decision can count in is
/// registered, and no other. An enforced limit's `allowed`, `limited` and
/// near-limit series; a shadow limit's `allowed`, `shadow_limited` and
/// near-limit series; no `shadow_limited` under the enforced limit, no
/// `limited` under the shadow one. A whole layer in shadow mode: its
/// limits' `shadow_limited`, not their `limited`.
#[test]
fn the_series_a_layer_can_count_in_are_registered_at_zero_and_only_those() {
    let decision =
        |limit: &str, d: &str| format!("tollgate_decisions_total{{limit={limit},decision={d}}}");
    let counts = counted(async {
        let _layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(5))
            .limit(NamedLimit::new("api-next", Quota::per_minute(3)).shadow())
            .key(GlobalKey)
            .build();
    });
    for d in ["allowed", "limited"] {
        assert!(counts.registered(&decision("api", d)), "api {d}");
    }
    assert!(!counts.registered(&decision("api", "shadow_limited")));
    for d in ["allowed", "shadow_limited"] {
        assert!(counts.registered(&decision("api-next", d)), "api-next {d}");
    }
    assert!(!counts.registered(&decision("api-next", "limited")));
    assert!(counts.registered("tollgate_near_limit_total{limit=api-next}"));
    let counts = counted(async {
        let _layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(5))
            .key(GlobalKey)
            .shadow(true)
            .build();
    });
    assert!(counts.registered(&decision("api", "shadow_limited")));
    assert!(!counts.registered(&decision("api", "limited")));
}
