//! `request_info(true)`: the handler finds a `RateLimitInfo` in its
//! request, whether the store answered at once or later; shadow mode shows
//! what would have been limited; without the option there is none.

mod common;

use common::Later;
use http::{Request, Response};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::{GlobalKey, MemoryStore, RateLimitInfo, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Reports what the handler saw: `allowed remaining/limit reset_ms names`.
async fn report(request: Request<()>) -> Result<Response<String>, Infallible> {
    let body = match request.extensions().get::<RateLimitInfo>() {
        Some(info) => {
            let names: Vec<&str> = info.limits().map(|(name, _)| name).collect();
            format!(
                "{} {}/{} {} {}",
                info.allowed(),
                info.remaining(),
                info.limit(),
                info.reset_after().as_millis(),
                names.join(",")
            )
        }
        None => "none".to_owned(),
    };
    Ok(Response::new(body))
}

async fn bodies<S>(mut service: S, n: usize) -> Vec<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let mut out = Vec::new();
    for _ in 0..n {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        out.push(response.into_body());
    }
    out
}

fn builder() -> tollgate::RateLimitBuilder<GlobalKey> {
    RateLimitLayer::builder()
        .quota("api", "2/min".parse().unwrap())
        .key(GlobalKey)
}

#[tokio::test]
async fn handlers_see_the_decision_from_a_ready_or_a_pending_store() {
    let ready = builder().request_info(true).build();
    let pending = builder()
        .request_info(true)
        .store(Later(MemoryStore::new()))
        .build();
    let expected = ["true 1/2 30000 api", "true 0/2 60000 api"];
    let from_ready = bodies(ServiceBuilder::new().layer(ready).service_fn(report), 2).await;
    let from_pending = bodies(ServiceBuilder::new().layer(pending).service_fn(report), 2).await;
    // Reset times are read off a running clock: compare them to the second.
    for got in [from_ready, from_pending] {
        let rounded: Vec<String> = got.iter().map(|b| round_reset(b)).collect();
        assert_eq!(rounded, expected);
    }
}

/// Rounds the reset field (milliseconds) to whole seconds' worth.
fn round_reset(body: &str) -> String {
    let mut fields: Vec<String> = body.split(' ').map(str::to_owned).collect();
    let ms: u64 = fields[2].parse().unwrap();
    fields[2] = (Duration::from_millis(ms).as_secs_f64().round() as u64 * 1000).to_string();
    fields.join(" ")
}

#[tokio::test]
async fn shadow_mode_tells_the_handler_what_would_have_been_limited() {
    let layer = builder().request_info(true).shadow(true).build();
    let got = bodies(ServiceBuilder::new().layer(layer).service_fn(report), 3).await;
    let allowed: Vec<&str> = got.iter().map(|b| b.split(' ').next().unwrap()).collect();
    assert_eq!(allowed, ["true", "true", "false"]);
}

#[tokio::test]
async fn without_the_option_there_is_no_info() {
    let layer = builder().build();
    let got = bodies(ServiceBuilder::new().layer(layer).service_fn(report), 1).await;
    assert_eq!(got, ["none"]);
}

/// A request passed unchecked because the store failed (fail open) carries
/// no info, as documented: handlers must take it as optional.
#[tokio::test]
async fn a_request_passed_because_the_store_failed_carries_none() {
    let layer = RateLimitLayer::builder()
        .quota("api", "10/min".parse().unwrap())
        .key(GlobalKey)
        .store(common::BrokenStore::Failing)
        .request_info(true)
        .build();
    let service = ServiceBuilder::new().layer(layer).service_fn(report);
    assert_eq!(bodies(service, 1).await, ["none"]);
}
