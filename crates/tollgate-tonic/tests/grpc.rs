//! A real tonic server on loopback and a real tonic client: how limited
//! calls look to gRPC clients, per-method limits, metadata keys, streaming.

use std::net::SocketAddr;
use std::time::Duration;
use tollgate::core::Quota;
use tollgate::{NamedLimit, OnMissingKey, OnStoreError, RateLimitLayer, Store};
use tollgate_tonic::{GrpcRejector, MetadataKey, method};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::server::HealthReporter;
use tonic_types::StatusExt;
use tower::Layer;

/// A health service behind `layer` on a free loopback port; the server
/// stops when the returned guard drops.
struct TestServer {
    addr: SocketAddr,
    reporter: HealthReporter,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    async fn start<K, St>(layer: RateLimitLayer<K, St, GrpcRejector>) -> TestServer
    where
        K: tollgate::KeyExtractor,
        St: Store,
    {
        Self::behind(layer).await
    }

    /// The health service behind any layer that wraps a tonic service as
    /// this crate's do (a rules layer too).
    async fn behind<L>(layer: L) -> TestServer
    where
        L: Layer<tonic::service::Routes> + Clone + Send + Sync + 'static,
        L::Service: tower::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = std::convert::Infallible,
            > + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send + 'static,
    {
        let (reporter, health) = tonic_health::server::health_reporter();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = Server::builder()
                .layer(layer)
                .add_service(health)
                .serve_with_incoming(TcpIncoming::from(listener))
                .await;
        });
        TestServer {
            addr,
            reporter,
            task,
        }
    }

    async fn client(&self) -> HealthClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        HealthClient::new(channel)
    }
}

async fn check(client: &mut HealthClient<Channel>) -> Result<(), Status> {
    client
        .check(HealthCheckRequest::default())
        .await
        .map(|_| ())
}

