//! The admin example (`examples/axum_admin.rs`) over real HTTP on
//! loopback: the admin route shows a key's state without charging it,
//! and a DELETE makes the key whole again.

#[allow(dead_code)] // its `main` is the example's, not the test's
#[path = "../examples/axum_admin.rs"]
mod example;

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The example's app, served on a free loopback port.
async fn start() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, example::app()).await });
    addr
}

/// One HTTP/1.1 request on a fresh connection: the status and the body.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    api_key: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let key = api_key.map_or(String::new(), |k| format!("x-api-key: {k}\r\n"));
    let head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n{key}connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

async fn state(addr: SocketAddr, key: &str) -> serde_json::Value {
    let (status, body) = request(addr, "GET", &format!("/admin/limits/{key}"), None).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn remaining(state: &serde_json::Value) -> Vec<u64> {
    state["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["remaining"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn the_admin_route_shows_a_key_without_charging_it_and_resets_it() {
    let addr = start().await;
    let fresh = state(addr, "k1").await;
    assert_eq!(fresh["key"], "k1");
    assert_eq!(fresh["blocked"], false);
    assert_eq!(remaining(&fresh), [5, 100]);
    assert_eq!(fresh["limits"][0]["name"], "api");
    assert_eq!(fresh["limits"][0]["limit"], 5);
    assert_eq!(fresh["limits"][0]["reset_after_ms"], 0);
    for _ in 0..2 {
        assert_eq!(request(addr, "GET", "/", Some("k1")).await.0, 200);
    }
    // Looked at ten times: nothing charged.
    for _ in 0..10 {
        assert_eq!(remaining(&state(addr, "k1").await), [3, 98]);
    }
    let seen = state(addr, "k1").await;
    let reset_ms = seen["limits"][0]["reset_after_ms"].as_u64().unwrap();
    // Two of five a minute spent: whole again in about 24 s.
    assert!((23_000..=24_000).contains(&reset_ms), "{reset_ms}");
    assert_eq!(seen["retry_after_ms"], 0);
    // The rest of the minute's requests, then refusals.
    for _ in 0..3 {
        assert_eq!(request(addr, "GET", "/", Some("k1")).await.0, 200);
    }
    assert_eq!(request(addr, "GET", "/", Some("k1")).await.0, 429);
    let spent = state(addr, "k1").await;
    assert_eq!(remaining(&spent)[0], 0);
    assert!(spent["retry_after_ms"].as_u64().unwrap() > 0);
    // Another key is untouched.
    assert_eq!(remaining(&state(addr, "k2").await), [5, 100]);
    // Reset: whole again, and the limit passes in full.
    let (status, _) = request(addr, "DELETE", "/admin/limits/k1", None).await;
    assert_eq!(status, 204);
    assert_eq!(remaining(&state(addr, "k1").await), [5, 100]);
    for _ in 0..5 {
        assert_eq!(request(addr, "GET", "/", Some("k1")).await.0, 200);
    }
    assert_eq!(request(addr, "GET", "/", Some("k1")).await.0, 429);
}

#[tokio::test]
async fn a_blocked_key_shows_its_block_and_a_reset_lifts_it() {
    let addr = start().await;
    for _ in 0..5 {
        request(addr, "GET", "/", Some("mallory")).await;
    }
    // Ten refusals within the minute: blocked for 5 minutes.
    for _ in 0..10 {
        assert_eq!(request(addr, "GET", "/", Some("mallory")).await.0, 429);
    }
    let blocked = state(addr, "mallory").await;
    assert_eq!(blocked["blocked"], true);
    let retry = blocked["retry_after_ms"].as_u64().unwrap();
    assert!((299_000..=300_000).contains(&retry), "{retry}");
    request(addr, "DELETE", "/admin/limits/mallory", None).await;
    let lifted = state(addr, "mallory").await;
    assert_eq!(lifted["blocked"], false);
    assert_eq!(request(addr, "GET", "/", Some("mallory")).await.0, 200);
}
