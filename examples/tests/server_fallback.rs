//! `--on-store-error fallback` with several `server`s sharing a real Redis
//! or PostgreSQL that goes away: the servers split each limit between
//! them as the store last counted them (a presence beat of their own, not
//! their traffic), the remainder to the lowest ranks, from the operator's
//! `--instances` when the store never answered, and each starts from
//! what the store last said of a key rather than from a fresh limit.
//!
//! No test waits a fixed time for the servers to count each other: each
//! waits (bounded) until every server's word in the store has been
//! renewed once after all of them were there, so that every server has
//! read the whole count.

mod playground;

use playground::{STEP, Server};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tollgate_tests::postgres::PostgresServer;
use tollgate_tests::redis::RedisServer;

/// How many of `n` requests to each server, in turn, got `200`.
fn admitted(servers: &[&Server], n: usize) -> usize {
    (0..n)
        .flat_map(|_| {
            servers
                .iter()
                .map(|server| playground::request(&server.addr, "/", &[]).status)
        })
        .filter(|status| *status == 200)
        .count()
}

/// Units a limit of `per_minute` refills in `elapsed`, rounded up.
fn refilled(per_minute: f64, elapsed: Duration) -> usize {
    (elapsed.as_secs_f64() * per_minute / 60.0).ceil() as usize
}

/// The bulk strings of a RESP reply, in order.
fn bulk_strings(reply: &str) -> Vec<String> {
    let mut lines = reply.split("\r\n");
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line.starts_with('$')
            && line != "$-1"
            && let Some(value) = lines.next()
        {
            out.push(value.to_owned());
        }
    }
    out
}

/// Each server's word in Redis: its id and until when it holds.
fn redis_words(redis: &RedisServer) -> HashMap<String, u64> {
    let reply = redis.command(&["ZRANGE", "tollgate:instances", "0", "-1", "WITHSCORES"]);
    bulk_strings(&reply)
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].parse().unwrap_or(0)))
        .collect()
}

