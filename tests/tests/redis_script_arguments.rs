//! Every script refuses arguments it cannot use before it writes anything,
//! with a `TOLLGATEARG` error reply, and no script leaves a key without an
//! expiry, whatever its arguments: each is called here as the store calls
//! it, with extreme ones, on a real server.

use std::time::Duration;
use tollgate_redis::RedisSlots;
use tollgate_tests::redis::RedisServer;

const PRELUDE: &str = include_str!("../../crates/tollgate-redis/scripts/prelude.lua");
const CHECK: &str = include_str!("../../crates/tollgate-redis/scripts/check.lua");
const DEBIT: &str = include_str!("../../crates/tollgate-redis/scripts/debit.lua");
const REFUND: &str = include_str!("../../crates/tollgate-redis/scripts/refund.lua");
const SHARE: &str = include_str!("../../crates/tollgate-redis/scripts/share.lua");
const ACQUIRE: &str = include_str!("../../crates/tollgate-redis/scripts/in_flight_acquire.lua");
const RENEW: &str = include_str!("../../crates/tollgate-redis/scripts/in_flight_renew.lua");
const COUNT: &str = include_str!("../../crates/tollgate-redis/scripts/in_flight_count.lua");

/// Each algorithm's file, its name in ARGV, and parameters it is sent by
/// a quota of 10 per second.
const ALGORITHMS: &[(&str, &str, [&str; 4])] = &[
    (
        include_str!("../../crates/tollgate-redis/scripts/gcra.lua"),
        "gcra",
        ["100000", "1000000", "10", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/token_bucket.lua"),
        "token_bucket",
        ["10", "1000000", "10", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/fixed_window.lua"),
        "fixed_window",
        ["10", "1000000", "0", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/sliding_window.lua"),
        "sliding_window",
        ["10", "1000000", "0", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/sliding_log.lua"),
        "sliding_log",
        ["10", "1000000", "1000", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/sliding_window_buckets.lua"),
        "sliding_window_buckets",
        ["10", "100000", "10", "0"],
    ),
    (
        include_str!("../../crates/tollgate-redis/scripts/leaky_bucket.lua"),
        "leaky_bucket",
        ["100000", "1099999", "10", "0"],
    ),
];

/// Numbers no script can use where it wants a whole number.
const NOT_WHOLE: &[&str] = &["-1", "1.5", "abc", "nan", "inf", "-inf", "1e400", "0x", " "];

const U64_MAX: &str = "18446744073709551615";

/// `EVAL script` with `keys` and `args`: the raw reply.
fn eval(server: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> String {
    let numkeys = keys.len().to_string();
    let mut command = vec!["EVAL", script, numkeys.as_str()];
    command.extend_from_slice(keys);
    command.extend_from_slice(args);
    server.command(&command)
}

/// Every key on the server with its PTTL.
fn keys_and_ttls(server: &RedisServer) -> Vec<(String, i64)> {
    let reply = server.command(&["KEYS", "*"]);
    // *N, then $len and the name, for each key.
    let names: Vec<String> = reply
        .split("\r\n")
        .skip(1)
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|pair| pair.get(1).map(|name| (*name).to_owned()))
        .filter(|name| !name.is_empty())
        .collect();
    names
        .into_iter()
        .map(|name| {
            let ttl = server.command(&["PTTL", &name]);
            let ttl = ttl.trim().trim_start_matches(':').parse().unwrap_or(-3);
            (name, ttl)
        })
        .collect()
}

/// Fails if any key lacks an expiry (PTTL −1; −2, gone since KEYS, is
/// fine; −3: an unreadable reply).
fn assert_every_key_expires(server: &RedisServer, case: &str) {
    let keys = keys_and_ttls(server);
    let forever: Vec<_> = keys
        .iter()
        .filter(|(_, ttl)| matches!(ttl, -1 | -3))
        .collect();
    assert!(
        forever.is_empty(),
        "{case}: keys without an expiry: {forever:?}"
    );
}

/// A refusal of an argument: the TOLLGATEARG code, and nothing written.
fn assert_refused(server: &RedisServer, reply: &str, case: &str) {
    assert!(
        reply.starts_with("-TOLLGATEARG "),
        "{case}: not refused: {reply:?}"
    );
    assert_every_key_expires(server, case);
}

/// The script of one algorithm for `entry`, joined as the store joins it.
fn script(algorithm: &str, entry: &str) -> String {
    format!("{PRELUDE}{algorithm}{entry}")
}

/// The arguments of each entry around `cost`, `now` and the limit's five.
fn check_args<'a>(cost: &'a str, now: &'a str, limit: [&'a str; 5]) -> Vec<&'a str> {
    let mut args = vec![cost, now, ""];
    args.extend(limit);
    args
}

fn debit_args<'a>(cost: &'a str, now: &'a str, limit: [&'a str; 5]) -> Vec<&'a str> {
    let mut args = vec![cost, now];
    args.extend(limit);
    args
}

