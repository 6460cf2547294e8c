//! A store of your own under a layer: `HashMapStore`
//! (`examples/src/custom_store.rs`), one map behind one lock, limits a
//! tower service to 3 requests a minute per `x-user`, counting only 401s.
//!
//! ```text
//! cargo run -p tollgate-examples --example custom_store
//! ```

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use tollgate::{HeaderKey, RateLimitLayer, settings::ChargeWhen};
use tollgate_core::Quota;
use tollgate_examples::custom_store::HashMapStore;
use tower::{Layer, ServiceExt, service_fn};

#[tokio::main]
async fn main() {
    // `try_build` asks the store whether it gives charges back
    // (`Store::can`): `charge_when` needs it.
    let layer = RateLimitLayer::builder()
        .quota("login", Quota::per_minute(3))
        .key(HeaderKey::new("x-user"))
        .store(HashMapStore::new())
        .charge_when(ChargeWhen::statuses("401").expect("a status list"))
        .try_build()
        .expect("HashMapStore gives charges back");
    let login = layer.layer(service_fn(|request: Request<()>| async move {
        let wrong = request.headers().contains_key("x-wrong-password");
        let status = if wrong {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::OK
        };
        Ok::<_, Infallible>(
            Response::builder()
                .status(status)
                .body(String::new())
                .unwrap(),
        )
    }));
    for (attempt, wrong) in [false, false, true, true, true, true]
        .into_iter()
        .enumerate()
    {
        let mut request = Request::get("/login").header("x-user", "alice");
        if wrong {
            request = request.header("x-wrong-password", "1");
        }
        let response = login
            .clone()
            .oneshot(request.body(()).unwrap())
            .await
            .unwrap();
        println!(
            "attempt {}: wrong password: {wrong:5} -> {}",
            attempt + 1,
            response.status()
        );
    }
}
