//! layer in process: a `GET /` through an axum `Router` with and without
//! the layer, allowed path and rejected path, vs tower_governor with the
//! same quota and the same key (the peer IP, from axum's `ConnectInfo`).
//!
//! Each batch builds a fresh router (fresh limiter state), sends three
//! untimed requests (they exhaust the quota of the rejected rows; the last
//! checks the status is the one the row claims to measure), then times `n`
//! requests, each built, called and its response awaited and handed to
//! `black_box` (the body is not read, on either side), on a current-thread
//! tokio runtime. The router is prepared as `axum::serve`
//! prepares it (`with_state`), so each request calls the layered service
//! rather than rebuilding it. The router without a layer runs in the same
//! rounds: the added cost of a layer on the allowed path is (with −
//! without) round by round, and the figure is the median of those
//! differences. The rejected path is compared whole, rejection included:
//! without a layer there is no rejection to subtract.
//!
//! The scenario runs in five child processes (`--child layer`), and each
//! row's figures are the medians of theirs: the rounds cancel the
//! machine's drift within a process, not the luck of one process (where
//! its code, stack and maps landed), which moved one binary's rows by up
//! to ±10 %.
//!
//! A router with a layer that does nothing (tower's `Identity`) runs in
//! the same rounds: axum wraps and boxes every route once more for any
//! layer, and clones the layered service for every request, so part of
//! each limiter's added cost is axum's. The row "above an empty layer"
//! takes that share off both sides (with − empty, round by round), leaving
//! what each limiter's own code costs.
//!
//! Headers are compared like for like: tollgate without headers vs
//! tower_governor's default (none on allowed responses), and tollgate's
//! default (the IETF draft's `RateLimit-Policy` and `RateLimit`) vs
//! tower_governor's `use_headers` (`x-ratelimit-limit`/`-remaining`). A
//! rejection carries headers on both sides by default (`Retry-After` and the
//! draft fields; `retry-after` and `x-ratelimit-after`).

use crate::measure::{Settings, Side, alternate, differences, ns_per_op, run_child};
use crate::report::{Better, Outcome, median};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, StatusCode};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::{PeerIp, RateLimitLayer, headers::HeaderStyle};
use tollgate_core::Quota;
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// The shape of a router under test.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// The bare router: the baseline.
    NoLayer,
    /// The router with a layer that does nothing (tower's `Identity`):
    /// what axum charges for any layer (each route wrapped and boxed once
    /// more), the floor under both rate limiters' added cost.
    EmptyLayer,
    /// tollgate with a header style.
    Tollgate(HeaderStyle),
    /// tower_governor, with (`true`) or without its `use_headers`.
    TowerGovernor(bool),
}

/// Whether a router's quota lets every request through or none past the
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// 1,000,000,000 per second: never exhausted.
    Allowed,
    /// 1 per hour with a burst of 1: every request after the first is denied.
    Rejected,
}

