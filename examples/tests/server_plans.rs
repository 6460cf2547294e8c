//! Issue 48: plan changes carry a key's usage exactly on every store the
//! playground `server` runs, the local-first store included. Each store
//! config runs its own server, on its own thread, through the same
//! sequence of plan changes written to its `--quota-file`, and its
//! figures are held to the memory store's.

mod playground;

use playground::{Response, Server, request};
use std::path::Path;
use std::time::Duration;

/// What one store config showed.
#[derive(Debug)]
struct Seen {
    /// `r` after the request that follows each flip.
    flips: Vec<u64>,
    /// The downgraded key's refusal: its `Retry-After`.
    retry: u64,
    /// `r` after the request that follows the upgrade back.
    after_debt: u64,
}

fn get(server: &Server, key: &str) -> Response {
    request(&server.addr, "/", &[("x-api-key", key)])
}

/// The `r` of the response's `RateLimit` field.
fn remaining(response: &Response) -> u64 {
    let field = response.header("ratelimit").unwrap_or_default();
    field
        .split(";r=")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no r in {field:?}"))
}

/// Writes `plans` to `file` with key `probe` at `probe`/h, then waits for
/// the server to follow it (it reads the file every 250 ms; a changed plan
/// applies to the key's next request): until `probe`'s responses show its
/// new quota (the file is read whole, so the other keys' plans are new
/// too), at most 200 tries 50 ms apart; then the figures judge.
fn plans(server: &Server, file: &Path, plans: &str, probe: u64) {
    std::fs::write(file, format!("{plans}probe={probe}/h\n")).unwrap();
    let expected = format!("q={probe};");
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(50));
        let response = get(server, "probe");
        let policy = response.header("ratelimit-policy").unwrap_or_default();
        if policy.contains(&expected) {
            return;
        }
    }
}

/// The sequence, on a server started with `args`: key `flip` used 5 of
/// 100/h, then moved 100/h ↔ 200/h six times, one request after each;
/// key `debt` used 110 of 200/h, moved to 100/h (a request refused, in
/// debt), then back to 200/h (one request).
fn sequence(name: &str, args: &[&str]) -> Seen {
    let dir = std::env::temp_dir().join(format!("tollgate-flips-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.txt"));
    std::fs::write(&file, "flip=100/h\ndebt=200/h\n").unwrap();
    let path = file.to_str().unwrap();
    let mut all = vec![
        "--quota-file",
        path,
        "--key",
        "header:x-api-key",
        "--on-store-error",
        "closed",
    ];
    all.extend_from_slice(args);
    let server = Server::start(&all);
    for _ in 0..5 {
        assert_eq!(get(&server, "flip").status, 200, "{name}");
    }
    for _ in 0..110 {
        assert_eq!(get(&server, "debt").status, 200, "{name}");
    }
    let (mut flips, mut retry, mut after_debt) = (Vec::new(), 0, 0);
    for i in 0..6 {
        // `debt` moves the other way: down first, then back up.
        let (flip, debt) = if i % 2 == 0 {
            ("200/h", "100/h")
        } else {
            ("100/h", "200/h")
        };
        let probe = 1_000 + i;
        plans(
            &server,
            &file,
            &format!("flip={flip}\ndebt={debt}\n"),
            probe,
        );
        let response = get(&server, "flip");
        assert_eq!(response.status, 200, "{name}");
        flips.push(remaining(&response));
        if i == 0 {
            let refused = get(&server, "debt");
            assert_eq!(refused.status, 429, "{name}: in debt");
            retry = refused
                .header("retry-after")
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("{name}: no Retry-After"));
        } else if i == 1 {
            let after = get(&server, "debt");
            assert_eq!(after.status, 200, "{name}: upgraded");
            after_debt = remaining(&after);
        }
    }
    let _ = std::fs::remove_file(&file);
    Seen {
        flips,
        retry,
        after_debt,
    }
}

