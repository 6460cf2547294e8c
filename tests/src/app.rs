//! A stand-in app: a handler that answers 200 with an empty body, behind
//! the layer under test.

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

/// The app type the tests drive: cloneable, shareable between tasks.
pub type App = BoxCloneSyncService<Request<()>, Response<String>, Infallible>;

/// `layer` around a handler that always answers 200.
pub fn behind<L>(layer: L) -> App
where
    L: Layer<BoxCloneSyncService<Request<()>, Response<String>, Infallible>>,
    L::Service: Service<Request<()>, Response = Response<String>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    <L::Service as Service<Request<()>>>::Future: Send + 'static,
{
    let handler = BoxCloneSyncService::new(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    BoxCloneSyncService::new(layer.layer(handler))
}

/// Sends `request` through `app` once it is ready; returns the status.
pub async fn status(app: &mut App, request: Request<()>) -> StatusCode {
    let response = app.ready().await.expect("ready").call(request).await;
    match response {
        Ok(response) => response.status(),
        Err(never) => match never {},
    }
}
