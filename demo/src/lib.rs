//! The demo: the same bursty traffic through each algorithm,
//! over real servers on loopback, and what each let through.
//!
//! [`run`] starts an axum app and a tonic server (in-memory counters,
//! recorded by a [`RecordingStore`]), sends the [`Trace`] to every
//! algorithm over HTTP and gRPC at once, in real time, and returns a
//! [`Demo`]: what each client saw and, from the server side, when each
//! request was admitted. [`report`] prints it, [`chart`] draws it;
//! [`redis`] runs the trace against instances sharing a Redis, and
//! [`local`] compares the ways they can share it.

pub mod chart;
pub mod clients;
pub mod local;
pub mod record;
pub mod redis;
pub mod report;
pub mod servers;
pub mod trace;

pub use record::{Record, RecordingStore};
pub use report::{AlgorithmResult, RunResult};
pub use trace::Trace;

use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tollgate_core::{Algorithm, Clock, MonotonicClock, Quota};

/// Something that stopped the demo, with what it was doing.
#[derive(Debug)]
pub struct DemoError(String);

impl DemoError {
    /// For `map_err`: an error that says what failed, then why.
    pub fn context<E: fmt::Display>(what: &str) -> impl FnOnce(E) -> DemoError + '_ {
        move |error| DemoError(format!("{what}: {error}"))
    }
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DemoError {}

/// How the demo runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The quota of every algorithm; the trace is laid out in its periods.
    pub quota: Quota,
    /// Whether to draw a progress bar (indicatif hides it anyway when
    /// stderr is not a terminal).
    pub progress: bool,
    /// Where the picture goes.
    pub out_dir: PathBuf,
}

impl Config {
    /// The demo as `cargo run --bin demo` runs it: 10 requests per second,
    /// a trace of about 4 s.
    pub fn standard(out_dir: impl Into<PathBuf>) -> Config {
        Config {
            quota: Quota::per_second(10),
            progress: true,
            out_dir: out_dir.into(),
        }
    }

    /// The same at twice the speed (10 per 500 ms, about 2 s), for tests
    /// and `--quick`.
    pub fn quick(out_dir: impl Into<PathBuf>) -> Config {
        Config {
            // 10 per 500 ms is a valid quota: the limit and period are nonzero.
            quota: Quota::new(10, Duration::from_millis(500)).unwrap_or(Quota::per_second(10)),
            ..Config::standard(out_dir)
        }
    }

    /// Where [`run`] writes the picture.
    pub fn svg_path(&self) -> PathBuf {
        self.out_dir.join("algorithms.svg")
    }
}

/// How long before its start the trace is scheduled: time to be sure the
/// first request is not late.
const LEAD: Duration = Duration::from_millis(300);

/// What a run of the demo found.
#[derive(Debug)]
pub struct Demo {
    /// The trace every algorithm was offered.
    pub trace: Trace,
    /// Where the axum app listened.
    pub http_addr: SocketAddr,
    /// Where the tonic server listened.
    pub grpc_addr: SocketAddr,
    /// One result per algorithm, in [`Algorithm::ALL`] order.
    pub results: Vec<AlgorithmResult>,
    /// The picture it wrote.
    pub svg: PathBuf,
}

/// Runs the demo: servers up, the trace through every algorithm over
/// HTTP and gRPC at once, servers down, the picture written.
pub async fn run(config: &Config) -> Result<Demo, DemoError> {
    let http_store = RecordingStore::new();
    let grpc_store = RecordingStore::new();
    let http = servers::start_http(config.quota, http_store.clone()).await?;
    let grpc = servers::start_grpc(config.quota, grpc_store.clone()).await?;
    // Connected before the trace starts, so the first calls are not late.
    let channel = clients::grpc_channel(grpc.addr)
        .await
        .map_err(DemoError::context(
            "cannot connect to the demo's gRPC server",
        ))?;

    let trace = Trace::bursty(config.quota);
    let (start_ns, start) = schedule(config.quota);
    let progress = progress_bar(
        config.progress,
        2 * Algorithm::ALL.len() * trace.arrivals.len(),
    );

    let shared = Arc::new(trace.clone());
    let mut runs = Vec::new();
    for algorithm in Algorithm::ALL {
        let (trace, bar, addr) = (shared.clone(), progress.clone(), http.addr);
        let path = servers::http_path(algorithm);
        let http_run = tokio::spawn(async move {
            clients::drive(&trace, start, &bar, |_| {
                clients::http_get(addr, path.clone())
            })
            .await
        });
        let (trace, bar, channel) = (shared.clone(), progress.clone(), channel.clone());
        let grpc_run = tokio::spawn(async move {
            clients::drive(&trace, start, &bar, |_| {
                clients::grpc_check(channel.clone(), algorithm.name())
            })
            .await
        });
        runs.push((algorithm, http_run, grpc_run));
    }

    let (http_records, grpc_records) = (http_store.clone(), grpc_store.clone());
    let mut results = Vec::new();
    for (algorithm, http_run, grpc_run) in runs {
        let http_replies = http_run
            .await
            .map_err(DemoError::context("an HTTP client task failed"))?;
        let grpc_replies = grpc_run
            .await
            .map_err(DemoError::context("a gRPC client task failed"))?;
        results.push((algorithm, http_replies, grpc_replies));
    }
    progress.finish_and_clear();
    let (http_addr, grpc_addr) = (http.addr, grpc.addr);
    drop((http, grpc));

    let http_records = http_records.records();
    let grpc_records = grpc_records.records();
    let results: Vec<AlgorithmResult> = results
        .into_iter()
        .map(|(algorithm, http_replies, grpc_replies)| AlgorithmResult {
            algorithm,
            http: RunResult::new(algorithm, &trace, start_ns, &http_replies, &http_records),
            grpc: RunResult::new(algorithm, &trace, start_ns, &grpc_replies, &grpc_records),
        })
        .collect();

    let svg = config.svg_path();
    chart::write_svg(&svg, &trace, &results)?;
    Ok(Demo {
        trace,
        http_addr,
        grpc_addr,
        results,
        svg,
    })
}

/// When the trace starts: on [`MonotonicClock`], the memory store's clock
/// (a multiple of the period, so the fixed window's boundaries fall on the
/// trace's whole periods), and the same moment as a tokio instant, for the
/// clients' timers.
///
/// Redis decides on its own clock (`TIME`); on the same machine that is
/// the system clock, which `MonotonicClock` starts from, so the boundaries
/// agree to well within the trace's margins.
pub fn schedule(quota: Quota) -> (u64, Instant) {
    let (clock_now, instant_now) = (MonotonicClock.now(), Instant::now());
    let start_ns = trace::aligned_start(clock_now, quota.period_nanos(), LEAD.as_nanos() as u64);
    (
        start_ns,
        instant_now + Duration::from_nanos(start_ns - clock_now),
    )
}

/// A bar over `total` requests, or a hidden one.
pub fn progress_bar(visible: bool, total: usize) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    // The template is a constant; if indicatif ever refused it, the default
    // style is fine.
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {elapsed:>3} [{bar:40}] {pos}/{len} requests answered",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}
