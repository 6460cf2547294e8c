//! Stores compose: [`Timeout`], [`Fallback`] and [`BlockCache`] wrap other
//! stores outside the layer, and so does a store a user writes (`Counting`
//! in `common`, which counts the checks that reach the store behind it).

mod common;

use common::{BrokenStore, Counting, Later, send};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::store::{BlockCache, Fallback, Timeout};
use tollgate::{GlobalKey, MemoryStore, OnStoreError, RateLimitLayer, Store};
use tollgate_core::{ManualClock, Quota};
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
    let error =
        tollgate::store::error::TimeoutError::<Infallible>::Elapsed(Duration::from_millis(30));
    assert!(error.to_string().contains("30ms"), "{error}");
}

// ---------------------------------------------------------------------
// A block cache in front of another store: keys the store refused are
// refused there until their retry time, without asking the store again.
// (A flood of refused requests then costs the shared store nothing.)
// ---------------------------------------------------------------------

#[tokio::test]
async fn a_cache_in_front_of_a_slower_store_spares_it_the_refused_requests() {
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let calls = Arc::new(AtomicUsize::new(0));
    let slow = Counting(
        Later(MemoryStore::builder().clock(clock.clone()).build()),
        calls.clone(),
    );
    let cache = BlockCache::new(slow).clock(clock.clone());
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
    // refusals after it were the cache's, with the same Retry-After (no
    // time has passed).
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    let retry_after: Vec<&str> = got[2..]
        .iter()
        .map(|r| r.headers()["retry-after"].to_str().unwrap())
        .collect();
    assert_eq!(retry_after, ["30"; 8]);
    // 10 s on, the cache still refuses, and its Retry-After has fallen by
    // 10 s, as the store's own would have.
    clock.advance(Duration::from_secs(10));
    let later = send(&mut service, Request::new(())).await;
    assert_eq!(later.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(later.headers()["retry-after"], "20");
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    // Once the retry time has passed, the store is asked again, and admits.
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        send(&mut service, Request::new(())).await.status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}

/// A plan change through `Timeout` is bounded by its timeout: a store
/// behind that never finishes one (away, reconnecting) does not hold the
/// caller, which gets an error once the timeout has passed, not before.
#[tokio::test(start_paused = true)]
async fn a_timeout_bounds_a_plan_change() {
    use tollgate::store::{AdminFuture, StoreWrapper};
    use tollgate::{Key, NamedLimit, Policy};

    #[derive(Clone)]
    struct NeverCarries(MemoryStore);
    impl StoreWrapper for NeverCarries {
        type Inner = MemoryStore;
        type Error = Infallible;
        type Future = <MemoryStore as Store>::Future;
        fn inner(&self) -> &MemoryStore {
            &self.0
        }

        fn relay(
            &self,
            _: &std::sync::Arc<tollgate::Policy>,
            _: &tollgate::Key,
            reply: tollgate::store::StoreReply<
                <Self::Inner as tollgate::Store>::Future,
                <Self::Inner as tollgate::Store>::Error,
            >,
        ) -> tollgate::store::StoreReply<Self::Future, Self::Error> {
            reply
        }
        fn check_within(
            &self,
            policy: &Arc<Policy>,
            key: &Key,
            cost: u32,
            within: Duration,
        ) -> tollgate::StoreReply<Self::Future, Infallible> {
            self.0.check_within(policy, key, cost, within)
        }
        fn carry(&self, _: &Arc<Policy>, _: &Arc<Policy>, _: &Key) -> AdminFuture {
            AdminFuture::new(std::future::pending())
        }
    }

    let store = Timeout::new(NeverCarries(MemoryStore::new()), Duration::from_millis(50));
    let plan = |limit| {
        Arc::new(Policy::new(vec![NamedLimit::new(
            "api",
            Quota::per_minute(limit),
        )]))
    };
    let started = tokio::time::Instant::now();
    let carry = Store::carry(&store, &plan(5), &plan(100), &Key::from("tenant"));
    let answer = tokio::time::timeout(Duration::from_secs(1), carry)
        .await
        .expect("given up on at the store's timeout, not held");
    assert!(answer.is_err());
    assert_eq!(started.elapsed(), Duration::from_millis(50));
}

/// A store that counts which of its operations were called: checks and
/// peeks, apart.
#[derive(Clone, Default)]
struct Tally {
    memory: MemoryStore,
    checks: Arc<AtomicUsize>,
    peeks: Arc<AtomicUsize>,
}

impl Store for Tally {
    type Error = Infallible;
    type Future = <MemoryStore as Store>::Future;

    fn check(
        &self,
        policy: &Arc<tollgate::Policy>,
        key: &tollgate::Key,
        cost: u32,
    ) -> tollgate::StoreReply<Self::Future, Infallible> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        self.memory.check(policy, key, cost)
    }

    fn peek(
        &self,
        policy: &Arc<tollgate::Policy>,
        key: &tollgate::Key,
    ) -> tollgate::StoreReply<Self::Future, Infallible> {
        self.peeks.fetch_add(1, Ordering::Relaxed);
        self.memory.peek(policy, key)
    }
}

/// A wrapper that overrides nothing but its check (`Counting`) forwards a
/// peek to the store behind's peek, never to a check: neither its own nor
/// the store's. (The default once went through the wrapper's check, so a
/// counting wrapper counted peeks, and a memory store took a place in its
/// map for every key peeked.) The same through `Split`, which asks about
/// another policy, and through the in-tree wrappers.
#[tokio::test]
async fn a_wrappers_peek_is_the_store_behinds_peek_never_a_check() {
    use tollgate::store::{Breaker, PenaltyBox, Split};
    let policy = Arc::new(tollgate::Policy::new(vec![tollgate::NamedLimit::new(
        "api",
        Quota::per_minute(4),
    )]));
    let key = tollgate::Key::from("k");
    let tally = Tally::default();
    let counting = Counting(tally.clone(), Arc::default());
    let peeked = counting.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(peeked.merged().remaining(), 4);
    assert_eq!(counting.calls(), 0, "the peek was counted as a check");
    assert_eq!(tally.checks.load(Ordering::Relaxed), 0);
    assert_eq!(tally.peeks.load(Ordering::Relaxed), 1);
    // Split: the store behind is asked about the split policy.
    let split = Split::fixed(tally.clone(), 2);
    let peeked = split.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(peeked.merged().limit(), 2, "the split's policy");
    // Every in-tree wrapper, nested.
    let penalty =
        tollgate::store::Penalty::new(3, Duration::from_secs(60), Duration::from_secs(60));
    let nested = BlockCache::new(PenaltyBox::new(
        Breaker::new(Timeout::new(
            Counting(split, Arc::default()),
            Duration::from_secs(1),
        )),
        penalty,
    ));
    nested.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(tally.checks.load(Ordering::Relaxed), 0);
    assert_eq!(tally.peeks.load(Ordering::Relaxed), 3);
}