/// Each server's word in PostgreSQL's presence row: its id and until when
/// it holds (16 bytes a word, little-endian).
fn postgres_words(postgres: &PostgresServer) -> HashMap<String, u64> {
    let hex = postgres.sql(
        "SELECT coalesce(encode(value, 'hex'), '') FROM tollgate_limits \
         WHERE key = 'tollgate:instances'",
    );
    let bytes: Vec<u8> = (0..hex.trim().len() / 2)
        .map(|i| u8::from_str_radix(&hex.trim()[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect();
    bytes
        .chunks_exact(16)
        .map(|word| {
            let id = u64::from_le_bytes(word[..8].try_into().unwrap());
            let until = u64::from_le_bytes(word[8..].try_into().unwrap());
            (format!("{id:016x}"), until)
        })
        .collect()
}

/// Waits until `n` words are in the store and each has been renewed
/// once since: every server has then counted all `n`.
fn wait_until_counted(n: usize, words: impl Fn() -> HashMap<String, u64>) {
    let deadline = Instant::now() + STEP;
    let all = loop {
        let now = words();
        if now.len() == n {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "{n} servers never all said so: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    loop {
        let now = words();
        if all
            .iter()
            .all(|(id, until)| now.get(id).is_some_and(|later| later > until))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the words were not renewed: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn store_args<'a>(url: &'a str, limit: &'a str) -> Vec<&'a str> {
    vec![
        "--store",
        url,
        "--on-store-error",
        "fallback",
        "--limit",
        limit,
        "--key",
        "global",
    ]
}

/// Two servers sharing 20 a minute, idle (no request at all) once both
/// were counted, then Redis killed: together they admit 20 (10 each: the
/// count comes from the beat, not from traffic), within one per server,
/// and what refilled meanwhile.
#[test]
fn idle_servers_split_the_limit_when_redis_dies() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let args = store_args(&url, "api=20/min");
    let (a, b) = (Server::start(&args), Server::start(&args));
    wait_until_counted(2, || redis_words(&redis));
    redis.kill();
    let started = Instant::now();
    let admitted = admitted(&[&a, &b], 30);
    let bound = 20 + refilled(20.0, started.elapsed()) + 2;
    println!("{admitted} admitted over two idle servers, Redis killed (bound {bound})");
    assert!(
        (18..=bound).contains(&admitted),
        "{admitted} admitted, bound {bound}"
    );
}

/// Two servers counted, Redis restarted empty (the servers' words gone),
/// killed again as soon as one server has said it shares it again: the
/// servers still split the limit in two (a beat that finds its word gone
/// counts no fewer than before), 20 together, not 30 or 40.
#[test]
fn after_a_redis_restart_the_count_is_kept() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let args = store_args(&url, "api=20/min");
    let (a, b) = (Server::start(&args), Server::start(&args));
    wait_until_counted(2, || redis_words(&redis));
    redis.restart();
    let deadline = Instant::now() + STEP;
    while redis_words(&redis).is_empty() {
        assert!(Instant::now() < deadline, "no server said so again");
        std::thread::sleep(Duration::from_millis(10));
    }
    redis.kill();
    let started = Instant::now();
    let admitted = admitted(&[&a, &b], 30);
    let bound = 20 + refilled(20.0, started.elapsed()) + 2;
    println!("{admitted} admitted over two servers after a restart (bound {bound})");
    assert!(
        (18..=bound).contains(&admitted),
        "{admitted} admitted, bound {bound}"
    );
}

/// 3 a minute over two servers counted and ranked by Redis: 2 and 1, 3 in
/// all (rounded down on both, they would admit 2), plus what refilled.
#[test]
fn three_a_minute_over_two_servers_admit_three() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let args = store_args(&url, "api=3/min");
    let (a, b) = (Server::start(&args), Server::start(&args));
    wait_until_counted(2, || redis_words(&redis));
    redis.kill();
    let started = Instant::now();
    let admitted = admitted(&[&a, &b], 10);
    let bound = 3 + refilled(3.0, started.elapsed());
    println!("{admitted} admitted of 3/min over two servers (bound {bound})");
    assert!(
        (3..=bound).contains(&admitted),
        "{admitted} admitted, bound {bound}"
    );
}

/// `--connect lazy --instances 2` with Redis absent from the start: the
/// store never counted, so each server takes the operator's count and
/// decides at half of 20 a minute: 20 together, not 40.
#[test]
fn a_lazy_start_without_redis_splits_by_instances() {
    let redis = RedisServer::not_started();
    let url = redis.url();
    let mut args = store_args(&url, "api=20/min");
    args.extend(["--connect", "lazy", "--instances", "2"]);
    let (a, b) = (Server::start(&args), Server::start(&args));
    let started = Instant::now();
    let admitted = admitted(&[&a, &b], 30);
    let bound = 20 + refilled(20.0, started.elapsed()) + 2;
    println!("{admitted} admitted over two lazy servers, Redis absent (bound {bound})");
    assert!(
        (18..=bound).contains(&admitted),
        "{admitted} admitted, bound {bound}"
    );
}

/// Two servers sharing 20 a minute spend 18 of it through Redis, then
/// Redis dies: each starts from its share of what Redis last said was
/// left, so together they admit about the 2 left (and what refilled),
/// one more per server at most — not a fresh 20.
#[test]
fn a_fallback_starts_from_what_was_left() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    // A second for Redis's answers: on a loaded machine none of the 18
    // is decided by the fallback instead.
    let mut args = store_args(&url, "api=20/min");
    args.extend(["--store-timeout-ms", "1000"]);
    let (a, b) = (Server::start(&args), Server::start(&args));
    wait_until_counted(2, || redis_words(&redis));
    let started = Instant::now();
    let spent = admitted(&[&a, &b], 9);
    assert_eq!(spent, 18, "the 18 pass through Redis");
    redis.kill();
    let admitted = admitted(&[&a, &b], 20);
    let left = 2 + refilled(20.0, started.elapsed());
    println!("{admitted} admitted after Redis died with {left} left");
    assert!(admitted <= left + 2, "{admitted} admitted, {left} left");
}

/// Four servers sharing 100 an hour through PostgreSQL, counted, then the
/// database killed: together they admit 100 (25 each), not 400, within
/// one per server.
#[test]
fn four_servers_split_the_limit_when_postgres_dies() {
    let mut postgres = PostgresServer::start();
    let url = postgres.url();
    let args = store_args(&url, "api=100/h");
    let servers: Vec<Server> = (0..4).map(|_| Server::start(&args)).collect();
    wait_until_counted(4, || postgres_words(&postgres));
    postgres.kill();
    let all: Vec<&Server> = servers.iter().collect();
    let admitted = admitted(&all, 50);
    println!("{admitted} admitted of 100/h over four servers, PostgreSQL killed");
    assert!((96..=104).contains(&admitted), "{admitted} admitted");
}

/// Over PostgreSQL too, a fallback starts from what was left: four
/// servers spend 96 of 100 an hour, the database dies, and together they
/// admit about the 4 left, one more per server at most.
#[test]
fn a_postgres_fallback_starts_from_what_was_left() {
    let mut postgres = PostgresServer::start();
    let url = postgres.url();
    let mut args = store_args(&url, "api=100/h");
    args.extend(["--store-timeout-ms", "1000"]);
    let servers: Vec<Server> = (0..4).map(|_| Server::start(&args)).collect();
    let all: Vec<&Server> = servers.iter().collect();
    wait_until_counted(4, || postgres_words(&postgres));
    let started = Instant::now();
    assert_eq!(admitted(&all, 24), 96, "the 96 pass through PostgreSQL");
    postgres.kill();
    let admitted = admitted(&all, 10);
    let left = 4 + refilled(100.0 / 60.0, started.elapsed());
    println!("{admitted} admitted after PostgreSQL died with {left} left");
    assert!(admitted <= left + 4, "{admitted} admitted, {left} left");
}
