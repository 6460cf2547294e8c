//! HTTP over loopback: requests per second of a hello-world axum server
//! with tollgate, with tower_governor, and with no layer, driven by a small
//! load generator in this program (`wrk` is not assumed to be installed).
//!
//! The server runs on a current-thread tokio runtime in a thread of its
//! own, the load generator on another: on a 2-core machine each gets one
//! core, the same for every variant. The generator keeps `CONNECTIONS`
//! keep-alive HTTP/1.1 connections busy, one request in flight on each (no
//! pipelining, as browsers and most clients do), reads every response
//! whole (status line, headers, `Content-Length` body) and counts it. Every
//! connection comes from 127.0.0.1, so every request has the same key: the
//! allowed quota (1,000,000,000/s) is never exhausted, the rejected one (1
//! per hour) is spent by the untimed first requests.
//!
//! The routers are those of the in-process layer scenario; the server
//! hands axum the peer address (`into_make_service_with_connect_info`), as
//! both layers need for keying by IP. Each measurement starts a fresh
//! server, so no limiter state carries over from one to the next.

use crate::measure::{Settings, Side, alternate};
use crate::report::{Better, Outcome, median};
use crate::scenario::layer::{Path, Variant, expected_status, router};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::headers::HeaderStyle;

/// Keep-alive connections the generator keeps busy.
const CONNECTIONS: usize = 32;
/// What every connection sends, again and again.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// Runs the scenario.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let seconds = settings.pick(2.0, 0.4);
    let duration = Duration::from_secs_f64(seconds);
    let rounds = settings.pick(5, 3);
    let cases = [
        (Variant::NoLayer, Path::Allowed),
        (Variant::Tollgate(HeaderStyle::NONE), Path::Allowed),
        (Variant::TowerGovernor(false), Path::Allowed),
        (Variant::Tollgate(HeaderStyle::default()), Path::Allowed),
        (Variant::Tollgate(HeaderStyle::default()), Path::Rejected),
        (Variant::TowerGovernor(false), Path::Rejected),
    ];
    let mut closures: Vec<Box<dyn FnMut() -> f64>> = cases
        .iter()
        .map(|&(variant, path)| {
            Box::new(move || serve_and_load(variant, path, duration)) as Box<dyn FnMut() -> f64>
        })
        .collect();
    let mut sides: Vec<Side<'_>> = closures.iter_mut().map(|c| &mut **c as Side<'_>).collect();
    let figures = alternate(rounds, &mut sides);
    let m = |i: usize| median(&figures[i]);
    vec![
        Outcome::new(
            "http: allowed, no headers",
            m(1),
            m(2),
            "requests/s",
            Better::Higher,
        )
        .against("tower_governor"),
        Outcome::new(
            "http: allowed, tollgate (IETF headers) vs no layer",
            m(3),
            m(0),
            "requests/s",
            Better::Higher,
        )
        .against("no layer"),
        Outcome::new("http: rejected", m(4), m(5), "requests/s", Better::Higher)
            .against("tower_governor"),
    ]
}

/// Starts a server for `variant` on `path`, loads it for `duration`,
/// stops it; requests per second.
fn serve_and_load(variant: Variant, path: Path, duration: Duration) -> f64 {
    let expected = expected_status(variant, path).as_u16();
    serve_app(
        move || async move { router(variant, path) },
        expected,
        duration,
    )
}

/// Starts a server for the router `make` builds on the server's own
/// current-thread runtime (a store that connects to a database connects
/// there, and its background tasks run there), loads it for `duration`
/// (every timed response must have status `expected`), stops it;
/// requests per second.
pub fn serve_app<F, Fut>(make: F, expected: u16, duration: Duration) -> f64
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = axum::Router>,
{
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async move {
            let app = make()
                .await
                .into_make_service_with_connect_info::<SocketAddr>();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind a loopback port");
            address_tx
                .send(listener.local_addr().expect("a local address"))
                .expect("the load generator waits");
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .await
                .expect("the server runs");
        });
    });
    let address = address_rx.recv().expect("the server starts");
    let rate = load(address, duration, expected);
    let _ = stop_tx.send(());
    server.join().expect("the server thread ends");
    rate
}

