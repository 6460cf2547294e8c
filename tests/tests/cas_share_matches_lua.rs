//! The local-first store's three operations in Rust (`tollgate-cas`, for
//! any compare-and-swap backend) decide as `share.lua` decides them in
//! Redis: random traces of reservations, syncs and give-backs by three
//! instances, on one key, at random gaps, run against a real redis-server
//! (its test clock) and against the compare-and-swap store over the
//! in-memory backend (a manual clock at the same time): the same grants,
//! shares and counts, and the same decisions at the scripts' resolution
//! (whole µs), step after step.

mod common;

use common::in_micros;
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tollgate::{Key, NamedLimit, Policy};
use tollgate_cas::{CasStore, MemoryBackend};
use tollgate_core::{Algorithm, Limiter, ManualClock, Quota, Refill, TokenBucket};
use tollgate_local::{ShareOp, ShareReply, SharedStore};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

/// One server for every case of the binary, stopped when it exits.
fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        // A server dies with the thread that started it: started on one
        // that outlives every test of the binary.
        let (started, server) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = started.send(RedisServer::start());
            loop {
                std::thread::park();
            }
        });
        server.recv().expect("the server's thread")
    })
}

/// The policies a trace runs under: every algorithm local-first decides,
/// one limit and two; quotas whose intervals are whole µs (the scripts'
/// unit), small enough that refills happen within a trace.
fn policies() -> Vec<Vec<NamedLimit>> {
    let quota = Quota::per_second(8).with_burst(4).unwrap();
    let mut policies: Vec<Vec<NamedLimit>> = Algorithm::ALL
        .into_iter()
        .filter(|a| a.local_first())
        .map(|a| vec![NamedLimit::new("api", quota).with_algorithm(a)])
        .collect();
    let interval = TokenBucket::new(quota).with_refill(Refill::Interval);
    policies.push(vec![
        NamedLimit::new("refill", quota).with_limiter(Limiter::TokenBucket(interval)),
    ]);
    let per_10s: Quota = "20/10s".parse().unwrap();
    policies.push(vec![
        NamedLimit::new("burst", quota),
        NamedLimit::new("steady", per_10s).with_algorithm(Algorithm::SlidingWindow),
    ]);
    policies.push(vec![
        NamedLimit::new("a", "5/s".parse().unwrap()),
        NamedLimit::new("b", per_10s).with_algorithm(Algorithm::TokenBucket),
    ]);
    policies
}

/// One step of a trace: a gap in ms, then an operation (its numbering
/// filled in as the trace runs).
#[derive(Clone, Debug)]
enum Step {
    Reserve {
        need: u32,
        want: u64,
        fanout: u32,
        holder: u64,
        held: u64,
        hold_ms: u64,
    },
    Sync {
        spent: u64,
        instance: u64,
        again: bool,
        instances: u32,
        need: u32,
        left: u64,
        want: u64,
    },
    Refund {
        cost: u32,
        holder: u64,
        /// Name the holder's last reservation (else one before it).
        last: bool,
        ago_ms: u64,
        /// The admission's `reset_after` per limit (ms), when known.
        resets_ms: Option<[u64; 2]>,
    },
}

fn step() -> impl Strategy<Value = (u64, Step)> {
    let gap = prop_oneof![Just(0u64), 1u64..50, 50u64..400, 400u64..1_500];
    let reserve = (0u32..4, 1u64..24, 1u32..9, 1u64..4, 0u64..6, 0usize..3).prop_map(
        |(need, want, fanout, holder, held, hold)| Step::Reserve {
            need,
            want,
            fanout,
            holder,
            held,
            hold_ms: [0, 500, 1_000][hold],
        },
    );
    let sync = (
        0u64..6,
        1u64..4,
        prop::bool::weighted(0.15),
        0u32..3,
        0u32..3,
        0u64..6,
        0u64..12,
    )
        .prop_map(
            |(spent, instance, again, instances, need, left, want)| Step::Sync {
                spent,
                instance,
                again,
                instances,
                need,
                left,
                want,
            },
        );
    let refund = (
        1u32..4,
        1u64..4,
        prop::bool::weighted(0.8),
        0u64..300,
        prop::option::of([0u64..2_000, 0u64..2_000]),
    )
        .prop_map(|(cost, holder, last, ago_ms, resets_ms)| Step::Refund {
            cost,
            holder,
            last,
            ago_ms,
            resets_ms,
        });
    (gap, prop_oneof![3 => reserve, 3 => sync, 2 => refund])
}

