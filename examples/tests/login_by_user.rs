//! The login-by-user recipe (`examples/login_by_user.rs`) over real HTTP
//! on loopback: 3 attempts a minute per user name read from the body,
//! the body still reaching the handler; another user is untouched; a
//! body without a user name is 400, one over 16 KiB is 413.

#[allow(dead_code)] // its `main` is the example's, not the test's
#[path = "../examples/login_by_user.rs"]
mod example;

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn start() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, example::app()).await });
    addr
}

/// `POST /login` with `body`: the status and the body of the answer.
async fn login(addr: SocketAddr, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /login HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

#[tokio::test]
async fn three_logins_a_minute_per_user_named_in_the_body() {
    let addr = start().await;
    let alice = r#"{"user": "alice", "password": "x"}"#;
    for _ in 0..2 {
        assert_eq!(login(addr, alice).await, (200, "welcome alice\n".into()));
    }
    // Another spelling of the same name: the same limit.
    let shouted = r#"{"user": " ALICE ", "password": "x"}"#;
    assert_eq!(login(addr, shouted).await.0, 200);
    assert_eq!(login(addr, alice).await.0, 429);
    // Another user name: a limit of its own.
    let bob = r#"{"user": "bob", "password": "x"}"#;
    assert_eq!(login(addr, bob).await, (200, "welcome bob\n".into()));
    // No user name: refused before the limit; a huge body: not read.
    assert_eq!(login(addr, r#"{"password": "x"}"#).await.0, 400);
    let huge = format!(
        r#"{{"user": "carol", "password": "{}"}}"#,
        "x".repeat(20_000)
    );
    assert_eq!(login(addr, &huge).await.0, 413);
    // The huge body counted nothing for carol: three attempts left.
    let carol = r#"{"user": "carol", "password": "x"}"#;
    for _ in 0..3 {
        assert_eq!(login(addr, carol).await.0, 200);
    }
    assert_eq!(login(addr, carol).await.0, 429);
}
