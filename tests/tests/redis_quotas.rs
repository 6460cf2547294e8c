//! Per-key quotas from a Redis hash, end to end with a real redis-server:
//! set a quota, see it applied from the key's first request; change it,
//! see the change within the TTL.

use http::Request;
use std::time::Duration;
use tollgate::quotas::KeyQuotas;
use tollgate::{HeaderKey, RateLimitLayer};
use tollgate_core::Quota;
use tollgate_redis::{RedisQuotas, RedisStore};
use tollgate_tests::app::{App, behind};
use tollgate_tests::redis::RedisServer;
use tower::ServiceExt;

const TTL: Duration = Duration::from_millis(300);
/// Long enough for a background HGET on loopback to come back.
const LOOKUP: Duration = Duration::from_millis(100);

/// Sends one request for `user`: its status and `RateLimit-Policy`.
async fn send(app: &App, user: &str) -> (u16, String) {
    let request = Request::builder().header("x-user", user).body(()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let policy = response
        .headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (response.status().as_u16(), policy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_from_a_redis_hash_apply_and_changes_apply_within_the_ttl() {
    let server = RedisServer::start();
    let store = RedisStore::connect(server.url()).await.unwrap();
    let source = RedisQuotas::new(&store);
    assert_eq!(source.hash(), "tollgate:quotas");
    let quotas = KeyQuotas::new(source).ttl(TTL);
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(100))
        .key(HeaderKey::new("x-user"))
        .store(store)
        .quota_source(quotas.clone())
        .build();
    let app = behind(layer);

    server.command(&["HSET", "tollgate:quotas", "user:241531", "3/min"]);
    server.command(&["HSET", "tollgate:quotas", "user:internal", "unlimited"]);
    server.command(&["HSET", "tollgate:quotas", "user:typo", "five a minute"]);

    // A key's first request waits for its quota, fetched from the hash:
    // exactly 3 pass.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let (status, policy) = send(&app, "user:241531").await;
        assert_eq!(policy, "\"api\";q=3;w=60");
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);

    // Raise it; the next request after the TTL starts the refresh.
    server.command(&["HSET", "tollgate:quotas", "user:241531", "10/min;1000/h"]);
    tokio::time::sleep(TTL).await;
    send(&app, "user:241531").await;
    tokio::time::sleep(LOOKUP).await;
    // The 3 used of 3 a minute came along: 7 of the new 10 left, not a
    // state read under the wrong rate.
    let (status, policy) = send(&app, "user:241531").await;
    assert_eq!(status, 200);
    assert_eq!(policy, "\"api\";q=10;w=60, \"api-2\";q=1000;w=3600");

    // "unlimited" is never limited; a field that does not parse is an
    // error, counted, and the key keeps the default limits.
    for _ in 0..120 {
        assert_eq!(send(&app, "user:internal").await.0, 200);
    }
    assert_eq!(send(&app, "user:typo").await.1, "\"api\";q=100;w=60");
    assert_eq!(quotas.errors(), 1);
}

/// `RedisQuotas::set` reaches every instance's cache within about a
/// second (the feed they follow), whatever the TTL, and the key's usage
/// comes along: two instances with an hour's TTL, a key that used 2 of 5
/// a minute moved to 100 a minute, the next request on either shows the
/// new quota with 97 (then 96) left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_set_through_redis_reaches_every_instance_within_a_second() {
    use tollgate::Key;
    use tollgate::quotas::QuotaAnswer;
    let server = RedisServer::start();
    let instance = async || {
        let store = RedisStore::connect(server.url()).await.unwrap();
        let source = RedisQuotas::new(&store);
        let quotas = KeyQuotas::new(source.clone()).ttl(Duration::from_secs(3600));
        let layer = RateLimitLayer::builder()
            .quota("api", Quota::per_minute(10))
            .key(HeaderKey::new("x-user"))
            .store(store)
            .quota_source(quotas)
            .build();
        (behind(layer), source)
    };
    let ((one, source), (two, _)) = (instance().await, instance().await);
    let key = Key::from("tenant");
    source
        .set(&key, &"5/min".parse::<QuotaAnswer>().unwrap())
        .await
        .unwrap();
    assert_eq!(send(&one, "tenant").await.1, "\"api\";q=5;w=60");
    assert_eq!(send(&two, "tenant").await.1, "\"api\";q=5;w=60");

    source
        .set(&key, &"100/min".parse::<QuotaAnswer>().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let remaining = async |app: &App| {
        let request = Request::builder()
            .header("x-user", "tenant")
            .body(())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let field = response.headers()["ratelimit"].to_str().unwrap().to_owned();
        let policy = response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        (policy, field)
    };
    let (policy, field) = remaining(&one).await;
    assert_eq!(policy, "\"api\";q=100;w=60");
    assert!(field.starts_with("\"api\";r=97;"), "{field}");
    let (policy, field) = remaining(&two).await;
    assert_eq!(policy, "\"api\";q=100;w=60");
    assert!(field.starts_with("\"api\";r=96;"), "carried once: {field}");
}
