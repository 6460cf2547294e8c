//! A store built with `connect_lazy` starts without Redis: its calls fail
//! at once (unavailable) until a server answers, then it decides and
//! shares as a connected store does; slots sharing its connection too. A
//! bad URL still fails at once.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::in_flight::InFlightLimit;
use tollgate::{Key, NamedLimit, Policy, Store};
use tollgate_core::Quota;
use tollgate_redis::{RedisSlots, RedisStore};
use tollgate_tests::redis::RedisServer;

/// Far longer than any pause a loaded machine gives a test.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

fn policy() -> Arc<Policy> {
    Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_minute(3),
    )]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_store_fails_at_once_until_redis_is_up_then_decides() {
    let mut server = RedisServer::not_started();
    // Until the server starts, its port takes connections and never
    // answers (as a host that is down behind a load balancer does): a
    // store that waited for a connection would wait out its 30 s connect
    // timeout; the lazy one fails at once. Holding the port also keeps
    // other tests' sockets off it.
    let silent = server.silent_listener();
    let store = RedisStore::builder(server.url())
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_lazy()
        .unwrap();
    let slots = RedisSlots::builder(server.url())
        .share_connection(&store)
        .connect_lazy()
        .unwrap();
    let (policy, key) = (policy(), Key::from("lazy"));
    let started = Instant::now();
    let error = store.check(&policy, &key, 1).resolve().await.unwrap_err();
    assert!(error.to_string().contains("not connected"), "{error}");
    let limit = InFlightLimit::new("inflight", 2).unwrap();
    assert!(slots.in_flight(&limit, &key).await.is_err());
    assert!(
        started.elapsed() < CONNECT_TIMEOUT / 3,
        "failed at once, not after the connect timeout: {:?}",
        started.elapsed()
    );
    // Closing the port resets the attempt that hangs on it.
    drop(silent);
    server.start_now();
    let up = Instant::now();
    let first = loop {
        match store.check(&policy, &key, 1).resolve().await {
            Ok(decision) => break decision,
            Err(_) => {
                // The attempts pause at most 2 s between them.
                assert!(
                    up.elapsed() < Duration::from_secs(10),
                    "not connected in 10 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(first.merged().allowed());
    assert_eq!(first.merged().remaining(), 2);
    // Charged in Redis: a second store (connected at once) sees it.
    let other = RedisStore::connect(server.url()).await.unwrap();
    let seen = other.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(seen.merged().remaining(), 2);
    assert_eq!(slots.in_flight(&limit, &key).await.unwrap(), 0);
}

#[tokio::test]
async fn a_lazy_store_still_refuses_a_bad_url_at_once() {
    let error = RedisStore::builder("redis://127.0.0.1:notaport")
        .connect_lazy()
        .unwrap_err();
    assert!(error.is_config(), "{error}");
}

#[test]
fn a_lazy_store_needs_a_runtime() {
    let error = RedisStore::builder("redis://127.0.0.1:1")
        .connect_lazy()
        .unwrap_err();
    assert!(error.to_string().contains("tokio runtime"), "{error}");
}
