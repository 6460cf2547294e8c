//! Test helpers shared by the integration tests of this crate.

use http::{Request, Response};
use std::convert::Infallible;
use std::sync::Arc;
use tollgate::{Key, Policy, Store, StoreCheck, Verdict};
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
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Verdict, Broken>> + Send>>;

    fn check(&self, _: &Arc<Policy>, _: &Key, _: u32) -> StoreCheck<Self::Future, Broken> {
        match self {
            BrokenStore::Failing => StoreCheck::Ready(Err(Broken)),
            BrokenStore::Hanging => StoreCheck::Pending(Box::pin(std::future::pending())),
        }
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
