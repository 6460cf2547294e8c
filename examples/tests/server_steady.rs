//! Issue 48: local-first exact mode admits what the algorithm allows at a
//! steady pace, through the playground `server`: four servers sharing one
//! Redis with `--local exact`, one request a second each (4 a second in
//! all) for 20 s on 100/min. The 80 requests are all inside the burst, so
//! every one passes, as the plain Redis store admits them.

mod playground;

use playground::{Server, request};
use std::time::{Duration, Instant};

#[test]
fn four_exact_servers_admit_every_request_at_a_steady_pace() {
    let redis = tollgate_tests::redis::RedisServer::start();
    let url = redis.url();
    let args = [
        "--store",
        &url,
        "--local",
        "exact",
        "--limit",
        "api=100/min",
        "--key",
        "global",
        "--on-store-error",
        "closed",
        "--store-timeout-ms",
        "5000",
    ];
    let servers: Vec<Server> = (0..4).map(|_| Server::start(&args)).collect();
    // Paced from one start, a request each 250 ms, to the servers in turn;
    // a late request only makes the next ones closer together (none is
    // timed).
    let start = Instant::now();
    let mut statuses = Vec::new();
    for i in 0..80u32 {
        let due = start + Duration::from_millis(250) * i;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        statuses.push(request(&servers[i as usize % 4].addr, "/", &[]).status);
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    println!("four exact servers at 4/s for 20 s on 100/min: {admitted} of 80 admitted");
    assert_eq!(admitted, 80, "{statuses:?}");
}
