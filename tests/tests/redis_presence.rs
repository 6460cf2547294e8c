//! The Redis store's presence beat against a real server: stores say at
//! once that they share it, are counted and ranked, keep their count
//! through a server restarted empty, and a lazy store counts by the
//! operator's number until Redis answers.

use std::time::{Duration, Instant};
use tollgate::store::{Presence, Share};
use tollgate_redis::RedisStore;
use tollgate_tests::redis::RedisServer;

/// Waits (bounded) until `ready` holds of every presence; their shares.
async fn until(presences: &[Presence], ready: impl Fn(&Share) -> bool) -> Vec<Share> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shares: Vec<Share> = presences.iter().map(Presence::share).collect();
        if shares.iter().all(&ready) {
            return shares;
        }
        assert!(Instant::now() < deadline, "{shares:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_are_counted_ranked_and_kept_through_a_restart() {
    let mut server = RedisServer::start();
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(RedisStore::connect(server.url()).await.unwrap());
    }
    let presences: Vec<Presence> = stores.iter().map(RedisStore::presence).collect();
    let shares = until(&presences, |s| s.instances() == 3 && s.rank().is_some()).await;
    let mut ranks: Vec<u32> = shares.iter().filter_map(Share::rank).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1, 2]);
    // Restarted empty: every word is gone. Each store's next beat adds
    // it anew and keeps the count of 3 (unranked) until the one after.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server
        .command(&["ZCARD", "tollgate:instances"])
        .starts_with(":3")
    {
        for presence in &presences {
            assert_eq!(presence.instances(), 3, "the count dropped");
        }
        assert!(Instant::now() < deadline, "the stores never came back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    until(&presences, |s| s.instances() == 3 && s.rank().is_some()).await;
    // A store dropped stops saying so: the others count 2 within 5 s
    // of its last word.
    drop(stores.pop());
    until(&presences[..2], |s| s.instances() == 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_store_counts_the_operators_number_until_redis_answers() {
    let mut server = RedisServer::not_started();
    let store = RedisStore::builder(server.url())
        .instances(4)
        .connect_lazy()
        .unwrap();
    let presence = store.presence();
    assert_eq!(presence.share(), Share::of(4));
    assert_eq!(store.instances(), 4);
    server.start_now();
    // Its first beat, alone: no fewer than 4, unranked; the next, 1.
    until(std::slice::from_ref(&presence), |s| {
        *s == Share::ranked(1, 0)
    })
    .await;
}
