//! What each algorithm did with the trace, and the demo's table.

use super::Demo;
use super::clients::{Reply, Seen};
use super::record::Record;
use super::trace::{Trace, max_in_window};
use std::fmt::Write as _;
use std::time::Duration;
use tollgate_core::Algorithm;

/// One algorithm's results over both transports.
#[derive(Clone, Debug)]
pub struct AlgorithmResult {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Over HTTP, through the axum app.
    pub http: RunResult,
    /// Over gRPC, through the tonic server.
    pub grpc: RunResult,
}

/// What one client offered one algorithm, what it saw, and what the server
/// recorded.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    /// Requests sent.
    pub offered: usize,
    /// Requests let through, as the client saw them.
    pub admitted: usize,
    /// Requests limited, as the client saw them.
    pub rejected: usize,
    /// Requests that ended otherwise (should be 0).
    pub failed: usize,
    /// The status and rate-limit fields of the first limited response.
    pub first_rejection: Option<Seen>,
    /// The status and rate-limit fields of the last response let through.
    pub last_admitted: Option<Seen>,
    /// What went wrong with the first failed request, if any did.
    pub first_failure: Option<String>,
    /// The server's decisions for this algorithm, in the order made.
    pub decisions: Vec<Record>,
    /// When each admitted request was let on, on the server's clock, in ns
    /// from the trace's start, sorted: the decision's time, and for the
    /// leaky bucket the slot the limiter gave it (the end of its hold; that
    /// the layer really holds a request until then is tested in tollgate's
    /// own layer tests).
    pub admitted_at: Vec<u64>,
    /// The most admitted requests in any one period (a sliding window over
    /// `admitted_at`).
    pub max_in_any_period: usize,
    /// How many were admitted in the period centred on the trace's window
    /// boundary (half a period either side).
    pub across_boundary: usize,
}

impl RunResult {
    /// Sums up `replies` (the client's view, in trace order) and the
    /// `records` of `algorithm`'s limit (the server's view) for a trace
    /// that started at `start_ns` on the server's clock.
    pub fn new(
        algorithm: Algorithm,
        trace: &Trace,
        start_ns: u64,
        replies: &[Reply],
        records: &[Record],
    ) -> RunResult {
        let mut result = RunResult {
            offered: replies.len(),
            ..RunResult::default()
        };
        for reply in replies {
            match reply {
                Reply::Admitted(seen) => {
                    result.admitted += 1;
                    result.last_admitted = Some(seen.clone());
                }
                Reply::Rejected(seen) => {
                    result.rejected += 1;
                    result.first_rejection.get_or_insert_with(|| seen.clone());
                }
                Reply::Failed(why) => {
                    result.failed += 1;
                    result.first_failure.get_or_insert_with(|| why.clone());
                }
            }
        }
        result.decisions = records
            .iter()
            .filter(|r| r.limit == algorithm.name())
            .cloned()
            .collect();
        result.admitted_at = result
            .decisions
            .iter()
            .filter(|r| r.allowed)
            .map(|r| r.released_at().saturating_sub(start_ns))
            .collect();
        result.admitted_at.sort_unstable();
        let period = trace.quota.period_nanos();
        result.max_in_any_period = max_in_window(&result.admitted_at, period);
        let around = trace.boundary() - period / 2..trace.boundary() + period / 2;
        result.across_boundary = result
            .admitted_at
            .iter()
            .filter(|at| around.contains(at))
            .count();
        result
    }

    /// How many requests the server admitted (its records, not the client's).
    pub fn server_admitted(&self) -> usize {
        self.admitted_at.len()
    }

    /// The shortest time between two admitted requests going on, in ns
    /// (`None` with fewer than two).
    pub fn min_spacing(&self) -> Option<u64> {
        self.admitted_at.windows(2).map(|w| w[1] - w[0]).min()
    }
}

/// Field names as the specifications spell them (on the wire they are
/// lowercase; HTTP field names are case-insensitive).
fn title(name: &str) -> &str {
    match name {
        "ratelimit-policy" => "RateLimit-Policy",
        "ratelimit" => "RateLimit",
        "retry-after" => "Retry-After",
        other => other,
    }
}

fn fields_line(seen: &Seen) -> String {
    seen.fields
        .iter()
        .map(|(name, value)| format!("{}: {value}", title(name)))
        .collect::<Vec<_>>()
        .join("  ")
}

/// A period as people write it: `1 s`, `500 ms`.
pub fn period_label(period: Duration) -> String {
    if period.subsec_nanos() == 0 {
        format!("{} s", period.as_secs())
    } else {
        format!("{} ms", period.as_millis())
    }
}

