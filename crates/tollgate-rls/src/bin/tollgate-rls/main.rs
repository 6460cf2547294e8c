//! `tollgate-rls`: Envoy's rate limit service (RLS v3) over a tollgate
//! store, reading envoyproxy/ratelimit's configuration unchanged.
//!
//! ```text
//! --grpc ADDR              default 127.0.0.1:8081; port 0 picks one; prints "listening on grpc://ADDR" once it accepts calls
//! --config PATH            envoyproxy/ratelimit's YAML: a file, or a directory of them
//! --store URL              memory (default) | redis://HOST:PORT | rediss://… | redis+cluster://HOST:PORT[,…] |
//!                          redis+sentinel://… | postgres://USER:PASSWORD@HOST:PORT/DB; or TOLLGATE_STORE
//! --local MODE             Redis or PostgreSQL stores: off (default) | exact | periodic=MS
//! --on-store-error MODE    open (default: every descriptor OK) | closed (the call OVER_LIMIT) |
//!                          fallback (decided in this process's memory at its share of each limit);
//!                          quota streams: open and fallback go on assigning, closed assigns DENY_ALL
//! --instances N            with fallback: how many processes share the store, until it has counted them (default 1)
//! --store-timeout-ms N     default 100: a store call given up after it, behind a circuit breaker
//! --response-headers SET   draft11 (default) | legacy (X-RateLimit-*) | both | none
//! --response-dynamic-metadata
//!                          every answer carries dynamic metadata (else only a quota-mode violation's)
//! --near-limit-ratio R     default 0.8: admitted hits past this share of a limit count as near it
//! --http ADDR              envoyproxy/ratelimit's POST /json check and GET /healthcheck; prints
//!                          "listening on http://ADDR" after the gRPC line
//! --metrics-listen ADDR    Prometheus text on /metrics (each rule's counts, the stores'); prints
//!                          "metrics on http://ADDR/metrics"
//! ```
//!
//! A shared store (Redis, PostgreSQL) without `--local` sits behind a
//! timeout, a circuit breaker and a block cache (a descriptor refused
//! stays refused until its reset without asking the store); with
//! `--on-store-error fallback`, a memory store decides while it fails,
//! each process at its share of every limit (the processes counted
//! through the store, `--instances` until it has).
//!
//! Beside `envoy.service.ratelimit.v3.RateLimitService`, the listener
//! answers Envoy's rate limit quota service
//! (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService`, RLQS, from
//! the same rules and store) and `grpc.health.v1.Health` (`SERVING` for
//! both services and for the server as a whole).
//!
//! Exits 2 on a usage error (a flag, or a configuration that
//! envoyproxy/ratelimit would refuse, naming the file and the key), 1 when
//! the store cannot be reached at start.

mod http;

use clap::Parser;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tollgate_cas::CasStore;
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_postgres::PostgresBackend;
use tollgate_redis::RedisStore;
use tollgate_rls::config::Config;
use tollgate_rls::{OnStoreError, QuotaServer, RateLimitServer, ResponseHeaders};
use tollgate_store::{BoxStore, MemoryStore, Presence, Resilient, Split};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[derive(Parser, Debug)]
#[command(
    name = "tollgate-rls",
    version,
    about = "Envoy's rate limit service (RLS v3) over a tollgate store, reading \
             envoyproxy/ratelimit's configuration unchanged."
)]
struct Args {
    /// Address for gRPC calls (Envoy's `rate_limit` filter's cluster);
    /// port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,

    /// envoyproxy/ratelimit's configuration: a YAML file, or a directory
    /// of `.yaml`/`.yml` files (one domain each).
    #[arg(long, value_name = "PATH")]
    config: PathBuf,

