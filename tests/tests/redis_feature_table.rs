//! The table of `docs/stores.md` — every store and wrapper against every
//! feature — computed here by trying each cell on a real Redis server
//! (and a real PostgreSQL server for the compare-and-swap store over it):
//! a layer built with the feature (refused at build, or built), an
//! operator's peek, reset and unblock, a key's own quota seen in a
//! response. The test fails when the table in the docs says otherwise,
//! and prints the table it found, so the docs cannot drift.

use http::{Request, Response};
use std::convert::Infallible;
use std::time::Duration;
use tollgate::in_flight::InFlightLayer;
use tollgate::quotas::{KeyQuotas, QuotaAnswer, StaticQuotas};
use tollgate::store::{BlockCache, BoxStore, Breaker, Fallback, Penalty, PenaltyBox, Timeout};
use tollgate::{
    HeaderKey, Key, MemoryStore, NamedLimit, Policy, RateLimitLayer, Store, settings::ChargeWhen,
};
use tollgate_cas::{CasStore, MemoryBackend};
use tollgate_core::Quota;
use tollgate_postgres::PostgresBackend;
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};
use tollgate_tests::postgres::PostgresServer;
use tollgate_tests::redis::RedisServer;
use tower::{Layer, ServiceExt, service_fn};

/// The features, as the table's columns name them.
const FEATURES: [&str; 8] = [
    "`charge_when`",
    "`pay_after`",
    "in-flight",
    "penalties",
    "admin peek / reset / unblock",
    "per-key quotas",
    "plan change keeps usage",
    "delay mode",
];

/// What trying one cell gave.
fn cell(works: bool) -> &'static str {
    if works { "yes" } else { "refused at build" }
}

/// What trying a cell that cannot be refused at build gave.
fn tried(works: bool) -> &'static str {
    if works { "yes" } else { "no" }
}

/// Every cell of `store`'s row, tried.
async fn row<St: Store>(store: St) -> Vec<&'static str> {
    let limited = || {
        RateLimitLayer::builder()
            .quota("api", Quota::per_minute(10))
            .store(store.clone())
    };
    let charge_when = limited()
        .charge_when(ChargeWhen::statuses("4xx").unwrap())
        .try_build()
        .is_ok();
    let pay_after = limited().pay_after().try_build().is_ok();
    // In-flight limits keep their own slots: the layer stands beside any
    // store's rate limit.
    let in_flight = InFlightLayer::builder()
        .max_in_flight(2)
        .try_build()
        .is_ok()
        && limited().try_build().is_ok();
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(60));
    let penalties = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .store(PenaltyBox::new(store.clone(), penalty))
        .try_build()
        .is_ok();
    let admin = admin_works(&store).await;
    let quotas = own_quota_seen(store.clone()).await;
    let carried = usage_carried(store.clone()).await;
    let delay = limited()
        .max_delay(Duration::from_millis(200))
        .try_build()
        .is_ok();
    let mut cells: Vec<&'static str> =
        [charge_when, pay_after, in_flight, penalties, admin, quotas]
            .into_iter()
            .map(cell)
            .collect();
    cells.push(tried(carried));
    cells.push(cell(delay));
    cells
}

/// A key that used 2 of its own 5 a minute, moved to 100 a minute (the
/// source changed, the key invalidated), has 97 left after its next
/// request: its usage came along (`Store::carry`).
async fn usage_carried<St: Store>(store: St) -> bool {
    use std::sync::{Arc, Mutex};
    let plan = Arc::new(Mutex::new("5/min".to_owned()));
    let source = {
        let plan = plan.clone();
        tollgate::quotas::quota_fn(move |_| plan.lock().unwrap().parse().unwrap())
    };
    let quotas = KeyQuotas::new(source);
    let Ok(layer) = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .key(HeaderKey::new("x-key"))
        .store(store)
        .quota_source(quotas.clone())
        .try_build()
    else {
        return false;
    };
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let send = || async {
        let request = Request::get("/").header("x-key", "plan").body(()).unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        let field = response.headers().get("ratelimit").cloned();
        field.map(|f| f.to_str().unwrap_or_default().to_owned())
    };
    send().await;
    send().await;
    *plan.lock().unwrap() = "100/min".to_owned();
    quotas.invalidate(&Key::from("plan"));
    send().await.is_some_and(|field| field.contains("r=97;"))
}

/// A peek, a reset and an unblock of a key that was charged all answer,
/// and after the reset the key is whole.
async fn admin_works<St: Store>(store: &St) -> bool {
    let policy = std::sync::Arc::new(Policy::new(vec![NamedLimit::new(
        "admin",
        Quota::per_minute(5),
    )]));
    let key = Key::from("admin-table");
    let charged = store.check(&policy, &key, 2).resolve().await.is_ok();
    let peeked = store.peek(&policy, &key).resolve().await.is_ok();
    let reset = store.reset(&policy, &key).await.is_ok();
    let unblocked = store.unblock(&policy, &key).await.is_ok();
    let whole = match store.peek(&policy, &key).resolve().await {
        Ok(decision) => decision.merged().remaining() == 5,
        Err(_) => false,
    };
    charged && peeked && reset && unblocked && whole
}

