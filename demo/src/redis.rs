//! `demo --redis URL`: the trace against app instances that share their
//! counters in Redis, beside one instance alone and two that do not share;
//! then (see [`local`]) two instances sharing a limit with and without the
//! local-first store.

use super::clients::{self, Reply};
use super::local::{self, LocalComparison};
use super::servers;
use super::trace::{self, Trace};
use super::{Config, DemoError, progress_bar, schedule};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tollgate::MemoryStore;
use tollgate_core::{Algorithm, Quota};
use tollgate_redis::RedisStore;

/// The answers one instance gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests sent to it.
    pub offered: usize,
    /// Let through (200).
    pub admitted: usize,
    /// Limited (429).
    pub rejected: usize,
    /// Anything else: Redis failing (503, the demo fails closed), a broken
    /// connection.
    pub failed: usize,
    /// Of the failures, the 503s: Redis did not answer within a second
    /// ([`Reply::unavailable`]).
    pub unavailable: usize,
}

impl Counts {
    fn add(&mut self, reply: &Reply) {
        self.offered += 1;
        match reply {
            Reply::Admitted(_) => self.admitted += 1,
            Reply::Rejected(_) => self.rejected += 1,
            Reply::Failed(_) => self.failed += 1,
        }
        if reply.unavailable() {
            self.unavailable += 1;
        }
    }

    /// Counts `replies`, request `i` having gone to instance `i % n`.
    fn per_instance<const N: usize>(replies: &[Reply]) -> [Counts; N] {
        let mut counts = [Counts::default(); N];
        for (i, reply) in replies.iter().enumerate() {
            counts[i % N].add(reply);
        }
        counts
    }
}

/// One algorithm, three ways.
#[derive(Clone, Debug)]
pub struct RedisResult {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// What the algorithm admits of the trace alone, in memory, at the
    /// trace's exact times: the limit's own answer.
    pub ideal: usize,
    /// One instance, counters in Redis.
    pub one: Counts,
    /// Two instances, one Redis, the same key prefix: one limit between
    /// them. Requests alternate between the two.
    pub shared: [Counts; 2],
    /// Two instances, each counting in its own memory: the limit twice.
    pub separate: [Counts; 2],
}

impl RedisResult {
    /// What the two sharing instances admitted together.
    pub fn shared_admitted(&self) -> usize {
        self.shared.iter().map(|c| c.admitted).sum()
    }

    /// What the two separate instances admitted together.
    pub fn separate_admitted(&self) -> usize {
        self.separate.iter().map(|c| c.admitted).sum()
    }

    /// Requests that failed anywhere.
    pub fn failed(&self) -> usize {
        self.one.failed
            + self.shared.iter().map(|c| c.failed).sum::<usize>()
            + self.separate.iter().map(|c| c.failed).sum::<usize>()
    }

    /// Of [`failed`](Self::failed), the 503s ([`Reply::unavailable`]).
    pub fn unavailable(&self) -> usize {
        self.one.unavailable
            + self.shared.iter().map(|c| c.unavailable).sum::<usize>()
            + self.separate.iter().map(|c| c.unavailable).sum::<usize>()
    }
}

/// What `--redis` found.
#[derive(Debug)]
pub struct RedisComparison {
    /// The Redis URL.
    pub url: String,
    /// The key prefix of this run (fresh each run, so no state is left
    /// over from an earlier one).
    pub prefix: String,
    /// The trace each setup was offered.
    pub trace: Trace,
    /// One per algorithm, in [`Algorithm::ALL`] order.
    pub results: Vec<RedisResult>,
    /// The second part: two instances sharing a limit with and without the
    /// local-first store.
    pub local: LocalComparison,
}

/// The local-first part's limit: ten times the demo's quota over the same
/// period, so that a reservation can hold more than one unit.
pub fn local_quota(quota: Quota) -> Quota {
    Quota::new(quota.limit().saturating_mul(10), quota.period()).unwrap_or(quota)
}

/// A Redis store at `url` under `prefix`, or an error that names the URL
/// (redacted).
pub(super) async fn connect(url: &str, prefix: String) -> Result<RedisStore, DemoError> {
    RedisStore::builder(url)
        .prefix(prefix)
        .connect()
        .await
        .map_err(DemoError::context(&format!(
            "cannot use Redis at {}",
            tollgate_redis::redacted(url)
        )))
}

