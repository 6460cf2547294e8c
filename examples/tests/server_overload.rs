//! Overload never opens the gates for a key known to be over its limit:
//! the `server` playground in its default configuration (`gcra`,
//! `--on-store-error open`, the block cache on, a 100 ms store timeout,
//! the circuit breaker), over Redis and over PostgreSQL, each reached
//! through a proxy on loopback that stalls on cue (every reply held: the
//! store cannot keep up), while a flood of distinct keys goes on.
//!
//! A victim key on 3/min is refused first (the store works), then the
//! store stalls and the flood starts: the breaker opens, and the flood's
//! requests fail open. The victim asks every 50 ms for longer than its
//! retry time (20 s), so that its refusal lapses during the outage. It
//! may be admitted at most its limit plus one per instance per period of
//! its quota: the three the store admitted, and one let through by
//! fail-open once its refusal lapsed, after which this instance blocks it
//! for the quota's period. Nothing here depends on speed: however slow
//! the machine, the bound grows only with the periods that passed.

mod playground;

use playground::{Server, try_request};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tollgate_tests::proxy::{Jitter, JitterProxy};

/// The victim's quota: 3/min.
const LIMIT: u64 = 3;
const PERIOD: Duration = Duration::from_secs(60);
/// How long the victim asks after the store stalled: past its retry time
/// (20 s after a burst of 3 on 3/min under GCRA).
const OUTAGE: Duration = Duration::from_secs(25);
/// Threads of the distinct-key flood.
const FLOODERS: usize = 4;

/// What the victim and the flood got.
#[derive(Debug, Default)]
struct Tally {
    victim_admitted: u64,
    victim_refused: u64,
    flood_admitted: usize,
    flood_other: usize,
}

/// The flood and the victim against `server` (whose store is behind
/// `proxy`), as the module docs say.
fn flood(server: &Server, proxy: &JitterProxy) -> (Tally, Duration) {
    let victim = [("x-api-key", "victim")];
    let get = |headers: &[(&str, &str)]| {
        try_request(&server.addr, "/", headers).expect("the server answers")
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    // The store decides while it keeps up: three, then refused.
    loop {
        match get(&victim).status {
            200 => tally.victim_admitted += 1,
            429 => break,
            status => panic!("the victim got {status} while the store was up"),
        }
        assert!(tally.victim_admitted <= LIMIT, "{tally:?}");
    }
    tally.victim_refused += 1;
    assert_eq!(tally.victim_admitted, LIMIT);
    proxy.stall();
    let outage = Instant::now();
    let stop = AtomicBool::new(false);
    let (flood_admitted, flood_other) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for flooder in 0..FLOODERS {
            let (stop, admitted, other) = (&stop, &flood_admitted, &flood_other);
            scope.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("flood-{flooder}-{n}");
                    n += 1;
                    match get(&[("x-api-key", &key)]).status {
                        200 => admitted.fetch_add(1, Ordering::Relaxed),
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        while outage.elapsed() < OUTAGE {
            match get(&victim).status {
                200 => tally.victim_admitted += 1,
                429 => tally.victim_refused += 1,
                status => panic!("the victim got {status} during the outage"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    tally.flood_admitted = flood_admitted.into_inner();
    tally.flood_other = flood_other.into_inner();
    (tally, started.elapsed())
}

/// Runs the flood against a server whose `--store` is `url` (through
/// `proxy`) and checks the bound; `store` names it in messages.
fn the_victim_stays_within_its_limit_plus_one(store: &str, url: &str, proxy: &JitterProxy) {
    let server = Server::start(&[
        "--store",
        url,
        "--limit",
        "api=3/min",
        "--key",
        "header:x-api-key",
    ]);
    let (tally, took) = flood(&server, proxy);
    // One server: one more per period begun since the first request.
    let periods = took.as_secs() / PERIOD.as_secs() + 1;
    let bound = LIMIT + periods;
    println!(
        "{store}: the victim (3/min) admitted {} times and refused {} in {took:?} of a \
         distinct-key flood the store could not keep up with ({} flood requests let through, \
         {} otherwise); bound {bound}",
        tally.victim_admitted, tally.victim_refused, tally.flood_admitted, tally.flood_other
    );
    let logs = server.logs();
    // The outage was one: the breaker opened, and the flood failed open.
    assert!(
        logs.iter()
            .any(|line| line.contains("circuit breaker open")),
        "{store}: {logs:#?}"
    );
    assert!(tally.flood_admitted > 0, "{store}: {tally:?}");
    assert!(
        tally.victim_admitted <= bound,
        "{store}: the victim was admitted {} times, at most {bound} allowed: {tally:?}",
        tally.victim_admitted
    );
}

#[test]
fn over_redis_a_flood_the_store_cannot_keep_up_with_admits_the_victim_at_most_once_more() {
    let redis = tollgate_tests::redis::RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = JitterProxy::start(upstream, Jitter::NONE, 47);
    let url = format!("redis://{}", proxy.addr());
    the_victim_stays_within_its_limit_plus_one("Redis", &url, &proxy);
}

#[test]
fn over_postgres_a_flood_the_store_cannot_keep_up_with_admits_the_victim_at_most_once_more() {
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let upstream = format!("127.0.0.1:{}", postgres.port()).parse().unwrap();
    let proxy = JitterProxy::start(upstream, Jitter::NONE, 47);
    let url = postgres.url().replace(
        &format!(":{}/", postgres.port()),
        &format!(":{}/", proxy.addr().port()),
    );
    the_victim_stays_within_its_limit_plus_one("PostgreSQL", &url, &proxy);
}
