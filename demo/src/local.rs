//! `demo --redis URL`, second part: one limit shared by two instances
//! through Redis, three ways — one Redis call per request (the server's
//! `--local off`), the local-first store's exact mode (`--local exact`) and
//! its periodic mode (`--local periodic=100`) — with what they admitted,
//! the Redis calls they made per request, and the latency their clients
//! saw.

use super::clients::{self, Reply, Timed};
use super::servers;
use super::trace::{self, Trace};
use super::{DemoError, progress_bar, schedule};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Policy, Store};
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::{LocalFirst, LocalMode, RedisStore};

/// How the two instances share their limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// The plain Redis store: one call per request (the block cache answers
    /// for a key Redis refused, until its retry time).
    OneCallPerRequest,
    /// The local-first store, exact mode: capacity reserved from Redis.
    Exact,
    /// The local-first store, periodic mode: counts synchronised every
    /// interval.
    Periodic(Duration),
}

impl Sharing {
    /// The three, in the order the report shows them; periodic at its
    /// default interval.
    pub const ALL: [Sharing; 3] = [
        Sharing::OneCallPerRequest,
        Sharing::Exact,
        Sharing::Periodic(Duration::from_millis(100)),
    ];

    /// The playground server's `--local` value for it: `off`, `exact`,
    /// `periodic=100`.
    pub fn label(self) -> String {
        match self {
            Sharing::OneCallPerRequest => "off".into(),
            Sharing::Exact => "exact".into(),
            Sharing::Periodic(interval) => format!("periodic={}", interval.as_millis()),
        }
    }

    /// An instance's store, over its own connection to `url`.
    async fn instance(self, url: &str, prefix: &str) -> Result<Instance, DemoError> {
        let redis = super::redis::connect(url, prefix.to_owned()).await?;
        let local = |mode| LocalFirst::builder(redis.clone(), mode).build();
        let store = match self {
            Sharing::OneCallPerRequest => InstanceStore::Plain(redis.clone()),
            Sharing::Exact => InstanceStore::Local(local(LocalMode::Exact)),
            Sharing::Periodic(sync_interval) => {
                InstanceStore::Local(local(LocalMode::Periodic { sync_interval }))
            }
        };
        Ok(Instance { redis, store })
    }
}

/// One instance's store, and the Redis store under it (which counts the
/// calls).
struct Instance {
    redis: RedisStore,
    store: InstanceStore,
}

enum InstanceStore {
    Plain(RedisStore),
    Local(LocalFirst<RedisStore>),
}

impl Instance {
    async fn serve(
        self,
        algorithms: &[Algorithm],
        quota: Quota,
    ) -> Result<servers::Running, DemoError> {
        match self.store {
            InstanceStore::Plain(store) => servers::start_http_for(algorithms, quota, store).await,
            InstanceStore::Local(store) => servers::start_http_for(algorithms, quota, store).await,
        }
    }
}

/// What two instances sharing one way did with the trace.
#[derive(Clone, Debug)]
pub struct SharingResult {
    /// How they shared.
    pub sharing: Sharing,
    /// What the two admitted together, per algorithm, in the order of
    /// [`LocalComparison::algorithms`].
    pub admitted: Vec<usize>,
    /// Requests sent, all algorithms together.
    pub offered: usize,
    /// Requests that failed (503: Redis did not answer within a second).
    pub failed: usize,
    /// Of those, the 503s ([`Reply::unavailable`]).
    pub unavailable: usize,
    /// Script calls the two made to Redis during the trace.
    pub redis_calls: u64,
    /// Every request's latency as its client saw it, sorted.
    pub latencies: Vec<Duration>,
    /// Per algorithm, what the limit alone admits at the moments the
    /// requests were really sent (a busy machine sends some late, across
    /// a window's or a refill's boundary).
    pub ideal_as_sent: Vec<usize>,
    /// The same at the moments their answers came back: a request is
    /// decided between the two, and one held up on its way can be decided
    /// after a boundary it was sent before.
    pub ideal_as_answered: Vec<usize>,
}

impl SharingResult {
    /// Redis calls per request sent.
    pub fn calls_per_request(&self) -> f64 {
        self.redis_calls as f64 / self.offered.max(1) as f64
    }

    /// The latency below which a share `q` (0 to 1) of requests were
    /// answered: 0.5 for the median, 0.99 for p99.
    pub fn latency_quantile(&self, q: f64) -> Duration {
        let last = self.latencies.len().saturating_sub(1);
        let at = ((last as f64) * q.clamp(0.0, 1.0)).round() as usize;
        self.latencies.get(at).copied().unwrap_or_default()
    }
}