/// The demo's report: the header, the table, the fields clients saw, and
/// what the figures show.
pub fn render(demo: &Demo) -> String {
    let trace = &demo.trace;
    let quota = trace.quota;
    let period = period_label(quota.period());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Quota {quota} per algorithm, one global key each; the leaky bucket holds \
         requests until their slot (a shaper), the others reject."
    );
    let _ = writeln!(out, "Trace: {}.", trace.describe());
    let _ = writeln!(
        out,
        "HTTP: axum on http://{}/{{algorithm}}   gRPC: tonic on {} \
         (grpc.health.v1.Health/Check, metadata x-algorithm)\n",
        demo.http_addr, demo.grpc_addr
    );
    let most = format!("max in {period}");
    let groups = format!(
        "{:<22} {:>7} | {:^28} | {:^28}",
        "", "", "HTTP (axum)", "gRPC (tonic)"
    );
    let _ = writeln!(out, "{}", groups.trim_end());
    let _ = writeln!(
        out,
        "{:<22} {:>7} | {:>8} {:>8} {:>10} | {:>8} {:>8} {:>10}",
        "algorithm", "offered", "admitted", "rejected", most, "admitted", "rejected", most
    );
    for result in &demo.results {
        let (h, g) = (&result.http, &result.grpc);
        let _ = writeln!(
            out,
            "{:<22} {:>7} | {:>8} {:>8} {:>10} | {:>8} {:>8} {:>10}",
            result.algorithm.name(),
            h.offered,
            h.admitted,
            h.rejected,
            h.max_in_any_period,
            g.admitted,
            g.rejected,
            g.max_in_any_period
        );
    }
    let _ = writeln!(
        out,
        "\n\"max in {period}\": the most requests admitted in any {period} (a sliding \
         window), on the server's clock."
    );

    let _ = writeln!(out, "\nWhat an HTTP client saw on its first 429:");
    for result in &demo.results {
        match &result.http.first_rejection {
            Some(seen) => {
                let _ = writeln!(
                    out,
                    "  {:<22} {}  {}",
                    result.algorithm.name(),
                    seen.status.split(' ').next().unwrap_or_default(),
                    fields_line(seen)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {:<22} (no request was limited)",
                    result.algorithm.name()
                );
            }
        }
    }
    if let Some(seen) = demo
        .results
        .first()
        .and_then(|r| r.http.last_admitted.as_ref())
    {
        let _ = writeln!(
            out,
            "and on its last 200 ({}): {}",
            demo.results[0].algorithm.name(),
            fields_line(seen)
        );
    }
    // The fixed window's first refusal comes halfway through a window
    // (20/s against 10/s), so its RetryInfo delay is easy to check: the
    // rest of the window. (GCRA's first refusal in the steady phase can
    // fall a hair before a slot opens and show a delay of 0.000 s.)
    let fixed = demo
        .results
        .iter()
        .find(|r| r.algorithm == Algorithm::FixedWindow);
    if let Some(seen) = fixed.and_then(|r| r.grpc.first_rejection.as_ref()) {
        let _ = writeln!(
            out,
            "A gRPC client's first limited call (fixed-window): {}\n  metadata: {}",
            seen.status,
            fields_line(seen)
        );
    }

    let failures: Vec<String> = demo
        .results
        .iter()
        .flat_map(|r| {
            [("HTTP", &r.http), ("gRPC", &r.grpc)]
                .into_iter()
                .filter(|(_, run)| run.failed > 0)
                .map(move |(transport, run)| {
                    format!(
                        "  {} {transport}: {} failed, first: {}",
                        r.algorithm.name(),
                        run.failed,
                        run.first_failure.as_deref().unwrap_or("?")
                    )
                })
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\nRequests that neither passed nor were limited:");
        for line in failures {
            let _ = writeln!(out, "{line}");
        }
    }

    let _ = writeln!(out);
    let limit = quota.limit();
    let of = |algorithm: Algorithm| demo.results.iter().find(|r| r.algorithm == algorithm);
    if let Some(fixed) = of(Algorithm::FixedWindow) {
        let _ = writeln!(
            out,
            "fixed-window let {} through within {period} across the boundary at {} \
             (limit {limit}: up to 2x).",
            fixed.http.across_boundary,
            period_label(Duration::from_nanos(trace.boundary())),
        );
    }
    if let Some(log) = of(Algorithm::SlidingLog) {
        let _ = writeln!(
            out,
            "sliding-log never let more than {} through in any {period}.",
            log.http.max_in_any_period
        );
    }
    if let Some(buckets) = of(Algorithm::SlidingWindowBuckets) {
        let _ = writeln!(
            out,
            "sliding-window-buckets never let more than {} through in any {period}.",
            buckets.http.max_in_any_period
        );
    }
    if let Some(gap) = of(Algorithm::LeakyBucket).and_then(|leaky| leaky.http.min_spacing()) {
        let _ = writeln!(
            out,
            "leaky-bucket scheduled requests at least {:.1} ms apart (one every {:.1} ms \
             at the quota's rate) and held each until its slot.",
            gap as f64 / 1e6,
            quota.emission_interval_nanos() as f64 / 1e6
        );
    }
    out
}
