//! Stores compose: [`Timeout`] and [`Fallback`] wrap other stores outside
//! the layer, and a cache in front of a slower store is one small file of
//! user code (`BlockCache` below, a block list of refused keys).

mod common;

use common::{BrokenStore, Later, send};
use http::{Request, Response, StatusCode};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::store::{Fallback, Timeout};
use tollgate::{
    GlobalKey, Key, MemoryStore, OnStoreError, Policy, PolicyDecision, RateLimitLayer, Store,
    StoreReply,
};
use tollgate_core::{Clock, DecisionFields, ManualClock, Quota};
use tower::{Layer, service_fn};

fn ok_service() -> impl tower::Service<
    Request<()>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>>,
> + Clone {
    service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

async fn statuses<St: Store>(store: St, n: usize, on_error: OnStoreError) -> Vec<StatusCode> {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .on_store_error(on_error)
        .build();
    let mut service = layer.layer(ok_service());
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(send(&mut service, Request::new(())).await.status());
    }
    seen
}

/// Three requests under 2 a minute, decided by a store that works.
const TWO_THEN_LIMITED: [StatusCode; 3] = [
    StatusCode::OK,
    StatusCode::OK,
    StatusCode::TOO_MANY_REQUESTS,
];

#[tokio::test]
async fn a_failing_primary_is_replaced_by_the_secondary() {
    // Fails at once: the secondary (memory) decides, 2 a minute.
    let store = Fallback::new(BrokenStore::Failing, MemoryStore::new());
    let got = statuses(store, 3, OnStoreError::Closed).await;
    assert_eq!(got, TWO_THEN_LIMITED);
}

#[tokio::test]
async fn a_working_primary_decides_alone() {
    let primary = MemoryStore::new();
    let secondary = MemoryStore::new();
    let store = Fallback::new(Later(primary.clone()), secondary.clone());
    let got = statuses(store, 3, OnStoreError::Closed).await;
    assert_eq!(got, TWO_THEN_LIMITED);
    assert_eq!((primary.len(), secondary.len()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_slow_primary_times_out_and_the_secondary_decides() {
    let store = Fallback::new(
        Timeout::new(BrokenStore::Hanging, Duration::from_millis(20)),
        MemoryStore::new(),
    );
    let started = tokio::time::Instant::now();
    let got = statuses(store, 3, OnStoreError::Closed).await;
    assert_eq!(got, TWO_THEN_LIMITED);
    // Three requests, each waited 20 ms for the primary (paused time: exact).
    assert_eq!(started.elapsed(), Duration::from_millis(60));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_alone_gives_the_layer_a_failure_to_answer() {
    let store = Timeout::new(BrokenStore::Hanging, Duration::from_millis(30));
    let started = tokio::time::Instant::now();
    let got = statuses(store, 2, OnStoreError::Closed).await;
    assert_eq!(got, [StatusCode::SERVICE_UNAVAILABLE; 2]);
    assert_eq!(started.elapsed(), Duration::from_millis(60));
    let error = tollgate::store::TimeoutError::<Infallible>::Elapsed(Duration::from_millis(30));
    assert!(error.to_string().contains("30ms"), "{error}");
}

// ---------------------------------------------------------------------
// A cache in front of another store, as a user would write it: keys the
// store refused are refused here until their retry time, without asking
// the store again. (A flood of refused requests then costs the shared
// store nothing.)
// ---------------------------------------------------------------------

/// (policy, key) → the verdict that refused it, and when it may pass.
type Blocked = Arc<Mutex<HashMap<(u64, Key), (PolicyDecision, u64)>>>;

/// Refuses, on its own, keys that `inner` refused, until they may pass.
#[derive(Clone)]
struct BlockCache<St, C> {
    inner: St,
    clock: C,
    blocked: Blocked,
}

impl<St: Store, C: Clock + Clone + Send + Sync + 'static> Store for BlockCache<St, C> {
    type Error = St::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<PolicyDecision, St::Error>> + Send>>;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        let now = self.clock.now();
        let entry = (policy.id(), key.clone());
        if let Some((verdict, until)) = self.blocked.lock().unwrap().get(&entry)
            && now < *until
        {
            let mut verdict = verdict.clone();
            verdict.merged = DecisionFields {
                retry_after_nanos: until - now,
                ..verdict.merged.fields()
            }
            .into();
            return StoreReply::Ready(Ok(verdict));
        }
        let remember = {
            let blocked = self.blocked.clone();
            move |verdict: &PolicyDecision| {
                if !verdict.merged.allowed() && verdict.merged.can_ever_pass() {
                    let until = now + verdict.merged.retry_after_nanos();
                    blocked
                        .lock()
                        .unwrap()
                        .insert(entry, (verdict.clone(), until));
                }
            }
        };
        match self.inner.check(policy, key, cost) {
            StoreReply::Ready(answer) => {
                if let Ok(verdict) = &answer {
                    remember(verdict);
                }
                StoreReply::Ready(answer)
            }
            StoreReply::Pending(future) => StoreReply::Pending(Box::pin(async move {
                let answer = future.await;
                if let Ok(verdict) = &answer {
                    remember(verdict);
                }
                answer
            })),
        }
    }
}

/// A store that counts the checks it is asked for.
#[derive(Clone)]
struct Counting<St>(St, Arc<AtomicUsize>);

impl<St: Store> Store for Counting<St> {
    type Error = St::Error;
    type Future = St::Future;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.check(policy, key, cost)
    }
}

#[tokio::test]
async fn a_cache_in_front_of_a_slower_store_spares_it_the_refused_requests() {
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let calls = Arc::new(AtomicUsize::new(0));
    let slow = Counting(
        Later(MemoryStore::builder().clock(clock.clone()).build()),
        calls.clone(),
    );
    let cache = BlockCache {
        inner: slow,
        clock: clock.clone(),
        blocked: Arc::default(),
    };
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(2))
        .key(GlobalKey)
        .store(cache)
        .build();
    let mut service = layer.layer(ok_service());
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(send(&mut service, Request::new(())).await);
    }
    let codes: Vec<StatusCode> = got.iter().map(|r| r.status()).collect();
    let mut expected = vec![StatusCode::OK; 2];
    expected.extend([StatusCode::TOO_MANY_REQUESTS; 8]);
    assert_eq!(codes, expected);
    // Two admissions and the first refusal reached the store; the seven
    // refusals after it were the cache's, with the same Retry-After.
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    let retry_after: Vec<&str> = got[2..]
        .iter()
        .map(|r| r.headers()["retry-after"].to_str().unwrap())
        .collect();
    assert_eq!(retry_after, ["30"; 8]);
    // Once the retry time has passed, the store is asked again, and admits.
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        send(&mut service, Request::new(())).await.status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}
