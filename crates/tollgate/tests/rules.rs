//! Limits declared in a rules file: building, the two classic scenarios
//! over HTTP, mistakes that name file, rule and field, and reloads.
#![cfg(all(feature = "rules", feature = "axum"))]

mod common;

use axum::Router;
use axum::routing::{get, post};
use common::http_over_tcp as http;
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::rules::{RulesError, RulesLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

/// A file of its own in the temp directory, removed on drop.
struct RulesFile(PathBuf);

impl RulesFile {
    fn new(text: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "tollgate-rules-{}-{}.toml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let file = RulesFile(std::env::temp_dir().join(name));
        file.write(text);
        file
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for RulesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const SCENARIOS: &str = r#"
# "500 per hour and 10 per minute"
[[rule]]
name = "reports"
match = { method = "GET", path = "/reports" }
key = "ip"
limits = [
  { name = "reports-hour", quota = "500/h" },
  { name = "reports-minute", quota = "10/min" },
]

# "10 per minute and 2 s apart"
[[rule]]
name = "login"
match = { method = "POST", path = "/login" }
limits = [
  { name = "login-minute", quota = "10/min" },
  { name = "login-spacing", quota = "1/2s" },
]
"#;

#[tokio::test]
async fn the_two_scenarios_written_as_rules_hold_over_http() {
    let file = RulesFile::new(SCENARIOS);
    let layer = RulesLayer::from_file(&file.0).expect("a valid file builds the layer");
    assert_eq!(layer.handle().rule_names(), ["reports", "login"]);
    let app = Router::new()
        .route("/reports", get(|| async { "report" }))
        .route("/login", post(|| async { "welcome" }))
        .route("/other", get(|| async { "other" }))
        .layer(layer);
    let (addr, server) = common::serve_on_loopback(app).await;

    // 500 per hour and 10 per minute: the minute binds first.
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(http(addr, "GET", "/reports").await.0);
    }
    assert_eq!(statuses, [[200; 10].as_slice(), &[429, 429]].concat());
    let (_, head) = http(addr, "GET", "/reports").await;
    assert!(
        head.contains(
            "ratelimit-policy: \"reports-hour\";q=500;w=3600, \"reports-minute\";q=10;w=60"
        ),
        "{head}"
    );
    assert!(
        head.contains("ratelimit: \"reports-hour\";r=490;"),
        "{head}"
    );

    // 10 per minute and 2 s apart: a second login at once waits for the
    // spacing, not for the minute.
    let (first, _) = http(addr, "POST", "/login").await;
    let (second, head) = http(addr, "POST", "/login").await;
    assert_eq!((first, second), (200, 429));
    assert!(
        head.contains("retry-after: 2\r\n") || head.contains("retry-after: 1\r\n"),
        "{head}"
    );
    assert!(head.contains("\"login-minute\";r=9;"), "{head}");
    assert!(head.contains("\"login-spacing\";r=0;"), "{head}");

    // No rule matches: not limited, no fields.
    for _ in 0..20 {
        let (status, head) = http(addr, "GET", "/other").await;
        assert_eq!(status, 200);
        assert!(!head.contains("ratelimit"));
    }
    server.abort();
}

/// Loads `text` from a file; the error it gives.
fn mistake(text: &str) -> (RulesError, PathBuf) {
    let file = RulesFile::new(text);
    let error = RulesLayer::from_file(&file.0).expect_err(text);
    (error, file.0.clone())
}

#[test]
fn each_kind_of_mistake_names_the_file_the_rule_and_the_field() {
    let rule = |body: &str| format!("[[rule]]\nname = \"api\"\n{body}\n");
    let limits = "limits = [{ name = \"a\", quota = \"10/min\" }]";
    let cases: Vec<(String, Option<&str>, Option<&str>, &str)> = vec![
        ("[[rule]\nname =".into(), None, None, "not valid TOML"),
        (
            "title = \"x\"".into(),
            None,
            Some("title"),
            "unknown top-level field",
        ),
        ("".into(), None, Some("rule"), "no `[[rule]]`"),
        (
            format!("[[rule]]\n{limits}"),
            Some("#1"),
            Some("name"),
            "needs a name",
        ),
        (
            rule("limits = [{ name = \"a\", quota = \"10/mni\" }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].quota"),
            "\"10/mni\"",
        ),
        (
            rule("limits = [{ name = \"a\", quota = \"10/min\", algorithm = \"bucket\" }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].algorithm"),
            "bucket",
        ),
        (
            rule("limits = [{ name = \"a\", quota = \"10/min\", burts = 2 }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].burts"),
            "unknown field",
        ),
        (
            rule("limits = [{ name = \"a\", quota = \"10/min\", burst = 0 }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].burst"),
            "",
        ),
        (
            rule("limits = [{ quota = \"10/min\" }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].name"),
            "needs a name",
        ),
        (
            rule("limits = [{ name = \"per user\", quota = \"10/min\" }]"),
            Some("\"api\" (#1)"),
            Some("limits[0].name"),
            "`-`, `_`, `.`",
        ),
        (
            format!("[[rule]]\nname = \"my api\"\n{limits}"),
            Some("#1"),
            Some("name"),
            "short token",
        ),
        (
            rule("limits = []"),
            Some("\"api\" (#1)"),
            Some("limits"),
            "needs limits",
        ),
        (
            rule(&format!("key = \"cookie\"\n{limits}")),
            Some("\"api\" (#1)"),
            Some("key"),
            "not a key kind",
        ),
        (
            rule(&format!("key = \"header:bad name\"\n{limits}")),
            Some("\"api\" (#1)"),
            Some("key"),
            "not a header name",
        ),
        (
            rule(&format!("match = {{ method = \"GE T\" }}\n{limits}")),
            Some("\"api\" (#1)"),
            Some("match.method"),
            "not an HTTP method",
        ),
        (
            rule(&format!("match = {{ path = \"login\" }}\n{limits}")),
            Some("\"api\" (#1)"),
            Some("match.path"),
            "does not start with `/`",
        ),
        (
            rule(&format!("match = {{ grpc_method = \"Check\" }}\n{limits}")),
            Some("\"api\" (#1)"),
            Some("match.grpc_method"),
            "not a gRPC method",
        ),
        (
            rule(&format!("match = {{ host = \"x\" }}\n{limits}")),
            Some("\"api\" (#1)"),
            Some("match.host"),
            "unknown condition",
        ),
        (
            rule(&format!("behaviour = \"delay\"\n{limits}")),
            Some("\"api\" (#1)"),
            Some("max_delay"),
            "needs max_delay",
        ),
        (
            rule(&format!(
                "behaviour = \"delay\"\nmax_delay = \"soon\"\n{limits}"
            )),
            Some("\"api\" (#1)"),
            Some("max_delay"),
            "not a duration",
        ),
        (
            rule(&format!("behaviour = \"block\"\n{limits}")),
            Some("\"api\" (#1)"),
            Some("behaviour"),
            "not a behaviour",
        ),
        (
            rule(&format!("colour = \"red\"\n{limits}")),
            Some("\"api\" (#1)"),
            Some("colour"),
            "unknown field",
        ),
        (
            format!("{}{}", rule(limits), rule(limits)),
            Some("\"api\" (#2)"),
            Some("name"),
            "unique",
        ),
        (
            format!("{}[[rule]]\nname = \"b\"\n{limits}\n", rule(limits)),
            Some("\"b\" (#2)"),
            Some("limits[0].name"),
            "used twice",
        ),
    ];
    for (text, rule_name, field, message) in cases {
        let (error, path) = mistake(&text);
        assert_eq!(error.file, path, "{text}");
        assert_eq!(error.rule.as_deref(), rule_name, "{text}: {error}");
        assert_eq!(error.field.as_deref(), field, "{text}: {error}");
        assert!(error.message.contains(message), "{text}: {error}");
        // The one-line form says all of it.
        let line = error.to_string();
        assert!(line.starts_with(&path.display().to_string()), "{line}");
        if let Some(field) = field {
            assert!(line.contains(&format!("field `{field}`")), "{line}");
        }
    }
    let missing = RulesLayer::from_file("/nonexistent/rules.toml").unwrap_err();
    assert!(
        missing.message.contains("cannot read the file"),
        "{missing}"
    );
}

async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
    Ok(Response::new("ok".to_owned()))
}

async fn status<S>(service: &mut S) -> StatusCode
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let request = Request::builder().uri("/x").body(()).unwrap();
    service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap()
        .status()
}

