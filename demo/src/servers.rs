//! The demo's servers: an axum app and a tonic gRPC server on loopback,
//! each limiting every algorithm separately.

use super::DemoError;
use axum::Router;
use axum::routing::get;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate::{GlobalKey, NamedLimit, OnStoreError, RateLimitLayer, Store};
use tollgate_core::{Algorithm, Quota};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// The gRPC metadata entry that names the algorithm a call is limited by:
/// the health service has one `Check` method, so the call says which of
/// the six limits it goes through.
pub const ALGORITHM_METADATA: &str = "x-algorithm";

/// The HTTP path limited by `algorithm`: `/gcra`, `/token-bucket`, ...
pub fn http_path(algorithm: Algorithm) -> String {
    format!("/{}", algorithm.name())
}

/// The limit for `algorithm`, named after it: the name is what clients see
/// in `RateLimit-Policy`, and in a shared store (Redis) what keeps the six
/// counters apart.
pub fn limit(algorithm: Algorithm, quota: Quota) -> NamedLimit {
    NamedLimit::new(algorithm.name(), quota).with_algorithm(algorithm)
}

/// A running server, stopped when dropped.
#[derive(Debug)]
pub struct Running {
    /// The address it accepts connections on.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds a free loopback port (the OS picks it).
async fn bind() -> Result<(TcpListener, SocketAddr), DemoError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(DemoError::context("cannot bind a loopback port"))?;
    let addr = listener
        .local_addr()
        .map_err(DemoError::context("cannot read the bound address"))?;
    Ok((listener, addr))
}

/// Starts the axum app: `GET /{algorithm}` answers `200 ok`, limited to
/// `quota` by that algorithm, one global key per route, counters in
/// `store`. One layer holds the six limits as a route table; the leaky
/// bucket shapes (holds requests until their slot), the others reject
/// with 429.
///
/// A store that fails or takes over a second answers 503 (fail closed),
/// not the default fail-open: the demo counts what the limit admitted, and
/// a Redis hiccup must show up as a failure rather than as admissions.
pub async fn start_http<St: Store>(quota: Quota, store: St) -> Result<Running, DemoError> {
    start_http_for(&Algorithm::ALL, quota, store).await
}

/// [`start_http`] with a route for each of `algorithms` only: a store that
/// supports some algorithms (the local-first store) refuses to build a
/// layer with the others.
pub async fn start_http_for<St: Store>(
    algorithms: &[Algorithm],
    quota: Quota,
    store: St,
) -> Result<Running, DemoError> {
    let mut limits = RateLimitLayer::builder()
        .key(GlobalKey)
        .store(store)
        .store_timeout(Duration::from_secs(1))
        .on_store_error(OnStoreError::Closed);
    for &algorithm in algorithms {
        limits = limits.path(&http_path(algorithm), [limit(algorithm, quota)]);
    }
    let limits = limits
        .try_build()
        .map_err(DemoError::context("cannot build the demo's limits"))?;
    let app = Router::new()
        .route("/{algorithm}", get(|| async { "ok" }))
        .layer(limits);
    let (listener, addr) = bind().await?;
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("the HTTP server on {addr} stopped: {error}");
        }
    });
    Ok(Running { addr, task })
}

/// Starts the tonic server: gRPC's standard health service
/// (`grpc.health.v1.Health`, from tonic-health) behind one layer whose
/// route table picks the limit by the call's [`ALGORITHM_METADATA`].
/// Limited calls end `RESOURCE_EXHAUSTED` with `RetryInfo`,
/// `QuotaFailure` and the rate-limit fields as metadata.
pub async fn start_grpc<St: Store>(quota: Quota, store: St) -> Result<Running, DemoError> {
    let mut limits = tollgate_tonic::builder().key(GlobalKey).store(store);
    for algorithm in Algorithm::ALL {
        limits = limits.route(
            move |request| {
                request
                    .headers
                    .get(ALGORITHM_METADATA)
                    .is_some_and(|value| value.as_bytes() == algorithm.name().as_bytes())
            },
            [limit(algorithm, quota)],
        );
    }
    let limits = limits.build();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let (listener, addr) = bind().await?;
    let task = tokio::spawn(async move {
        let served = Server::builder()
            .layer(limits)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await;
        if let Err(error) = served {
            eprintln!("the gRPC server on {addr} stopped: {error}");
        }
    });
    Ok(Running { addr, task })
}
