//! The message limit over a real tonic server and client on loopback: a
//! hand-written streaming service (`test.Streams`, raw bytes, no protoc)
//! whose streams run out of budget, are held in delay mode, and meet
//! failing or slow stores; unary calls and the call layer are unchanged.

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate::core::{Clock, ManualClock, Quota};
use tollgate::{
    GlobalKey, Key, MemoryStore, OnStoreError, Policy, PolicyDecision, Store, StoreReply,
};
use tollgate_tonic::messages::Direction;
use tollgate_tonic::{MessageLimitLayer, MetadataKey};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::tokio_stream::{self, Stream};
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;
use tower::Layer;

// ---------------------------------------------------------------------
// A codec of raw bytes and a service of three methods.

/// Messages are their bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

const COUNT: &str = "/test.Streams/Count";
const SUM: &str = "/test.Streams/Sum";
const ECHO: &str = "/test.Streams/Echo";
const CHAT: &str = "/test.Streams/Chat";

/// `test.Streams`:
/// - `Count` (server streaming): asked for `n` messages of `size` bytes
///   (two big-endian u32s), sends them; message `i` starts with `i`.
/// - `Sum` (client streaming): reads every message, passing a failure on
///   with `?`, and answers how many it read.
/// - `Echo` (unary): answers its request.
/// - `Chat` (both streams): answers each message with itself, and ends
///   with the request stream's failure if it fails.
#[derive(Clone, Default)]
struct Streams {
    /// How many messages `Sum` has read, over all calls.
    read: Arc<AtomicUsize>,
}

impl NamedService for Streams {
    const NAME: &'static str = "test.Streams";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type MessageStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

impl<B> tower::Service<http::Request<B>> for Streams
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let read = self.read.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(Raw);
            let response = match request.uri().path() {
                COUNT => {
                    grpc.server_streaming(tower::service_fn(count), request)
                        .await
                }
                SUM => {
                    let sum =
                        tower::service_fn(move |request: Request<tonic::Streaming<Bytes>>| {
                            let read = read.clone();
                            async move {
                                let mut stream = request.into_inner();
                                let mut n = 0u32;
                                while let Some(_message) = stream.message().await? {
                                    n += 1;
                                    read.fetch_add(1, Ordering::SeqCst);
                                }
                                Ok::<_, Status>(tonic::Response::new(Bytes::from(
                                    n.to_be_bytes().to_vec(),
                                )))
                            }
                        });
                    grpc.client_streaming(sum, request).await
                }
                CHAT => {
                    let chat =
                        tower::service_fn(move |request: Request<tonic::Streaming<Bytes>>| {
                            let read = read.clone();
                            async move {
                                let echoes =
                                    tokio_stream::StreamExt::map(request.into_inner(), move |m| {
                                        if m.is_ok() {
                                            read.fetch_add(1, Ordering::SeqCst);
                                        }
                                        m
                                    });
                                let echoes: MessageStream = Box::pin(echoes);
                                Ok::<_, Status>(tonic::Response::new(echoes))
                            }
                        });
                    grpc.streaming(chat, request).await
                }
                ECHO => {
                    let echo = tower::service_fn(|request: Request<Bytes>| async move {
                        Ok::<_, Status>(tonic::Response::new(request.into_inner()))
                    });
                    grpc.unary(echo, request).await
                }
                _ => Status::unimplemented("no such method").into_http(),
            };
            Ok(response)
        })
    }
}

async fn count(request: Request<Bytes>) -> Result<tonic::Response<MessageStream>, Status> {
    let mut asked = request.into_inner();
    if asked.len() != 8 {
        return Err(Status::invalid_argument("n and size"));
    }
    let (n, size) = (asked.get_u32(), asked.get_u32() as usize);
    let messages = (0..n).map(move |i| {
        let mut message = i.to_be_bytes().to_vec();
        message.resize(size.max(4), 0xAB);
        Ok(Bytes::from(message))
    });
    Ok(tonic::Response::new(Box::pin(tokio_stream::iter(messages))))
}

// ---------------------------------------------------------------------
// Server and client.

/// `test.Streams` behind `layer` on a free loopback port; stops when
/// dropped.
struct TestServer {
    addr: SocketAddr,
    streams: Streams,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve<L, ResBody>(layer: L) -> TestServer
where
    L: Layer<tonic::service::Routes> + Clone + Send + 'static,
    L::Service: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let streams = Streams::default();
    let service = streams.clone();
    let task = tokio::spawn(async move {
        let _ = Server::builder()
            .layer(layer)
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await;
    });
    TestServer {
        addr,
        streams,
        task,
    }
}

