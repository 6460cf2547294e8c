//! Penalties: a key refused N times within a period is blocked for a
//! while, longer for repeat offences, forgotten after a quiet spell; a
//! blocked key costs the store behind no call; other keys are untouched;
//! an operator's unblock lifts it. On a manual clock.

mod common;

use common::Counting;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::store::{Penalty, PenaltyBox};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, PolicyDecision, Store, StoreReply};
use tollgate_core::{ManualClock, Quota};

const SECOND: u64 = 1_000_000_000;

struct Setup {
    clock: ManualClock,
    calls: Arc<AtomicUsize>,
    store: PenaltyBox<Counting<MemoryStore<ManualClock>>, ManualClock>,
    policy: Arc<Policy>,
}

impl Setup {
    /// 1 request an hour; 3 refusals within 10 s block for 30 s, doubling
    /// up to 100 s; offences forgotten 5 min after a block.
    fn new() -> Self {
        let clock = ManualClock::new(1_700_000_000 * SECOND);
        let calls = Arc::new(AtomicUsize::new(0));
        let memory = MemoryStore::builder().clock(clock.clone()).build();
        let penalty = Penalty::new(3, Duration::from_secs(10), Duration::from_secs(30))
            .escalate(2, Duration::from_secs(100))
            .forget_after(Duration::from_secs(300));
        let store = PenaltyBox::new(Counting(memory, calls.clone()), penalty).clock(clock.clone());
        let policy = Arc::new(Policy::new(vec![NamedLimit::new(
            "api",
            Quota::per_hour(1),
        )]));
        Setup {
            clock,
            calls,
            store,
            policy,
        }
    }

    fn check(&self, key: &str) -> PolicyDecision {
        match self.store.check(&self.policy, &Key::from(key), 1) {
            StoreReply::Ready(answer) => answer.unwrap(),
            StoreReply::Pending(_) => panic!("the memory store answers at once"),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }

    /// Offends `refusals` times, 1 s apart (the key's request spent).
    fn offend(&self, key: &str, refusals: u32) {
        for n in 0..refusals {
            if n > 0 {
                self.advance(1);
            }
            assert!(!self.check(key).merged().allowed());
        }
    }

    /// What is left of `key`'s block, if it is blocked: asked with a peek,
    /// which never offends.
    fn block_left(&self, key: &str) -> Option<Duration> {
        let peek = match self.store.peek(&self.policy, &Key::from(key)) {
            StoreReply::Ready(answer) => answer.unwrap(),
            StoreReply::Pending(_) => panic!("the memory store answers at once"),
        };
        // A key spent but not blocked passes a request of cost 0.
        (!peek.merged().allowed()).then(|| peek.merged().retry_after())
    }
}

#[test]
fn refusals_within_the_period_block_the_key_for_the_block_duration() {
    let s = Setup::new();
    assert!(s.check("mallory").merged().allowed());
    s.offend("mallory", 2);
    assert_eq!(s.block_left("mallory"), None, "two refusals do not block");
    s.advance(1);
    s.offend("mallory", 1);
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(30)));
    let calls = s.calls();
    for _ in 0..1_000 {
        assert!(!s.check("mallory").merged().allowed());
    }
    assert_eq!(s.calls(), calls, "a blocked key costs no store call");
    // Other keys are untouched.
    assert!(s.check("alice").merged().allowed());
    assert_eq!(s.block_left("alice"), None);
    s.advance(29);
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(1)));
    s.advance(1);
    assert_eq!(s.block_left("mallory"), None);
    // The block is over: the store decides again (and the hour is not).
    assert!(!s.check("mallory").merged().allowed());
    assert_eq!(s.calls(), calls + 2);
    s.advance(3600);
    assert!(s.check("mallory").merged().allowed());
}

#[test]
fn a_blocked_answer_tells_the_truth_about_the_block() {
    let s = Setup::new();
    s.check("mallory");
    s.offend("mallory", 3);
    s.advance(10);
    let answer = s.check("mallory");
    for decision in std::iter::once(&answer.merged()).chain(answer.each()) {
        assert!(!decision.allowed());
        assert_eq!(decision.limit(), 1);
        assert_eq!(decision.remaining(), 0);
        assert_eq!(decision.retry_after(), Duration::from_secs(20));
        assert_eq!(decision.replenish_after(), Duration::from_secs(20));
        assert!(decision.reset_after() >= Duration::from_secs(20));
    }
}