    /// memory | redis://HOST:PORT | rediss://… | redis+cluster://… |
    /// redis+sentinel://… | postgres://USER:PASSWORD@HOST:PORT/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "memory",
        env = "TOLLGATE_STORE",
        hide_env_values = true
    )]
    store: String,

    /// Redis or PostgreSQL stores: off | exact | periodic=MS (decide in
    /// this process's memory, sharing the limits through the store).
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = parse_local)]
    local: Local,

    /// open (every descriptor OK) | closed (the call OVER_LIMIT) |
    /// fallback (decided in memory, at this process's share of each limit).
    #[arg(long, value_name = "MODE", default_value = "open", value_parser = parse_on_store_error)]
    on_store_error: StoreErrorMode,

    /// With `--on-store-error fallback`: how many processes share the
    /// store, until the store has counted them.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,

    /// Fields Envoy adds to the client's response: draft11 (RateLimit-Policy,
    /// RateLimit) | legacy (X-RateLimit-Limit, -Remaining, -Reset) | both | none.
    #[arg(long, value_name = "SET", default_value = "draft11", value_parser = parse_response_headers)]
    response_headers: ResponseHeaders,

    /// Every answer carries dynamic metadata (the call, and the passed
    /// rules' `metadata`), as envoyproxy/ratelimit's
    /// RESPONSE_DYNAMIC_METADATA; without it only a call with a
    /// quota-mode violation does.
    #[arg(long)]
    response_dynamic_metadata: bool,

    /// The share of a limit past which admitted hits count as near it
    /// (tollgate_rls_near_limit_total), from 0 to 1, as
    /// envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
    #[arg(long, value_name = "R", default_value_t = 0.8, value_parser = parse_ratio)]
    near_limit_ratio: f64,

    /// Address for envoyproxy/ratelimit's HTTP checks: `POST /json` (a
    /// RateLimitRequest in JSON; 200, or 429 when over the limit) and
    /// `GET /healthcheck`; port 0 picks a free one.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,

    /// Address for Prometheus's scrapes of `/metrics`: each rule's hits,
    /// within, near and over its limit, shadow-mode hits, and the stores'
    /// counts; port 0 picks a free one.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,

    /// A store call is given up after this many milliseconds (and a store
    /// that keeps failing is not asked, for a cool-down).
    #[arg(long, value_name = "N", default_value_t = 100)]
    store_timeout_ms: u64,
}

/// `--local`: off, or local-first in a mode.
#[derive(Clone, Copy, Debug)]
struct Local(Option<LocalMode>);

fn parse_local(text: &str) -> Result<Local, String> {
    match text {
        "off" => Ok(Local(None)),
        _ => text.parse().map(|mode| Local(Some(mode))),
    }
}

/// `--on-store-error`: the service's rule, or a fallback store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreErrorMode {
    Answer(OnStoreError),
    Fallback,
}

fn parse_on_store_error(text: &str) -> Result<StoreErrorMode, String> {
    match text {
        "open" => Ok(StoreErrorMode::Answer(OnStoreError::Open)),
        "closed" => Ok(StoreErrorMode::Answer(OnStoreError::Closed)),
        "fallback" => Ok(StoreErrorMode::Fallback),
        _ => Err(format!("expected open, closed or fallback, not {text:?}")),
    }
}

fn parse_response_headers(text: &str) -> Result<ResponseHeaders, String> {
    match text {
        "draft11" => Ok(ResponseHeaders::Draft11),
        "legacy" => Ok(ResponseHeaders::Legacy),
        "both" => Ok(ResponseHeaders::Both),
        "none" => Ok(ResponseHeaders::None),
        _ => Err(format!(
            "expected draft11, legacy, both or none, not {text:?}"
        )),
    }
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("expected a number from 0 to 1, not {text:?}")),
    }
}

/// Why the service did not start: a usage error (exit 2) or a store that
/// cannot be reached (exit 1).
pub(crate) enum Failure {
    Usage(String),
    Startup(String),
}

/// The store `args` name, assembled as tollgate's `Resilient` orders it:
/// a shared store behind a timeout, a breaker, the fallback if asked and
/// a block cache, or local-first in front of it (its own bounds on every
/// call) with the fallback if asked; the memory store alone.
async fn store(args: &Args) -> Result<BoxStore, Failure> {
    let url = args.store.as_str();
    if url == "memory" {
        if args.local.0.is_some() {
            return Err(Failure::Usage(
                "--local needs a Redis or PostgreSQL --store: the memory store is local already"
                    .to_owned(),
            ));
        }
        if args.on_store_error == StoreErrorMode::Fallback {
            return Err(Failure::Usage(
                "--on-store-error fallback needs a Redis or PostgreSQL --store: the memory \
                 store does not fail"
                    .to_owned(),
            ));
        }
        return Ok(BoxStore::new(MemoryStore::new()));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let backend = PostgresBackend::builder(url)
            .create_schema(true)
            .connect()
            .await
            .map_err(|e| {
                let message = format!(
                    "cannot use the PostgreSQL store at {}: {e}",
                    tollgate_postgres::redacted(url)
                );
                if e.is_config() {
                    Failure::Usage(message)
                } else {
                    Failure::Startup(message)
                }
            })?;
        // A write that lost its race to another process's is tried again
        // for as long as the store timeout allows.
        let cas = CasStore::builder(backend)
            .instances(args.instances)
            .retry_within(args.store_timeout())
            .build();
        let presence = cas.presence();
        return Ok(shared(cas, presence, args));
    }
    if url.starts_with("redis") {
        let redis = RedisStore::builder(url)
            .instances(args.instances)
            .connect()
            .await
            .map_err(|e| {
                let message = format!("cannot use the Redis store: {e}");
                if e.is_config() {
                    Failure::Usage(message)
                } else {
                    Failure::Startup(message)
                }
            })?;
        let presence = redis.presence();
        return Ok(shared(redis, presence, args));
    }
    Err(Failure::Usage(
        "--store: expected memory, a redis://, rediss://, redis+cluster:// or redis+sentinel:// \
         URL, or a postgres:// URL"
            .to_owned(),
    ))
}