impl TestServer {
    async fn client(&self) -> Client {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        Client {
            grpc: tonic::client::Grpc::new(channel),
            api_key: None,
        }
    }

    fn read(&self) -> usize {
        self.streams.read.load(Ordering::SeqCst)
    }
}

struct Client {
    grpc: tonic::client::Grpc<Channel>,
    api_key: Option<&'static str>,
}

impl Client {
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(key) = self.api_key {
            request
                .metadata_mut()
                .insert("x-api-key", key.parse().unwrap());
        }
        request
    }

    /// Asks `Count` for `n` messages of `size` bytes: the numbers of those
    /// that arrived, and the status the stream ended with (`None`: OK).
    async fn count(&mut self, n: u32, size: u32) -> (Vec<u32>, Option<Status>) {
        self.grpc.ready().await.unwrap();
        let mut asked = Vec::new();
        asked.put_u32(n);
        asked.put_u32(size);
        let request = self.request(Bytes::from(asked));
        let path = PathAndQuery::from_static(COUNT);
        let mut stream = match self.grpc.server_streaming(request, path, Raw).await {
            Ok(response) => response.into_inner(),
            Err(status) => return (Vec::new(), Some(status)),
        };
        let mut numbers = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(mut message)) => numbers.push(message.get_u32()),
                Ok(None) => return (numbers, None),
                Err(status) => return (numbers, Some(status)),
            }
        }
    }

    /// Sends `n` messages of `size` bytes to `Sum`: its answer, or the
    /// status the call ended with.
    async fn sum(&mut self, n: usize, size: usize) -> Result<u32, Status> {
        self.grpc.ready().await.unwrap();
        let messages = (0..n).map(move |_| Bytes::from(vec![7; size]));
        let request = self.request(tokio_stream::iter(messages));
        let path = PathAndQuery::from_static(SUM);
        let mut reply = self
            .grpc
            .client_streaming(request, path, Raw)
            .await?
            .into_inner();
        Ok(reply.get_u32())
    }

    /// Sends `n` messages to `Chat`: how many answers arrived, and the
    /// status the call ended with (`None`: OK).
    async fn chat(&mut self, n: usize) -> (usize, Option<Status>) {
        self.grpc.ready().await.unwrap();
        let messages = (0..n).map(|_| Bytes::from_static(b"hi"));
        let request = self.request(tokio_stream::iter(messages));
        let path = PathAndQuery::from_static(CHAT);
        let mut stream = match self.grpc.streaming(request, path, Raw).await {
            Ok(response) => response.into_inner(),
            Err(status) => return (0, Some(status)),
        };
        let mut answers = 0;
        loop {
            match stream.message().await {
                Ok(Some(_)) => answers += 1,
                Ok(None) => return (answers, None),
                Err(status) => return (answers, Some(status)),
            }
        }
    }

    async fn echo(&mut self) -> Result<Bytes, Status> {
        self.grpc.ready().await.unwrap();
        let request = self.request(Bytes::from_static(b"hello"));
        let path = PathAndQuery::from_static(ECHO);
        Ok(self.grpc.unary(request, path, Raw).await?.into_inner())
    }
}

/// A memory store on a clock that never moves: a limit's figures are
/// exact.
fn still_store() -> MemoryStore<ManualClock> {
    MemoryStore::builder().clock(ManualClock::new(0)).build()
}

/// The messages of a stream that ended with OK.
fn complete((numbers, status): (Vec<u32>, Option<Status>)) -> Vec<u32> {
    assert!(status.is_none(), "{status:?}");
    numbers
}

/// The delay RetryInfo carries.
fn retry_delay(status: &Status) -> Option<Duration> {
    status.get_details_retry_info()?.retry_delay
}

