//! The demo's picture: admitted requests over time for each algorithm,
//! against the offered load.
//!
//! Drawn with plotters' SVG backend only: text is written as SVG `<text>`
//! and laid out with plotters' built-in size estimates, so no font files
//! or system libraries are needed.

use super::DemoError;
use super::report::{AlgorithmResult, period_label};
use super::trace::Trace;
use plotters::prelude::*;
use std::path::Path;

/// Buckets per period: each bar is a tenth of the quota's period.
const BUCKETS_PER_PERIOD: u64 = 10;

const OFFERED: RGBColor = RGBColor(205, 205, 205);
const BOUNDARY: RGBColor = RGBColor(150, 150, 150);
const RATE: RGBColor = RGBColor(200, 40, 40);
/// One color per algorithm, in `Algorithm::ALL` order.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
];

/// Counts `times` (ns) in buckets of `width` ns: `counts[i]` holds those in
/// `[i·width, (i+1)·width)`.
pub fn histogram(times: &[u64], width: u64, buckets: usize) -> Vec<u32> {
    let mut counts = vec![0; buckets];
    for &t in times {
        if let Some(count) = usize::try_from(t / width.max(1))
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *count += 1;
        }
    }
    counts
}

/// Draws one panel per algorithm into an SVG document.
pub fn render_svg(trace: &Trace, results: &[AlgorithmResult]) -> Result<String, DemoError> {
    let mut svg = String::new();
    draw(&mut svg, trace, results).map_err(DemoError::context("cannot draw the picture"))?;
    Ok(svg)
}

/// Draws the picture and writes it to `path`, creating its directory.
pub fn write_svg(path: &Path, trace: &Trace, results: &[AlgorithmResult]) -> Result<(), DemoError> {
    let svg = render_svg(trace, results)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(DemoError::context(&format!(
            "cannot create {}",
            dir.display()
        )))?;
    }
    std::fs::write(path, svg).map_err(DemoError::context(&format!(
        "cannot write {}",
        path.display()
    )))
}

fn draw(
    svg: &mut String,
    trace: &Trace,
    results: &[AlgorithmResult],
) -> Result<(), Box<dyn std::error::Error>> {
    let period = trace.quota.period_nanos();
    let limit = trace.quota.limit();
    let bucket = (period / BUCKETS_PER_PERIOD).max(1);
    // One period after the last arrival: room for the leaky bucket's queue
    // to drain.
    let periods = trace.last_arrival().div_ceil(period) + 1;
    let buckets = usize::try_from(periods * BUCKETS_PER_PERIOD)?;
    let offered = histogram(&trace.arrivals, bucket, buckets);
    let seconds = |ns: u64| ns as f64 / 1e9;
    let x_end = seconds(periods * period);
    let y_end = f64::from(offered.iter().copied().max().unwrap_or(1)) + 2.0;
    let per_bucket_rate = limit as f64 / BUCKETS_PER_PERIOD as f64;

    let rows = results.len().div_ceil(2).max(1);
    let root = SVGBackend::with_string(svg, (1200, 40 + 280 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "The same trace through each algorithm, quota {}: requests per {}, offered and \
             admitted (server clock); grey lines: window boundaries",
            trace.quota,
            period_label(std::time::Duration::from_nanos(bucket))
        ),
        ("sans-serif", 20),
    )?;
    let panels = root.split_evenly((rows, 2));
    for (i, (result, area)) in results.iter().zip(panels.iter()).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let run = &result.http;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{}: admitted {} of {}, at most {} in any {}",
                    result.algorithm.name(),
                    run.server_admitted(),
                    run.offered,
                    run.max_in_any_period,
                    period_label(trace.quota.period())
                ),
                ("sans-serif", 17),
            )
            .margin(8)
            .margin_right(24)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d(0.0..x_end, 0.0..y_end)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_labels(5)
            .y_max_light_lines(0)
            .x_label_formatter(&|x| format!("{x:.1} s"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;

        // Window boundaries: where the fixed window starts counting afresh.
        chart.draw_series((1..periods).map(|k| {
            let x = seconds(k * period);
            PathElement::new(vec![(x, 0.0), (x, y_end)], BOUNDARY.stroke_width(1))
        }))?;
        let bar = |i: usize, count: u32, inset: f64, style: ShapeStyle| {
            let x0 = seconds(i as u64 * bucket);
            let x1 = seconds((i as u64 + 1) * bucket);
            let pad = (x1 - x0) * inset;
            Rectangle::new([(x0 + pad, 0.0), (x1 - pad, f64::from(count))], style)
        };
        chart
            .draw_series(
                offered
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| bar(i, c, 0.0, OFFERED.filled())),
            )?
            .label("offered")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], OFFERED.filled()));
        let admitted = histogram(&run.admitted_at, bucket, buckets);
        chart
            .draw_series(
                admitted
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| bar(i, c, 0.15, color.filled())),
            )?
            .label("admitted")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(LineSeries::new(
                [(0.0, per_bucket_rate), (x_end, per_bucket_rate)],
                RATE.stroke_width(2),
            ))?
            .label("the quota's rate")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RATE.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BOUNDARY)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_half_open_buckets() {
        assert_eq!(histogram(&[0, 9, 10, 25, 99], 10, 3), [2, 1, 1]);
    }
}