async fn check_with_key(client: &mut HealthClient<Channel>, api_key: &str) -> Code {
    let mut request = Request::new(HealthCheckRequest::default());
    request
        .metadata_mut()
        .insert("x-api-key", api_key.parse().unwrap());
    match client.check(request).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_call_is_resource_exhausted_with_retry_info_and_quota_failure() {
    let period = Duration::from_secs(2);
    let layer = tollgate_tonic::builder()
        .quota("calls", Quota::new(3, period).unwrap())
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;

    for _ in 0..3 {
        check(&mut client).await.expect("within the quota");
    }
    let status = check(&mut client).await.expect_err("over the quota");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status
            .message()
            .starts_with("rate limit exceeded: \"calls\" (3/2s); retry in "),
        "{}",
        status.message()
    );

    let retry = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo with a delay");
    assert!(retry > Duration::ZERO && retry <= period, "{retry:?}");

    let failure = status.get_details_quota_failure().expect("QuotaFailure");
    assert_eq!(failure.violations.len(), 1);
    let violation = &failure.violations[0];
    assert_eq!(violation.subject, "ip:127.0.0.1");
    assert_eq!(violation.quota_id, "calls");
    assert_eq!(violation.quota_value, 3);

    // The rate-limit fields travel as metadata, with the name of the limit
    // that refused.
    let metadata = status.metadata();
    assert_eq!(metadata.get("violated-policies").unwrap(), "calls");
    assert_eq!(
        metadata.get("ratelimit-policy").unwrap(),
        "\"calls\";q=3;w=2"
    );
    assert!(
        metadata
            .get("ratelimit")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("\"calls\";r=0;t=")
    );
    assert!(metadata.get("retry-after").is_some());

    // After the delay a call passes.
    tokio::time::sleep(retry).await;
    check(&mut client)
        .await
        .expect("a call after the RetryInfo delay passes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_instead_of_resource_exhausted() {
    let build = |rejector: GrpcRejector, with_503: bool| {
        let builder = RateLimitLayer::builder()
            .quota("calls", Quota::per_minute(1))
            .key(tollgate_tonic::GrpcPeerIp)
            .rejector(rejector);
        if with_503 {
            builder
                .rejection_status(http::StatusCode::SERVICE_UNAVAILABLE)
                .build()
        } else {
            builder.build()
        }
    };
    for layer in [
        build(GrpcRejector::unavailable(), false),
        build(GrpcRejector::new(), true),
    ] {
        let server = TestServer::start(layer).await;
        let mut client = server.client().await;
        check(&mut client).await.unwrap();
        let status = check(&mut client).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.get_details_retry_info().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_method_limits_are_independent_of_each_other_and_of_the_default() {
    let layer = tollgate_tonic::builder()
        .quota("default", Quota::per_minute(2))
        .path(
            &method("grpc.health.v1.Health", "Check"),
            [NamedLimit::new("check", Quota::per_minute(1))],
        )
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;

    check(&mut client).await.unwrap();
    let status = check(&mut client).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.get_details_quota_failure().unwrap().violations[0].quota_id,
        "check"
    );

    // Watch falls under the default: its own budget of 2, untouched by Check.
    for _ in 0..2 {
        let mut stream = client
            .watch(HealthCheckRequest::default())
            .await
            .expect("Watch is within the default limit")
            .into_inner();
        assert!(stream.message().await.unwrap().is_some());
    }
    let status = client
        .watch(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.get_details_quota_failure().unwrap().violations[0].quota_id,
        "default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_key_has_its_own_budget_and_missing_keys_share_one() {
    let layer = tollgate_tonic::builder()
        .quota("per-key", Quota::per_minute(2))
        .key(MetadataKey::new("x-api-key"))
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;

    let a: Vec<Code> = codes_for_keys(&mut client, &["a", "a", "a"]).await;
    assert_eq!(a, [Code::Ok, Code::Ok, Code::ResourceExhausted]);
    let b: Vec<Code> = codes_for_keys(&mut client, &["b", "b", "b"]).await;
    assert_eq!(b, [Code::Ok, Code::Ok, Code::ResourceExhausted]);

    // No metadata at all: the documented default counts every such call
    // under one shared key, so leaving the key out is no way around it.
    let mut without = Vec::new();
    for _ in 0..3 {
        without.push(check(&mut client).await.map_err(|s| s.code()).err());
    }
    assert_eq!(without, [None, None, Some(Code::ResourceExhausted)]);
    let status = check(&mut client).await.unwrap_err();
    assert_eq!(
        status.get_details_quota_failure().unwrap().violations[0].subject,
        "key",
        "keys that may be secrets are not echoed"
    );
}

async fn codes_for_keys(client: &mut HealthClient<Channel>, keys: &[&str]) -> Vec<Code> {
    let mut codes = Vec::new();
    for key in keys {
        codes.push(check_with_key(client, key).await);
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_key_can_be_refused_with_a_grpc_status() {
    let layer = tollgate_tonic::builder()
        .quota("per-key", Quota::per_minute(2))
        .key(MetadataKey::new("x-api-key"))
        .on_missing_key(OnMissingKey::Reject(http::StatusCode::UNAUTHORIZED))
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;
    let status = check(&mut client).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(status.message(), "the request carries no rate-limit key");
    assert_eq!(check_with_key(&mut client, "a").await, Code::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_with_fail_closed_is_unavailable_with_retry_info() {
    // A breaker in front: one failure opens it for 30 s.
    let store = tollgate::store::Breaker::new(FailingStore)
        .failures(1)
        .cool_down(Duration::from_secs(30));
    let layer = tollgate_tonic::builder()
        .quota("calls", Quota::per_minute(10))
        .store(tollgate::store::BoxStore::new(store))
        .on_store_error(OnStoreError::Closed)
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;
    let retry_delay = |status: &Status| {
        status
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .expect("RetryInfo with a delay")
    };
    // The store's own failure: nothing knows better than 1 s.
    let status = check(&mut client).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.message(),
        "the rate limiter is unavailable; retry later"
    );
    assert_eq!(retry_delay(&status), Duration::from_secs(1));
    // The breaker now open: the time until it asks the store again.
    let status = check(&mut client).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    let delay = retry_delay(&status);
    assert!(
        delay > Duration::from_secs(25) && delay <= Duration::from_secs(30),
        "{delay:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_streaming_call_is_counted_once_when_it_starts() {
    let layer = tollgate_tonic::builder()
        .quota("calls", Quota::per_minute(2))
        .build();
    let server = TestServer::start(layer).await;
    let mut client = server.client().await;

    let mut stream = client
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    // Five messages on one stream...
    for status in [
        ServingStatus::NotServing,
        ServingStatus::Serving,
        ServingStatus::NotServing,
        ServingStatus::Serving,
    ] {
        assert!(stream.message().await.unwrap().is_some());
        server.reporter.set_service_status("", status).await;
    }
    assert!(stream.message().await.unwrap().is_some());
    // ...cost one call: one more fits, then the limit.
    check(&mut client).await.expect("the second call of two");
    assert_eq!(
        check(&mut client).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_wraps_one_generated_service() {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let layer = tollgate_tonic::builder()
        .quota("calls", Quota::per_minute(1))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(
        Server::builder()
            .add_service(layer.layer(health))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    check(&mut client).await.unwrap();
    assert_eq!(
        check(&mut client).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    task.abort();
}

/// A store that always fails: fault injection a real store cannot give.
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
    type Future = std::future::Ready<Result<tollgate::PolicyDecision, Broken>>;

    fn check(
        &self,
        _: &std::sync::Arc<tollgate::Policy>,
        _: &tollgate::Key,
        _: u32,
    ) -> tollgate::StoreReply<Self::Future, Broken> {
        tollgate::StoreReply::Ready(Err(Broken))
    }
}

/// A layer from a rules file drives a tonic service: the builder it is
/// made with brings the gRPC rejector, so a call over the rule's limit is
/// `RESOURCE_EXHAUSTED` with `RetryInfo`, like a call over a coded layer's.
#[tokio::test]
async fn a_rules_file_layer_answers_grpc_calls_with_resource_exhausted() {
    use tollgate::rules::RulesLayer;
    let rules = r#"
        [[rule]]
        name = "health"
        match = { grpc_method = "grpc.health.v1.Health/Check" }
        key = "global"
        limits = [{ name = "checks", quota = "2/min" }]
    "#;
    let layer = RulesLayer::from_toml_with(
        rules,
        RateLimitLayer::builder().rejector(GrpcRejector::new()),
    )
    .expect("valid rules");
    let server = TestServer::behind(layer).await;
    server
        .reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    let mut client = server.client().await;
    assert!(check(&mut client).await.is_ok());
    assert!(check(&mut client).await.is_ok());
    let status = check(&mut client)
        .await
        .expect_err("the third call is limited");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let retry = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo with a delay");
    // 2 a minute: the next call fits in 30 s.
    assert!(
        retry > Duration::from_secs(29) && retry <= Duration::from_secs(30),
        "{retry:?}"
    );
    assert_eq!(
        status.metadata().get("ratelimit-policy").unwrap(),
        "\"checks\";q=2;w=60"
    );
}