/// Runs the trace through every algorithm three ways at once: one instance
/// on Redis; two instances on the same Redis (two connections, one key
/// prefix), requests alternating; two instances with memory stores.
pub async fn run(url: &str, config: &Config) -> Result<RedisComparison, DemoError> {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let prefix = format!("tollgate-demo:{millis}");
    let one =
        servers::start_http(config.quota, connect(url, format!("{prefix}:one")).await?).await?;
    let shared = [
        servers::start_http(
            config.quota,
            connect(url, format!("{prefix}:shared")).await?,
        )
        .await?,
        servers::start_http(
            config.quota,
            connect(url, format!("{prefix}:shared")).await?,
        )
        .await?,
    ];
    let separate = [
        servers::start_http(config.quota, MemoryStore::new()).await?,
        servers::start_http(config.quota, MemoryStore::new()).await?,
    ];

    let trace = Trace::bursty(config.quota);
    let (start_ns, start) = schedule(config.quota);
    let progress = progress_bar(
        config.progress,
        3 * Algorithm::ALL.len() * trace.arrivals.len(),
    );
    let shared_trace = Arc::new(trace.clone());
    let mut runs = Vec::new();
    for algorithm in Algorithm::ALL {
        let path = servers::http_path(algorithm);
        let setups: [Vec<SocketAddr>; 3] = [
            vec![one.addr],
            shared.iter().map(|s| s.addr).collect(),
            separate.iter().map(|s| s.addr).collect(),
        ];
        let handles = setups.map(|addrs| {
            let (trace, bar, path) = (shared_trace.clone(), progress.clone(), path.clone());
            tokio::spawn(async move {
                clients::drive(&trace, start, &bar, |i| {
                    clients::http_get(addrs[i % addrs.len()], path.clone())
                })
                .await
            })
        });
        runs.push((algorithm, handles));
    }
    let mut results = Vec::new();
    for (algorithm, [alone, together, apart]) in runs {
        let task = || DemoError::context("a client task failed");
        let alone = alone.await.map_err(task())?;
        let together = together.await.map_err(task())?;
        let apart = apart.await.map_err(task())?;
        results.push(RedisResult {
            algorithm,
            ideal: trace::ideal_admissions(algorithm, &trace, start_ns).len(),
            one: Counts::per_instance::<1>(&alone)[0],
            shared: Counts::per_instance(&together),
            separate: Counts::per_instance(&apart),
        });
    }
    progress.finish_and_clear();
    // The servers stop here, before the next part starts.
    drop((one, shared, separate));
    let local = local::run(url, &prefix, local_quota(config.quota), config.progress).await?;
    Ok(RedisComparison {
        url: url.to_owned(),
        prefix,
        trace,
        results,
        local,
    })
}

/// The `--redis` report.
pub fn render(comparison: &RedisComparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Redis at {} (key prefix {}), quota {} per algorithm, one global key each.",
        comparison.url, comparison.prefix, comparison.trace.quota
    );
    let _ = writeln!(out, "Trace: {}.", comparison.trace.describe());
    let _ = writeln!(
        out,
        "The same trace, at the same moments, to three setups: one instance on Redis; \
         two instances sharing that Redis\n(requests alternate between them); two \
         instances each counting in its own memory.\n"
    );
    let _ = writeln!(
        out,
        "{:<21} {:>7} | {:>12} | {:>22} | {:>22}",
        "algorithm", "offered", "one instance", "two sharing (a + b)", "two in memory (a + b)"
    );
    for r in &comparison.results {
        let _ = writeln!(
            out,
            "{:<21} {:>7} | {:>12} | {:>22} | {:>22}",
            r.algorithm.name(),
            r.one.offered,
            r.one.admitted,
            format!(
                "{} ({} + {})",
                r.shared_admitted(),
                r.shared[0].admitted,
                r.shared[1].admitted
            ),
            format!(
                "{} ({} + {})",
                r.separate_admitted(),
                r.separate[0].admitted,
                r.separate[1].admitted
            ),
        );
    }
    let total = |f: &dyn Fn(&RedisResult) -> usize| comparison.results.iter().map(f).sum::<usize>();
    let (one, shared, separate) = (
        total(&|r| r.one.admitted),
        total(&|r| r.shared_admitted()),
        total(&|r| r.separate_admitted()),
    );
    let _ = writeln!(
        out,
        "\nIn all: one instance admitted {one}; two instances sharing Redis {shared}; \
         two instances in memory {separate}."
    );
    let over: Vec<String> = comparison
        .results
        .iter()
        .filter(|r| r.shared_admitted() > r.one.admitted)
        .map(|r| {
            format!(
                "{} (+{})",
                r.algorithm.name(),
                r.shared_admitted() - r.one.admitted
            )
        })
        .collect();
    if over.is_empty() {
        let _ = writeln!(
            out,
            "For every algorithm the two sharing instances together admitted no more than \
             one instance alone."
        );
    } else {
        // The setups run at the same moments only as far as the machine
        // allows: a request landing a hair either side of a slot, or
        // delayed by a busy scheduler, can move an admission. Said plainly
        // rather than hidden.
        let _ = writeln!(
            out,
            "The two sharing instances admitted more than one instance alone for: {} \
             (real time: a request on the edge of a slot, or delayed by a busy machine, \
             can fall either way).",
            over.join(", ")
        );
    }
    let failed = total(&|r| r.failed());
    if failed > 0 {
        let _ = writeln!(
            out,
            "{failed} requests failed (503 when Redis did not answer in time: the demo fails closed)."
        );
    }
    let _ = writeln!(out, "\n{}", local::render(&comparison.local));
    out
}