#[test]
fn refusals_spread_wider_than_the_period_do_not_block() {
    let s = Setup::new();
    s.check("slow");
    for _ in 0..10 {
        assert!(!s.check("slow").merged().allowed());
        s.advance(6);
    }
    // Each run of two refusals within 10 s started again: never blocked.
    assert_eq!(s.block_left("slow"), None);
}

#[test]
fn a_repeat_offence_blocks_longer_up_to_the_bound_and_offences_are_forgotten() {
    let s = Setup::new();
    s.check("mallory");
    let mut blocks = Vec::new();
    for _ in 0..4 {
        s.offend("mallory", 3);
        let left = s.block_left("mallory").expect("blocked");
        blocks.push(left.as_secs());
        s.advance(left.as_secs());
    }
    // 30 s, then ×2, ×4 (capped at 100 s), 100 s.
    assert_eq!(blocks, [30, 60, 100, 100]);
    // Offences are remembered for 5 min after the last block ended: 4 min
    // later the next one is a fifth.
    s.advance(240);
    s.offend("mallory", 3);
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(100)));
    // More than 5 min after that block ended, a first offence again.
    s.advance(100 + 300);
    s.offend("mallory", 3);
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(30)));
}

#[tokio::test]
async fn unblock_lifts_the_block_and_forgets_the_run_and_the_offences() {
    let s = Setup::new();
    let key = Key::from("mallory");
    s.check("mallory");
    s.offend("mallory", 2);
    s.store.unblock(&s.policy, &key).await.unwrap();
    s.advance(1);
    s.offend("mallory", 2);
    assert_eq!(
        s.block_left("mallory"),
        None,
        "the earlier run is forgotten"
    );
    s.advance(1);
    s.offend("mallory", 1);
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(30)));
    // A peek sees the block, as `resolve` awaits it.
    let peek = s.store.peek(&s.policy, &key).resolve().await.unwrap();
    assert_eq!(peek.merged().retry_after(), Duration::from_secs(30));
    s.store.unblock(&s.policy, &key).await.unwrap();
    assert_eq!(s.block_left("mallory"), None);
    // Decided by its counts again: refused by the hour, not the block.
    let calls = s.calls();
    s.offend("mallory", 3);
    assert_eq!(s.calls(), calls + 3);
    // A first offence again: 30 s, not 60.
    assert_eq!(s.block_left("mallory"), Some(Duration::from_secs(30)));
    // Reset: no block, and the key is whole.
    s.store.reset(&s.policy, &key).await.unwrap();
    assert!(s.check("mallory").merged().allowed());
}

#[test]
fn peeks_never_offend() {
    let s = Setup::new();
    s.check("mallory");
    for _ in 0..10 {
        assert_eq!(s.block_left("mallory"), None);
    }
    assert!(s.store.is_empty());
}

#[test]
fn the_book_is_bounded() {
    let s = Setup::new();
    let store = s.store.clone().max_entries(64);
    for n in 0..10_000u64 {
        let key = Key::from(n);
        let _ = store.check(&s.policy, &key, 1);
        let _ = store.check(&s.policy, &key, 1);
    }
    assert!(
        store.len() <= store.capacity(),
        "{} > {}",
        store.len(),
        store.capacity()
    );
    assert!(store.capacity() <= 64 && store.capacity() > 0);
}

#[tokio::test]
async fn the_layer_builder_puts_a_penalty_box_in_front_of_its_store() {
    use http::{Request, Response, StatusCode};
    use tower::{Layer, ServiceExt, service_fn};

    let clock = ManualClock::new(1_700_000_000 * SECOND);
    let calls = Arc::new(AtomicUsize::new(0));
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let layer = tollgate::RateLimitLayer::builder()
        .quota("api", Quota::per_hour(1))
        .key(tollgate::GlobalKey)
        .store(tollgate::store::PenaltyBox::new(
            Counting(memory, calls.clone()),
            Penalty::new(2, Duration::from_secs(60), Duration::from_secs(600)),
        ))
        .build();
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, std::convert::Infallible>(Response::new(String::new()))
    }));
    let mut statuses = Vec::new();
    let mut retry = None;
    for _ in 0..10 {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        statuses.push(response.status());
        retry = response.headers().get("retry-after").cloned();
    }
    assert_eq!(statuses[0], StatusCode::OK);
    assert!(
        statuses[1..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS)
    );
    // The admission and two refusals reached the store; then the block.
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert_eq!(retry.unwrap(), "600");
}
