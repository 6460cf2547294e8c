//! Accuracy: how far each window algorithm's decisions are from the exact
//! sliding log's, on a seeded, realistic trace at and around the limit.
//!
//! The trace ([`TraceParams`], printed with every run so that anyone can
//! rerun it): many keys, each offered a rate drawn log-uniformly between
//! 0.25× and 4× the limit, in on/off phases (exponential lengths), Poisson
//! arrivals while on, and bursts of 20–150 requests within two seconds at
//! random moments. Every request costs 1. Keys are classed by the rate they
//! were actually offered over the trace: under 0.8× the limit, at (0.8–1.25×)
//! and over (above 1.25×).
//!
//! Each algorithm runs on its own state, driven by its own decisions, on a
//! manual clock (the trace's timestamps): that is how a deployed limiter
//! behaves. Each of its decisions is compared with what the exact sliding
//! log would decide *given the same admitted history* (the requests that
//! algorithm admitted in the last period):
//!
//! - a **false admit**: the algorithm admits, the log would refuse (the
//!   period would then hold more than the limit);
//! - a **false reject**: the algorithm refuses, the log would admit.
//!
//! Both are counted as a share of all decisions for that class of keys.
//! Beside them: the **most admitted in any period** (over every key of the
//! class, any span of one period), and **admitted vs the log**: how many
//! requests the algorithm admitted in all against the exact log run on its
//! own (independent histories: the decision streams may drift apart, but
//! the totals compare).
//!
//! GCRA is shown as a reference, marked as not a window algorithm: with a
//! burst equal to the limit it refills continuously, so "false admits"
//! there mean "more than the limit in some period", which it allows by
//! design (up to twice the limit).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::Path;
use tollgate_core::{Algorithm, Gcra, Limiter, Quota, SlidingWindowBuckets};

/// What the trace is made of. [`TraceParams::default`] is the published run.
#[derive(Clone, Copy, Debug)]
pub struct TraceParams {
    /// The generator's seed.
    pub seed: u64,
    /// How many keys.
    pub keys: u32,
    /// How long the trace lasts, in seconds.
    pub seconds: u64,
    /// The limit, per minute.
    pub per_minute: u64,
    /// The range of each key's offered rate while on, as multiples of the
    /// limit (drawn log-uniformly).
    pub rate: (f64, f64),
    /// Mean length of an on phase and of an off phase, in seconds.
    pub on_off: (f64, f64),
    /// Bursts per key per minute of on time, on average.
    pub bursts_per_minute: f64,
    /// The size of a burst (uniform, inclusive), spread over two seconds.
    pub burst: (u64, u64),
}

impl Default for TraceParams {
    fn default() -> Self {
        TraceParams {
            seed: 25,
            keys: 300,
            seconds: 360,
            per_minute: 100,
            rate: (0.25, 4.0),
            on_off: (40.0, 20.0),
            bursts_per_minute: 0.5,
            burst: (20, 150),
        }
    }
}

impl std::fmt::Display for TraceParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}, {} keys, {} s, limit {}/min; offered {}–{}× the limit while on \
             (log-uniform), on/off phases of {} s / {} s on average (exponential), \
             Poisson arrivals, {} bursts per key per on-minute of {}–{} requests within 2 s",
            self.seed,
            self.keys,
            self.seconds,
            self.per_minute,
            self.rate.0,
            self.rate.1,
            self.on_off.0,
            self.on_off.1,
            self.bursts_per_minute,
            self.burst.0,
            self.burst.1
        )
    }
}

/// splitmix64: a small, well-mixed generator, seeded, with no dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

/// Where the trace starts on the clock: 17.3 s past a minute, so that
/// windows and sub-windows do not line up with it.
const START: u64 = 1_700_000_000_000_000_000 + 17_300_000_000;
const SECOND: f64 = 1e9;

