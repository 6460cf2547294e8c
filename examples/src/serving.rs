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
//! The cap defaults to what the process can open ([`default_connection_cap`]:
//! its open-file limit less a reserve). At the cap a new connection is
//! still accepted, and the open connection that has waited longest for a
//! request head (since it opened, or since its last response was sent) is
//! closed to make room: a flood of connections that never finish a head
//! cannot keep a client with a real request out. A connection whose
//! request is being served is never closed for room; if every one is, the
//! new connection waits until one ends.
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
use pin_project_lite::pin_project;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
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
    /// The most connections open at once; beyond it the connection that
    /// has waited longest for a request head is closed to make room.
    /// Default [`default_connection_cap`].
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: default_connection_cap(),
        }
    }
}

/// File descriptors kept for what is not a client's connection: the
/// listener, a store's connections (Redis), logs.
pub const RESERVED_FILES: usize = 64;

/// What the process can open (its soft open-file limit, `ulimit -n`) less
/// [`RESERVED_FILES`], at least 1; 10,000 where the limit cannot be read
/// or is unlimited.
pub fn default_connection_cap() -> usize {
    match open_file_limit() {
        Some(limit) => limit.saturating_sub(RESERVED_FILES).max(1),
        None => 10_000,
    }
}

#[cfg(unix)]
fn open_file_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given, a
    // valid, owned `rlimit`; nothing else is touched.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if read != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    usize::try_from(limit.rlim_cur).ok()
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<usize> {
    None
}

/// Serves `app` on `listener` over HTTP/1.1 within `limits`, with each
/// request's peer address as axum's `ConnectInfo<SocketAddr>` (what
/// `ClientIp` keys on). Runs until the listener fails for good.
pub async fn serve(listener: TcpListener, app: Router, limits: ServeLimits) -> io::Result<()> {
    let open = Arc::new(Connections::new(limits.max_connections.max(1)));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors, or a connection reset before it was
            // accepted: a pause, not the end of the server.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let connection = open.admit().await;
        let (app, open) = (app.clone(), open.clone());
        tokio::spawn(async move {
            serve_connection(stream, peer, app, limits, &connection).await;
            open.remove(&connection);
        });
    }
}

/// The open connections, and the cap on them.
struct Connections {
    cap: usize,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    /// Rings when a connection ends.
    ended: Notify,
}

/// One open connection, as the cap sees it.
struct Connection {
    id: u64,
    opened: Instant,
    /// Since when (ms after `opened`) it has been waiting for a request
    /// head; [`SERVING`] while a request's response is not sent yet.
    waiting_since_ms: AtomicU64,
    /// Rings to close it, to make room.
    close: Notify,
}

/// `waiting_since_ms` of a connection whose request is being served.
const SERVING: u64 = u64::MAX;

impl Connections {
    fn new(cap: usize) -> Self {
        Connections {
            cap,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            ended: Notify::new(),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection: at the cap, the connection that has
    /// waited longest for a head is closed for it; if every connection is
    /// serving a request, this waits until one ends.
    async fn admit(&self) -> Arc<Connection> {
        loop {
            let ended = self.ended.notified();
            {
                let mut open = self.open();
                if open.len() >= self.cap {
                    let oldest = open
                        .values()
                        .filter(|c| c.waiting_since_ms.load(Ordering::Relaxed) != SERVING)
                        .min_by_key(|c| c.waiting_since())
                        .map(|c| c.id);
                    // Out of the table at once: its place is the new one's.
                    if let Some(evicted) = oldest.and_then(|id| open.remove(&id)) {
                        evicted.close.notify_one();
                    }
                }
                if open.len() < self.cap {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let connection = Arc::new(Connection {
                        id,
                        opened: Instant::now(),
                        waiting_since_ms: AtomicU64::new(0),
                        close: Notify::new(),
                    });
                    open.insert(id, connection.clone());
                    return connection;
                }
            }
            ended.await;
        }
    }

    /// `connection` ended (or was closed for room).
    fn remove(&self, connection: &Connection) {
        self.open().remove(&connection.id);
        self.ended.notify_one();
    }
}

impl Connection {
    /// When it started waiting for its current head.
    fn waiting_since(&self) -> Instant {
        let ms = self.waiting_since_ms.load(Ordering::Relaxed);
        self.opened + Duration::from_millis(ms)
    }

    /// A request's head came: it is serving.
    fn serving(&self) {
        self.waiting_since_ms.store(SERVING, Ordering::Relaxed);
    }

    /// Its response is sent (or dropped): it waits for the next head.
    fn waiting(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(SERVING - 1);
        self.waiting_since_ms.store(ms, Ordering::Relaxed);
    }
}

/// One connection, until it ends, fails, is idle too long, or is closed to
/// make room.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ServeLimits,
    connection: &Arc<Connection>,
) {
    let (on_head, on_sent) = (connection.clone(), connection.clone());
    let service = app
        .map_request(move |mut request: http::Request<hyper::body::Incoming>| {
            on_head.serving();
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        })
        .map_response(move |response: axum::response::Response| {
            let sent = SentGuard(on_sent.clone());
            response.map(|body| {
                axum::body::Body::new(Sending {
                    body,
                    sent: Some(sent),
                })
            })
        });
    let (stream, activity) = Tracked::new(stream);
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::select! {
        // A failed connection (a client gone, a malformed request) concerns
        // that client only.
        _ = served => {}
        () = activity.idle_for(limits.idle_timeout) => {}
        () = connection.close.notified() => {}
    }
}

/// Marks its connection waiting for a head again when dropped: when the
/// response body it rides in has been sent, or given up.
struct SentGuard(Arc<Connection>);

impl Drop for SentGuard {
    fn drop(&mut self) {
        self.0.waiting();
    }
}

pin_project! {
    /// A response body that marks its connection free once it is done.
    struct Sending<B> {
        #[pin]
        body: B,
        sent: Option<SentGuard>,
    }
}

impl<B: http_body::Body> http_body::Body for Sending<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) {
            // Sent whole: waiting for the next head from now on.
            this.sent.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
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