/// Numbers each operation as the local-first store would: reservations
/// and reports increase per holder.
#[derive(Default)]
struct Numbers {
    reports: [u64; 4],
    sequences: [u64; 4],
    /// When each holder's reservations' holds end on the clock (ms since
    /// the trace's start), by report number.
    holds: [Vec<u64>; 4],
    /// The trace's clock, ms since its start.
    now_ms: u64,
}

impl Numbers {
    fn op(&mut self, step: &Step) -> ShareOp {
        match *step {
            Step::Reserve {
                need,
                want,
                fanout,
                holder,
                held,
                hold_ms,
            } => {
                self.reports[holder as usize] += 1;
                self.holds[holder as usize].push(self.now_ms + hold_ms);
                ShareOp::Reserve {
                    need,
                    want: want.max(u64::from(need)),
                    fanout,
                    holder,
                    held,
                    hold_micros: hold_ms * 1_000,
                    ahead_micros: 250_000,
                    report: self.reports[holder as usize],
                }
            }
            Step::Sync {
                spent,
                instance,
                again,
                instances,
                need,
                left,
                want,
            } => {
                if !again || self.sequences[instance as usize] == 0 {
                    self.sequences[instance as usize] += 1;
                }
                ShareOp::Sync {
                    spent,
                    instance,
                    sequence: self.sequences[instance as usize],
                    life_micros: 1_250_000,
                    instances,
                    need,
                    left,
                    want,
                }
            }
            Step::Refund {
                cost,
                holder,
                last,
                ago_ms,
                resets_ms,
            } => {
                let report = self.reports[holder as usize];
                ShareOp::Refund {
                    cost,
                    holder,
                    report: if last {
                        report
                    } else {
                        report.saturating_sub(1)
                    },
                    ago_micros: ago_ms * 1_000,
                    resets: resets_ms
                        .map(|ms| ms.iter().map(|ms| ms * 1_000_000).collect())
                        .unwrap_or_default(),
                }
            }
        }
    }
}

/// How long after a hold ends (ms, on the clock) the compare-and-swap
/// store may drop its count: at least the 1 s it keeps one past its
/// expiry and refill.
const LAPSED_MS: u64 = 1_000;

impl Numbers {
    /// Whether `op` gives back units of a reservation whose hold ended
    /// [`LAPSED_MS`] or more ago on the clock: the compare-and-swap store
    /// may have dropped that count, its value at rest (a count is kept
    /// until its expiry, a whole refill and 1 s more), where Redis still
    /// holds the key, whose time to live runs in real time, which hardly
    /// moves while the clock jumps. If the two answer such a give-back
    /// differently, the difference is the two clocks', not the stores':
    /// it and the rest of its trace are left unjudged.
    fn names_a_lapsed_hold(&self, op: &ShareOp) -> bool {
        let ShareOp::Refund { holder, report, .. } = *op else {
            return false;
        };
        let holds = &self.holds[holder as usize];
        report > 0
            && usize::try_from(report - 1)
                .ok()
                .and_then(|i| holds.get(i))
                .is_some_and(|end| end.saturating_add(LAPSED_MS) <= self.now_ms)
    }
}

/// Whether two replies say the same: the same outcome, server time and
/// counts; the same times at the scripts' resolution, whole µs, but
/// for one µs either way (the Rust side computes in ns: a refund that
/// raises a bucket's mark rounds its ns up where the script's µs are
/// whole).
fn same(rust: &ShareReply, lua: &ShareReply) -> bool {
    let head = |r: &ShareReply| (r.outcome, r.server_micros);
    let near = |a: u64, b: u64| a.abs_diff(b) <= 1_000;
    head(rust) == head(lua)
        && rust.decision.each().len() == lua.decision.each().len()
        && rust
            .decision
            .each()
            .iter()
            .zip(lua.decision.each())
            .all(|(r, l)| {
                let r = in_micros(*r);
                r.allowed() == l.allowed()
                    && r.limit() == l.limit()
                    && r.remaining() == l.remaining()
                    && near(r.reset_after_nanos(), l.reset_after_nanos())
                    && near(r.retry_after_nanos(), l.retry_after_nanos())
                    && near(r.wait_nanos(), l.wait_nanos())
                    && near(r.replenish_after_nanos(), l.replenish_after_nanos())
            })
}

/// How far real time may run ahead of the test clock, since a step,
/// before a trace's differing answer may be Redis expiring a key by its
/// own clock (see `run_trace`).
const OVERTAKEN: Duration = Duration::from_millis(100);

/// Numbers the traces of the binary: each runs under a prefix of its own
/// (a case proptest shrinks runs again, on a fresh key).
static TRACES: AtomicU64 = AtomicU64::new(0);