/// Each key's arrival times (ns, sorted).
pub fn trace(p: &TraceParams) -> Vec<Vec<u64>> {
    let mut rng = SplitMix(p.seed);
    let end = p.seconds as f64 * SECOND;
    let limit_per_ns = p.per_minute as f64 / (60.0 * SECOND);
    (0..p.keys)
        .map(|_| {
            let factor = p.rate.0 * (p.rate.1 / p.rate.0).powf(rng.unit());
            let rate = factor * limit_per_ns;
            let mut times = Vec::new();
            // Start on or off at random, part way into the phase.
            let mut t = -rng.exp(p.on_off.0 * SECOND);
            let mut on = !rng.next().is_multiple_of(3);
            while t < end {
                let mean = if on { p.on_off.0 } else { p.on_off.1 };
                let phase_end = t + rng.exp(mean * SECOND);
                if on {
                    let mut at = t + rng.exp(1.0 / rate);
                    while at < phase_end {
                        times.push(at);
                        at += rng.exp(1.0 / rate);
                    }
                    let per_ns = p.bursts_per_minute / (60.0 * SECOND);
                    let mut burst_at = t + rng.exp(1.0 / per_ns);
                    while burst_at < phase_end {
                        let size = p.burst.0 + rng.next() % (p.burst.1 - p.burst.0 + 1);
                        for _ in 0..size {
                            times.push(burst_at + rng.unit() * 2.0 * SECOND);
                        }
                        burst_at += rng.exp(1.0 / per_ns);
                    }
                }
                t = phase_end;
                on = !on;
            }
            let mut times: Vec<u64> = times
                .into_iter()
                .filter(|&t| (0.0..end).contains(&t))
                .map(|t| START + t as u64)
                .collect();
            times.sort_unstable();
            times
        })
        .collect()
}

/// A class of keys by the rate they were offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Under 0.8× the limit.
    Under,
    /// 0.8× to 1.25×.
    At,
    /// Over 1.25×.
    Over,
}

impl Class {
    const ALL: [Class; 3] = [Class::Under, Class::At, Class::Over];

    fn label(self) -> &'static str {
        match self {
            Class::Under => "under (< 0.8×)",
            Class::At => "at (0.8–1.25×)",
            Class::Over => "over (> 1.25×)",
        }
    }

    fn of(offered: usize, p: &TraceParams) -> Class {
        let per_minute = offered as f64 * 60.0 / p.seconds as f64;
        let factor = per_minute / p.per_minute as f64;
        if factor < 0.8 {
            Class::Under
        } else if factor <= 1.25 {
            Class::At
        } else {
            Class::Over
        }
    }
}

/// The counts of one algorithm over one class of keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Keys in the class.
    pub keys: usize,
    /// Requests offered.
    pub decisions: u64,
    /// Admitted where the log (same history) would refuse.
    pub false_admits: u64,
    /// Refused where the log (same history) would admit.
    pub false_rejects: u64,
    /// Admitted in all.
    pub admitted: u64,
    /// Admitted in all by the exact log run on its own.
    pub log_admitted: u64,
    /// The most admitted in any period, over the class's keys.
    pub max_in_period: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.keys += other.keys;
        self.decisions += other.decisions;
        self.false_admits += other.false_admits;
        self.false_rejects += other.false_rejects;
        self.admitted += other.admitted;
        self.log_admitted += other.log_admitted;
        self.max_in_period = self.max_in_period.max(other.max_in_period);
    }

    fn percent(&self, n: u64) -> f64 {
        100.0 * n as f64 / self.decisions.max(1) as f64
    }

    /// False admits, % of decisions.
    pub fn false_admit_percent(&self) -> f64 {
        self.percent(self.false_admits)
    }

    /// False rejects, % of decisions.
    pub fn false_reject_percent(&self) -> f64 {
        self.percent(self.false_rejects)
    }
}

/// One algorithm's results: per class, and over all keys.
#[derive(Clone, Debug)]
pub struct AlgorithmAccuracy {
    /// The row's label.
    pub label: String,
    /// Whether it counts in windows (GCRA, shown for reference, does not).
    pub windowed: bool,
    /// Per [`Class`], in `Class::ALL` order.
    pub classes: [Tally; 3],
    /// Over every key.
    pub all: Tally,
}

/// The whole measurement.
#[derive(Clone, Debug)]
pub struct Accuracy {
    /// The trace's parameters.
    pub params: TraceParams,
    /// Requests in the trace.
    pub requests: u64,
    /// One entry per algorithm.
    pub algorithms: Vec<AlgorithmAccuracy>,
}

/// The limiters compared, with their labels.
fn limiters(quota: Quota) -> Vec<(String, bool, Limiter)> {
    let buckets = SlidingWindowBuckets::new(quota);
    vec![
        (
            "fixed-window".into(),
            true,
            Limiter::new(Algorithm::FixedWindow, quota),
        ),
        (
            "sliding-window".into(),
            true,
            Limiter::new(Algorithm::SlidingWindow, quota),
        ),
        (
            "sliding-window-buckets (60)".into(),
            true,
            Limiter::SlidingWindowBuckets(buckets),
        ),
        (
            "sliding-window-buckets (10)".into(),
            true,
            Limiter::SlidingWindowBuckets(buckets.with_sub_windows(10)),
        ),
        (
            "sliding-log".into(),
            true,
            Limiter::new(Algorithm::SlidingLog, quota),
        ),
        (
            "gcra, burst = limit (not a window algorithm)".into(),
            false,
            Limiter::Gcra(Gcra::new(quota)),
        ),
    ]
}