fn one_rule(quota: &str, behaviour: &str) -> String {
    rule_named("x", "x", quota, behaviour)
}

fn rule_named(rule: &str, limit: &str, quota: &str, behaviour: &str) -> String {
    format!(
        "[[rule]]\nname = \"{rule}\"\nkey = \"global\"\n{behaviour}\nlimits = [{{ name = \"{limit}\", quota = \"{quota}\" }}]\n"
    )
}

#[tokio::test]
async fn a_reload_swaps_the_rules_and_a_broken_file_keeps_the_old_ones() {
    let file = RulesFile::new(&one_rule("1/min", ""));
    let layer = RulesLayer::from_file(&file.0).unwrap();
    let handle = layer.handle();
    let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
    assert_eq!(status(&mut service).await, StatusCode::OK);
    assert_eq!(status(&mut service).await, StatusCode::TOO_MANY_REQUESTS);

    // The same rules again: counters carry on.
    handle.reload().unwrap();
    assert_eq!(status(&mut service).await, StatusCode::TOO_MANY_REQUESTS);

    // A broken file: refused with the place of the mistake; old rules stay.
    file.write(&one_rule("3/minn", ""));
    let error = handle.reload().unwrap_err();
    assert_eq!(error.field.as_deref(), Some("limits[0].quota"));
    assert_eq!(status(&mut service).await, StatusCode::TOO_MANY_REQUESTS);

    // A good new file: the new quota applies (a changed rule counts afresh).
    file.write(&one_rule("3/min", ""));
    handle.reload().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(status(&mut service).await.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);

    // Shadow: never rejects.
    handle
        .replace_with(&one_rule("1/min", "behaviour = \"shadow\""))
        .unwrap();
    for _ in 0..5 {
        assert_eq!(status(&mut service).await, StatusCode::OK);
    }
}

