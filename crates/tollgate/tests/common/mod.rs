//! Test helpers shared by the integration tests of this crate.

use http::{Request, Response};
use std::convert::Infallible;
use std::sync::Arc;
use tollgate::store::StoreWrapper;
use tollgate::{Key, MemoryStore, Policy, PolicyDecision, Store, StoreReply};
use tower::{Service, ServiceExt};

/// A store that fails or hangs: fault injection a real store cannot give.
#[derive(Clone)]
#[allow(dead_code)] // each test binary uses some of the variants
pub enum BrokenStore {
    Failing,
    Hanging,
}

#[derive(Debug)]
pub struct Broken;

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("store is broken")
    }
}

impl std::error::Error for Broken {}

impl Store for BrokenStore {
    type Error = Broken;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<PolicyDecision, Broken>> + Send>>;

    fn check(&self, _: &Arc<Policy>, _: &Key, _: u32) -> StoreReply<Self::Future, Broken> {
        match self {
            BrokenStore::Failing => StoreReply::Ready(Err(Broken)),
            BrokenStore::Hanging => StoreReply::Pending(Box::pin(std::future::pending())),
        }
    }
}

/// A memory store that answers through a future, as a networked store
/// does: the layer's checking path, with real decisions.
#[derive(Clone)]
#[allow(dead_code)] // not every test binary uses it
pub struct Later<C = tollgate_core::MonotonicClock>(pub MemoryStore<C>);

impl<C: tollgate_core::Clock + Clone> StoreWrapper for Later<C> {
    type Inner = MemoryStore<C>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<PolicyDecision, Infallible>>;

    fn inner(&self) -> &MemoryStore<C> {
        &self.0
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
        reply
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: std::time::Duration,
    ) -> StoreReply<Self::Future, Infallible> {
        StoreReply::Pending(std::future::ready(Ok(self.0.check_now(policy, key, cost))))
    }
}

/// Sends one request through `service` once it is ready.
#[allow(dead_code)] // not every test binary sends requests this way
pub async fn send<S>(service: &mut S, request: Request<()>) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    service.ready().await.unwrap().call(request).await.unwrap()
}

/// One HTTP/1.1 request over a fresh TCP connection to `addr`: the status
/// and the response head, lower-cased.
#[allow(dead_code)] // not every test binary talks TCP
pub async fn http_over_tcp(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_string(&mut reply),
    )
    .await
    .unwrap()
    .unwrap();
    let status = reply
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    let head = reply.split("\r\n\r\n").next().unwrap_or_default();
    (status, head.to_ascii_lowercase())
}

/// Serves `router` on a free loopback port, with the peer address in each
/// request (as `axum::serve` with connect info gives it): the address, and
/// the server's task to abort at the end.
#[allow(dead_code)] // not every test binary serves over TCP
pub async fn serve_on_loopback(
    router: axum::Router,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });
    (addr, server)
}

/// A store of a user's own in front of another: counts the checks that
/// reach the store behind it. Peeks, resets, unblocks and refunds pass on
/// uncounted.
#[derive(Clone)]
#[allow(dead_code)] // not every test binary counts calls
pub struct Counting<St>(pub St, pub Arc<std::sync::atomic::AtomicUsize>);

impl<St: Store> Counting<St> {
    /// The checks counted so far.
    #[allow(dead_code)]
    pub fn calls(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<St: Store> StoreWrapper for Counting<St> {
    type Inner = St;
    type Error = St::Error;
    type Future = St::Future;

    fn inner(&self) -> &St {
        &self.0
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
        reply
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: std::time::Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.check_within(policy, key, cost, within)
    }

    // No `peek`: the default forwards it to the store behind's peek,
    // uncounted (tests/store_wrappers.rs checks it).
}

/// A memory store that fails every check while it is down, as a shared
/// store does in an outage: refunds and debits still reach it (a store
/// that charged can be given back to once it is back).
#[derive(Clone, Default)]
#[allow(dead_code)] // not every test binary has outages
pub struct Outage {
    pub store: MemoryStore,
    pub down: Arc<std::sync::atomic::AtomicBool>,
}

#[allow(dead_code)]
impl Outage {
    /// Down (every check fails) or up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::Relaxed);
    }
}

impl StoreWrapper for Outage {
    type Inner = MemoryStore;
    type Error = Broken;
    type Future = std::future::Ready<Result<PolicyDecision, Broken>>;

    fn inner(&self) -> &MemoryStore {
        &self.store
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
        reply.map(
            |ready| std::future::ready(ready.into_inner().map_err(|never| match never {})),
            |never| match never {},
        )
    }

    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        _: std::time::Duration,
    ) -> StoreReply<Self::Future, Broken> {
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return StoreReply::Ready(Err(Broken));
        }
        StoreReply::Ready(Ok(self.store.check_now(policy, key, cost)))
    }
}