/// What the local-first part of `--redis` found.
#[derive(Clone, Debug)]
pub struct LocalComparison {
    /// The trace each algorithm was offered, under each sharing.
    pub trace: Trace,
    /// The algorithms the local-first store supports (the others are not
    /// run).
    pub algorithms: Vec<Algorithm>,
    /// What each algorithm admits of the trace alone, in memory, at the
    /// trace's exact times: the limit's own answer.
    pub ideal: Vec<usize>,
    /// One per [`Sharing::ALL`], in that order.
    pub results: Vec<SharingResult>,
}

/// The algorithms a local-first store decides, as it says itself.
fn supported(store: &LocalFirst<RedisStore>, quota: Quota) -> Vec<Algorithm> {
    Algorithm::ALL
        .into_iter()
        .filter(|&algorithm| {
            let policy = Policy::new(vec![servers::limit(algorithm, quota)]);
            Store::supports(store, &policy).is_ok()
        })
        .collect()
}

/// Runs [`Trace::under_then_flood`] for `quota` through every algorithm
/// the local-first store supports, once per [`Sharing`], one after the
/// other (so each has the machine to itself): two instances, each with its
/// own connection to `url`, under one key prefix (fresh per sharing, from
/// `prefix`), requests alternating between them.
pub async fn run(
    url: &str,
    prefix: &str,
    quota: Quota,
    progress: bool,
) -> Result<LocalComparison, DemoError> {
    let trace = Trace::under_then_flood(quota);
    let mut algorithms = Vec::new();
    let mut ideal = Vec::new();
    let mut results = Vec::new();
    for (round, sharing) in Sharing::ALL.into_iter().enumerate() {
        let prefix = format!("{prefix}:local-{round}");
        let instances = [
            sharing.instance(url, &prefix).await?,
            sharing.instance(url, &prefix).await?,
        ];
        if algorithms.is_empty() {
            let probe = LocalFirst::builder(instances[0].redis.clone(), LocalMode::Exact).build();
            algorithms = supported(&probe, quota);
        }
        let counters = [instances[0].redis.clone(), instances[1].redis.clone()];
        let calls_before: u64 = counters.iter().map(RedisStore::calls).sum();
        let [a, b] = instances;
        let servers = [
            a.serve(&algorithms, quota).await?,
            b.serve(&algorithms, quota).await?,
        ];
        let addrs = [servers[0].addr, servers[1].addr];
        let (start_ns, start) = schedule(quota);
        if ideal.is_empty() {
            ideal = algorithms
                .iter()
                .map(|&algorithm| trace::ideal_admissions(algorithm, &trace, start_ns).len())
                .collect();
        }
        let replies = drive_all(&trace, &algorithms, addrs, start, progress).await?;
        let redis_calls = counters.iter().map(RedisStore::calls).sum::<u64>() - calls_before;
        drop(servers);
        let mut result = SharingResult::new(sharing, &replies, redis_calls);
        let ideal_at = |when: fn(&Timed) -> u64| -> Vec<usize> {
            algorithms
                .iter()
                .zip(&replies)
                .map(|(&algorithm, run)| {
                    // A request that failed (503) was decided by nobody:
                    // it is no arrival of the limit's.
                    let mut times: Vec<u64> = run
                        .iter()
                        .filter(|t| !matches!(t.reply, Reply::Failed(_)))
                        .map(when)
                        .collect();
                    times.sort_unstable();
                    trace::ideal_admissions_at(algorithm, quota, &times, start_ns).len()
                })
                .collect()
        };
        result.ideal_as_sent = ideal_at(|t| t.sent_at);
        result.ideal_as_answered = ideal_at(Timed::answered_at);
        results.push(result);
    }
    Ok(LocalComparison {
        trace,
        algorithms,
        ideal,
        results,
    })
}