/// Drives `CONNECTIONS` connections to `address` for `duration`; requests
/// per second. Every timed response must have status `expected`.
fn load(address: SocketAddr, duration: Duration, expected: u16) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let done = Arc::new(AtomicU64::new(0));
        let wrong = Arc::new(AtomicU64::new(0));
        // Connect and send two untimed requests on each connection: the
        // rejected rows' quota is spent here, and every socket is warm.
        let mut streams = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let mut stream = connect(address).await;
            let mut buf = Vec::with_capacity(4096);
            for _ in 0..2 {
                stream.write_all(REQUEST).await.expect("send a request");
                read_within(&mut stream, &mut buf)
                    .await
                    .expect("read a response")
                    .expect("a response before the connection closes");
            }
            streams.push(stream);
        }
        let start = Instant::now();
        let deadline = start + duration;
        let mut tasks = tokio::task::JoinSet::new();
        for mut stream in streams {
            let (done, wrong) = (done.clone(), wrong.clone());
            tasks.spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                while Instant::now() < deadline {
                    if stream.write_all(REQUEST).await.is_err() {
                        // The server closed the connection: open another.
                        stream = connect(address).await;
                        continue;
                    }
                    match read_within(&mut stream, &mut buf).await {
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            panic!("the server stalled: {e}")
                        }
                        Ok(Some(head)) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            if head.status != expected {
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                            if head.close {
                                stream = connect(address).await;
                            }
                        }
                        // The server closed the connection: open another.
                        Ok(None) | Err(_) => stream = connect(address).await,
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let rate = done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
        let wrong = wrong.load(Ordering::Relaxed);
        assert_eq!(wrong, 0, "{wrong} responses did not have status {expected}");
        rate
    })
}

/// How long a response may take before the run stops: a stalled server
/// ends the benchmark with a message instead of hanging it.
const STALL: Duration = Duration::from_secs(5);

/// [`read_response`], failing with `TimedOut` after [`STALL`].
async fn read_within(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Head>> {
    tokio::time::timeout(STALL, read_response(stream, buf))
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no response within {STALL:?}"),
            ))
        })
}

/// A loopback connection with Nagle's algorithm off, as load generators do.
async fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address)
        .await
        .expect("connect to the server");
    stream.set_nodelay(true).expect("set TCP_NODELAY");
    stream
}

/// What the generator needs from a response's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The body's length (`Content-Length`, 0 when absent).
    pub content_length: usize,
    /// Whether the server will close the connection after this response.
    pub close: bool,
}

/// Parses a response head (the bytes before the blank line). `None` when
/// it is not HTTP/1.x. Chunked bodies are not expected from these handlers
/// (fixed strings) and are refused rather than misread.
pub fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    if !status_line.starts_with("HTTP/1.") {
        return None;
    }
    let status = status_line.get(9..12)?.parse().ok()?;
    let mut parsed = Head {
        status,
        content_length: 0,
        close: false,
    };
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            parsed.content_length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("connection") {
            parsed.close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
    }
    Some(parsed)
}

/// Reads one whole response into `buf`; `Ok(None)` if the connection
/// closed first.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Head>> {
    buf.clear();
    let mut searched = 0;
    loop {
        if let Some(at) = buf[searched..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = searched + at;
            let head = parse_head(&buf[..end]).unwrap_or_else(|| {
                panic!(
                    "an HTTP/1.1 response with a Content-Length: {:?}",
                    String::from_utf8_lossy(&buf[..end])
                )
            });
            let total = end + 4 + head.content_length;
            while buf.len() < total {
                if stream.read_buf(buf).await? == 0 {
                    return Ok(None);
                }
            }
            return Ok(Some(head));
        }
        // The blank line may straddle two reads: search again from 3 back.
        searched = buf.len().saturating_sub(3);
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_hyper_response_head() {
        let head = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\n\
                     Content-Length: 33\r\nretry-after: 3599\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT";
        assert_eq!(
            parse_head(head),
            Some(Head {
                status: 429,
                content_length: 33,
                close: false
            })
        );
    }

    #[test]
    fn notices_a_closing_connection_and_a_missing_length() {
        let head = b"HTTP/1.1 200 OK\r\nConnection: close";
        assert_eq!(
            parse_head(head),
            Some(Head {
                status: 200,
                content_length: 0,
                close: true
            })
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(parse_head(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked"),
            None
        );
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: lots"), None);
    }
}