/// The request both sides see: `GET /` from 10.0.0.1, as axum's
/// `into_make_service_with_connect_info` would hand it over.
pub fn request() -> Request<Body> {
    let mut request = Request::builder()
        .uri("/")
        .body(Body::empty())
        .expect("a valid request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([10, 0, 0, 1], 4000))));
    request
}

/// A hello-world router.
pub(crate) fn app() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

/// The router of `variant` with the quota of `path`. Shared with the HTTP
/// scenario, so both measure the same stacks.
pub fn router(variant: Variant, path: Path) -> Router {
    let (quota, interval, burst) = match path {
        Path::Allowed => (
            Quota::new(1_000_000_000, Duration::from_secs(1)).expect("a valid quota"),
            Duration::from_nanos(1),
            1_000_000_000,
        ),
        Path::Rejected => (
            Quota::per_hour(1).with_burst(1).expect("a valid quota"),
            Duration::from_secs(3600),
            1,
        ),
    };
    match variant {
        Variant::NoLayer => app(),
        Variant::EmptyLayer => app().layer(tower::layer::util::Identity::new()),
        Variant::Tollgate(headers) => app().layer(
            RateLimitLayer::builder()
                .quota("api", quota)
                .key(PeerIp)
                .headers(headers)
                .build(),
        ),
        Variant::TowerGovernor(false) => {
            let config = GovernorConfigBuilder::default()
                .period(interval)
                .burst_size(burst)
                .finish()
                .expect("a valid config");
            app().layer(GovernorLayer::new(Arc::new(config)))
        }
        Variant::TowerGovernor(true) => {
            let config = GovernorConfigBuilder::default()
                .period(interval)
                .burst_size(burst)
                .use_headers()
                .finish()
                .expect("a valid config");
            app().layer(GovernorLayer::new(Arc::new(config)))
        }
    }
}

/// The status every timed request of `variant` on `path` must get.
pub fn expected_status(variant: Variant, path: Path) -> StatusCode {
    match (variant, path) {
        (Variant::NoLayer | Variant::EmptyLayer, _) | (_, Path::Allowed) => StatusCode::OK,
        (_, Path::Rejected) => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// One batch: ns per request through a fresh router.
fn batch(runtime: &tokio::runtime::Runtime, variant: Variant, path: Path, n: u64) -> f64 {
    // What `axum::serve` does (`into_make_service` calls `with_state`): turn
    // every handler into a route once, so a request does not re-apply the
    // layers to its handler (which would time building each layer's
    // service, not calling it).
    let router = router(variant, path).with_state::<()>(());
    runtime.block_on(async move {
        for _ in 0..2 {
            black_box(router.clone().oneshot(request()).await.expect("infallible"));
        }
        let status = router
            .clone()
            .oneshot(request())
            .await
            .expect("infallible")
            .status();
        let expected = expected_status(variant, path);
        assert_eq!(status, expected, "{variant:?} on the {path:?} path");
        let mut service = router;
        let start = Instant::now();
        for _ in 0..n {
            let response = service.call(request()).await.expect("infallible");
            black_box(response);
        }
        ns_per_op(start, n)
    })
}

/// One row of this scenario: what it compares (every figure is ns per
/// request, lower is better), the bound where there is one, and
/// the anchor in words.
struct RowSpec {
    name: &'static str,
    target: Option<f64>,
    against: &'static str,
}

/// The rows, in the order [`measure_rows`] gives their figures.
const ROWS: [RowSpec; 7] = [
    RowSpec {
        name: "layer: allowed, added cost, no headers",
        target: Some(1.0),
        against: "tower_governor",
    },
    RowSpec {
        name: "layer: allowed, added cost, with headers",
        target: Some(1.0),
        against: "tower_governor use_headers",
    },
    RowSpec {
        name: "layer: allowed, above an empty layer, no headers",
        target: None,
        against: "tower_governor",
    },
    RowSpec {
        name: "layer: allowed, empty layer, added cost",
        target: None,
        against: "tower_governor's added cost",
    },
    RowSpec {
        name: "layer: allowed, whole request, no headers",
        target: None,
        against: "tower_governor",
    },
    RowSpec {
        name: "layer: allowed, tollgate vs no layer",
        target: None,
        against: "no layer",
    },
    RowSpec {
        name: "layer: rejected, whole request",
        target: Some(0.1),
        against: "tower_governor",
    },
];

/// How many processes measure the scenario. Odd, so that each median is
/// one process's figure.
///
/// One process's figures carry that process's luck: where its code, stack
/// and maps landed. Within a process the rounds agree closely; from one
/// process to the next, the same binary's added cost moved by up to ±10 %
/// here, most of it on the anchor's side (tower_governor's 136–156 ns in
/// three processes, tollgate's 155–167). Each row is therefore the median
/// over processes of each side's figure.
const PROCESSES: usize = 5;

/// Runs the scenario: `PROCESSES` children of this program each measure
/// every row (`--child layer`), and each row's figures are the medians of
/// theirs.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let runs: Vec<Vec<(f64, f64)>> = (0..PROCESSES).map(|_| spawn(settings)).collect();
    ROWS.iter()
        .enumerate()
        .map(|(i, spec)| {
            let ours: Vec<f64> = runs.iter().map(|run| run[i].0).collect();
            let anchor: Vec<f64> = runs.iter().map(|run| run[i].1).collect();
            let each: Vec<String> = runs
                .iter()
                .map(|run| format!("{:.3}", run[i].0 / run[i].1))
                .collect();
            eprintln!("  {}: each process's ratio {}", spec.name, each.join(", "));
            let outcome = Outcome::new(
                spec.name,
                median(&ours),
                median(&anchor),
                "ns/request",
                Better::Lower,
            )
            .against(spec.against);
            match spec.target {
                Some(bound) => outcome.target(bound),
                None => outcome,
            }
        })
        .collect()
}

/// Runs one `--child layer` of this program and reads its figures.
fn spawn(settings: Settings) -> Vec<(f64, f64)> {
    let text = run_child("layer", settings);
    let figures: Vec<(f64, f64)> = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("child layer's figures {text:?}: {e}"));
    assert_eq!(figures.len(), ROWS.len(), "child layer's figures {text:?}");
    figures
}

/// The body of a `--child layer` process: prints each row's figures
/// (tollgate's, the anchor's) as a JSON array of pairs.
pub fn child(settings: Settings) {
    let figures = measure_rows(settings);
    println!(
        "{}",
        serde_json::to_string(&figures).expect("figures serialize")
    );
}

/// Each row's figures in this process, in the order of `ROWS`:
/// (tollgate's, the anchor's).
pub fn measure_rows(settings: Settings) -> Vec<(f64, f64)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut rows = Vec::with_capacity(ROWS.len());

    // Allowed: the baseline, then like-for-like pairs. The added cost is the
    // difference of two figures about four times its size, so drift of the
    // machine's speed between batches is most of its noise: many short
    // batches side by side (tens of milliseconds each), and the median of
    // the per-round differences.
    let (rounds, n) = settings.pick((101, 20_000), (41, 10_000));
    let variants = [
        Variant::NoLayer,
        Variant::Tollgate(HeaderStyle::NONE),
        Variant::TowerGovernor(false),
        Variant::Tollgate(HeaderStyle::default()),
        Variant::TowerGovernor(true),
        Variant::EmptyLayer,
    ];
    let figures = measure(&runtime, &variants, Path::Allowed, rounds, n);
    let added = |i: usize| median(&differences(&figures[i], &figures[0]));
    // What each limiter adds above a layer that does nothing: its own work,
    // without axum's share of wrapping a route in one more layer.
    let own = |i: usize| median(&differences(&figures[i], &figures[5]));
    rows.push((added(1), added(2)));
    rows.push((added(3), added(4)));
    rows.push((own(1), own(2)));
    rows.push((added(5), added(2)));
    rows.push((median(&figures[1]), median(&figures[2])));
    rows.push((median(&figures[3]), median(&figures[0])));

    // Rejected: fewer requests, as tower_governor takes ~18 µs to reject.
    let rounds = settings.rounds();
    let n: u64 = settings.pick(50_000, 20_000);
    let variants = [
        Variant::Tollgate(HeaderStyle::default()),
        Variant::TowerGovernor(false),
    ];
    let figures = measure(&runtime, &variants, Path::Rejected, rounds, n);
    // No "added cost" here: without a layer the handler runs and answers
    // 200, so (rejection − handler) is not what the layer adds. The whole
    // request, rejection included, is compared instead.
    rows.push((median(&figures[0]), median(&figures[1])));
    rows
}

/// Every variant's batches over alternating rounds, in the order given.
fn measure(
    runtime: &tokio::runtime::Runtime,
    variants: &[Variant],
    path: Path,
    rounds: usize,
    n: u64,
) -> Vec<Vec<f64>> {
    let mut closures: Vec<Box<dyn FnMut() -> f64 + '_>> = variants
        .iter()
        .map(|&variant| {
            Box::new(move || batch(runtime, variant, path, n)) as Box<dyn FnMut() -> f64>
        })
        .collect();
    let mut sides: Vec<Side<'_>> = closures.iter_mut().map(|c| &mut **c as Side<'_>).collect();
    alternate(rounds, &mut sides)
}