// ---------------------------------------------------------------------
// Out of budget.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_past_its_budget_ends_with_resource_exhausted_and_retry_info() {
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(5))
        .key(GlobalKey)
        .store(still_store())
        .direction(Direction::Responses)
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;

    let (numbers, status) = client.count(20, 4).await;
    assert_eq!(numbers, [0, 1, 2, 3, 4], "exactly the budget arrives");
    let status = status.expect("the stream ends with an error");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // 5 per minute: one every 12 s, and the clock has not moved since the
    // five were charged, so a retry passes in exactly 12 s.
    assert_eq!(retry_delay(&status), Some(Duration::from_secs(12)));
    assert!(
        status.message().contains("\"messages\""),
        "{}",
        status.message()
    );
    let details = status.get_error_details();
    let violations = &details.quota_failure().expect("a QuotaFailure").violations;
    assert_eq!(violations[0].quota_id, "messages");
    assert_eq!(violations[0].quota_value, 5);
    let metadata = status.metadata();
    assert_eq!(metadata.get("retry-after").unwrap(), "12");
    assert_eq!(metadata.get("ratelimit").unwrap(), "\"messages\";r=0;t=12");
    assert_eq!(metadata.get("violated-policies").unwrap(), "messages");
    assert_eq!(
        metadata.get("ratelimit-policy").unwrap(),
        "\"messages\";q=5;w=60"
    );

    // The budget is spent for the key: the next stream gets nothing.
    let (numbers, status) = client.count(3, 4).await;
    assert!(numbers.is_empty());
    assert_eq!(status.unwrap().code(), Code::ResourceExhausted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_split_across_frames_count_once_each() {
    // 40 KiB messages: HTTP/2 carries each in several DATA frames.
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(7))
        .key(GlobalKey)
        .store(still_store())
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;
    // Both directions, one budget: the request is one message, six of
    // the response's fit.
    let (numbers, status) = client.count(10, 40 * 1024).await;
    assert_eq!(numbers, [0, 1, 2, 3, 4, 5]);
    assert_eq!(status.unwrap().code(), Code::ResourceExhausted);

    let server = serve(
        MessageLimitLayer::builder()
            .quota("messages", Quota::per_minute(5))
            .key(GlobalKey)
            .store(still_store())
            .build(),
    )
    .await;
    let mut client = server.client().await;
    let status = client.sum(10, 40 * 1024).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(server.read(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_past_its_budget_ends_with_resource_exhausted_and_retry_info() {
    let layer = MessageLimitLayer::builder()
        .quota("uploads", Quota::per_minute(5))
        .key(GlobalKey)
        .store(still_store())
        .direction(Direction::Requests)
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;

    // Within the budget: the handler reads all and answers.
    assert_eq!(client.sum(3, 16).await.unwrap(), 3);
    // Past it: the handler reads the two left, then its `?` ends the call
    // with the layer's status.
    let status = client.sum(10, 16).await.unwrap_err();
    assert_eq!(server.read(), 5);
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(retry_delay(&status), Some(Duration::from_secs(12)));
    assert!(
        status.message().contains("\"uploads\""),
        "{}",
        status.message()
    );
    assert_eq!(status.metadata().get("retry-after").unwrap(), "12");
    assert_eq!(
        status
            .get_error_details()
            .quota_failure()
            .unwrap()
            .violations[0]
            .quota_id,
        "uploads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_streams_of_a_call_share_one_budget() {
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(7))
        .key(GlobalKey)
        .store(still_store())
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;
    let (answers, status) = client.chat(10).await;
    let status = status.expect("the call ends out of budget");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(retry_delay(&status).is_some());
    // Each message that got through was charged once, in whichever
    // direction: seven in all, however the two streams interleaved.
    assert_eq!(server.read() + answers, 7, "read {}", server.read());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_has_its_own_budget() {
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(3))
        .key(MetadataKey::new("x-api-key"))
        .store(still_store())
        .direction(Direction::Responses)
        .build();
    let server = serve(layer).await;
    let mut alice = server.client().await;
    alice.api_key = Some("alice");
    let mut bob = server.client().await;
    bob.api_key = Some("bob");
    assert_eq!(alice.count(5, 4).await.0, [0, 1, 2]);
    assert_eq!(complete(bob.count(2, 4).await), [0, 1]);
    assert_eq!(bob.count(2, 4).await.0, [0]);
}

// ---------------------------------------------------------------------
// Delay mode, on tokio's paused clock (the store reads it too).

/// tokio's clock, as a tollgate clock: paused in these tests, so the
/// holds take no real time and the figures are exact.
#[derive(Clone)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[tokio::test(start_paused = true)]
async fn in_delay_mode_messages_over_the_rate_are_held_not_refused() {
    let start = tokio::time::Instant::now();
    let store = MemoryStore::builder().clock(TokioClock(start)).build();
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_second(10))
        .key(GlobalKey)
        .store(store)
        .direction(Direction::Responses)
        .max_delay(Duration::from_secs(5))
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;

    let asked = tokio::time::Instant::now();
    let (numbers, status) = client.count(30, 4).await;
    let took = asked.elapsed();
    assert!(status.is_none(), "{status:?}");
    assert_eq!(numbers, (0..30).collect::<Vec<_>>());
    // A burst of 10, then one every 100 ms: the last of 30 after 2 s.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn in_delay_mode_a_client_stream_is_held_too() {
    let start = tokio::time::Instant::now();
    let store = MemoryStore::builder().clock(TokioClock(start)).build();
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_second(10))
        .key(GlobalKey)
        .store(store)
        .direction(Direction::Requests)
        .max_delay(Duration::from_secs(5))
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;
    let asked = tokio::time::Instant::now();
    assert_eq!(client.sum(25, 8).await.unwrap(), 25);
    let took = asked.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_message_that_would_wait_past_the_bound_ends_the_stream() {
    // Two streams at once share a key: their messages queue behind each
    // other, and with a bound of 250 ms some would wait longer.
    let start = tokio::time::Instant::now();
    let store = MemoryStore::builder().clock(TokioClock(start)).build();
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_second(10).with_burst(1).unwrap())
        .key(GlobalKey)
        .store(store.clone())
        .direction(Direction::Responses)
        .max_delay(Duration::from_millis(250))
        .build();
    let server = serve(layer).await;
    let (mut a, mut b, mut c, mut d) = (
        server.client().await,
        server.client().await,
        server.client().await,
        server.client().await,
    );
    let (ra, rb, rc, rd) = tokio::join!(a.count(5, 4), b.count(5, 4), c.count(5, 4), d.count(5, 4));
    let statuses: Vec<_> = [ra, rb, rc, rd].into_iter().map(|(_, s)| s).collect();
    let refused = statuses.iter().flatten().collect::<Vec<_>>();
    assert!(
        !refused.is_empty(),
        "four streams at once exceed a 250 ms bound"
    );
    for status in refused {
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(retry_delay(status).is_some());
    }
}

// ---------------------------------------------------------------------
// Stores that fail, or answer late.

#[derive(Clone)]
struct FailingStore;

#[derive(Debug)]
struct Broken;

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("store is broken")
    }
}

