//! `tollgate-rls`: Envoy's rate limit service (RLS v3) over a tollgate
//! store, reading envoyproxy/ratelimit's configuration unchanged.
//!
//! ```text
//! --grpc ADDR              default 127.0.0.1:8081; port 0 picks one; prints "listening on grpc://ADDR" once it accepts calls
//! --config PATH            envoyproxy/ratelimit's YAML: a file, or a directory of them
//! --store URL              memory (default) | redis://HOST:PORT | rediss://… | redis+cluster://HOST:PORT[,…] |
//!                          redis+sentinel://… | postgres://USER:PASSWORD@HOST:PORT/DB; or TOLLGATE_STORE
//! --local MODE             Redis or PostgreSQL stores: off (default) | exact | periodic=MS
//! --on-store-error MODE    open (default: every descriptor OK) | closed (the call OVER_LIMIT)
//! --store-timeout-ms N     default 100: a store call given up after it, behind a circuit breaker
//! ```
//!
//! Beside `envoy.service.ratelimit.v3.RateLimitService`, the listener
//! answers `grpc.health.v1.Health` (`SERVING` for the service and for
//! the server as a whole).
//!
//! Exits 2 on a usage error (a flag, or a configuration that
//! envoyproxy/ratelimit would refuse, naming the file and the key), 1 when
//! the store cannot be reached at start.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::net::TcpListener;
use tollgate_cas::CasStore;
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_postgres::PostgresBackend;
use tollgate_redis::RedisStore;
use tollgate_rls::config::Config;
use tollgate_rls::{OnStoreError, RateLimitServer};
use tollgate_store::{BoxStore, MemoryStore, Resilient};
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

    /// open (every descriptor OK) | closed (the call OVER_LIMIT).
    #[arg(long, value_name = "MODE", default_value = "open", value_parser = parse_on_store_error)]
    on_store_error: OnStoreError,

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

fn parse_on_store_error(text: &str) -> Result<OnStoreError, String> {
    match text {
        "open" => Ok(OnStoreError::Open),
        "closed" => Ok(OnStoreError::Closed),
        _ => Err(format!("expected open or closed, not {text:?}")),
    }
}

/// Why the service did not start: a usage error (exit 2) or a store that
/// cannot be reached (exit 1).
enum Failure {
    Usage(String),
    Startup(String),
}

/// The store `args` name, assembled as tollgate's `Resilient` orders it:
/// a shared store behind a timeout and a breaker, or local-first in front
/// of it; the memory store alone.
async fn store(args: &Args) -> Result<BoxStore, Failure> {
    let timeout = Duration::from_millis(args.store_timeout_ms);
    let url = args.store.as_str();
    if url == "memory" {
        if args.local.0.is_some() {
            return Err(Failure::Usage(
                "--local needs a Redis or PostgreSQL --store: the memory store is local already"
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
        let cas = CasStore::builder(backend).retry_within(timeout).build();
        return Ok(shared(cas, args.local.0, timeout));
    }
    if url.starts_with("redis") {
        let redis = RedisStore::builder(url).connect().await.map_err(|e| {
            let message = format!("cannot use the Redis store: {e}");
            if e.is_config() {
                Failure::Usage(message)
            } else {
                Failure::Startup(message)
            }
        })?;
        return Ok(shared(redis, args.local.0, timeout));
    }
    Err(Failure::Usage(
        "--store: expected memory, a redis://, rediss://, redis+cluster:// or redis+sentinel:// \
         URL, or a postgres:// URL"
            .to_owned(),
    ))
}

/// A shared store as the service uses it: local-first in front of it
/// (which has its own bounds on every call), or behind a timeout and a
/// breaker.
fn shared<S>(store: S, local: Option<LocalMode>, timeout: Duration) -> BoxStore
where
    S: tollgate_store::shared::SharedStore,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    match local {
        Some(mode) => BoxStore::new(LocalFirst::builder(store, mode).build()),
        None => BoxStore::new(Resilient::over(store).timeout(timeout).breaker().build()),
    }
}

/// The gRPC service the binary serves.
type RlsService = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<
    RateLimitServer<BoxStore>,
>;

async fn run(args: Args) -> Result<(), Failure> {
    let config = Config::load(&args.config).map_err(|e| Failure::Usage(e.to_string()))?;
    let store = store(&args).await?;
    let listener = TcpListener::bind(args.grpc)
        .await
        .map_err(|e| Failure::Startup(format!("cannot listen on {}: {e}", args.grpc)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Startup(e.to_string()))?;
    let server = RateLimitServer::new(config, store).on_store_error(args.on_store_error);
    // A change to the files is in force within a second; one that does
    // not load leaves the last good configuration in force.
    let _follow = server.rules().follow(&args.config);
    let service = server.into_service();
    // `grpc.health.v1.Health`: the service, and the server as a whole
    // (""), serving from the start.
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RlsService>().await;
    println!("listening on grpc://{addr}");
    Server::builder()
        .add_service(health)
        .add_service(service)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown())
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
