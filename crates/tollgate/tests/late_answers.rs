//! Late answers never stay charged: a check the layer stopped waiting on
//! (its store timeout, a request dropped) is heard out, and an admission
//! it brings is given back through the store that charged it
//! (`tollgate::store::late`). The store here is the memory store behind a
//! wrapper that charges at once and answers after a delay, as a networked
//! store whose write landed and whose reply is late; time is tokio's,
//! paused, so every delay is exact.

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::store::late::late_checks_in_progress;
use tollgate::store::{Fallback, StoreWrapper, Timeout};
use tollgate::{
    HeaderKey, Key, MemoryStore, Policy, PolicyDecision, RateLimitLayer, StoreReply,
    settings::ChargeWhen,
};
use tollgate_core::Quota;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

type App = BoxCloneSyncService<Request<()>, Response<String>, Infallible>;

/// The memory store, answering each check after a delay: a fixed one, or
/// 0 or 30 ms at random (from a seeded generator).
#[derive(Clone)]
struct Slow {
    memory: MemoryStore,
    delay_ms: Arc<AtomicU64>,
    jitter: Option<Arc<Mutex<u64>>>,
    // Set: every answer at once.
    calm: Arc<AtomicBool>,
}

impl Slow {
    fn new(delay_ms: u64) -> Self {
        Slow {
            memory: MemoryStore::new(),
            delay_ms: Arc::new(AtomicU64::new(delay_ms)),
            jitter: None,
            calm: Arc::new(AtomicBool::new(false)),
        }
    }

    fn jittered(seed: u64) -> Self {
        Slow {
            jitter: Some(Arc::new(Mutex::new(seed))),
            ..Slow::new(0)
        }
    }

    fn delay(&self) -> Duration {
        let ms = match &self.jitter {
            Some(state) => {
                let mut state = state.lock().unwrap();
                *state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                if (*state >> 33) % 2 == 0 { 0 } else { 30 }
            }
            None => self.delay_ms.load(Ordering::Relaxed),
        };
        if self.calm.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        Duration::from_millis(ms)
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<PolicyDecision, Infallible>> + Send>>;

impl StoreWrapper for Slow {
    type Inner = MemoryStore;
    type Error = Infallible;
    type Future = Answer;

    fn inner(&self) -> &MemoryStore {
        &self.memory
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
        reply.map(|ready| Box::pin(ready) as Answer, |never| never)
    }

    /// Charged now, answered after the delay.
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: Duration,
    ) -> StoreReply<Answer, Infallible> {
        let verdict = self.memory.check_now(policy, key, cost);
        let delay = self.delay();
        if delay.is_zero() {
            return StoreReply::Ready(Ok(verdict));
        }
        StoreReply::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(verdict)
        }))
    }
}

fn handler() -> App {
    BoxCloneSyncService::new(tower::service_fn(|request: Request<()>| async move {
        let right = request
            .headers()
            .get("x-password")
            .is_none_or(|p| p == "right");
        let mut response = Response::new(String::new());
        if !right {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, Infallible>(response)
    }))
}

/// 3 a minute per `x-user` over `store`, waited for `timeout`, failing
/// open; `login`: counting only 401s.
fn app<St: tollgate::Store>(store: St, timeout: Duration, login: bool) -> App {
    let mut builder = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(3))
        .key(HeaderKey::new("x-user"))
        .store(store)
        .store_timeout(timeout);
    if login {
        builder = builder.charge_when(ChargeWhen::statuses("401").unwrap());
    }
    BoxCloneSyncService::new(builder.try_build().unwrap().layer(handler()))
}

async fn send(app: &mut App, user: &str, right: bool) -> StatusCode {
    let request = Request::get("/")
        .header("x-user", user)
        .header("x-password", if right { "right" } else { "wrong" })
        .body(())
        .unwrap();
    app.ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap()
        .status()
}

/// How many of `n` requests for `user` pass, one after another.
async fn passing(app: &mut App, user: &str, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        if send(app, user, true).await == StatusCode::OK {
            passed += 1;
        }
    }
    passed
}