/// How many of `times` (sorted) the limiter admits, on its own state.
fn admitted_alone(limiter: &Limiter, times: &[u64]) -> u64 {
    let mut state = limiter.new_state();
    times
        .iter()
        .filter(|&&t| limiter.check(&mut state, t, 1).allowed())
        .count() as u64
}

/// One key through one limiter, against the log on the same history.
fn run_key(limiter: &Limiter, times: &[u64], period: u64, limit: u64) -> Tally {
    let mut state = limiter.new_state();
    // The times this limiter admitted in the last period.
    let mut window: VecDeque<u64> = VecDeque::new();
    let mut tally = Tally {
        keys: 1,
        decisions: times.len() as u64,
        ..Tally::default()
    };
    for &now in times {
        while window.front().is_some_and(|&t| now - t >= period) {
            window.pop_front();
        }
        let log_admits = (window.len() as u64) < limit;
        let admits = limiter.check(&mut state, now, 1).allowed();
        match (admits, log_admits) {
            (true, false) => tally.false_admits += 1,
            (false, true) => tally.false_rejects += 1,
            _ => {}
        }
        if admits {
            window.push_back(now);
            tally.admitted += 1;
            tally.max_in_period = tally.max_in_period.max(window.len() as u64);
        }
    }
    tally
}

/// Runs the trace through every algorithm.
pub fn measure(params: TraceParams) -> Accuracy {
    let quota = Quota::per_minute(params.per_minute);
    let (period, limit) = (quota.period_nanos(), quota.limit());
    let keys = trace(&params);
    let log = Limiter::new(Algorithm::SlidingLog, quota);
    let log_admitted: Vec<u64> = keys.iter().map(|t| admitted_alone(&log, t)).collect();
    let classes: Vec<Class> = keys.iter().map(|t| Class::of(t.len(), &params)).collect();
    let algorithms = limiters(quota)
        .into_iter()
        .map(|(label, windowed, limiter)| {
            let mut per_class = [Tally::default(); 3];
            for ((times, class), log_admitted) in keys.iter().zip(&classes).zip(&log_admitted) {
                let mut tally = run_key(&limiter, times, period, limit);
                tally.log_admitted = *log_admitted;
                let i = Class::ALL.iter().position(|c| c == class).unwrap_or(0);
                per_class[i].add(&tally);
            }
            let mut all = Tally::default();
            per_class.iter().for_each(|t| all.add(t));
            AlgorithmAccuracy {
                label,
                windowed,
                classes: per_class,
                all,
            }
        })
        .collect();
    Accuracy {
        params,
        requests: keys.iter().map(|t| t.len() as u64).sum(),
        algorithms,
    }
}

