//! Configuration mistakes are caught when the store is built, with errors
//! that say what to do; and a password given in a URL never reaches an
//! error, a `Debug` output or a log line.

use http::{Request, StatusCode};
use std::time::Duration;
use tollgate::{GlobalKey, RateLimitLayer};
use tollgate_core::Quota;
use tollgate_redis::RedisStore;
use tollgate_tests::app::behind;
use tollgate_tests::logs::Captured;
use tollgate_tests::redis::{RedisCluster, RedisServer, free_port};
use tower::ServiceExt;

const SECRET: &str = "s3cret-hunter2";

#[tokio::test]
async fn a_one_server_url_at_a_cluster_node_is_refused_with_the_url_to_use() {
    let cluster = RedisCluster::start(3);
    let node = &cluster.nodes()[0];
    let error = RedisStore::connect(node.url()).await.unwrap_err();
    assert!(error.is_config(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("use redis+cluster://127.0.0.1:{}", node.port())),
        "{message}"
    );
    // The cluster URL of the same node works.
    let url = format!("redis+cluster://127.0.0.1:{}", node.port());
    RedisStore::connect(url)
        .await
        .expect("a cluster URL connects");
}

#[tokio::test]
async fn malformed_urls_are_config_errors() {
    for url in [
        "redis://127.0.0.1:notaport",
        "http://127.0.0.1:6379",
        "redis+cluster://",
        "redis+cluster://127.0.0.1:1,127.0.0.1:port",
    ] {
        let error = RedisStore::connect(url).await.unwrap_err();
        assert!(error.is_config(), "{url}: {error}");
        assert!(tollgate_redis::check_url(url).is_err(), "{url}");
    }
}

/// Everything a failing store shows a person: its `Display`, its `Debug`,
/// and its sources'.
fn shown(error: &dyn std::error::Error) -> String {
    let mut text = format!("{error} {error:?}");
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(&format!(" {inner} {inner:?}"));
        source = inner.source();
    }
    text
}

#[tokio::test]
async fn a_password_in_the_url_never_reaches_errors_debug_output_or_logs() {
    let (logs, _guard) = Captured::install();
    // Unreachable, malformed, and a wrong password for a real server.
    let unreachable = format!("redis://:{SECRET}@127.0.0.1:{}", free_port());
    let malformed = format!("redis://:{SECRET}@127.0.0.1:port");
    let server = RedisServer::start();
    let wrong = format!("redis://:{SECRET}@127.0.0.1:{}", server.port());
    server.command(&["CONFIG", "SET", "requirepass", "another-password"]);
    let cluster = format!("redis+cluster://:{SECRET}@127.0.0.1:{}", free_port());
    for url in [&unreachable, &malformed, &wrong, &cluster] {
        let builder = RedisStore::builder(url.as_str()).connect_timeout(Duration::from_millis(300));
        let debug = format!("{builder:?}");
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(debug.contains("***"), "{debug}");
        let error = builder.connect().await.unwrap_err();
        let text = shown(&error);
        assert!(!text.contains(SECRET), "{url}: {text}");
    }

    // A working store whose server then goes away: the layer logs each
    // failure, and none of those lines holds the password.
    let mut server = RedisServer::start();
    server.command(&["CONFIG", "SET", "requirepass", SECRET]);
    let store = RedisStore::builder(format!("redis://:{SECRET}@127.0.0.1:{}", server.port()))
        .reconnect_max_delay(Duration::from_millis(50))
        .connect()
        .await
        .expect("the right password connects");
    assert!(!format!("{store:?}").contains(SECRET));
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_second(100))
        .key(GlobalKey)
        .store(store)
        .build();
    let app = behind(layer);
    let send = || async {
        let response = app.clone().oneshot(Request::new(())).await.unwrap();
        response.status()
    };
    assert_eq!(send().await, StatusCode::OK);
    server.kill();
    for _ in 0..5 {
        // Failing open: let through, and logged.
        assert_eq!(send().await, StatusCode::OK);
    }
    let lines = logs.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("WARN") || l.contains("ERROR")),
        "the failures were logged: {lines:#?}"
    );
    for line in &lines {
        assert!(!line.contains(SECRET), "{line}");
    }
}
