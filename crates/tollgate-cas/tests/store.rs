//! The compare-and-swap store over the in-memory backend: the conformance
//! kit for every algorithm (on a manual clock, and on the backend's own
//! clock), backends that answer later and race each other, a hot key
//! that admits exactly its limit however many tasks race for it, values
//! that are not states, retries that run out, late checks, expiries and a
//! plan's carried usage.

use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::store::{PolicyDebit, PolicyRefund};
use tollgate::{Key, NamedLimit, Policy, Store};
use tollgate_cas::{CasBackend, CasError, CasStore, MemoryBackend, Snapshot, Swap};
use tollgate_conformance::Kit;
use tollgate_core::{Algorithm, Clock, ManualClock, Quota};

const SECOND: u64 = 1_000_000_000;

/// A manual clock at `at` seconds, a memory backend and a store on it.
fn store_at(at: u64) -> (ManualClock, MemoryBackend<ManualClock>) {
    let clock = ManualClock::new(at * SECOND);
    (clock.clone(), MemoryBackend::with_clock(clock))
}

fn policy(limits: &[(&str, &str, Algorithm)]) -> Arc<Policy> {
    Arc::new(Policy::new(
        limits
            .iter()
            .map(|(name, quota, algorithm)| {
                NamedLimit::new(*name, quota.parse().unwrap()).with_algorithm(*algorithm)
            })
            .collect(),
    ))
}

/// A backend in front of another that answers every call later: each
/// read and write waits for the runtime to run other tasks first (as a
/// database's round trip does), with `async` code, boxed — the shape of a
/// backend over a network client.
#[derive(Clone)]
struct Later<B>(B);

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<B: CasBackend + Clone> CasBackend for Later<B> {
    type Error = B::Error;
    type Read = Boxed<Result<Snapshot, B::Error>>;
    type Write = Boxed<Result<bool, B::Error>>;

    fn read(&self, key: &str) -> Self::Read {
        let (backend, key) = (self.0.clone(), key.to_owned());
        Box::pin(async move {
            let snapshot = backend.read(&key).await;
            tokio::task::yield_now().await;
            snapshot
        })
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        let (backend, key) = (self.0.clone(), key.to_owned());
        Box::pin(async move {
            tokio::task::yield_now().await;
            backend.write(&key, swap).await
        })
    }
}

#[tokio::test]
async fn the_cas_store_conforms_for_every_algorithm() {
    let (clock, backend) = store_at(1);
    let report = Kit::manual(CasStore::new(backend), clock)
        .run()
        .await
        .unwrap();
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert_eq!(report.traces, 20 * Algorithm::ALL.len());
}

#[tokio::test]
async fn the_cas_store_conforms_when_its_backend_answers_later() {
    let (clock, backend) = store_at(1);
    let report = Kit::manual(CasStore::new(Later(backend)), clock)
        .traces(8)
        .run()
        .await
        .unwrap();
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
}

#[tokio::test]
async fn the_cas_store_conforms_on_its_backends_own_clock() {
    let report = Kit::real_time(CasStore::new(MemoryBackend::new()))
        .traces(4)
        .run()
        .await
        .unwrap();
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
}