impl std::error::Error for Broken {}

impl Store for FailingStore {
    type Error = Broken;
    type Future = std::future::Ready<Result<PolicyDecision, Broken>>;

    fn check(&self, _: &Arc<Policy>, _: &Key, _: u32) -> StoreReply<Self::Future, Broken> {
        StoreReply::Ready(Err(Broken))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_lets_messages_through_or_fails_closed_with_unavailable() {
    let open = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(1))
        .store(FailingStore)
        .build();
    let server = serve(open).await;
    let mut client = server.client().await;
    assert_eq!(complete(client.count(5, 4).await), [0, 1, 2, 3, 4]);

    let closed = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(1))
        .store(FailingStore)
        .direction(Direction::Responses)
        .on_store_error(OnStoreError::Closed)
        .build();
    let server = serve(closed).await;
    let mut client = server.client().await;
    let (numbers, status) = client.count(5, 4).await;
    assert!(numbers.is_empty());
    let status = status.unwrap();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.message(),
        "the rate limiter is unavailable; retry later"
    );
    let retry = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    assert_eq!(retry, Some(Duration::from_secs(1)));
}

/// A memory store that answers after `delay` (a store that does I/O).
#[derive(Clone)]
struct SlowStore {
    inner: MemoryStore<ManualClock>,
    delay: Duration,
}

impl tollgate::store::StoreWrapper for SlowStore {
    type Inner = MemoryStore<ManualClock>;
    type Error = Infallible;
    type Future = BoxFuture<Result<PolicyDecision, Infallible>>;

    fn inner(&self) -> &Self::Inner {
        &self.inner
    }

