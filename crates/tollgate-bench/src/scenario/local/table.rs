//! The local scenario's own tables (parts 1 to 4), as they go into
//! `BENCHMARKS.md` beside its rows.

use super::Local;
use super::setup::{FLOOD, GCRA_BURST, HOT_RATE, Kind, RATE, TASKS, YIELD_EVERY};
use std::fmt::Write as _;
use tollgate_core::Algorithm;

impl Local {
    /// The scenario's own tables (parts 1 to 4), as they go into
    /// `BENCHMARKS.md`.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "Decisions per second (medians of alternating rounds) and the time of one decision \
             (medians of the rounds' percentiles), one instance, {TASKS} tasks, one key, GCRA \
             {HOT_RATE}/s (never reached), `Store::check` called directly, a yield every \
             {YIELD_EVERY} decisions.\n\n\
             | store | decisions/s | rounds (lowest–highest) | × MemoryStore | × RedisStore | p50 | p99 | Redis calls per decision | decisions that waited |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (i, kind) in Kind::ALL.iter().enumerate() {
            let (decisions, calls, waited) = self.counts[i];
            let (calls, waited) = match kind {
                Kind::Exact | Kind::Periodic => (
                    format!("1 per {:.0}", decisions as f64 / calls.max(1) as f64),
                    format!("{:.3} %", 100.0 * waited as f64 / decisions.max(1) as f64),
                ),
                Kind::Memory => ("none".to_string(), "–".to_string()),
                Kind::Redis => ("1".to_string(), "all".to_string()),
            };
            let lowest = self.rounds[i].iter().copied().fold(f64::INFINITY, f64::min);
            let highest = self.rounds[i].iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0}–{:.0} | {:.3} | {:.1} | {} | {} | {calls} | {waited} |",
                kind.label(),
                self.rates[i],
                lowest,
                highest,
                self.rates[i] / self.rates[0],
                self.rates[i] / self.rates[3],
                time(self.latency[i].0),
                time(self.latency[i].1),
            );
        }
        out.push_str(
            "\nRedis calls per decision, 4 instances × 16 tasks, steady load (requests evenly \
             spaced), limit 1,000/s (GCRA: burst 1,000), 0.5 s warm-up then the time measured.\n\n\
             | mode | algorithm | load | seconds | decisions | refused | calls (stats) | calls (server) | \
             calls per decision | decisions per call | lapsed | held at the end |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for s in &self.steady {
            let exact = s.mode == "exact";
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} % | {:.2} | {} | {} | {} | {} | {:.4} | {:.0} | {} | {} |",
                s.mode,
                s.algorithm,
                s.fraction * 100.0,
                s.seconds,
                s.decisions,
                s.refused,
                s.calls,
                s.server_calls,
                s.calls as f64 / s.decisions.max(1) as f64,
                s.decisions as f64 / s.calls.max(1) as f64,
                if exact {
                    s.lapsed.to_string()
                } else {
                    "–".into()
                },
                if exact {
                    s.unspent.to_string()
                } else {
                    "–".into()
                },
            );
        }
        let _ = write!(
            out,
            "\nOver-admission, 4 instances × 16 tasks flooding one key for {:.1} s; GCRA \
             {RATE}/s with a burst of {GCRA_BURST} (allowed: burst + rate × duration), fixed \
             window {RATE} per 1 s (allowed: {RATE} × windows reached).\n\n\
             | algorithm | mode | admitted | allowed | over-admission at the end | most over at any moment | lapsed | held at the end |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
            FLOOD.as_secs_f64()
        );
        for f in &self.floods {
            let mode = match f.interval_ms {
                None => "exact".to_string(),
                Some(ms) => format!("periodic {ms} ms"),
            };
            let exact = f.interval_ms.is_none();
            let allowed = match f.algorithm {
                Algorithm::FixedWindow => format!("{} ({} windows)", f.allowed, f.windows),
                _ => format!("{} ({:.2} s)", f.allowed, f.seconds),
            };
            let _ = writeln!(
                out,
                "| {} | {mode} | {} | {allowed} | {:+} | {:+} | {} | {} |",
                f.algorithm,
                f.admitted,
                f.over(),
                f.peak,
                if exact {
                    f.lapsed.to_string()
                } else {
                    "–".into()
                },
                if exact {
                    f.unspent().to_string()
                } else {
                    "–".into()
                },
            );
        }
        out
    }
}

/// A time in ns for a table: ns, µs or ms.
fn time(ns: f64) -> String {
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}
