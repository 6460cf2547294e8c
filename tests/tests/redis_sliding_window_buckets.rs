//! The sliding window of sub-window counters on Redis: the memory store and
//! the Redis store decide identically on a long, bursty trace (500 per hour
//! in 60 one-minute sub-windows, over three hours), and a key holding every
//! sub-window of the hour costs Redis no more than its counters
//! (`MEMORY USAGE`, printed).

mod common;

use common::{decide, in_micros};
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Key, MemoryStore, NamedLimit, Policy};
use tollgate_core::{Algorithm, ManualClock, Quota};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

/// A seeded trace of (gap in µs, cost): quiet stretches, steady traffic
/// around the limit and bursts, so that the hour both fills and drains.
fn trace() -> Vec<(u64, u32)> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        // xorshift64
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut trace = Vec::new();
    for phase in 0..60 {
        match phase % 4 {
            // A burst: 20 to 80 requests within a second.
            0 => (0..20 + next() % 60).for_each(|_| trace.push((next() % 20_000, 1))),
            // Steady, about 1,000 an hour (twice the limit), some cost 2.
            1 | 2 => (0..40)
                .for_each(|_| trace.push((next() % 7_200_000, 1 + u32::from(next() % 10 == 0)))),
            // Quiet: one gap of up to ten minutes.
            _ => trace.push((next() % 600_000_000, 1)),
        }
    }
    trace
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_decide_identically_and_the_key_costs_its_counters() {
    let server = RedisServer::start();
    let quota: Quota = "500/h".parse().unwrap();
    let policy = Arc::new(Policy::new(vec![
        NamedLimit::new("hourly", quota).with_algorithm(Algorithm::SlidingWindowBuckets),
    ]));
    // 25.5 s into a sub-window, on a whole microsecond.
    let start = 1_700_000_000_000_000_000 + 25_500_000_000;
    let clock = ManualClock::new(start);
    let redis = RedisStore::builder(server.url())
        .test_clock(clock.clone())
        .connect()
        .await
        .expect("connect");
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let key = Key::from_bytes(b"user-000001");
    let mut seen = [0usize; 2];
    for (i, (gap, cost)) in trace().into_iter().enumerate() {
        clock.advance(Duration::from_micros(gap));
        let expected = decide(&memory, &policy, &key, cost).await;
        let got = decide(&redis, &policy, &key, cost).await;
        assert_eq!(got.merged(), in_micros(expected.merged()), "request {i}");
        seen[usize::from(got.merged().allowed())] += 1;
    }
    assert!(seen[0] > 100 && seen[1] > 500, "{seen:?}: fills and drains");

    // One request in each of the 61 sub-windows the hour overlaps: the
    // most fields a key ever holds.
    let full_key = Key::from_bytes(b"user-000002");
    for _ in 0..61 {
        for _ in 0..8 {
            decide(&redis, &policy, &full_key, 1).await;
        }
        clock.advance(Duration::from_secs(60));
    }
    let name = &redis.redis_keys(&policy, &full_key)[0];
    let fields: u64 = server
        .command(&["HLEN", name])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    let bytes: u64 = server
        .command(&["MEMORY", "USAGE", name, "SAMPLES", "0"])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    println!("sliding-window-buckets, 500/h: {fields} fields, MEMORY USAGE {bytes} B");
    // 61 counters, and the field that says what quota they count under.
    assert_eq!(fields, 62);
    // A compact hash (listpack): 61 counters in under 1 KB, where a log of
    // 500 entries takes about 12 KB (and the estimate for 60
    // counters is 1.6 KB).
    assert!(bytes <= 1_024, "{bytes} B");
}
