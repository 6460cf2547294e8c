//! The local scenario's chart: over-admission against the sync interval
//! (part 3), drawn with `--charts`.

use super::Local;
use super::flood::Flood;
use super::setup::{FLOOD, GCRA_BURST, RATE};
use plotters::prelude::*;
use std::path::Path;
use tollgate_core::Algorithm;

/// The chart's file name, under the chart directory.
pub const CHART: &str = "local-over-admission.svg";

impl Local {
    /// The chart: over-admission against the sync interval, periodic mode,
    /// one line per algorithm; exact mode's figure as a dashed line.
    pub fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let overs: Vec<f64> = self
            .floods
            .iter()
            .flat_map(|f| [f.over() as f64, f.peak as f64])
            .collect();
        let top = overs.iter().copied().fold(100.0f64, f64::max) * 1.15;
        let bottom = overs.iter().copied().fold(0.0f64, f64::min) * 1.15 - top * 0.05;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Local-first, periodic mode: over-admission against the sync interval \
                     (4 instances × 16 tasks, {:.1} s flood)",
                    FLOOD.as_secs_f64()
                ),
                ("sans-serif", 17),
            )
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((8.0f64..1_250.0).log_scale(), bottom..top)?;
        chart
            .configure_mesh()
            .x_desc("sync interval, ms (log scale)")
            .y_desc("admitted − allowed (requests)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:+.0}"))
            .label_style(("sans-serif", 13))
            .draw()?;
        let colors = [RGBColor(214, 39, 40), RGBColor(31, 119, 180)];
        for (algorithm, color) in [Algorithm::Gcra, Algorithm::FixedWindow]
            .into_iter()
            .zip(colors)
        {
            let runs: Vec<&Flood> = self
                .floods
                .iter()
                .filter(|f| f.algorithm == algorithm)
                .collect();
            let points: Vec<(f64, f64)> = runs
                .iter()
                .filter_map(|f| Some((f.interval_ms? as f64, f.over() as f64)))
                .collect();
            let peaks: Vec<(f64, f64)> = runs
                .iter()
                .filter_map(|f| Some((f.interval_ms? as f64, f.peak as f64)))
                .collect();
            let name = match algorithm {
                Algorithm::Gcra => format!("GCRA {RATE}/s, burst {GCRA_BURST}"),
                _ => format!("fixed window {RATE}/s"),
            };
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(format!("{name}, periodic: at the end of the flood"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )?;
            chart.draw_series(
                points.iter().map(|&(x, y)| {
                    Text::new(format!("{y:+.0}"), (x * 1.06, y), ("sans-serif", 12))
                }),
            )?;
            chart
                .draw_series(DashedLineSeries::new(
                    peaks.clone(),
                    8,
                    4,
                    color.stroke_width(2),
                ))?
                .label(format!("{name}, periodic: most over at any moment"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], color.stroke_width(2))
                });
            chart.draw_series(
                peaks
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.stroke_width(2))),
            )?;
            if let Some(exact) = runs.iter().find(|f| f.interval_ms.is_none()) {
                let y = exact.over() as f64;
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(8.0, y), (1_250.0, y)],
                        6,
                        4,
                        color.mix(0.7).stroke_width(1),
                    ))?
                    .label(format!("{name}, exact mode: {:+.0}", y))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.7).stroke_width(1))
                    });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::MiddleLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
        root.present()?;
        Ok(())
    }
}