#[tokio::test]
async fn requests_in_flight_finish_on_the_rules_they_started_with() {
    let layer = RulesLayer::from_toml(&one_rule(
        "1/s",
        "behaviour = \"delay\"\nmax_delay = \"2s\"",
    ))
    .unwrap();
    let handle = layer.handle();
    let service = ServiceBuilder::new().layer(layer).service_fn(ok);
    let request = || Request::builder().uri("/x").body(()).unwrap();
    let first = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The second is held about a second, for its slot under the old rule.
    let held = tokio::spawn(service.clone().oneshot(request()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Meanwhile the rules change to a strict reject-only limit.
    handle
        .replace_with(&rule_named("x", "strict", "1/h", ""))
        .unwrap();
    let held = held.await.unwrap().unwrap();
    assert_eq!(held.status(), StatusCode::OK, "finished on the old rules");
    assert_eq!(held.headers()["ratelimit-policy"], "\"x\";q=1;w=1");
    let after = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(after.headers()["ratelimit-policy"], "\"strict\";q=1;w=3600");
}

#[tokio::test]
async fn a_watched_file_is_reloaded_when_it_changes() {
    let file = RulesFile::new(&one_rule("1/min", ""));
    let layer = RulesLayer::from_file(&file.0).unwrap();
    let handle = layer.handle();
    let watcher = handle.watch(Duration::from_millis(20));
    file.write(&rule_named("renamed", "x", "1/min", ""));
    let mut waited = Duration::ZERO;
    while handle.rule_names() != ["renamed"] {
        assert!(
            waited < Duration::from_secs(5),
            "the change was never picked up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    // A broken change is skipped: the rules stay.
    file.write("[[rule]]\nname = \"broken\"\n");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(handle.rule_names(), ["renamed"]);
    watcher.abort();
}

/// The rule a request got, by the limit named in its `RateLimit-Policy`
/// ("" when no rule matched).
async fn rule_for(app: &Router, method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let policy = response
        .headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    policy.split('"').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn every_kind_of_condition_selects_its_rule() {
    let rules = r#"
[[rule]]
name = "grpc"
match = { grpc_method = "pkg.Greeter/SayHello" }
key = "method"
limits = [{ name = "grpc", quota = "100/min" }]

[[rule]]
name = "user"
match = { route = "/users/{id}" }
key = ["route", "global"]
limits = [{ name = "user", quota = "100/min" }]

[[rule]]
name = "free"
match = { path = "/api/*", header = "x-plan=free" }
key = "header:x-api-key"
limits = [{ name = "free", quota = "100/min" }]

[[rule]]
name = "keyed"
match = { path = "/api/*", header = "x-api-key" }
key = "header:x-api-key"
limits = [{ name = "keyed", quota = "100/min" }]

[[rule]]
name = "writes"
match = { method = ["POST", "put"] }
key = "global"
limits = [{ name = "writes", quota = "100/min" }]
"#;
    let layer = RulesLayer::from_toml(rules).unwrap();
    let ok = || async { "ok" };
    let app = Router::new()
        .route("/pkg.Greeter/SayHello", post(ok))
        .route("/users/{id}", get(ok))
        .route("/api/items", get(ok).post(ok))
        .route("/other", get(ok).put(ok))
        .layer(layer);
    assert_eq!(
        rule_for(&app, "POST", "/pkg.Greeter/SayHello", &[]).await,
        "grpc"
    );
    assert_eq!(rule_for(&app, "GET", "/users/7", &[]).await, "user");
    let free = [("x-api-key", "k1"), ("x-plan", "free")];
    assert_eq!(rule_for(&app, "GET", "/api/items", &free).await, "free");
    let paid = [("x-api-key", "k1"), ("x-plan", "paid")];
    assert_eq!(rule_for(&app, "GET", "/api/items", &paid).await, "keyed");
    // No API key: neither /api rule; a POST falls to "writes", a GET to none.
    assert_eq!(rule_for(&app, "POST", "/api/items", &[]).await, "writes");
    assert_eq!(rule_for(&app, "GET", "/api/items", &[]).await, "");
    assert_eq!(rule_for(&app, "PUT", "/other", &[]).await, "writes");
    assert_eq!(rule_for(&app, "GET", "/other", &[]).await, "");
}

#[tokio::test]
async fn each_key_kind_counts_apart() {
    let rules = r#"
[[rule]]
name = "per-key"
key = "header:x-api-key"
limits = [{ name = "per-key", quota = "1/min" }]
"#;
    let layer = RulesLayer::from_toml(rules).unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let status = async |key: &str| {
        let request = Request::builder()
            .uri("/")
            .header("x-api-key", key)
            .body(axum::body::Body::empty())
            .unwrap();
        app.clone()
            .oneshot(request)
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(
        [status("a").await, status("a").await, status("b").await],
        [200, 429, 200]
    );
}

#[test]
fn names_follow_the_same_rule_as_the_builder() {
    // `NamedLimit::new("v1.read", …)` is a valid name; so it is in a file.
    let file = RulesFile::new(
        "[[rule]]\nname = \"v1.api\"\nlimits = [{ name = \"v1.read\", quota = \"10/min\" }]\n",
    );
    RulesLayer::from_file(&file.0).expect("dotted names are tokens");
}

#[tokio::test]
async fn every_algorithm_is_chosen_by_name_in_a_rules_file_the_interval_bucket_too() {
    use tollgate_core::Algorithm;
    // The leaky bucket shapes (a third request would wait 30 s for its
    // slot rather than be refused): it has tests of its own.
    let refusing = Algorithm::ALL
        .into_iter()
        .filter(|a| *a != Algorithm::LeakyBucket);
    for algorithm in refusing {
        let text = format!(
            "[[rule]]\nname = \"x\"\nkey = \"global\"\nlimits = [{{ name = \"x\", quota = \"2/min\", algorithm = \"{algorithm}\" }}]\n"
        );
        let layer = RulesLayer::from_toml(&text).unwrap();
        let mut service = ServiceBuilder::new().layer(layer).service_fn(ok);
        let mut statuses = Vec::new();
        let mut last = None;
        for _ in 0..3 {
            let request = Request::builder().uri("/").body(()).unwrap();
            let response = service.ready().await.unwrap().call(request).await.unwrap();
            statuses.push(response.status().as_u16());
            last = Some(response);
        }
        assert_eq!(statuses, [200, 200, 429], "{algorithm}");
        if algorithm == Algorithm::TokenBucketInterval {
            // Whole periods: both tokens come back at the minute's end.
            let last = last.unwrap();
            let policy = last.headers()["ratelimit-policy"].to_str().unwrap();
            assert_eq!(policy, "\"x\";q=2;w=60");
        }
    }
}