/// Six flips 100/h ↔ 200/h with one request after each: the memory store
/// says what is exact (5 used, then one more after each flip: 194, 93,
/// 192, 91, 190, 89), and the Redis store, PostgreSQL and the local-first
/// store in exact and periodic mode say it within one unit. A key that
/// used 110 of 200/h, moved to 100/h, is in debt: refused with the
/// `Retry-After` the memory store gives (GCRA at 100/h gives a unit back
/// every 36 s: within one unit's time of it), and moved back to 200/h it
/// keeps the debt (110 used, 89 left after its next request), on every
/// store.
#[test]
fn plan_flips_carry_usage_exactly_on_every_store() {
    // A Redis server each: the playground has no key prefix flag.
    let redis: Vec<_> = (0..3)
        .map(|_| tollgate_tests::redis::RedisServer::start())
        .collect();
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let urls: Vec<String> = redis.iter().map(|r| r.url()).collect();
    let postgres_url = postgres.url();
    let configs: Vec<(&str, Vec<&str>)> = vec![
        ("memory", vec![]),
        ("redis", vec!["--store", &urls[0]]),
        ("local-exact", vec!["--store", &urls[1], "--local", "exact"]),
        (
            "local-periodic",
            vec!["--store", &urls[2], "--local", "periodic=100"],
        ),
        ("postgres", vec!["--store", &postgres_url]),
    ];
    let seen: Vec<(&str, Seen)> = std::thread::scope(|scope| {
        let threads: Vec<_> = configs
            .iter()
            .map(|(name, args)| scope.spawn(move || (*name, sequence(name, args))))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (name, seen) in &seen {
        println!("{name}: {seen:?}");
    }
    let memory = &seen[0].1;
    assert_eq!(
        memory.flips,
        [194, 93, 192, 91, 190, 89],
        "the memory store"
    );
    assert_eq!(memory.after_debt, 89, "the memory store keeps the debt");
    let mut wrong = Vec::new();
    for (name, seen) in &seen[1..] {
        for (flip, (got, exact)) in seen.flips.iter().zip(&memory.flips).enumerate() {
            if got.abs_diff(*exact) > 1 {
                wrong.push(format!("{name}, flip {}: r={got}, exact {exact}", flip + 1));
            }
        }
        if seen.retry.abs_diff(memory.retry) > 36 {
            wrong.push(format!(
                "{name}: Retry-After {} after the downgrade, the memory store's {}",
                seen.retry, memory.retry
            ));
        }
        if seen.after_debt.abs_diff(memory.after_debt) > 1 {
            wrong.push(format!(
                "{name}: r={} after the downgrade and upgrade, exact {}",
                seen.after_debt, memory.after_debt
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A key's plan changed in the quota file while no server ran: the next
/// server reads the key's usage under its new plan as a live change
/// carries it (8 used of 10 an hour; restarted at 20: 11 left after the
/// next request; at 5: refused), on the shared stores.
#[test]
fn a_plan_changed_across_a_restart_keeps_the_keys_usage() {
    let redis = tollgate_tests::redis::RedisServer::start();
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (redis_url, postgres_url) = (redis.url(), postgres.url());
    let stores = [
        vec!["--store", &redis_url],
        vec!["--store", &redis_url, "--local", "exact"],
        vec!["--store", &redis_url, "--local", "periodic=100"],
        vec!["--store", &postgres_url],
    ];
    let dir = std::env::temp_dir().join(format!("tollgate-restarts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (n, store) in stores.iter().enumerate() {
        let key = format!("restarted-{n}");
        let file = dir.join(format!("{n}.txt"));
        let start = |plan: &str| {
            std::fs::write(&file, format!("{key}={plan}\n")).unwrap();
            let mut args = vec!["--quota-file", file.to_str().unwrap()];
            args.extend_from_slice(&["--key", "header:x-api-key"]);
            args.extend(store);
            Server::start(&args)
        };
        let server = start("10/h");
        for _ in 0..8 {
            assert_eq!(get(&server, &key).status, 200, "{store:?}");
        }
        // Periodic mode reports every 100 ms: stopped after a report.
        std::thread::sleep(Duration::from_millis(300));
        drop(server);
        let server = start("20/h");
        let admitted = get(&server, &key);
        assert_eq!(admitted.status, 200, "{store:?}");
        assert_eq!(remaining(&admitted), 11, "{store:?}: 9 used of 20");
        std::thread::sleep(Duration::from_millis(300));
        drop(server);
        let server = start("5/h");
        assert_eq!(get(&server, &key).status, 429, "{store:?}: 9 used of 5");
        drop(server);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