/// The trace through every algorithm at once, alternating between the two
/// instances; the replies per algorithm.
async fn drive_all(
    trace: &Trace,
    algorithms: &[Algorithm],
    addrs: [SocketAddr; 2],
    start: tokio::time::Instant,
    progress: bool,
) -> Result<Vec<Vec<Timed>>, DemoError> {
    let bar = progress_bar(progress, algorithms.len() * trace.arrivals.len());
    let shared = Arc::new(trace.clone());
    let runs: Vec<_> = algorithms
        .iter()
        .map(|&algorithm| {
            let (trace, bar, path) = (shared.clone(), bar.clone(), servers::http_path(algorithm));
            tokio::spawn(async move {
                clients::drive_timed(&trace, start, &bar, |i| {
                    clients::http_get(addrs[i % 2], path.clone())
                })
                .await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for run in runs {
        replies.push(
            run.await
                .map_err(DemoError::context("a client task failed"))?,
        );
    }
    bar.finish_and_clear();
    Ok(replies)
}

impl SharingResult {
    fn new(sharing: Sharing, replies: &[Vec<Timed>], redis_calls: u64) -> SharingResult {
        let all = || replies.iter().flatten();
        let mut latencies: Vec<Duration> = all().map(|timed| timed.latency).collect();
        latencies.sort_unstable();
        SharingResult {
            sharing,
            admitted: replies
                .iter()
                .map(|run| {
                    run.iter()
                        .filter(|t| matches!(t.reply, Reply::Admitted(_)))
                        .count()
                })
                .collect(),
            offered: all().count(),
            failed: all()
                .filter(|t| matches!(t.reply, Reply::Failed(_)))
                .count(),
            unavailable: all().filter(|t| t.reply.unavailable()).count(),
            redis_calls,
            latencies,
            ideal_as_sent: Vec::new(),
            ideal_as_answered: Vec::new(),
        }
    }
}

/// The local-first part of the `--redis` report.
pub fn render(comparison: &LocalComparison) -> String {
    let mut out = String::new();
    let quota = comparison.trace.quota;
    let limit = quota.limit();
    let secs = |periods: u64| format!("{:.2} s", quota.period().as_secs_f64() * periods as f64);
    let _ = writeln!(
        out,
        "Local-first: one limit ({quota}) shared by two instances through Redis, three ways \
         (the server's --local flag):\n  off = one Redis call per request (a refused key is \
         cached until its retry time); exact = capacity reserved from Redis, never over the \
         limit;\n  periodic=MS = counted locally, synchronised every MS milliseconds, within \
         a documented bound of the limit."
    );
    let _ = writeln!(
        out,
        "Trace, per algorithm: {limit} requests over {} (half the rate), then {} over {} \
         (three times it), alternating between the instances; the ways run one after the \
         other.\n",
        secs(2),
        3 * limit,
        secs(1),
    );
    let labels: Vec<String> = comparison
        .results
        .iter()
        .map(|r| r.sharing.label())
        .collect();
    let _ = write!(out, "{:<24} {:>9} |", "admitted", "the limit");
    for label in &labels {
        let _ = write!(out, " {label:>12}");
    }
    let _ = writeln!(out);
    for (i, algorithm) in comparison.algorithms.iter().enumerate() {
        let _ = write!(
            out,
            "{:<24} {:>9} |",
            algorithm.name(),
            comparison.ideal.get(i).copied().unwrap_or_default()
        );
        for result in &comparison.results {
            let admitted = result.admitted.get(i).copied().unwrap_or_default();
            let _ = write!(out, " {admitted:>12}");
        }
        let _ = writeln!(out);
    }
    let row = |out: &mut String, name: &str, cell: &dyn Fn(&SharingResult) -> String| {
        let _ = write!(out, "{name:<34} |");
        for result in &comparison.results {
            let _ = write!(out, " {:>12}", cell(result));
        }
        let _ = writeln!(out);
    };
    row(&mut out, "Redis calls per request", &|r| {
        format!("{:.3}", r.calls_per_request())
    });
    row(&mut out, "client latency p50", &|r| {
        micros(r.latency_quantile(0.5))
    });
    row(&mut out, "client latency p99", &|r| {
        micros(r.latency_quantile(0.99))
    });
    let failed: usize = comparison.results.iter().map(|r| r.failed).sum();
    let _ = writeln!(
        out,
        "\"the limit\": what the algorithm admits of the trace alone, in memory, at its exact \
         times. Latency: from sending a request to reading its answer over a fresh loopback \
         connection."
    );
    if failed > 0 {
        let _ = writeln!(
            out,
            "{failed} requests failed (503 when Redis did not answer in time: the demo fails closed)."
        );
    }
    out
}

/// `412 µs`, `1.25 ms`.
fn micros(latency: Duration) -> String {
    let us = latency.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.2} ms", us / 1_000.0)
    }
}
