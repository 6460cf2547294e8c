//! Results: the medians of a scenario, the JSON rows, the Markdown table.

use serde::Serialize;
use std::fmt::Write as _;

/// One line of the JSON file: exactly the five fields the issue asks for,
/// so that any tool reading the file needs nothing else.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// What was measured, e.g. `"core: GCRA, atomic cell, allowed"`.
    pub scenario: String,
    /// tollgate's median.
    pub ours: f64,
    /// The anchor's median, measured in the same rounds.
    pub anchor: f64,
    /// The unit of `ours` and `anchor` (`ns/check`, `requests/s`, …).
    pub unit: String,
    /// `ours / anchor`. Whether lower or higher is better depends on the
    /// unit: see [`Better`].
    pub ratio: f64,
}

/// Which way a ratio is good. Times and bytes: lower; rates: higher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// A cost (time per operation, bytes per key): below 1.0 tollgate wins.
    Lower,
    /// A rate (operations per second): above 1.0 tollgate wins.
    Higher,
}

/// A row with what it takes to judge it: its direction and, for the rows the
/// issue sets a goal for, the bound the ratio must meet.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The figures.
    pub row: Row,
    /// Which way is good.
    pub better: Better,
    /// The ratio the issue asks for (at most, for [`Better::Lower`]; at
    /// least, for [`Better::Higher`]), when it asks for one.
    pub target: Option<f64>,
    /// What the anchor is, in words, for the table (`"governor direct"`).
    pub anchor_name: String,
    /// The ratio before rounding, which the target is judged on.
    exact_ratio: f64,
}

impl Outcome {
    /// An outcome from two medians; the ratio is computed here so that it
    /// is always `ours / anchor`.
    pub fn new(scenario: &str, ours: f64, anchor: f64, unit: &str, better: Better) -> Self {
        Outcome {
            row: Row {
                scenario: scenario.to_string(),
                ours: round(ours),
                anchor: round(anchor),
                unit: unit.to_string(),
                ratio: round(ratio(ours, anchor)),
            },
            better,
            target: None,
            anchor_name: String::new(),
            exact_ratio: ratio(ours, anchor),
        }
    }

    /// Sets the issue's bound for this row.
    pub fn target(mut self, bound: f64) -> Self {
        self.target = Some(bound);
        self
    }

    /// Names the anchor.
    pub fn against(mut self, anchor: &str) -> Self {
        self.anchor_name = anchor.to_string();
        self
    }

    /// Whether the row meets its target; `None` when it has none. A row
    /// without a meaningful ratio (NaN) never meets it.
    pub fn met(&self) -> Option<bool> {
        let bound = self.target?;
        let ratio = self.exact_ratio;
        Some(match self.better {
            Better::Lower => ratio <= bound,
            Better::Higher => ratio >= bound,
        })
    }

