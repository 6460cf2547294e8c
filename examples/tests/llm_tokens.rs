//! The LLM-style example (`examples/llm_tokens.rs`) over real HTTP on
//! loopback: completions of 500 streamed tokens against 1,000 tokens a
//! minute — two pass, the third is refused with a `Retry-After` and the
//! headers' `r=0`; another key is untouched; a completion larger than
//! the whole minute passes once (the key was not in debt) and leaves the
//! key in debt.

#[allow(dead_code)] // its `main` is the example's, not the test's
#[path = "../examples/llm_tokens.rs"]
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

/// `GET /v1/complete?max_tokens=N` as `key`: the status, the head
/// (lower-cased) and the body.
async fn complete(addr: SocketAddr, key: &str, tokens: u32) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /v1/complete?max_tokens={tokens} HTTP/1.1\r\nhost: test\r\nx-api-key: {key}\r\n\
         connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn the_third_completion_of_500_tokens_is_refused() {
    let addr = start().await;
    for request in 1..=2 {
        let (status, head, body) = complete(addr, "k1", 500).await;
        assert_eq!(status, 200, "request {request}: {head}");
        assert!(body.contains("token500 "), "the whole stream: {body}");
    }
    let (status, head, _) = complete(addr, "k1", 500).await;
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after: "), "{head}");
    assert!(head.contains("\"tokens\";r=0"), "{head}");
    // Another key has its own minute.
    assert_eq!(complete(addr, "k2", 500).await.0, 200);
}

#[tokio::test]
async fn a_completion_larger_than_the_minute_leaves_the_key_in_debt() {
    let addr = start().await;
    let (status, _, body) = complete(addr, "big", 2_500).await;
    assert_eq!(status, 200);
    assert!(body.contains("token2500 "));
    let (status, head, _) = complete(addr, "big", 1).await;
    assert_eq!(status, 429, "{head}");
    // 2,500 tokens at 1,000 a minute: about 90 s of debt before the next
    // token (GCRA, the layer's default, pays it off at the rate).
    let retry: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!((85..=91).contains(&retry), "retry after {retry} s");
}