impl Accuracy {
    /// The Markdown table, with the trace's parameters above it.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "Trace: {} ({} requests). Rerun: `cargo run --release -p tollgate-bench -- --only accuracy`.\n\n\
             | algorithm | keys | false admits | false rejects | most in any 60 s | admitted vs the log |\n\
             |---|---|---:|---:|---:|---:|\n",
            self.params, self.requests
        );
        let limit = self.params.per_minute as f64;
        for a in &self.algorithms {
            let rows = std::iter::once(("all".to_string(), &a.all)).chain(
                Class::ALL
                    .iter()
                    .zip(&a.classes)
                    .map(|(c, t)| (c.label().to_string(), t)),
            );
            for (class, t) in rows {
                let _ = writeln!(
                    out,
                    "| {} | {class}: {} keys | {:.2} % | {:.2} % | {} ({:.2}×) | {:+.2} % |",
                    a.label,
                    t.keys,
                    t.false_admit_percent(),
                    t.false_reject_percent(),
                    t.max_in_period,
                    t.max_in_period as f64 / limit,
                    100.0 * (t.admitted as f64 / t.log_admitted.max(1) as f64 - 1.0),
                );
            }
        }
        out
    }

    /// The chart: false admits and false rejects per algorithm (all keys,
    /// and keys offered under 0.8× the limit), and the most admitted in any
    /// period, as an SVG.
    pub fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let n = self.algorithms.len();
        let root = SVGBackend::new(path, (1100, 120 + 70 * n as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let (left, right) = root.split_horizontally(760);
        let names: Vec<String> = self.algorithms.iter().map(|a| a.label.clone()).collect();
        let top = self
            .algorithms
            .iter()
            .flat_map(|a| [a.all.false_admit_percent(), a.all.false_reject_percent()])
            .fold(1.0f64, f64::max);
        let mut errors = ChartBuilder::on(&left)
            .caption(
                "Decisions unlike the exact log's (same history), % of all",
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(330)
            .build_cartesian_2d(0.0..top * 1.5, 0.0..n as f64)?;
        errors
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("% of decisions: red false admits, blue false rejects (light: keys under 0.8× the limit)")
            .label_style(("sans-serif", 13))
            .draw()?;
        let admit = RGBColor(214, 39, 40);
        let reject = RGBColor(31, 119, 180);
        for (i, a) in self.algorithms.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let bars = [
                (a.all.false_admit_percent(), admit.filled(), 0.72, 0.88),
                (
                    a.classes[0].false_admit_percent(),
                    admit.mix(0.35).filled(),
                    0.56,
                    0.72,
                ),
                (a.all.false_reject_percent(), reject.filled(), 0.28, 0.44),
                (
                    a.classes[0].false_reject_percent(),
                    reject.mix(0.35).filled(),
                    0.12,
                    0.28,
                ),
            ];
            for (value, style, lo, hi) in bars {
                errors.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + lo), (value, y + hi)],
                    style,
                )))?;
            }
            errors.draw_series(std::iter::once(Text::new(
                format!(
                    "admits {:.1} %, rejects {:.1} %",
                    a.all.false_admit_percent(),
                    a.all.false_reject_percent()
                ),
                (top * 0.02 + a.all.false_admit_percent(), y + 0.80),
                ("sans-serif", 12),
            )))?;
            // The name left of the axis, in the label area (pixels).
            let (x, y) = errors.backend_coord(&(0.0, y + 0.5));
            left.draw(&Text::new(
                names[i].clone(),
                (x - 8, y),
                TextStyle::from(("sans-serif", 13).into_font())
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        let limit = self.params.per_minute as f64;
        let most = self
            .algorithms
            .iter()
            .map(|a| a.all.max_in_period as f64 / limit)
            .fold(2.0f64, f64::max);
        let mut peaks = ChartBuilder::on(&right)
            .caption("Most admitted in any 60 s", ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(10)
            .build_cartesian_2d(0.0..most * 1.1, 0.0..n as f64)?;
        peaks
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("× the limit (line: the limit)")
            .label_style(("sans-serif", 13))
            .draw()?;
        for (i, a) in self.algorithms.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let ratio = a.all.max_in_period as f64 / limit;
            let color = if ratio > 1.0 {
                admit
            } else {
                RGBColor(46, 160, 67)
            };
            peaks.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.25), (ratio, y + 0.75)],
                color.filled(),
            )))?;
            peaks.draw_series(std::iter::once(Text::new(
                format!("{:.2}×", ratio),
                (ratio + most * 0.02, y + 0.5),
                ("sans-serif", 12),
            )))?;
        }
        peaks.draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, n as f64)],
            BLACK.stroke_width(1),
        )))?;
        root.present()?;
        Ok(())
    }
}

/// Runs the published trace and prints its table (stderr, with the other
/// scenarios' progress).
pub fn run() -> Accuracy {
    let accuracy = measure(TraceParams::default());
    eprintln!("{}", accuracy.to_markdown());
    accuracy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> TraceParams {
        TraceParams {
            keys: 30,
            seconds: 180,
            ..TraceParams::default()
        }
    }

    #[test]
    fn the_trace_is_seeded() {
        let p = small();
        assert_eq!(trace(&p), trace(&p));
        let other = trace(&TraceParams { seed: 26, ..p });
        assert_ne!(trace(&p), other);
    }

    #[test]
    fn the_exact_log_agrees_with_itself_and_the_buckets_never_admit_falsely() {
        let accuracy = measure(small());
        let of = |label: &str| {
            accuracy
                .algorithms
                .iter()
                .find(|a| a.label.starts_with(label))
                .unwrap()
                .all
        };
        let log = of("sliding-log");
        assert_eq!((log.false_admits, log.false_rejects), (0, 0));
        assert_eq!(log.admitted, log.log_admitted);
        assert!(log.max_in_period <= 100);
        let buckets = of("sliding-window-buckets (60)");
        assert_eq!(buckets.false_admits, 0);
        assert!(buckets.max_in_period <= 100);
        assert!(of("fixed-window").max_in_period > 100);
    }
}
