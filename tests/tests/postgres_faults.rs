//! PostgreSQL failures under load: the database stopped as a crash would
//! (every session cut) and started again while four tasks send requests.
//! Every request is answered within the layer's store timeout (plus
//! slack) as its store-error setting says — let through (`Open`) or 503
//! (`Closed`) while the database is away — and limiting resumes by
//! itself once it is back, on fresh pooled connections.

use http::{Request, StatusCode};
use std::time::{Duration, Instant};
use tollgate::{HeaderKey, OnStoreError, RateLimitLayer};
use tollgate_cas::CasStore;
use tollgate_core::Quota;
use tollgate_postgres::PostgresBackend;
use tollgate_tests::app::{App, behind};
use tollgate_tests::postgres::PostgresServer;
use tower::ServiceExt;

const TIMEOUT: Duration = Duration::from_millis(200);
/// Generous: the test command runs on 2 cores, which other builds share,
/// and the database's restart takes them too. Still far below the pool's
/// own timeouts (5 s): an answer comes from the layer's timeout, not from
/// a connection attempt that gave up.
const SLACK: Duration = Duration::from_millis(800);

async fn app(server: &PostgresServer, on_error: OnStoreError) -> App {
    let backend = PostgresBackend::builder(server.url())
        .create_schema(true)
        .pool_size(8)
        .connect()
        .await
        .unwrap();
    let layer = RateLimitLayer::builder()
        .quota("api", "1/min".parse::<Quota>().unwrap())
        .key(HeaderKey::new("x-user"))
        .store(CasStore::new(backend))
        .store_timeout(TIMEOUT)
        .on_store_error(on_error)
        .build();
    behind(layer)
}

/// Sends one request for `user`; its status and how long it took.
async fn send(app: &App, user: &str) -> (StatusCode, Duration) {
    let request = Request::builder().header("x-user", user).body(()).unwrap();
    let started = Instant::now();
    let response = app.clone().oneshot(request).await.unwrap();
    (response.status(), started.elapsed())
}

/// Polls until the database decides again for a fresh user under a
/// 1-per-minute limit (the second request refused); how long that took.
async fn time_until_limiting_resumes(app: &App) -> Duration {
    let started = Instant::now();
    for attempt in 0.. {
        let user = format!("probe-{attempt}");
        let first = send(app, &user).await.0;
        let second = send(app, &user).await.0;
        if first == StatusCode::OK && second == StatusCode::TOO_MANY_REQUESTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "limiting never resumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_gets_the_configured_behaviour_then_limits_again() {
    for (name, on_error) in [
        ("open", OnStoreError::Open),
        ("closed", OnStoreError::Closed),
    ] {
        let mut server = PostgresServer::start();
        let app = app(&server, on_error).await;
        assert!(time_until_limiting_resumes(&app).await < Duration::from_secs(2));
        // Four tasks, each a user of its own sending twice a request
        // every 10 ms: the first of a pair passes, the second is refused,
        // while the database answers.
        let load: Vec<_> = (0..4)
            .map(|task| {
                let app = app.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for i in 0..60 {
                        let user = format!("user-{task}-{i}");
                        seen.push(send(&app, &user).await);
                        seen.push(send(&app, &user).await);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    seen
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Down as a crash would take it, for half a second, then back.
        // The harness waits on threads: out of the runtime's way.
        tokio::task::block_in_place(|| server.kill());
        let down = Instant::now();
        let mut while_down = Vec::new();
        while down.elapsed() < Duration::from_millis(500) {
            while_down.push(send(&app, "while-down").await);
        }
        tokio::task::block_in_place(|| server.start_now());
        let (mut refused, mut failed, mut slowest) = (0, 0, Duration::ZERO);
        for task in load {
            for (status, took) in task.await.unwrap() {
                slowest = slowest.max(took);
                assert!(took <= TIMEOUT + SLACK, "{name}: a request took {took:?}");
                match status {
                    StatusCode::OK => {}
                    StatusCode::TOO_MANY_REQUESTS => refused += 1,
                    StatusCode::SERVICE_UNAVAILABLE if name == "closed" => failed += 1,
                    other => panic!("{name}: {other}"),
                }
            }
        }
        // While the database was away: every request passed (open), or
        // every one got 503 (closed), none waiting past the timeout.
        assert!(!while_down.is_empty());
        for (status, took) in &while_down {
            assert!(*took <= TIMEOUT + SLACK, "{name}: a request took {took:?}");
            let expected = match name {
                "open" => StatusCode::OK,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            assert_eq!(*status, expected, "{name}: while the database was down");
        }
        let resumed = time_until_limiting_resumes(&app).await;
        println!(
            "{name}: {} requests while down, each answered as set; under load {refused} \
             refused, {failed} answered 503, the slowest in {slowest:?}; limiting resumed \
             {resumed:?} after the restart",
            while_down.len()
        );
        assert!(
            refused > 0,
            "{name}: the database limited before it went down"
        );
        assert!(
            resumed < Duration::from_secs(5),
            "{name}: limiting resumed after {resumed:?}"
        );
    }
}