/// A shared store as the service uses it (`store`); `presence` counts the
/// processes that share it, for the fallback's split.
fn shared<S>(store: S, presence: Presence, args: &Args) -> BoxStore
where
    S: tollgate_store::shared::SharedStore,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let timeout = args.store_timeout();
    let fallback = args.on_store_error == StoreErrorMode::Fallback;
    let split = || Split::presence(MemoryStore::new(), presence.clone());
    match (args.local.0, fallback) {
        (Some(mode), false) => BoxStore::new(LocalFirst::builder(store, mode).build()),
        (Some(mode), true) => BoxStore::new(
            Resilient::over(LocalFirst::builder(store, mode).build())
                .timeout(timeout)
                .breaker()
                .fallback(split())
                .build(),
        ),
        (None, false) => BoxStore::new(
            Resilient::over(store)
                .timeout(timeout)
                .breaker()
                .block_cache()
                .build(),
        ),
        (None, true) => BoxStore::new(
            Resilient::over(store)
                .timeout(timeout)
                .breaker()
                .fallback(split())
                .block_cache()
                .build(),
        ),
    }
}

impl Args {
    fn store_timeout(&self) -> Duration {
        Duration::from_millis(self.store_timeout_ms)
    }

    /// What the service answers when its store fails: with a fallback,
    /// the fallback's own failures (none in memory) are answered open.
    fn on_store_error(&self) -> OnStoreError {
        match self.on_store_error {
            StoreErrorMode::Answer(rule) => rule,
            StoreErrorMode::Fallback => OnStoreError::Open,
        }
    }
}

/// The gRPC service the binary serves.
type RlsService = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<
    RateLimitServer<BoxStore>,
>;

async fn run(args: Args) -> Result<(), Failure> {
    // The recorder first: each rule registers its counters when loaded.
    let metrics = match args.metrics_listen {
        Some(addr) => Some(http::metrics(addr).await?),
        None => None,
    };
    let config = Config::load(&args.config).map_err(|e| Failure::Usage(e.to_string()))?;
    let store = store(&args).await?;
    let listener = TcpListener::bind(args.grpc)
        .await
        .map_err(|e| Failure::Startup(format!("cannot listen on {}: {e}", args.grpc)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Startup(e.to_string()))?;
    let server = RateLimitServer::new(config, store.clone())
        .on_store_error(args.on_store_error())
        .response_headers(args.response_headers)
        .dynamic_metadata(args.response_dynamic_metadata)
        .near_limit_ratio(args.near_limit_ratio);
    // A change to the files is in force within a second; one that does
    // not load leaves the last good configuration in force.
    let _follow = server.rules().follow(&args.config);
    // RLQS on the same listener, from the same rules and store.
    let quota = QuotaServer::new(server.rules(), store.clone())
        .on_store_error(args.on_store_error())
        .store_timeout(args.store_timeout())
        .into_service();
    let server = Arc::new(server);
    let checks = match args.http {
        Some(addr) => Some(http::checks(addr, Arc::clone(&server)).await?),
        None => None,
    };
    let service = RlsService::from_arc(server);
    // `grpc.health.v1.Health`: the service, and the server as a whole
    // (""), serving from the start.
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RlsService>().await;
    reporter
        .set_serving::<RateLimitQuotaServiceServer<QuotaServer<BoxStore>>>()
        .await;
    // Bound before printed: a client that reads a line can connect. The
    // gRPC line first, always: scripts read it for the address.
    println!("listening on grpc://{addr}");
    // The lines after it are written so that a reader that stopped
    // reading (it had the address it wanted) cannot stop the service.
    if let Some((checks_addr, serve)) = checks {
        tokio::spawn(serve);
        let _ = writeln!(std::io::stdout(), "listening on http://{checks_addr}");
    }
    if let Some((metrics_addr, serve)) = metrics {
        tokio::spawn(serve);
        let _ = writeln!(
            std::io::stdout(),
            "metrics on http://{metrics_addr}/metrics"
        );
    }
    Server::builder()
        .add_service(health)
        .add_service(service)
        .add_service(quota)
        // Without TCP_NODELAY a small answer can wait for the client's
        // delayed acknowledgement (40 ms on Linux): every call's latency.
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown(),
        )
        .await
        .map_err(|e| Failure::Startup(e.to_string()))
}

/// Completes on Ctrl-C or SIGTERM: calls in progress finish, then the
/// process exits.
async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Writes `tracing` events to stderr (stdout carries the `listening on`
/// line scripts read): those `RUST_LOG` selects, warnings and errors
/// when it is unset.
fn install_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    install_logs();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("tollgate-rls: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Startup(message)) => {
            eprintln!("tollgate-rls: {message}");
            ExitCode::FAILURE
        }
    }
}