fn refund_args<'a>(cost: &'a str, now: &'a str, limit: [&'a str; 5]) -> Vec<&'a str> {
    let mut args = vec![cost, now, "", "0", ""];
    args.extend(limit);
    args
}

/// A reservation of `need` to 5 units held for `hold` µs.
fn reserve_args<'a>(
    need: &'a str,
    now: &'a str,
    hold: &'a str,
    limit: [&'a str; 5],
) -> Vec<&'a str> {
    let mut args = vec![
        "reserve", now, need, "5", "2", "7", "0", hold, "1000000", "1",
    ];
    args.extend(limit);
    args
}

type Entry = (
    &'static str,
    &'static str,
    fn(&str, &str, [&str; 5]) -> Vec<String>,
);

fn entries() -> Vec<Entry> {
    fn owned(args: Vec<&str>) -> Vec<String> {
        args.into_iter().map(str::to_owned).collect()
    }
    vec![
        ("check", CHECK, |c, n, l| owned(check_args(c, n, l))),
        ("debit", DEBIT, |c, n, l| owned(debit_args(c, n, l))),
        ("refund", REFUND, |c, n, l| owned(refund_args(c, n, l))),
        ("share", SHARE, |c, n, l| owned(reserve_args(c, n, "0", l))),
    ]
}

/// The keys of one limit for an entry: its state, and for a reservation
/// the count of held units beside it.
fn keys_for(entry: &str) -> Vec<&'static str> {
    if entry == "share" {
        vec!["t:{k}:l:state", "t:{k}:l:state~held"]
    } else {
        vec!["t:{k}:l:state"]
    }
}

#[test]
fn rate_limit_scripts_refuse_parameters_they_cannot_use_before_writing() {
    let server = RedisServer::start();
    for (file, name, params) in ALGORITHMS {
        for (entry, tail, args) in entries() {
            let source = script(file, tail);
            let keys = keys_for(entry);
            // Each parameter in turn set to what no limit sends.
            for index in 0..4 {
                let mut bad: Vec<&str> = NOT_WHOLE.to_vec();
                if index < 2 {
                    // A limit and a period (or an interval) are at least 1.
                    bad.push("0");
                }
                for value in bad {
                    server.command(&["FLUSHALL"]);
                    let mut limit = [*name, params[0], params[1], params[2], params[3]];
                    limit[1 + index] = value;
                    let case = format!("{name} {entry}: parameter {} = {value:?}", index + 1);
                    let args = args("1", "", limit);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let reply = eval(&server, &source, &keys, &args);
                    assert_refused(&server, &reply, &case);
                    assert_eq!(keys_and_ttls(&server), [], "{case}: wrote");
                }
            }
            // The cost (or a reservation's least) and the test clock.
            let limit = [*name, params[0], params[1], params[2], params[3]];
            for value in NOT_WHOLE.iter().chain(&["1e17", "99999999999999999999"]) {
                for (what, cost, now) in [("cost", *value, ""), ("clock", "1", *value)] {
                    server.command(&["FLUSHALL"]);
                    let case = format!("{name} {entry}: {what} = {value:?}");
                    let args = args(cost, now, limit);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let reply = eval(&server, &source, &keys, &args);
                    if entry == "share" && what == "cost" && NOT_WHOLE.iter().all(|v| v != value) {
                        // A least to grant: any u64 (it is only compared).
                        assert_every_key_expires(&server, &case);
                        continue;
                    }
                    assert_refused(&server, &reply, &case);
                    assert_eq!(keys_and_ttls(&server), [], "{case}: wrote");
                }
            }
        }
    }
}

#[test]
fn rate_limit_scripts_leave_no_key_without_an_expiry_at_the_extremes() {
    let server = RedisServer::start();
    // What a limit could send at most: every parameter u64::MAX (read as
    // "unbounded"), the largest cost, a clock far ahead; then a charge of
    // that and a refund of it, in one server.
    let extreme_clocks = ["", "9007199254740992"];
    for (file, name, params) in ALGORITHMS {
        let limits = [
            [*name, params[0], params[1], params[2], params[3]],
            [*name, U64_MAX, U64_MAX, U64_MAX, U64_MAX],
            [*name, "1", U64_MAX, U64_MAX, U64_MAX],
            [*name, U64_MAX, "1", "1", "0"],
        ];
        for limit in limits {
            for now in extreme_clocks {
                server.command(&["FLUSHALL"]);
                for (entry, tail, args) in entries() {
                    let source = script(file, tail);
                    for cost in ["1", "4294967295"] {
                        let case = format!("{name} {entry} {limit:?} cost {cost} clock {now:?}");
                        let args = args(cost, now, limit);
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        let reply = eval(&server, &source, &keys_for(entry), &args);
                        assert!(
                            !reply.starts_with('-') || reply.starts_with("-TOLLGATEARG "),
                            "{case}: {reply:?}"
                        );
                        assert_every_key_expires(&server, &case);
                    }
                }
                // A reservation held for as long as a u64 says, and a sync
                // of a huge count.
                let reserve = script(file, SHARE);
                let args = reserve_args("1", now, U64_MAX, limit);
                let case = format!("{name} reserve held for u64::MAX µs, clock {now:?}");
                let reply = eval(&server, &reserve, &keys_for("share"), &args);
                assert!(!reply.starts_with("-ERR"), "{case}: {reply:?}");
                assert_every_key_expires(&server, &case);
                // A share that lives as long as a u64 says, for a huge
                // waiting cost, among any number of instances.
                let mut sync = vec![
                    "sync",
                    now,
                    "4294967295",
                    "9",
                    "3",
                    U64_MAX,
                    "4294967295",
                    "4294967295",
                    "0",
                    "0",
                ];
                sync.extend(limit);
                let case = format!("{name} sync, clock {now:?}");
                let keys = ["t:{k}:l:state", "t:{k}:~sync", "t:{k}:l:state~share"];
                let reply = eval(&server, &reserve, &keys, &sync);
                assert!(!reply.starts_with("-ERR"), "{case}: {reply:?}");
                assert_every_key_expires(&server, &case);
            }
        }
    }
}

