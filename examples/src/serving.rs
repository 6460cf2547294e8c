//! Serving an axum app with the limits that belong to the server, not to a
//! rate limiter: a header-read timeout, an idle timeout and a cap on open
//! connections.
//!
//! A rate limiter sees a request once its head has arrived. A slowloris
//! client never finishes its head (or its body, or leaves a keep-alive
//! connection idle): it holds a connection, a task and a file descriptor
//! without ever becoming a request to count, and a few thousand such
//! connections lock every other client out. Only the server can stop it, by
//! closing connections that are too slow or idle, and by refusing to hold
//! more than it can afford. `axum::serve` sets neither; [`serve`] does, on
//! hyper's HTTP/1 connection.
//!
//! ```no_run
//! use tollgate_examples::serving::{ServeLimits, serve};
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! serve(listener, app, ServeLimits::default()).await
//! # }
//! ```

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt;

/// What a connection may cost the server.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// How long a client may take to send a request's head, from the first
    /// moment the server waits for it (so also how long a keep-alive
    /// connection may sit between requests). Default 10 s.
    pub header_timeout: Duration,
    /// How long a connection may go without a byte read or written, at any
    /// stage (a body sent one byte a minute included). Default 60 s.
    pub idle_timeout: Duration,
    /// The most connections open at once; beyond it the server stops
    /// accepting until one closes, and new ones wait in the kernel's
    /// backlog. Default 10,000.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// Serves `app` on `listener` over HTTP/1.1 within `limits`, with each
/// request's peer address as axum's `ConnectInfo<SocketAddr>` (what
/// `ClientIp` keys on). Runs until the listener fails for good.
pub async fn serve(listener: TcpListener, app: Router, limits: ServeLimits) -> io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // Taken before accepting: at the cap, connections wait unaccepted.
        let Ok(permit) = open.clone().acquire_owned().await else {
            return Ok(());
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors, or a connection reset before it was
            // accepted: a pause, not the end of the server.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, app, limits).await;
            drop(permit);
        });
    }
}

/// One connection, until it ends, fails, or is idle too long.
async fn serve_connection(stream: TcpStream, peer: SocketAddr, app: Router, limits: ServeLimits) {
    let service = app.map_request(move |mut request: http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    });
    let (stream, activity) = Tracked::new(stream);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::select! {
        // A failed connection (a client gone, a malformed request) concerns
        // that client only.
        _ = connection => {}
        () = activity.idle_for(limits.idle_timeout) => {}
    }
}

/// A stream that notes when it last moved a byte.
struct Tracked {
    stream: TcpStream,
    activity: Arc<Activity>,
}

/// When a connection last moved a byte, in milliseconds since it opened.
struct Activity {
    opened: Instant,
    last_ms: AtomicU64,
}

impl Tracked {
    fn new(stream: TcpStream) -> (Tracked, Arc<Activity>) {
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
        });
        let tracked = Tracked {
            stream,
            activity: activity.clone(),
        };
        (tracked, activity)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.activity.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.last_ms.store(ms, Ordering::Relaxed);
    }
}

impl Activity {
    /// Resolves once no byte has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        poll
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
