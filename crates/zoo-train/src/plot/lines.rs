//! Line charts of named `(x, y)` series, with log scales.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::prelude::*;

use crate::error::{Result, TrainError};

use super::{curve_color, write_png};

/// A line chart: named `(x, y)` series, with a log scale on either axis.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Title above the chart.
    pub title: String,
    /// Name of the x axis.
    pub x_desc: String,
    /// Name of the y axis.
    pub y_desc: String,
    /// The curves, each with its legend entry.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Log scale on x (every x must then be positive).
    pub log_x: bool,
    /// Log scale on y (every y must then be positive).
    pub log_y: bool,
}

/// Draws `chart` to a PNG at `path` (720 × 480), through a temporary file.
///
/// # Errors
/// No finite point, a non-positive value on a log axis, or a file that cannot be written.
pub fn line_chart(path: &Path, chart: &LineChart) -> Result<PathBuf> {
    let points = chart.series.iter().flat_map(|(_, p)| p);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        if x.is_finite() && y.is_finite() {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
    }
    if x0 > x1 {
        return Err(TrainError::Format(format!(
            "line chart {:?}: no finite point",
            chart.title
        )));
    }
    if (chart.log_x && x0 <= 0.0) || (chart.log_y && y0 <= 0.0) {
        return Err(TrainError::Format(format!(
            "line chart {:?}: a log axis needs positive values, got x from {x0} and y from {y0}",
            chart.title
        )));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    write_png(path, "line chart", |tmp, text| {
        let root = BitMapBackend::new(tmp, (720, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder.margin(16);
        if text {
            builder
                .caption(&chart.title, ("sans-serif", 20))
                .x_label_area_size(40)
                .y_label_area_size(70);
        }
        let pad = (y1 - y0) * 0.05;
        match (chart.log_x, chart.log_y) {
            (false, false) => draw_lines(
                &mut builder.build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))?,
                chart,
                text,
            )?,
            (true, false) => draw_lines(
                &mut builder.build_cartesian_2d((x0..x1).log_scale(), (y0 - pad)..(y1 + pad))?,
                chart,
                text,
            )?,
            (false, true) => draw_lines(
                &mut builder.build_cartesian_2d(x0..x1, (y0 / 1.2..y1 * 1.2).log_scale())?,
                chart,
                text,
            )?,
            (true, true) => draw_lines(
                &mut builder
                    .build_cartesian_2d((x0..x1).log_scale(), (y0 / 1.2..y1 * 1.2).log_scale())?,
                chart,
                text,
            )?,
        }
        root.present()?;
        Ok(())
    })
}

fn draw_lines<'a, DB, X, Y>(
    ctx: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    chart: &LineChart,
    text: bool,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    if text {
        ctx.configure_mesh()
            .x_desc(chart.x_desc.as_str())
            .y_desc(chart.y_desc.as_str())
            .draw()
            .map_err(|e| e.to_string())?;
    } else {
        ctx.configure_mesh()
            .x_labels(0)
            .y_labels(0)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    for (i, (name, pts)) in chart.series.iter().enumerate() {
        let color = curve_color(i);
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let drawn = ctx
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if text {
            drawn
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
    }
    if text && chart.series.len() > 1 {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
