//! Plans per API key read from a file the app follows: edit the file and
//! each key's next request is decided under its new plan, no restart.
//!
//! ```sh
//! printf 'acme = 3/min\nvip = unlimited\n' > plans.txt
//! cargo run -p tollgate-examples --example plans_file -- plans.txt
//! curl -s -H 'x-api-key: acme' localhost:3000/   # 3 a minute
//! curl -s -H 'x-api-key: other' localhost:3000/  # the default, 10 a minute
//! printf 'acme = 100/min\nvip = unlimited\n' > plans.txt  # acme: 100 from now on
//! ```
//!
//! `PlanFile` reads `KEY=QUOTA` lines (`5/s;500/h`, `unlimited`,
//! `default`, `#` comments); a bad file at start is an error naming its
//! line. `follow` reads it again within about a second of a change, once
//! it is whole; a change that does not parse, or that empties the file,
//! is logged and the plans read last stay. A key the file does not name
//! gets the layer's default limit, and one moved to another plan keeps
//! what it used under the old one.

use axum::Router;
use axum::routing::get;
use tollgate::quotas::{KeyQuotas, PlanFile};
use tollgate::{HeaderKey, RateLimitLayer};
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "plans.txt".into());
    let (app, follow) = app(&path)?;
    tokio::spawn(follow);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, app, ServeLimits::default()).await?;
    Ok(())
}

/// The app, its limits per `x-api-key` from the plans file at `path`
/// (10 a minute for a key it does not name), and the task that follows
/// the file (to spawn).
pub fn app(
    path: &str,
) -> Result<(Router, impl Future<Output = ()> + Send + 'static), Box<dyn std::error::Error>> {
    let plans = PlanFile::open(path)?;
    let quotas = KeyQuotas::new(plans.book());
    let limit = RateLimitLayer::builder()
        .quota("api", "10/min".parse()?)
        .key(HeaderKey::new("x-api-key"))
        .quota_source(quotas.clone())
        .build();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);
    Ok((app, plans.follow(quotas)))
}
