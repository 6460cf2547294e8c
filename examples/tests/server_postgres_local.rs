//! Four `server` playgrounds on one PostgreSQL database, each deciding in
//! its own memory through the local-first store (`--local`, issue 51):
//! 400 requests on one key of 100 an hour, sent to the four at once from
//! four threads. Exact mode (reservations) admits exactly the limit;
//! periodic mode (shares, synchronised every 100 ms) at most the limit and
//! one unit per server (rounding up the shares). A GCRA refills a unit
//! every 36 s: what refilled while the test ran may pass too.

mod playground;

use playground::{Server, request};
use std::time::Instant;

/// Four servers started with `args` over the database at `url`, 100
/// requests to each from a thread of its own: the statuses, and how many
/// units refilled meanwhile (one per 36 s).
fn four_servers(url: &str, args: &[&str]) -> (Vec<u16>, u64, Vec<String>) {
    let args = [&["--store", url][..], args].concat();
    let servers: Vec<Server> = (0..4).map(|_| Server::start(&args)).collect();
    let started = Instant::now();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let threads: Vec<_> = servers
            .iter()
            .map(|server| {
                scope.spawn(move || {
                    (0..100)
                        .map(|_| request(&server.addr, "/", &[]).status)
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let refilled = started.elapsed().as_secs() / 36;
    let logs = servers.iter().flat_map(Server::logs).collect();
    (statuses, refilled, logs)
}

/// The flags every run shares: one global key on 100 an hour, failing
/// closed (a store error lets nothing through uncounted) with seconds for
/// the database on a loaded machine.
const LIMIT: [&str; 8] = [
    "--limit",
    "api=100/h",
    "--key",
    "global",
    "--on-store-error",
    "closed",
    "--store-timeout-ms",
    "5000",
];

fn count(statuses: &[u16], status: u16) -> u64 {
    statuses.iter().filter(|s| **s == status).count() as u64
}

#[test]
fn four_exact_servers_over_postgres_admit_exactly_the_limit() {
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let args = [&LIMIT[..], &["--local", "exact"]].concat();
    let (statuses, refilled, logs) = four_servers(&postgres.url(), &args);
    let admitted = count(&statuses, 200);
    println!("exact: {admitted} admitted of 400 over four servers ({refilled} refilled)");
    assert!(
        (100..=100 + refilled).contains(&admitted),
        "{admitted} admitted, {refilled} refilled; the logs: {logs:?}"
    );
    // Every other request refused by the limit, none by a store error.
    assert_eq!(count(&statuses, 429), 400 - admitted, "{logs:?}");
}

#[test]
fn four_periodic_servers_over_postgres_admit_at_most_the_limit_and_one_each() {
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let args = [&LIMIT[..], &["--local", "periodic=100"]].concat();
    let (statuses, refilled, logs) = four_servers(&postgres.url(), &args);
    let admitted = count(&statuses, 200);
    println!("periodic: {admitted} admitted of 400 over four servers ({refilled} refilled)");
    assert!(
        admitted <= 100 + 4 + refilled,
        "{admitted} admitted, {refilled} refilled; the logs: {logs:?}"
    );
    // Shares move to the traffic: most of the limit is admitted, not a
    // server's part of it.
    assert!(admitted >= 50, "{admitted} admitted; the logs: {logs:?}");
    assert_eq!(count(&statuses, 429), 400 - admitted, "{logs:?}");
}
