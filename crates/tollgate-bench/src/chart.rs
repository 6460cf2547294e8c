//! SVG charts of the ratios (plotters).
//!
//! Two charts, because a ratio means opposite things in the two kinds of
//! row: costs (time, bytes; lower is better) and rates (per second; higher
//! is better). Each row is a bar from 1.0 (parity with the anchor) to its
//! ratio, on a log scale so that 0.5 and 2.0 are the same length. A bar is
//! green where tollgate does better than its anchor, orange where it does
//! worse; a red tick marks the target where the row has one.

use crate::report::{Better, Outcome};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use std::path::Path;

/// The file names of the two charts, under the chart directory.
pub const FILES: [(&str, Better); 2] = [
    ("ratios-cost.svg", Better::Lower),
    ("ratios-rate.svg", Better::Higher),
];

/// Draws both charts into `dir` (created if missing).
pub fn draw_all(dir: &Path, outcomes: &[Outcome]) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    for (file, better) in FILES {
        let rows: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.better == better && o.row.ratio.is_finite() && o.row.ratio > 0.0)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let title = match better {
            Better::Lower => "tollgate / anchor: time and memory (lower is better)",
            Better::Higher => "tollgate / anchor: throughput (higher is better)",
        };
        draw(&dir.join(file), title, &rows)?;
    }
    Ok(())
}

/// The x range: every ratio and target with room to spare, always
/// including parity, on round powers of ten so the axis reads well.
fn x_range(rows: &[&Outcome]) -> (f64, f64) {
    let values = rows
        .iter()
        .flat_map(|o| [Some(o.row.ratio), o.target])
        .flatten();
    let (lo, hi) = values.fold((1.0f64, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    (
        10f64.powi((lo / 1.5).log10().floor() as i32).min(0.1),
        10f64.powi((hi * 1.5).log10().ceil() as i32).max(10.0),
    )
}

/// One chart of `rows`, first row at the top.
fn draw(path: &Path, title: &str, rows: &[&Outcome]) -> Result<(), Box<dyn std::error::Error>> {
    let n = rows.len();
    let height = 90 + 34 * n as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = x_range(rows);
    // Segment 0 is at the bottom: row i goes in segment n-1-i.
    let names: Vec<String> = rows.iter().rev().map(|o| o.row.scenario.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(400)
        .build_cartesian_2d((lo..hi).log_scale(), (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("ratio tollgate / anchor (log scale, 1 = parity; red tick = target)")
        .label_style(("sans-serif", 14))
        .draw()?;
    let green = RGBColor(46, 160, 67);
    let orange = RGBColor(230, 126, 34);
    for (i, o) in rows.iter().enumerate() {
        let slot = n - 1 - i;
        let ratio = o.row.ratio;
        let wins = match o.better {
            Better::Lower => ratio <= 1.0,
            Better::Higher => ratio >= 1.0,
        };
        let color = if wins { green } else { orange };
        let mut bar = Rectangle::new(
            [
                (1.0, SegmentValue::Exact(slot)),
                (ratio, SegmentValue::Exact(slot + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(6, 6, 0, 0);
        chart.draw_series(std::iter::once(bar))?;
        if let Some(target) = o.target {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![
                    (target, SegmentValue::Exact(slot)),
                    (target, SegmentValue::Exact(slot + 1)),
                ],
                RED.stroke_width(3),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            format!("{ratio:.3}"),
            (ratio.max(1.0) * 1.08, SegmentValue::CenterOf(slot)),
            ("sans-serif", 13),
        )))?;
    }
    // Parity.
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
        BLACK.stroke_width(1),
    )))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_holds_parity_ratios_and_targets() {
        let a = Outcome::new("a", 2.0, 100.0, "ns", Better::Lower).target(0.1);
        let b = Outcome::new("b", 300.0, 100.0, "ns", Better::Lower);
        assert_eq!(x_range(&[&a, &b]), (0.01, 10.0));
        let c = Outcome::new("c", 1_000.0, 10.0, "ns", Better::Lower);
        assert_eq!(x_range(&[&c]), (0.1, 1_000.0));
    }
}