/// `tasks` tasks on each of `stores` (as many processes sharing a backend)
/// each sending requests for one key until refused (trying again after a
/// call that ran out of attempts): what was admitted, in all.
async fn hot_key<B: CasBackend>(stores: &[CasStore<B>], policy: Arc<Policy>, tasks: usize) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for store in stores
        .iter()
        .flat_map(|store| std::iter::repeat_n(store, tasks))
    {
        let (store, policy, admitted) = (store.clone(), policy.clone(), admitted.clone());
        handles.push(tokio::spawn(async move {
            let key = Key::from("hot");
            loop {
                match store.check(&policy, &key, 1).resolve().await {
                    Ok(decision) if decision.merged().allowed() => {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => return,
                    Err(CasError::Contended { .. }) => continue,
                    Err(error) => panic!("{error}"),
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_key_admits_exactly_its_limit_however_many_tasks_race() {
    let mut conflicts = 0;
    for algorithm in Algorithm::ALL {
        // A frozen clock: nothing refills, so exactly the limit passes.
        let (_clock, backend) = store_at(1_000);
        // Four stores on one backend, as four processes: their calls race.
        let stores: Vec<_> = (0..4)
            .map(|_| {
                CasStore::builder(Later(backend.clone()))
                    .backoff(Duration::from_micros(50), Duration::from_millis(2))
                    .build()
            })
            .collect();
        let limits = policy(&[
            ("minute", "100/min", algorithm),
            ("hour", "1000/h", Algorithm::FixedWindow),
        ]);
        let admitted = hot_key(&stores, limits, 4).await;
        assert_eq!(admitted, 100, "{algorithm}");
        conflicts += stores.iter().map(CasStore::conflicts).sum::<u64>();
    }
    // Races were run (how many each time is the scheduler's business).
    assert!(conflicts > 0, "no race was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_store_s_calls_on_a_key_take_turns_and_never_race() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingLog] {
        let (_clock, backend) = store_at(1_000);
        let store = CasStore::new(Later(backend));
        let limits = policy(&[("minute", "100/min", algorithm)]);
        // Sixteen tasks of one process on one key: one at a time.
        let admitted = hot_key(std::slice::from_ref(&store), limits, 16).await;
        assert_eq!(admitted, 100, "{algorithm}");
        assert_eq!(
            (store.conflicts(), store.contended()),
            (0, 0),
            "{algorithm}"
        );
    }
}

/// A call holds its key's turn from its first poll to its end: one made
/// and not polled holds none, and one dropped half-way gives it back.
#[tokio::test]
async fn a_turn_is_held_only_while_a_call_runs() {
    let (_clock, backend) = store_at(1_000);
    let store = CasStore::new(Later(backend));
    let limits = policy(&[("api", "10/min", Algorithm::Gcra)]);
    let key = Key::from("k");
    let pending = |reply| match reply {
        tollgate::StoreReply::Pending(future) => Box::pin(future),
        tollgate::StoreReply::Ready(_) => panic!("a backend that answers later"),
    };
    let idle = pending(store.check(&limits, &key, 1));
    let mut halfway = pending(store.check(&limits, &key, 1));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(halfway.as_mut().poll(&mut cx).is_pending(), "reading");
    drop(halfway);
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        store.check(&limits, &key, 1).resolve(),
    );
    let verdict = next.await.expect("the turn is free").unwrap();
    assert!(verdict.merged().allowed());
    drop(idle);
}

#[tokio::test]
async fn races_lost_are_counted_and_retried() {
    // One thread, five stores on one backend (as five processes): every
    // task reads, then yields before it writes, so all but one of them
    // lose each round.
    let (_clock, backend) = store_at(1_000);
    let stores: Vec<_> = (0..5)
        .map(|_| {
            CasStore::builder(Later(backend.clone()))
                .max_attempts(64)
                .backoff(Duration::ZERO, Duration::ZERO)
                .build()
        })
        .collect();
    let limits = policy(&[("api", "10/min", Algorithm::Gcra)]);
    let admitted = hot_key(&stores, limits, 1).await;
    assert_eq!(admitted, 10);
    // Each admission but the last few lost at least one other task a race.
    let conflicts: u64 = stores.iter().map(CasStore::conflicts).sum();
    assert!(conflicts >= 10, "{conflicts}");
    assert_eq!(stores.iter().map(CasStore::contended).sum::<u64>(), 0);
}

/// A backend whose writes never land: another writer always wins.
#[derive(Clone)]
struct AlwaysLoses(MemoryBackend<ManualClock>, Arc<AtomicUsize>);

impl CasBackend for AlwaysLoses {
    type Error = std::convert::Infallible;
    type Read = <MemoryBackend<ManualClock> as CasBackend>::Read;
    type Write = std::future::Ready<Result<bool, Self::Error>>;

    fn read(&self, key: &str) -> Self::Read {
        self.0.read(key)
    }

    fn write(&self, _: &str, _: Swap) -> Self::Write {
        self.1.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(false))
    }
}

#[tokio::test]
async fn retries_that_run_out_are_an_error_and_charge_nothing() {
    let (_clock, backend) = store_at(1);
    let writes = Arc::new(AtomicUsize::new(0));
    let store = CasStore::builder(AlwaysLoses(backend.clone(), writes.clone()))
        .max_attempts(3)
        .backoff(Duration::from_micros(10), Duration::from_micros(100))
        .build();
    let limits = policy(&[("api", "10/min", Algorithm::SlidingLog)]);
    let key = Key::from("k");
    let error = store.check(&limits, &key, 1).resolve().await.unwrap_err();
    assert!(
        matches!(error, CasError::Contended { attempts: 3, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("3 attempts"), "{error}");
    assert_eq!(writes.load(Ordering::Relaxed), 3);
    assert_eq!((store.conflicts(), store.contended()), (3, 1));
    assert!(backend.is_empty());
}

#[tokio::test]
async fn a_value_that_is_not_states_is_an_error_until_reset() {
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(backend.clone());
    let limits = policy(&[
        ("api", "2/min", Algorithm::SlidingWindowBuckets),
        ("hour", "10/h", Algorithm::SlidingLog),
    ]);
    let key = Key::from("mangled");
    let name = store.key_name(&limits, &key);
    for garbage in [
        &b"\x01\x02\x08\x00\x81\x08"[..],
        b"\xff\xff\xff",
        b"\x01\x05\x01\x00",
        b"\x01\x01\x01\x00",
        b"hello world",
    ] {
        let mut swap = Swap::new(Bytes::copy_from_slice(garbage), 1);
        if let Some(stored) = backend.get(&name) {
            swap.expected = Some(stored.version);
            swap.version = stored.version + 1;
        }
        assert!(backend.write(&name, swap).await.unwrap());
        let error = store.check(&limits, &key, 1).resolve().await.unwrap_err();
        assert!(
            matches!(
                error,
                CasError::Unreadable { .. } | CasError::Mismatched { .. }
            ),
            "{garbage:?}: {error}"
        );
        assert!(error.to_string().contains("reset the key"), "{error}");
        assert!(store.peek(&limits, &key).resolve().await.is_err());
        // A refund or a debit of such a key fails, logged, and changes
        // nothing.
        let refund = PolicyRefund::new(1, Duration::ZERO);
        store.refund(&limits, &key, refund).landed().await;
        store
            .debit(&limits, &key, PolicyDebit::new(1))
            .landed()
            .await;
        assert_eq!(
            backend.get(&name).map(|stored| stored.bytes),
            Some(Bytes::copy_from_slice(garbage))
        );
    }
    store.reset(&limits, &key).await.unwrap();
    let decision = store.check(&limits, &key, 1).resolve().await.unwrap();
    assert!(decision.merged().allowed());
    assert_eq!(decision.each()[0].remaining(), 1);
}

/// A backend whose writes are slow: the clock moves on by `stall` before
/// each write lands (a database queueing it).
#[derive(Clone)]
struct Stalled(MemoryBackend<ManualClock>, ManualClock, Duration);

impl CasBackend for Stalled {
    type Error = std::convert::Infallible;
    type Read = <MemoryBackend<ManualClock> as CasBackend>::Read;
    type Write = <MemoryBackend<ManualClock> as CasBackend>::Write;

    fn read(&self, key: &str) -> Self::Read {
        self.0.read(key)
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        self.1.advance(self.2);
        self.0.write(key, swap)
    }
}

#[tokio::test]
async fn a_late_check_charges_nothing() {
    let limits = policy(&[("api", "2/min", Algorithm::FixedWindow)]);
    let key = Key::from("late");
    // Out of time before the write: not sent.
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(backend.clone());
    let answer = store
        .check_within(&limits, &key, 1, Duration::ZERO)
        .resolve()
        .await;
    assert!(answer.unwrap_err().is_late());
    assert!(backend.is_empty());
    // Sent in time, landing after the deadline: refused by the backend.
    let (clock, backend) = store_at(1);
    let store = CasStore::new(Stalled(
        backend.clone(),
        clock.clone(),
        Duration::from_secs(2),
    ));
    let answer = store
        .check_within(&limits, &key, 1, Duration::from_secs(1))
        .resolve()
        .await;
    assert!(answer.unwrap_err().is_late());
    assert!(backend.is_empty());
    assert_eq!(store.conflicts(), 0, "a late write is not a lost race");
    // In time: charged.
    let answer = store
        .check_within(&limits, &key, 1, Duration::from_secs(5))
        .resolve()
        .await
        .unwrap();
    assert!(answer.merged().allowed());
    assert_eq!(backend.len(), 1);
}

/// A backend whose reads return values past their expiry, which its
/// writes (the memory backend's) treat as absent: its read and write
/// disagree.
#[derive(Clone)]
struct ServesExpired(MemoryBackend<ManualClock>, Arc<AtomicUsize>);

impl CasBackend for ServesExpired {
    type Error = std::convert::Infallible;
    type Read = std::future::Ready<Result<Snapshot, Self::Error>>;
    type Write = <MemoryBackend<ManualClock> as CasBackend>::Write;

    fn read(&self, key: &str) -> Self::Read {
        let Ok(snapshot) = self.0.read(key).into_inner();
        std::future::ready(Ok(Snapshot::new(snapshot.now, self.0.get(key))))
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.write(key, swap)
    }
}

/// Such a backend fails the call at once, saying so — not as a race lost
/// eight times to a writer that does not exist.
#[tokio::test]
async fn a_backend_whose_read_and_write_disagree_is_named_not_retried() {
    let (clock, backend) = store_at(100);
    let writes = Arc::new(AtomicUsize::new(0));
    let store = CasStore::new(ServesExpired(backend.clone(), writes.clone()));
    let limits = policy(&[("api", "1/min", Algorithm::Gcra)]);
    let key = Key::from("k");
    assert!(store.check(&limits, &key, 1).resolve().await.is_ok());
    // A reset leaves an empty value, at rest (expired) at once.
    store.reset(&limits, &key).await.unwrap();
    let before = writes.load(Ordering::Relaxed);
    clock.advance(Duration::from_secs(1));
    let error = store.check(&limits, &key, 1).resolve().await.unwrap_err();
    assert!(matches!(error, CasError::Disagreeing { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("read and write disagree"), "{message}");
    assert!(!message.contains("lost the race"), "{message}");
    // One write tried, and not made; nothing charged, no race counted as
    // given up.
    assert_eq!(writes.load(Ordering::Relaxed) - before, 1);
    assert_eq!(store.contended(), 0);
    let Ok(snapshot) = backend.read(&store.key_name(&limits, &key)).into_inner();
    assert_eq!(snapshot.value, None);
}

#[tokio::test]
async fn each_value_expires_when_its_key_is_back_at_rest() {
    // 100 s into the epoch, every limit of 1 per minute, one request: when
    // the value may go (ns).
    let cases = [
        // GCRA: whole one emission interval later.
        (Algorithm::Gcra, 160 * SECOND),
        (Algorithm::TokenBucket, 160 * SECOND),
        // The interval bucket: at the next period boundary.
        (Algorithm::TokenBucketInterval, 120 * SECOND),
        // The leaky bucket: whole 1 ns later (the next request would wait
        // under one interval), kept its slack (T − 1 ns) more, until the
        // slot it holds has passed.
        (Algorithm::LeakyBucket, 160 * SECOND),
        // The fixed window: at its window's end.
        (Algorithm::FixedWindow, 120 * SECOND),
        // The log: when its entry leaves the period.
        (Algorithm::SlidingLog, 160 * SECOND),
        // The sliding window: when its count, weighted, is down to
        // nothing: 1 ns into the next window (⌊1 · (60 s − 1 ns) / 60 s⌋).
        (Algorithm::SlidingWindow, 120 * SECOND + 1),
        // The buckets: when the sub-window leaves: 1 s sub-windows, the
        // 100th leaves at the start of the 161st.
        (Algorithm::SlidingWindowBuckets, 161 * SECOND),
    ];
    for (algorithm, rest_at) in cases {
        let (clock, backend) = store_at(100);
        let store = CasStore::new(backend.clone());
        let limits = policy(&[("api", "1/min", algorithm)]);
        let key = Key::from("k");
        assert!(
            store
                .check(&limits, &key, 1)
                .resolve()
                .await
                .unwrap()
                .merged()
                .allowed()
        );
        let name = store.key_name(&limits, &key);
        assert_eq!(backend.expires_at(&name), Some(rest_at), "{algorithm}");
        // Just before, the key still counts; at its expiry it is swept,
        // and the next request is decided as a fresh key's is.
        clock.set(rest_at - 1);
        assert_eq!(backend.sweep(), 0, "{algorithm}");
        clock.set(rest_at);
        assert_eq!(backend.sweep(), 1, "{algorithm}");
        let peek = store.peek(&limits, &key).resolve().await.unwrap();
        assert_eq!(peek.merged().remaining(), 1, "{algorithm}");
    }
}

#[tokio::test]
async fn a_refusal_and_a_peek_write_nothing_and_a_reset_is_at_rest_at_once() {
    let (clock, backend) = store_at(1);
    let store = CasStore::new(backend.clone());
    let limits = policy(&[("api", "1/min", Algorithm::SlidingLog)]);
    let key = Key::from("k");
    let name = store.key_name(&limits, &key);
    store.check(&limits, &key, 1).resolve().await.unwrap();
    let written = backend.get(&name).unwrap();
    assert!(
        !store
            .check(&limits, &key, 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
    );
    store.peek(&limits, &key).resolve().await.unwrap();
    assert_eq!(backend.get(&name), Some(written));
    store.reset(&limits, &key).await.unwrap();
    assert_eq!(backend.expires_at(&name), Some(clock.now()));
    assert_eq!(backend.sweep(), 1);
}

#[tokio::test]
async fn a_refund_and_a_debit_reach_the_backend() {
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(Later(backend.clone()));
    let limits = policy(&[
        ("api", "3/min", Algorithm::Gcra),
        ("hour", "10/h", Algorithm::SlidingWindow),
    ]);
    let key = Key::from("k");
    let admitted = store.check(&limits, &key, 2).resolve().await.unwrap();
    assert_eq!(admitted.each()[0].remaining(), 1);
    assert_eq!(admitted.charged_at(), Some(SECOND));
    // Answered later: a spawned task, which the reply waits for.
    store
        .refund(
            &limits,
            &key,
            PolicyRefund::of(&admitted, 2, Duration::ZERO),
        )
        .landed()
        .await;
    let peek = store.peek(&limits, &key).resolve().await.unwrap();
    assert_eq!(
        (peek.each()[0].remaining(), peek.each()[1].remaining()),
        (3, 10)
    );
    store
        .debit(&limits, &key, PolicyDebit::of(&admitted, 5))
        .landed()
        .await;
    let peek = store.peek(&limits, &key).resolve().await.unwrap();
    assert_eq!(
        (peek.each()[0].remaining(), peek.each()[1].remaining()),
        (0, 5)
    );
    assert!(!peek.merged().allowed(), "in debt");
}

#[tokio::test]
async fn a_plan_change_carries_each_limits_usage_in_one_value() {
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(backend.clone());
    // Named apart, as plans are by their fingerprints (`Policy::plan`);
    // the limits of each in one value.
    let free = policy(&[
        ("free-minute", "5/min", Algorithm::Gcra),
        ("free-day", "100/d", Algorithm::FixedWindow),
    ]);
    let pro = policy(&[
        ("pro-minute", "50/min", Algorithm::Gcra),
        ("pro-day", "1000/d", Algorithm::FixedWindow),
    ]);
    let key = Key::from("tenant");
    for _ in 0..3 {
        store.check(&free, &key, 1).resolve().await.unwrap();
    }
    store.carry(&free, &pro, &key).await.unwrap();
    let peek = store.peek(&pro, &key).resolve().await.unwrap();
    assert_eq!(
        (peek.each()[0].remaining(), peek.each()[1].remaining()),
        (47, 997)
    );
    let peek = store.peek(&free, &key).resolve().await.unwrap();
    assert_eq!(
        peek.each()[0].remaining(),
        5,
        "the old plan's value is reset"
    );
    assert_eq!(backend.sweep(), 1, "reset: at rest at once");
    assert_eq!(backend.len(), 1);
}

#[tokio::test]
async fn a_layer_over_it_offers_every_feature() {
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(backend);
    let built = |builder: tollgate::RateLimitBuilder<_, CasStore<_>>| builder.try_build().is_ok();
    let base = || {
        tollgate::RateLimitLayer::builder()
            .quota("api", Quota::per_minute(10))
            .store(store.clone())
    };
    assert!(built(base().charge_when(
        tollgate::settings::ChargeWhen::statuses("4xx").unwrap()
    )));
    assert!(built(base().pay_after()));
    assert!(built(base().max_delay(Duration::from_millis(200))));
}

/// A backend whose first read fails: the error is the backend's.
#[derive(Clone)]
struct FailsOnce(MemoryBackend<ManualClock>, Arc<AtomicBool>);

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the database is down")
    }
}

impl std::error::Error for Down {}

impl CasBackend for FailsOnce {
    type Error = Down;
    type Read = std::future::Ready<Result<Snapshot, Down>>;
    type Write = std::future::Ready<Result<bool, Down>>;

    fn read(&self, key: &str) -> Self::Read {
        if self.1.swap(false, Ordering::Relaxed) {
            return std::future::ready(Err(Down));
        }
        std::future::ready(Ok(self.0.read(key).into_inner().unwrap()))
    }

    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        std::future::ready(Ok(self.0.write(key, swap).into_inner().unwrap()))
    }
}

#[tokio::test]
async fn a_backend_failure_is_the_stores_error() {
    let (_clock, backend) = store_at(1);
    let store = CasStore::new(FailsOnce(backend, Arc::new(AtomicBool::new(true))));
    let limits = policy(&[("api", "1/min", Algorithm::Gcra)]);
    let error = store
        .check(&limits, &Key::GLOBAL, 1)
        .resolve()
        .await
        .unwrap_err();
    assert!(matches!(error, CasError::Backend(Down)));
    assert!(error.to_string().contains("the database is down"));
    assert!(
        store
            .check(&limits, &Key::GLOBAL, 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
    );
}

/// Three stores on one backend (three instances), each asked for its
/// presence: the beats count three and rank them 0, 1 and 2, in one value
/// of the backend beside the limits; a store dropped stops beating, and
/// its word ends within 5 s of its last.
#[tokio::test]
async fn presence_beats_count_and_rank_the_instances() {
    use tollgate::store::Share;
    let backend = MemoryBackend::new();
    let mut stores: Vec<_> = (0..3)
        .map(|_| CasStore::builder(backend.clone()).instances(5).build())
        .collect();
    let presences: Vec<_> = stores.iter().map(CasStore::presence).collect();
    let mut ranks = Vec::new();
    for _ in 0..200 {
        ranks = presences.iter().map(|p| p.share()).collect();
        if ranks
            .iter()
            .all(|share| share.instances() == 3 && share.rank().is_some())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut seen: Vec<u32> = ranks.iter().filter_map(Share::rank).collect();
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2], "{ranks:?}");
    drop(stores.remove(0));
    for _ in 0..400 {
        if presences[1].instances() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(presences[1].instances(), 2);
}
