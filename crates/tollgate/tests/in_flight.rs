//! In-flight limits over real HTTP: an axum server on loopback behind an
//! `InFlightLayer`, clients on raw TCP connections. The handler counts the
//! requests running in it; the layer must never let more than the limit
//! of one key run at once, and must give a slot back however a request
//! ends (its body ends, the client goes away mid-body or before the
//! response, the service fails).

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Frame;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::in_flight::{
    Acquired, InFlightBody, InFlightLayer, InFlightLimit, MemorySlots, SlotPermit, SlotReply, Slots,
};
use tollgate::{GlobalKey, HeaderKey, Key, OnMissingKey, OnStoreError, headers::HeaderStyle};
use tower::{Layer, Service, ServiceExt, service_fn};

/// How long any one wait in these tests may take before it fails.
const STEP: Duration = Duration::from_secs(10);

/// Requests running in the handler now, and the most at once.
#[derive(Clone, Default)]
struct Gauge {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Gauge {
    /// Counts a request in for as long as the guard lives.
    fn enter(&self) -> impl Drop {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        Leave(self.running.clone())
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

struct Leave(Arc<AtomicUsize>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A body that sends a line every 20 ms and never ends by itself.
struct Ticking(tokio::time::Interval);

impl http_body::Body for Ticking {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_tick(cx)
            .map(|_| Some(Ok(Frame::data(Bytes::from_static(b"tick\n")))))
    }
}

/// The app: `/` holds the request for the milliseconds in `x-hold-ms`
/// (counted by `gauge` meanwhile), `/stream` answers with a body that
/// never ends.
fn app(gauge: &Gauge) -> Router {
    let gauge = gauge.clone();
    Router::new()
        .route(
            "/",
            get(move |headers: HeaderMap| {
                let gauge = gauge.clone();
                async move {
                    let _in = gauge.enter();
                    let ms = headers
                        .get("x-hold-ms")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    "ok"
                }
            }),
        )
        .route(
            "/stream",
            get(|| async { Body::new(Ticking(tokio::time::interval(Duration::from_millis(20)))) }),
        )
}

/// A response read off the wire: status and head (lower-cased).
struct Reply {
    status: u16,
    head: String,
}

impl Reply {
    fn field(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .map(str::trim)
    }
}

/// Sends `GET path` with `headers` on a fresh connection.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut text = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).await.expect("send");
    stream
}

/// `GET path` with `headers`, read to its end.
async fn get_once(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut stream = send(addr, path, headers).await;
    let mut raw = String::new();
    tokio::time::timeout(STEP, stream.read_to_string(&mut raw))
        .await
        .expect("a response in time")
        .expect("read the response");
    parse(&raw)
}

fn parse(raw: &str) -> Reply {
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let head = raw.split("\r\n\r\n").next().unwrap_or_default();
    Reply {
        status,
        head: head.to_ascii_lowercase(),
    }
}

/// Sends `n` requests of key `key` at once, each held `hold_ms` in the
/// handler; their replies.
async fn burst(addr: SocketAddr, n: usize, key: &'static str, hold_ms: u64) -> Vec<Reply> {
    let hold = hold_ms.to_string();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let hold = hold.clone();
            tokio::spawn(async move {
                get_once(addr, "/", &[("x-key", key), ("x-hold-ms", &hold)]).await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.expect("the client task"));
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_slow_requests_never_run_more_than_five_at_once_and_the_rest_are_refused() {
    let gauge = Gauge::default();
    let layer = InFlightLayer::builder()
        .max_in_flight(5)
        .key(HeaderKey::new("x-key"))
        .build();
    let slots = layer.slots().clone();
    let (addr, server) = common::serve_on_loopback(app(&gauge).layer(layer)).await;
    let replies = burst(addr, 100, "alice", 500).await;
    let passed: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(passed.len() + refused.len(), 100, "only 200s and 429s");
    assert!(gauge.most() <= 5, "{} ran at once", gauge.most());
    assert_eq!(gauge.most(), 5, "the limit was reached");
    assert!(passed.len() >= 5, "{} passed", passed.len());
    assert!(refused.len() >= 80, "{} refused", refused.len());
    for reply in &refused {
        assert_eq!(
            reply.field("ratelimit-policy"),
            Some(r#""inflight";q=5;qu="concurrent-requests""#),
            "{}",
            reply.head
        );
        assert_eq!(reply.field("ratelimit"), Some(r#""inflight";r=0"#));
        // No honest time to give: see the module docs.
        assert_eq!(reply.field("retry-after"), None, "{}", reply.head);
    }
    // Allowed responses carry the fields too: r is what was left when the
    // request started, its own slot taken.
    for reply in &passed {
        let r = reply.field("ratelimit").expect("RateLimit on a 200");
        let r: u32 = r.rsplit_once("r=").unwrap().1.parse().unwrap();
        assert!(r < 5, "{r}");
    }
    // Every slot came back, and the key left the table.
    let limit = InFlightLimit::new("inflight", 5).unwrap();
    wait_until(|| slots.in_flight(&limit, &Key::from("alice")) == 0).await;
    assert_eq!(slots.keys(), 0);
    // Another key was never affected, and the key passes again.
    assert_eq!(get_once(addr, "/", &[("x-key", "bob")]).await.status, 200);
    assert_eq!(get_once(addr, "/", &[("x-key", "alice")]).await.status, 200);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_requests_all_pass_and_still_never_more_than_five_at_once() {
    let gauge = Gauge::default();
    let layer = InFlightLayer::builder()
        .max_in_flight(5)
        .key(HeaderKey::new("x-key"))
        .max_delay(Duration::from_secs(30))
        .build();
    let (addr, server) = common::serve_on_loopback(app(&gauge).layer(layer)).await;
    let started = Instant::now();
    let replies = burst(addr, 100, "alice", 50).await;
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(gauge.most() <= 5, "{} ran at once", gauge.most());
    assert_eq!(gauge.most(), 5);
    // 100 requests of 50 ms, 5 at a time: at least a second.
    assert!(started.elapsed() >= Duration::from_millis(950));
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_is_refused_when_no_slot_comes_within_the_wait() {
    let gauge = Gauge::default();
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(GlobalKey)
        .max_delay(Duration::from_millis(200))
        .build();
    let (addr, server) = common::serve_on_loopback(app(&gauge).layer(layer)).await;
    let holder = tokio::spawn(async move { get_once(addr, "/", &[("x-hold-ms", "3000")]).await });
    wait_until(|| gauge.running.load(Ordering::SeqCst) == 1).await;
    let started = Instant::now();
    let reply = get_once(addr, "/", &[]).await;
    assert_eq!(reply.status, 429);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
    assert_eq!(reply.field("ratelimit"), Some(r#""inflight";r=0"#));
    holder.abort();
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_drops_the_connection_mid_body_gives_its_slot_back() {
    let gauge = Gauge::default();
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .build();
    let slots = layer.slots().clone();
    let limit = layer.limit().clone();
    let (addr, server) = common::serve_on_loopback(app(&gauge).layer(layer)).await;
    // The stream starts, and holds the key's only slot while it runs.
    let mut stream = send(addr, "/stream", &[("x-key", "alice")]).await;
    let mut first = vec![0; 256];
    let n = tokio::time::timeout(STEP, stream.read(&mut first))
        .await
        .expect("the head in time")
        .expect("read");
    let head = String::from_utf8_lossy(&first[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        get_once(addr, "/", &[("x-key", "alice")]).await.status,
        429,
        "the stream holds the slot"
    );
    assert_eq!(slots.in_flight(&limit, &Key::from("alice")), 1);
    // The client goes away mid-body.
    drop(stream);
    wait_until(|| slots.in_flight(&limit, &Key::from("alice")) == 0).await;
    assert_eq!(get_once(addr, "/", &[("x-key", "alice")]).await.status, 200);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_before_the_response_gives_its_slot_back() {
    let gauge = Gauge::default();
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .build();
    let slots = layer.slots().clone();
    let limit = layer.limit().clone();
    let (addr, server) = common::serve_on_loopback(app(&gauge).layer(layer)).await;
    let stream = send(addr, "/", &[("x-key", "alice"), ("x-hold-ms", "60000")]).await;
    wait_until(|| gauge.running.load(Ordering::SeqCst) == 1).await;
    assert_eq!(slots.in_flight(&limit, &Key::from("alice")), 1);
    drop(stream);
    // The server notices, drops the handler's future, and with it the slot.
    wait_until(|| slots.in_flight(&limit, &Key::from("alice")) == 0).await;
    assert_eq!(get_once(addr, "/", &[("x-key", "alice")]).await.status, 200);
    server.abort();
}

/// Polls `condition` every 10 ms until it holds; fails after `STEP`.
async fn wait_until(condition: impl Fn() -> bool) {
    let deadline = Instant::now() + STEP;
    while !condition() {
        assert!(Instant::now() < deadline, "the condition did not come true");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// In process, through tower: how a call ends decides when its slot comes
// back.

type Reply2 = Response<InFlightBody<String, tollgate::in_flight::MemoryPermit>>;

fn one_slot() -> (InFlightLayer<GlobalKey>, InFlightLimit, MemorySlots) {
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(GlobalKey)
        .build();
    let limit = layer.limit().clone();
    let slots = layer.slots().clone();
    (layer, limit, slots)
}

#[tokio::test]
async fn the_slot_lasts_as_long_as_the_response_body() {
    let (layer, limit, slots) = one_slot();
    let mut service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let response: Reply2 = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.body().holds_slot());
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 1);
    let refused = service.ready().await.unwrap().call(Request::new(())).await;
    assert_eq!(refused.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    drop(response);
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 0);
}

#[tokio::test]
async fn a_failing_service_and_a_dropped_call_give_the_slot_back() {
    let (layer, limit, slots) = one_slot();
    let mut failing = layer.layer(service_fn(|_: Request<()>| async {
        Err::<Response<String>, &str>("broken")
    }));
    let error = failing.ready().await.unwrap().call(Request::new(())).await;
    assert_eq!(error.err(), Some("broken"));
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 0);
    let mut slow = layer.layer(service_fn(|_: Request<()>| async {
        std::future::pending::<()>().await;
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let call = slow.ready().await.unwrap().call(Request::new(()));
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 1);
    drop(call);
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 0);
}

/// One request through `service` once it is ready.
async fn call_once<S>(service: &mut S) -> S::Response
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap()
}

#[tokio::test]
async fn missing_keys_are_shared_by_default_or_skipped_or_refused() {
    let ok =
        || service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    let status = call_once;
    // Shared: the second request without a key finds the shared slot taken.
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .build();
    let mut service = layer.layer(ok());
    let held = status(&mut service).await;
    assert_eq!(status(&mut service).await.status(), 429);
    drop(held);
    // Skipped: not counted at all.
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .on_missing_key(OnMissingKey::Skip)
        .build();
    let mut service = layer.layer(ok());
    let held = status(&mut service).await;
    assert!(!held.body().holds_slot());
    assert_eq!(status(&mut service).await.status(), 200);
    // Refused with the status given.
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(HeaderKey::new("x-key"))
        .on_missing_key(OnMissingKey::Reject(StatusCode::UNAUTHORIZED))
        .build();
    let mut service = layer.layer(ok());
    assert_eq!(status(&mut service).await.status(), 401);
}

/// A slot store that fails, or never answers: fault injection a real store
/// cannot give on demand.
#[derive(Clone)]
enum Broken {
    Failing,
    Hanging,
}

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the slot store is down")
    }
}

impl std::error::Error for Down {}

/// A permit of a store that never gives one: given back by its drop.
struct Unit;

impl SlotPermit for Unit {}

impl Slots for Broken {
    type Permit = Unit;
    type Error = Down;
    type Future = Pin<Box<dyn Future<Output = Result<Acquired<Unit>, Down>> + Send>>;
    type Freed = std::future::Pending<()>;

    fn acquire(&self, _: &InFlightLimit, _: &Key) -> SlotReply<Self::Future, Unit, Down> {
        match self {
            Broken::Failing => SlotReply::Ready(Err(Down)),
            Broken::Hanging => SlotReply::Pending(Box::pin(std::future::pending())),
        }
    }

    fn freed(&self, _: &InFlightLimit, _: &Key) -> Self::Freed {
        std::future::pending()
    }
}

#[tokio::test]
async fn a_failing_or_late_store_lets_requests_through_or_answers_503_as_configured() {
    for (store, on_error, expected) in [
        (Broken::Failing, OnStoreError::Open, 200),
        (Broken::Failing, OnStoreError::Closed, 503),
        (Broken::Hanging, OnStoreError::Open, 200),
        (Broken::Hanging, OnStoreError::Closed, 503),
    ] {
        let layer = InFlightLayer::builder()
            .max_in_flight(1)
            .key(GlobalKey)
            .slots(store)
            .on_store_error(on_error.clone())
            .store_timeout(Duration::from_millis(20))
            .build();
        let mut service = layer.layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let response = service
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), expected, "{on_error:?}");
        // A 503 says when to retry: 1 s, nothing knowing better.
        let retry_after = response.headers().get(http::header::RETRY_AFTER);
        let expected_retry = (expected == 503).then_some("1");
        assert_eq!(retry_after.map(|v| v.to_str().unwrap()), expected_retry);
        // Let through without a slot: nothing to hold.
        assert!(!response.body().holds_slot());
    }
}

#[tokio::test]
async fn allowed_responses_say_what_remained_and_header_styles_apply() {
    let layer = InFlightLayer::builder()
        .max_in_flight(3)
        .key(GlobalKey)
        .headers(HeaderStyle::BOTH)
        .build();
    let mut service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let first = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    let second = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    let field = |r: &Reply2, name: &str| r.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(field(&first, "ratelimit"), r#""inflight";r=2"#);
    assert_eq!(field(&second, "ratelimit"), r#""inflight";r=1"#);
    assert_eq!(
        field(&second, "ratelimit-policy"),
        r#""inflight";q=3;qu="concurrent-requests""#
    );
    assert_eq!(field(&second, "x-ratelimit-limit"), "3");
    assert_eq!(field(&second, "x-ratelimit-remaining"), "1");
    assert!(!second.headers().contains_key("x-ratelimit-reset"));
    // Only on rejections: an allowed response carries none.
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(GlobalKey)
        .headers(HeaderStyle::DRAFT.only_on_rejections())
        .build();
    let mut service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let allowed = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert!(!allowed.headers().contains_key("ratelimit"));
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert_eq!(field(&refused, "ratelimit"), r#""inflight";r=0"#);
}

#[test]
fn settings_that_cannot_work_are_refused_when_built() {
    let zero = InFlightLayer::builder()
        .max_in_flight(0)
        .try_build()
        .unwrap_err();
    assert!(zero.to_string().contains("at least 1"), "{zero}");
    let name = InFlightLayer::builder()
        .name("not a token")
        .try_build()
        .unwrap_err();
    assert!(name.to_string().contains("token"), "{name}");
    let timeout = InFlightLayer::builder()
        .store_timeout(Duration::ZERO)
        .try_build()
        .unwrap_err();
    assert!(timeout.to_string().contains("store_timeout"), "{timeout}");
}

/// In shadow, a full key's request runs anyway, without a slot (so not
/// counted), even when the layer would queue it; no response carries the
/// limit's fields.
#[tokio::test]
async fn in_shadow_a_full_keys_request_runs_without_a_slot_and_no_fields() {
    let layer = InFlightLayer::builder()
        .max_in_flight(1)
        .key(GlobalKey)
        .max_delay(Duration::from_secs(60))
        .shadow(true)
        .build();
    let (limit, slots) = (layer.limit().clone(), layer.slots().clone());
    let mut service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let first: Reply2 = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert!(first.body().holds_slot());
    assert!(
        first.headers().get("ratelimit").is_none(),
        "{:?}",
        first.headers()
    );
    let second: Reply2 = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert!(!second.body().holds_slot());
    assert!(second.headers().get("ratelimit").is_none());
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 1);
    drop((first, second));
    assert_eq!(slots.in_flight(&limit, &Key::GLOBAL), 0);
}