    fn relay(
        &self,
        _: &std::sync::Arc<tollgate::Policy>,
        _: &tollgate::Key,
        reply: tollgate::store::StoreReply<
            <Self::Inner as tollgate::Store>::Future,
            <Self::Inner as tollgate::Store>::Error,
        >,
    ) -> tollgate::store::StoreReply<Self::Future, Self::Error> {
        reply.map(|ready| Box::pin(ready) as BoxFuture<_>, |never| never)
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: Duration,
    ) -> StoreReply<Self::Future, Infallible> {
        let (store, policy, key, delay) =
            (self.inner.clone(), policy.clone(), key.clone(), self.delay);
        StoreReply::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(store.check_now(&policy, &key, cost))
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_later_is_awaited_and_a_late_one_fails_open() {
    let slow = |delay| {
        MessageLimitLayer::builder()
            .quota("messages", Quota::per_minute(5))
            .key(GlobalKey)
            .store(SlowStore {
                inner: still_store(),
                delay,
            })
            .direction(Direction::Responses)
            .store_timeout(Duration::from_millis(100))
            .build()
    };
    // In time: counted as the memory store counts.
    let server = serve(slow(Duration::from_millis(10))).await;
    let mut client = server.client().await;
    let (numbers, status) = client.count(20, 4).await;
    assert_eq!(numbers, [0, 1, 2, 3, 4]);
    assert_eq!(status.unwrap().code(), Code::ResourceExhausted);
    // Too late: every message is let through (fail open).
    let server = serve(slow(Duration::from_secs(1))).await;
    let mut client = server.client().await;
    let (numbers, status) = client.count(8, 4).await;
    assert!(status.is_none(), "{status:?}");
    assert_eq!(numbers.len(), 8);
}

// ---------------------------------------------------------------------
// Unary calls, other methods, and the call layer.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_methods_are_counted() {
    let layer = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(2))
        .key(GlobalKey)
        .method(COUNT)
        .build();
    let server = serve(layer).await;
    let mut client = server.client().await;
    for _ in 0..10 {
        assert_eq!(&client.echo().await.unwrap()[..], b"hello");
    }
    assert_eq!(client.sum(10, 4).await.unwrap(), 10);
    assert_eq!(client.count(5, 4).await.0, [0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_costs_a_message_each_way_and_the_call_layer_still_answers_first() {
    let calls = tollgate_tonic::builder()
        .quota("calls", Quota::per_minute(3))
        .key(GlobalKey)
        .build();
    let messages = MessageLimitLayer::builder()
        .quota("messages", Quota::per_minute(100))
        .key(GlobalKey)
        .build();
    let server = serve(tower::layer::util::Stack::new(messages, calls)).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        client.echo().await.unwrap();
    }
    // The call layer's rejection, as without the message layer.
    let status = client.echo().await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status
            .message()
            .starts_with("rate limit exceeded: \"calls\""),
        "{}",
        status.message()
    );
    assert!(retry_delay(&status).is_some());

    // A message budget of 4: two unary calls, then the third call's
    // request is refused.
    let server = serve(
        MessageLimitLayer::builder()
            .quota("messages", Quota::per_minute(4))
            .key(GlobalKey)
            .store(still_store())
            .build(),
    )
    .await;
    let mut client = server.client().await;
    client.echo().await.unwrap();
    client.echo().await.unwrap();
    let status = client.echo().await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().starts_with("message rate limit exceeded"),
        "{}",
        status.message()
    );
}

#[test]
fn settings_that_cannot_work_are_refused_when_built() {
    let none = MessageLimitLayer::builder().try_build().unwrap_err();
    assert!(none.to_string().contains("at least one limit"), "{none}");
    let zero = MessageLimitLayer::builder()
        .quota("m", Quota::per_second(1))
        .store_timeout(Duration::ZERO)
        .try_build()
        .unwrap_err();
    assert!(zero.to_string().contains("store_timeout"), "{zero}");
    let reject = MessageLimitLayer::builder()
        .quota("m", Quota::per_second(1))
        .on_missing_key(tollgate::OnMissingKey::Reject(
            http::StatusCode::UNAUTHORIZED,
        ))
        .try_build()
        .unwrap_err();
    assert!(reject.to_string().contains("OnMissingKey"), "{reject}");
}

#[test]
fn one_message_limit_in_shadow_is_refused_at_build_with_the_fix() {
    let error = tollgate_tonic::MessageLimitLayer::builder()
        .limit(tollgate::NamedLimit::new("uploads", tollgate::core::Quota::per_second(5)).shadow())
        .try_build()
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"uploads\" is in shadow"), "{error}");
    assert!(
        error.contains("MessageLimitBuilder::shadow(true)"),
        "{error}"
    );
}