/// Runs one trace; `false` when its answers differed after real time had
/// run ahead of the test clock by more than [`OVERTAKEN`] since some
/// earlier step: Redis expires keys by its own clock (a key kept until
/// its state is at rest on the test clock may be gone on the server's),
/// so such a run proves nothing either way and is run again. On a machine
/// that keeps up, real time stays behind the clock, which jumps by the
/// trace's gaps (a step takes a few ms). The other way round, Redis keeps
/// a key the test clock has put at rest: see
/// [`Numbers::names_a_lapsed_hold`].
async fn run_trace(limits: &[NamedLimit], steps: &[(u64, Step)]) -> bool {
    let case = TRACES.fetch_add(1, Ordering::Relaxed);
    // A whole second, a quarter in: windows and refills start mid-way.
    let start = 1_700_000_000_250_000_000;
    let redis_clock = ManualClock::new(start);
    let cas_clock = ManualClock::new(start);
    let redis = RedisStore::builder(server().url())
        .prefix(format!("share-{case}"))
        .test_clock(redis_clock.clone())
        .connect()
        .await
        .expect("connect");
    let cas = CasStore::new(MemoryBackend::with_clock(cas_clock.clone()));
    let policy = Arc::new(Policy::new(limits.to_vec()));
    let key = Key::from("k");
    let mut numbers = Numbers::default();
    let real = std::time::Instant::now();
    let mut on_the_clock = Duration::ZERO;
    // How far real time is ahead of the clock (negative: behind), and the
    // least it was after any earlier step.
    let lead = |on_the_clock: Duration| real.elapsed().as_secs_f64() - on_the_clock.as_secs_f64();
    let mut least_lead = f64::MAX;
    for (index, (gap, step)) in steps.iter().enumerate() {
        redis_clock.advance(Duration::from_millis(*gap));
        cas_clock.advance(Duration::from_millis(*gap));
        on_the_clock += Duration::from_millis(*gap);
        numbers.now_ms = on_the_clock.as_millis() as u64;
        let op = numbers.op(step);
        let lapsed = numbers.names_a_lapsed_hold(&op);
        let lua = redis.share(&policy, &key, op.clone()).await.expect("redis");
        let rust = cas.share(&policy, &key, op.clone()).await.expect("cas");
        let now_lead = lead(on_the_clock);
        if !same(&rust, &lua) && now_lead - least_lead > OVERTAKEN.as_secs_f64() {
            return false;
        }
        if !same(&rust, &lua) && lapsed {
            return true;
        }
        least_lead = least_lead.min(now_lead);
        assert!(
            same(&rust, &lua),
            "case {case}, step {index}: {op:?}\n  rust {rust:?}\n  lua  {lua:?}\n  policy {:?}\n  the steps: {steps:?}",
            policy.limits()
        );
    }
    true
}

/// A trace a CI run found: holder 2's held count lapsed 2.3 s before its
/// give-back on the test clock (the compare-and-swap store dropped it at
/// rest) while the server's key had hardly lived in real time, so
/// `share.lua` still took the give-back off it. The steps before it are
/// judged; it, the clocks' difference, is not.
#[tokio::test]
async fn a_held_count_lapsed_on_the_test_clock_is_gone_on_both() {
    let refund = |cost, holder, last, ago_ms| Step::Refund {
        cost,
        holder,
        last,
        ago_ms,
        resets_ms: None,
    };
    let reserve = |want, holder, held| Step::Reserve {
        need: 1,
        want,
        fanout: 5,
        holder,
        held,
        hold_ms: 500,
    };
    let steps = vec![
        (347, refund(2, 3, true, 235)),
        (355, refund(1, 2, true, 177)),
        (313, reserve(8, 3, 0)),
        (0, reserve(10, 2, 3)),
        (
            1367,
            Step::Refund {
                cost: 1,
                holder: 1,
                last: false,
                ago_ms: 185,
                resets_ms: Some([1328, 1316]),
            },
        ),
        (940, refund(1, 1, false, 263)),
        (305, refund(1, 1, true, 263)),
        (164, refund(2, 2, true, 265)),
    ];
    let gcra = policies().remove(0);
    assert!(run_trace(&gcra, &steps).await, "overtaken by real time");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_rust_operations_decide_as_share_lua(
        policy in 0..policies().len(),
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let limits = policies()[policy].clone();
        // A run overtaken by real time is run again (see `run_trace`); a
        // machine too busy to give one of eight a fair run proves nothing.
        let fair = (0..8).any(|_| runtime.block_on(run_trace(&limits, &steps)));
        if !fair {
            eprintln!("eight runs of a trace overtaken by real time: not judged");
        }
    }
}
