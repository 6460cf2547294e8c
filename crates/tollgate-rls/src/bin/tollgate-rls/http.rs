//! The binary's HTTP listeners: `--http` answers envoyproxy/ratelimit's
//! `/json` check and `/healthcheck`; `--metrics-listen` serves the
//! counters as Prometheus text on `/metrics`.

use crate::Failure;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tollgate_rls::RateLimitServer;
use tollgate_rls::json::{request_from_json, response_to_json};
use tollgate_store::BoxStore;

type Server = Arc<RateLimitServer<BoxStore>>;

/// Binds `addr` and returns the address bound and the task that serves
/// `router` on it until the process ends.
async fn listen(
    addr: SocketAddr,
    what: &str,
    router: Router,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), Failure> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::Startup(format!("cannot listen on {addr} for {what}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::Startup(format!("cannot read the {what} address: {e}")))?;
    let what = what.to_owned();
    let serve = async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "the {what} listener stopped");
        }
    };
    Ok((bound, serve))
}

/// `/json` and `/healthcheck` on `addr`.
pub(crate) async fn checks(
    addr: SocketAddr,
    server: Server,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), Failure> {
    let router = Router::new()
        .route("/json", post(json))
        .route("/healthcheck", get(|| async { "OK" }))
        .with_state(server);
    listen(addr, "HTTP checks", router).await
}

/// `POST /json`: a `RateLimitRequest` in JSON, answered with the
/// `RateLimitResponse` in JSON: 200 when `OK`, 429 when `OVER_LIMIT`, as
/// envoyproxy/ratelimit answers; 400 with the reason for a body that is
/// not a request, or a request the service refuses (no domain, …).
async fn json(State(server): State<Server>, body: Bytes) -> Response {
    let request = match request_from_json(&body) {
        Ok(request) => request,
        Err(reason) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not a RateLimitRequest: {reason}\n"),
            )
                .into_response();
        }
    };
    let response = match server.should_rate_limit(tonic::Request::new(request)).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return (StatusCode::BAD_REQUEST, format!("{}\n", status.message())).into_response();
        }
    };
    let code = match Code::try_from(response.overall_code) {
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::OK,
    };
    let body = response_to_json(&response).to_string();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Installs a Prometheus recorder (before the rules are loaded: each
/// rule registers its counters when it is), and `/metrics` on `addr`.
pub(crate) async fn metrics(
    addr: SocketAddr,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), Failure> {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| Failure::Startup(format!("cannot install the metrics recorder: {e}")))?;
    tollgate_store::describe_metrics();
    tollgate_redis::describe_metrics();
    tollgate_local::describe_metrics();
    tollgate_rls::stats::describe();
    tollgate_rls::quota::metrics::describe();
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let text = handle.render();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    listen(addr, "metrics", router).await
}