    /// The verdict column: `≤ 1.0 met`, `≥ 0.7 MISSED`, or empty.
    pub fn verdict(&self) -> String {
        match (self.target, self.met()) {
            (Some(bound), Some(met)) => {
                let sign = match self.better {
                    Better::Lower => "≤",
                    Better::Higher => "≥",
                };
                format!("{sign} {bound} {}", if met { "met" } else { "MISSED" })
            }
            _ => String::new(),
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// NaN for none. Medians, not means: one round disturbed by another process
/// on a shared machine must not move the figure.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// `ours / anchor`; NaN (written as `null` in JSON) when either is not
/// positive, rather than an infinity or a negative that would look like a
/// result.
pub fn ratio(ours: f64, anchor: f64) -> f64 {
    // A cost or a rate of zero or less (an added cost can come out
    // negative on a noisy machine) is no measurement: no ratio.
    if anchor > 0.0 && ours > 0.0 {
        ours / anchor
    } else {
        f64::NAN
    }
}

/// Four significant digits: more would be noise, and a shorter file diffs
/// better from one run to the next.
fn round(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let digits = 4 - 1 - x.abs().log10().floor() as i32;
    // Scale by an exact power of ten in the direction that keeps it exact.
    if digits >= 0 {
        let scale = 10f64.powi(digits);
        (x * scale).round() / scale
    } else {
        let scale = 10f64.powi(-digits);
        (x / scale).round() * scale
    }
}

/// The JSON file: an array of rows, pretty-printed.
pub fn to_json(outcomes: &[Outcome]) -> String {
    let rows: Vec<&Row> = outcomes.iter().map(|o| &o.row).collect();
    serde_json::to_string_pretty(&rows).expect("rows serialize")
}

/// A number for a table: thousands separated for large ones, a few decimals
/// for small ones.
fn show(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_string();
    }
    if x.abs() >= 10_000.0 {
        let digits = format!("{:.0}", x.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if x < 0.0 { format!("-{out}") } else { out }
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The Markdown table of every row, as it goes into `BENCHMARKS.md`.
pub fn to_markdown(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| scenario | tollgate | anchor | anchor is | unit | ratio | better | target |\n\
         |---|---:|---:|---|---|---:|---|---|\n",
    );
    for o in outcomes {
        let better = match o.better {
            Better::Lower => "lower",
            Better::Higher => "higher",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            o.row.scenario,
            show(o.row.ours),
            show(o.row.anchor),
            o.anchor_name,
            o.row.unit,
            if o.row.ratio.is_finite() {
                format!("{:.3}", o.row.ratio)
            } else {
                "–".to_string()
            },
            better,
            o.verdict()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn median_ignores_one_wild_round() {
        assert_eq!(median(&[10.0, 11.0, 1_000.0, 10.5, 9.5]), 10.5);
    }

    #[test]
    fn ratio_is_ours_over_anchor() {
        assert_eq!(ratio(50.0, 100.0), 0.5);
        assert!(ratio(1.0, 0.0).is_nan());
        assert!(ratio(-3.0, 100.0).is_nan());
        let negative = Outcome::new("x", -3.0, 100.0, "ns/request", Better::Lower).target(0.1);
        assert_eq!(negative.met(), Some(false), "a negative cost is no win");
        let just_over = Outcome::new("x", 1.00004, 1.0, "ns/check", Better::Lower).target(1.0);
        assert_eq!(just_over.met(), Some(false), "judged before rounding");
        let o = Outcome::new("x", 12.0, 8.0, "ns/check", Better::Lower);
        assert_eq!(o.row.ratio, 1.5);
    }

    #[test]
    fn targets_follow_the_direction() {
        let slow = Outcome::new("t", 12.0, 10.0, "ns/check", Better::Lower).target(1.0);
        assert_eq!(slow.met(), Some(false));
        assert_eq!(slow.verdict(), "≤ 1 MISSED");
        let fast = Outcome::new("r", 80.0, 100.0, "decisions/s", Better::Higher).target(0.7);
        assert_eq!(fast.met(), Some(true));
        let none = Outcome::new("n", 1.0, 1.0, "ns/check", Better::Lower);
        assert_eq!(none.met(), None);
        assert_eq!(none.verdict(), "");
    }

    #[test]
    fn json_rows_have_exactly_the_five_fields() {
        let rows = vec![
            Outcome::new("core: GCRA", 17.04, 17.6, "ns/check", Better::Lower).target(1.0),
            Outcome::new("redis", 1.0, 0.0, "decisions/s", Better::Higher),
        ];
        let value: serde_json::Value = serde_json::from_str(&to_json(&rows)).unwrap();
        let array = value.as_array().unwrap();
        assert_eq!(array.len(), 2);
        let first = array[0].as_object().unwrap();
        let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["anchor", "ours", "ratio", "scenario", "unit"]);
        assert_eq!(first["scenario"], "core: GCRA");
        assert_eq!(first["ours"], 17.04);
        assert_eq!(first["unit"], "ns/check");
        assert_eq!(first["ratio"], 0.9682);
        // An undefined ratio is null, never a fake number.
        assert!(array[1]["ratio"].is_null());
    }

    #[test]
    fn rounding_keeps_four_significant_digits() {
        assert_eq!(round(123_456.0), 123_500.0);
        assert_eq!(round(0.012_346), 0.012_35);
        assert_eq!(round(0.0), 0.0);
    }

    #[test]
    fn markdown_separates_thousands() {
        assert_eq!(show(1_234_567.0), "1,234,567");
        assert_eq!(show(17.04), "17.0");
        assert_eq!(show(0.5), "0.50");
        let table = to_markdown(&[Outcome::new("a", 1.0, 2.0, "ns", Better::Lower).against("b")]);
        assert!(table.contains("| a | 1.00 | 2.00 | b | ns | 0.500 | lower |  |"));
    }
}