#[test]
fn in_flight_acquire_refuses_a_lease_or_limit_out_of_range_before_writing() {
    let server = RedisServer::start();
    let key = "t:{k}:l:inflight";
    let mut cases: Vec<(&str, &str, &str)> = vec![
        // The playground's case: a lease whose end PEXPIRE refused.
        ("1", "100000000000000000", "a:1"),
        ("1", "86400001", "a:1"),
        ("1", "0", "a:1"),
        ("0", "30000", "a:1"),
        ("4294967296", "30000", "a:1"),
        ("1", "30000", ""),
    ];
    for bad in NOT_WHOLE {
        cases.push((bad, "30000", "a:1"));
        cases.push(("1", bad, "a:1"));
    }
    for (limit, lease, id) in cases {
        server.command(&["FLUSHALL"]);
        // A slot already held, with its expiry: the refusal must keep it.
        let reply = eval(&server, ACQUIRE, &[key], &["5", "30000", "held:1"]);
        assert!(reply.starts_with("*2\r\n:1"), "{reply:?}");
        let case = format!("acquire limit {limit:?} lease {lease:?} id {id:?}");
        let reply = eval(&server, ACQUIRE, &[key], &[limit, lease, id]);
        assert_refused(&server, &reply, &case);
        let members = server.command(&["ZCARD", key]);
        assert_eq!(members, ":1\r\n", "{case}: wrote");
    }
    // Missing arguments altogether.
    server.command(&["FLUSHALL"]);
    let reply = eval(&server, ACQUIRE, &[key], &[]);
    assert_refused(&server, &reply, "acquire without arguments");
    assert_eq!(keys_and_ttls(&server), []);
    // The longest lease still works, and its set expires.
    let reply = eval(&server, ACQUIRE, &[key], &["1", "86400000", "a:1"]);
    assert!(reply.starts_with("*2\r\n:1"), "{reply:?}");
    assert_every_key_expires(&server, "a lease of a day");
}

#[test]
fn in_flight_renew_refuses_a_lease_out_of_range_before_writing() {
    let server = RedisServer::start();
    let key = "t:{k}:l:inflight";
    let mut leases = vec!["100000000000000000", "86400001", "0"];
    leases.extend_from_slice(NOT_WHOLE);
    for lease in leases {
        server.command(&["FLUSHALL"]);
        let reply = eval(&server, ACQUIRE, &[key], &["5", "30000", "a:1"]);
        assert!(reply.starts_with("*2\r\n:1"), "{reply:?}");
        let before = server.command(&["ZSCORE", key, "a:1"]);
        let case = format!("renew lease {lease:?}");
        let reply = eval(&server, RENEW, &[key], &[lease, "a:1"]);
        assert_refused(&server, &reply, &case);
        assert_eq!(
            server.command(&["ZSCORE", key, "a:1"]),
            before,
            "{case}: wrote"
        );
    }
    let reply = eval(&server, RENEW, &[key], &["30000"]);
    assert_refused(&server, &reply, "renew without an id");
    let reply = eval(&server, RENEW, &[key], &["86400000", "a:1"]);
    assert_eq!(reply, ":1\r\n");
    assert_every_key_expires(&server, "renewed for a day");
    // The count only reads.
    let reply = eval(&server, COUNT, &[key], &[]);
    assert_eq!(reply, ":1\r\n");
}

#[tokio::test]
async fn redis_slots_refuse_a_lease_above_a_day() {
    let server = RedisServer::start();
    let error = RedisSlots::builder(server.url())
        .lease(Duration::from_millis(100_000_000_000_000_000))
        .connect()
        .await
        .unwrap_err();
    assert!(error.is_config(), "{error}");
    assert!(error.to_string().contains("longer than"), "{error}");
    let slots = RedisSlots::builder(server.url())
        .lease(RedisSlots::MAX_LEASE)
        .connect()
        .await
        .unwrap();
    assert_eq!(slots.lease(), RedisSlots::MAX_LEASE);
    assert_every_key_expires(&server, "slots");
}