/// A key with a quota of its own (`pro`: 5 a minute, the layer's default
/// 10) gets it in its responses' `RateLimit-Policy` within a second.
async fn own_quota_seen<St: Store>(store: St) -> bool {
    let quotas = StaticQuotas::new().with("pro", QuotaAnswer::Quotas(vec![Quota::per_minute(5)]));
    let Ok(layer) = RateLimitLayer::builder()
        .quota("api", Quota::per_minute(10))
        .key(HeaderKey::new("x-key"))
        .store(store)
        .quota_source(KeyQuotas::new(quotas))
        .try_build()
    else {
        return false;
    };
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    for _ in 0..20 {
        let request = Request::get("/").header("x-key", "pro").body(()).unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        let policy = response.headers().get("ratelimit-policy");
        if policy.is_some_and(|p| p.to_str().unwrap_or_default().contains("q=5;")) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The table's rows, in the docs' order.
async fn table(
    server: &RedisServer,
    postgres: &PostgresServer,
) -> Vec<(&'static str, Vec<&'static str>)> {
    let redis = |prefix: &'static str| RedisStore::builder(server.url()).prefix(prefix).connect();
    let mut rows = vec![("`MemoryStore`", row(MemoryStore::new()).await)];
    let cas = CasStore::new(MemoryBackend::new());
    rows.push(("`CasStore<MemoryBackend>`", row(cas).await));
    let backend = PostgresBackend::builder(postgres.url())
        .create_schema(true)
        .connect()
        .await
        .unwrap();
    rows.push((
        "`CasStore<PostgresBackend>`",
        row(CasStore::new(backend)).await,
    ));
    rows.push((
        "`RedisStore`",
        row(redis("table-redis").await.unwrap()).await,
    ));
    let exact = LocalFirst::builder(redis("table-exact").await.unwrap(), LocalMode::Exact).build();
    rows.push(("`LocalFirst` exact", row(exact).await));
    let periodic = LocalFirst::builder(
        redis("table-periodic").await.unwrap(),
        LocalMode::periodic(),
    )
    .build();
    rows.push(("`LocalFirst` periodic", row(periodic).await));
    let timeout = Timeout::new(
        redis("table-timeout").await.unwrap(),
        Duration::from_secs(1),
    );
    rows.push(("`Timeout<RedisStore>`", row(timeout).await));
    let cache = BlockCache::new(redis("table-cache").await.unwrap());
    rows.push(("`BlockCache<RedisStore>`", row(cache).await));
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(60));
    let boxed = PenaltyBox::new(redis("table-penalty").await.unwrap(), penalty);
    rows.push(("`PenaltyBox<RedisStore>`", row(boxed).await));
    let breaker = Breaker::new(Timeout::new(
        redis("table-breaker").await.unwrap(),
        Duration::from_secs(1),
    ));
    rows.push(("`Breaker<Timeout<RedisStore>>`", row(breaker).await));
    let fallback = Fallback::new(
        Timeout::new(
            redis("table-fallback").await.unwrap(),
            Duration::from_secs(1),
        ),
        MemoryStore::new(),
    );
    rows.push((
        "`Fallback<Timeout<RedisStore>, MemoryStore>`",
        row(fallback).await,
    ));
    let erased = BoxStore::new(redis("table-box").await.unwrap());
    rows.push(("`BoxStore`", row(erased).await));
    rows
}

/// The table as markdown, as the docs hold it.
fn markdown(rows: &[(&str, Vec<&str>)]) -> String {
    let mut out = format!("| store | {} |\n", FEATURES.join(" | "));
    out.push_str(&format!("|---|{}\n", "---|".repeat(FEATURES.len())));
    for (store, cells) in rows {
        out.push_str(&format!("| {store} | {} |\n", cells.join(" | ")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_table_of_stores_and_features_is_what_each_store_does() {
    let server = RedisServer::start();
    let postgres = PostgresServer::start();
    let found = markdown(&table(&server, &postgres).await);
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/stores.md"))
        .expect("docs/stores.md");
    let start = "<!-- table: tests/tests/redis_feature_table.rs -->\n";
    let written = docs
        .split_once(start)
        .and_then(|(_, rest)| rest.split_once("<!-- end of table -->"))
        .map(|(table, _)| table)
        .expect("the table's markers");
    assert_eq!(
        written, found,
        "docs/stores.md's table differs; what each store does:\n{found}"
    );
}