/// Lets the late checks end and their refunds land (paused time moves on
/// by itself while every task waits). The count is the process's: other
/// tests' checks may be in it for a moment.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..1_000 {
        if late_checks_in_progress() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("late checks still heard out after 10 s");
}

#[tokio::test(start_paused = true)]
async fn a_late_admission_is_given_back() {
    // Failed open: the store charged, the layer did not wait.
    let slow = Slow::new(30);
    given_back_through(slow.clone(), &slow, "the store itself").await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_in_time_stays_charged() {
    let store = Slow::new(5);
    let mut app = app(store.clone(), Duration::from_millis(10), false);
    assert_eq!(send(&mut app, "a", true).await, StatusCode::OK);
    settle().await;
    store.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(
        passing(&mut app, "a", 5).await,
        2,
        "the answer in time counts"
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_refusal_gives_nothing_back() {
    let store = Slow::new(0);
    let mut app = app(store.clone(), Duration::from_millis(10), false);
    assert_eq!(passing(&mut app, "a", 3).await, 3);
    store.delay_ms.store(30, Ordering::Relaxed);
    // Refused by the store, late: failed open, and nothing to give back.
    assert_eq!(send(&mut app, "a", true).await, StatusCode::OK);
    settle().await;
    store.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(passing(&mut app, "a", 2).await, 0, "still spent");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_request_leaves_nothing_charged() {
    let store = Slow::new(30);
    let mut app = app(store.clone(), Duration::from_secs(1), false);
    for _ in 0..3 {
        let request = Request::get("/").header("x-user", "a").body(()).unwrap();
        let call = app.ready().await.unwrap().call(request);
        // The client goes away while the store decides.
        assert!(
            tokio::time::timeout(Duration::from_millis(5), call)
                .await
                .is_err()
        );
    }
    settle().await;
    store.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(passing(&mut app, "a", 5).await, 3, "the key is whole again");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_under_a_fallback_gives_back_to_the_store_behind() {
    let primary = Slow::new(30);
    let secondary = MemoryStore::new();
    let store = Fallback::new(
        Timeout::new(primary.clone(), Duration::from_millis(10)),
        secondary.clone(),
    );
    let mut app_ = app(store, Duration::from_secs(1), false);
    // The secondary decides each one (and counts it); the primary's late
    // admissions go back to the primary.
    assert_eq!(passing(&mut app_, "a", 4).await, 3);
    settle().await;
    // The primary answers at once now, and decides.
    primary.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(passing(&mut app_, "a", 5).await, 3, "the primary is whole");
}

#[tokio::test(start_paused = true)]
async fn jittered_successes_never_lock_a_user_out() {
    for seed in 1..=5 {
        let store = Slow::jittered(seed);
        let mut slow = app(store.clone(), Duration::from_millis(10), true);
        for user in 0..8 {
            let user = format!("user-{user}");
            // A user's logins a little apart (as people type): each
            // late answer is in before the next login asks.
            for _ in 0..5 {
                assert_eq!(send(&mut slow, &user, true).await, StatusCode::OK);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        settle().await;
        // The same counters, answered at once from now on.
        store.calm.store(true, Ordering::Relaxed);
        for user in 0..8 {
            let user = format!("user-{user}");
            for attempt in 0..3 {
                assert_eq!(
                    send(&mut slow, &user, false).await,
                    StatusCode::UNAUTHORIZED,
                    "seed {seed}, {user}, wrong password {attempt}"
                );
            }
            assert_eq!(
                send(&mut slow, &user, false).await,
                StatusCode::TOO_MANY_REQUESTS
            );
        }
    }
}

/// Three late admissions through `store` (in front of `slow`, which
/// answers after 30 ms, past the layer's 10 ms), then `slow` at once: the
/// key is whole, every late admission given back through `store`.
async fn given_back_through<St: tollgate::Store>(store: St, slow: &Slow, label: &str) {
    slow.delay_ms.store(30, Ordering::Relaxed);
    let mut app = app(store, Duration::from_millis(10), false);
    for _ in 0..3 {
        assert_eq!(send(&mut app, "a", true).await, StatusCode::OK, "{label}");
    }
    settle().await;
    slow.calm.store(true, Ordering::Relaxed);
    assert_eq!(
        passing(&mut app, "a", 5).await,
        3,
        "{label}: the key is whole again"
    );
}

#[tokio::test(start_paused = true)]
async fn late_admissions_are_given_back_through_every_wrapper() {
    use tollgate::store::{BlockCache, BoxStore, Breaker, Penalty, PenaltyBox, Split};
    let slow = Slow::new(0);
    given_back_through(BlockCache::new(slow.clone()), &slow, "BlockCache").await;
    let slow = Slow::new(0);
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(60));
    given_back_through(PenaltyBox::new(slow.clone(), penalty), &slow, "PenaltyBox").await;
    let slow = Slow::new(0);
    given_back_through(Breaker::new(slow.clone()), &slow, "Breaker").await;
    let slow = Slow::new(0);
    given_back_through(Split::new(slow.clone(), || 1), &slow, "Split").await;
    let slow = Slow::new(0);
    given_back_through(BoxStore::new(slow.clone()), &slow, "BoxStore").await;
    let slow = Slow::new(0);
    let fallback = Fallback::new(slow.clone(), MemoryStore::new());
    given_back_through(fallback, &slow, "Fallback").await;
    let slow = Slow::new(0);
    let nested = BoxStore::new(Breaker::new(BlockCache::new(slow.clone())));
    given_back_through(nested, &slow, "BoxStore<Breaker<BlockCache>>").await;
}

/// A compare-and-swap backend whose writes land at once and whose
/// replies come `delay` later: the write that lands before its deadline
/// and answers after it.
#[derive(Clone)]
struct LateReplies {
    memory: tollgate_cas::MemoryBackend,
    delay_ms: Arc<AtomicU64>,
}

impl tollgate_cas::CasBackend for LateReplies {
    type Error = Infallible;
    type Read = <tollgate_cas::MemoryBackend as tollgate_cas::CasBackend>::Read;
    type Write = Pin<Box<dyn Future<Output = Result<bool, Infallible>> + Send>>;

    fn read(&self, key: &str) -> Self::Read {
        self.memory.read(key)
    }

    fn write(&self, key: &str, swap: tollgate_cas::Swap) -> Self::Write {
        let written = self.memory.write(key, swap);
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::Relaxed));
        Box::pin(async move {
            let written = written.await;
            tokio::time::sleep(delay).await;
            written
        })
    }
}

#[tokio::test(start_paused = true)]
async fn late_replies_from_a_compare_and_swap_backend_are_given_back() {
    use tollgate_cas::{CasStore, MemoryBackend};
    let backend = LateReplies {
        memory: MemoryBackend::new(),
        delay_ms: Arc::new(AtomicU64::new(30)),
    };
    let store = CasStore::new(backend.clone());
    let mut app = app(store, Duration::from_millis(10), false);
    for _ in 0..3 {
        assert_eq!(send(&mut app, "a", true).await, StatusCode::OK);
    }
    settle().await;
    backend.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(passing(&mut app, "a", 5).await, 3, "the key is whole again");
}

#[tokio::test(start_paused = true)]
async fn a_direct_check_given_up_on_leaves_nothing_charged() {
    use tollgate::KeyedLimiter;
    let slow = Slow::new(30);
    let limiter = KeyedLimiter::builder()
        .quota("calls", Quota::per_minute(3))
        .store(slow.clone())
        .keyed()
        .unwrap();
    let key = Key::from("a");
    for _ in 0..3 {
        // The caller stops waiting before the store answers.
        assert!(
            tokio::time::timeout(Duration::from_millis(5), limiter.check(&key))
                .await
                .is_err()
        );
        let waiting = limiter.until_ready(&key);
        assert!(
            tokio::time::timeout(Duration::from_millis(5), waiting)
                .await
                .is_err()
        );
    }
    settle().await;
    slow.calm.store(true, Ordering::Relaxed);
    let mut admitted = 0;
    for _ in 0..5 {
        if limiter.check(&key).await.unwrap().allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "the key is whole again");
}
