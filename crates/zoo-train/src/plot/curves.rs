//! `metrics.png`: the loss and metric curves of a run, drawn after training.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::{Result, TrainError};

use super::{PANEL, curve_color, wants_log_scale, write_png};

/// One panel: a metric and its train / valid curves as `(x, value)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The metric, e.g. `loss`.
    pub metric: String,
    /// `(split_metric, points)`, train before valid.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Groups the per-round table into one panel per metric (loss first), with `x` the round
/// number, or the `step` column when `x_axis` is `step`. Non-finite values are left out.
pub fn panels(rounds: &[BTreeMap<String, f64>], x_axis: &str) -> Vec<Panel> {
    let mut by_metric: BTreeMap<(bool, String), Vec<String>> = BTreeMap::new();
    for key in rounds.iter().flat_map(|r| r.keys()) {
        let Some((_, metric)) = key.split_once('_') else {
            continue;
        };
        let series = by_metric
            .entry((metric != "loss", metric.to_string()))
            .or_default();
        if !series.contains(key) {
            series.push(key.clone());
        }
    }
    by_metric
        .into_iter()
        .map(|((_, metric), mut keys)| {
            keys.sort();
            let series = keys
                .into_iter()
                .map(|k| {
                    let points = rounds
                        .iter()
                        .enumerate()
                        .filter_map(|(i, r)| {
                            let x = if x_axis == "step" {
                                *r.get("step")?
                            } else {
                                (i + 1) as f64
                            };
                            r.get(&k).filter(|v| v.is_finite()).map(|v| (x, *v))
                        })
                        .collect();
                    (k, points)
                })
                .collect();
            Panel { metric, series }
        })
        .collect()
}

/// Draws `dir/metrics.png`, one panel per metric, through a temporary file and a rename.
/// Titles, ticks and legends need a font (see `FONT_PATHS`); without one the curves are
/// drawn alone and a warning is logged.
///
/// # Errors
/// An empty table, or a failure to draw or write the file.
pub fn plot_rounds(rounds: &[BTreeMap<String, f64>], x_axis: &str, dir: &Path) -> Result<PathBuf> {
    let panels = panels(rounds, x_axis);
    if panels.is_empty() {
        return Err(TrainError::Format("no metrics to plot".into()));
    }
    write_png(&dir.join("metrics.png"), "plot", |tmp, text| {
        draw(&panels, x_axis, text, tmp)
    })
}

fn draw(
    panels: &[Panel],
    x_axis: &str,
    text: bool,
    file: &Path,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let width = PANEL.0 * panels.len() as u32;
    let root = BitMapBackend::new(file, (width, PANEL.1)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels.len()));
    for (area, panel) in areas.iter().zip(panels) {
        let points = panel.series.iter().flat_map(|(_, p)| p);
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in points {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if x0 > x1 {
            continue; // nothing finite to draw
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let mut builder = ChartBuilder::on(area);
        builder.margin(14);
        if text {
            builder
                .caption(&panel.metric, ("sans-serif", 20))
                .x_label_area_size(35)
                .y_label_area_size(55);
        }
        if wants_log_scale(y0, y1) {
            let mut chart = builder.build_cartesian_2d(x0..x1, (y0 / 1.2..y1 * 1.2).log_scale())?;
            draw_curves(&mut chart, panel, x_axis, text)?;
        } else {
            let pad = ((y1 - y0) * 0.05).max(1e-6);
            let mut chart = builder.build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))?;
            draw_curves(&mut chart, panel, x_axis, text)?;
        }
    }
    root.present()?;
    Ok(())
}

/// The mesh, the curves and (with `text`) the legend of one panel, on a linear or a log
/// value axis.
fn draw_curves<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    panel: &Panel,
    x_axis: &str,
    text: bool,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    if text {
        chart
            .configure_mesh()
            .x_desc(x_axis)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| e.to_string())?;
    } else {
        chart
            .configure_mesh()
            .x_labels(0)
            .y_labels(0)
            .disable_mesh()
            .draw()
            .map_err(|e| e.to_string())?;
    }
    for (i, (name, pts)) in panel.series.iter().enumerate() {
        let color = curve_color(i);
        let drawn = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if text {
            drawn
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::font_ready;

    fn rounds() -> Vec<BTreeMap<String, f64>> {
        (1..=6)
            .map(|r| {
                let mut m = BTreeMap::new();
                m.insert("step".to_string(), 50.0 * r as f64);
                m.insert("train_loss".to_string(), 3.0 / r as f64);
                m.insert("valid_loss".to_string(), 3.3 / r as f64);
                m.insert("valid_accuracy".to_string(), 15.0 * r as f64);
                m.insert("train_learning_rate".to_string(), 1e-3);
                m
            })
            .collect()
    }

    #[test]
    fn one_panel_per_metric_loss_first_with_step_or_round_on_x() {
        let mut table = rounds();
        table[1].insert("valid_loss".into(), f64::NAN);
        let p = panels(&table, "step");
        let names: Vec<&str> = p.iter().map(|p| p.metric.as_str()).collect();
        assert_eq!(names, ["loss", "accuracy", "learning_rate"]);
        assert_eq!(p[0].series[0].0, "train_loss");
        assert_eq!(p[0].series[0].1[..2], [(50.0, 3.0), (100.0, 1.5)]);
        // The NaN of round 2 is left out.
        assert_eq!(p[0].series[1].1.len(), 5);
        assert_eq!(p[0].series[1].1[1].0, 150.0);
        let p = panels(&table, "epoch");
        assert_eq!(p[1].series[0].1[2], (3.0, 45.0));
    }

    /// The mean row (y) of the pixels of `color` in columns `cols`.
    fn mean_row(img: &image::RgbImage, color: RGBColor, cols: std::ops::Range<u32>) -> f64 {
        let rows: Vec<u32> = cols
            .clone()
            .flat_map(|x| (0..img.height()).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == [color.0, color.1, color.2])
            .map(|(_, y)| y)
            .collect();
        assert!(!rows.is_empty(), "no curve pixels at x {cols:?}");
        rows.iter().sum::<u32>() as f64 / rows.len() as f64
    }

    /// Rows (y) of the pixels of `color` in panel `k`, at the left and right fifths.
    fn curve_rows(img: &image::RgbImage, k: u32, color: RGBColor) -> (f64, f64) {
        let x = k * PANEL.0;
        (
            mean_row(img, color, x + 90..x + 150),
            mean_row(img, color, x + PANEL.0 - 100..x + PANEL.0 - 40),
        )
    }

    fn draw_to_image(with_text: bool) -> image::RgbImage {
        // One folder per call: tests drawing at the same time must not share one.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("zoo-plot-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("metrics.png");
        draw(&panels(&rounds(), "step"), "step", with_text, &file).unwrap();
        let img = image::open(&file).unwrap().to_rgb8();
        std::fs::remove_dir_all(dir).ok();
        assert_eq!(img.dimensions(), (3 * PANEL.0, PANEL.1));
        img
    }

    /// Dark pixels in columns `cols` and rows `rows` of the image.
    fn dark_pixels(
        img: &image::RgbImage,
        cols: std::ops::Range<u32>,
        rows: std::ops::Range<u32>,
    ) -> usize {
        cols.flat_map(|x| rows.clone().map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|&c| c < 100))
            .count()
    }

    #[test]
    fn draws_falling_loss_and_rising_accuracy() {
        let img = draw_to_image(false);
        // Loss falls: the train-loss curve (first colour) sits lower on the right.
        let (left, right) = curve_rows(&img, 0, curve_color(0));
        assert!(right > left + 50.0, "loss curve rows {left} -> {right}");
        // Accuracy rises: its only curve sits higher on the right.
        let (left, right) = curve_rows(&img, 1, curve_color(0));
        assert!(right + 50.0 < left, "accuracy curve rows {left} -> {right}");
    }

    #[test]
    fn draws_titles_ticks_and_legends_with_a_font() {
        if !font_ready() {
            zoo_device::record_skip(
                "draws_titles_ticks_and_legends_with_a_font",
                "no font (install fonts-dejavu-core or set ZOO_PLOT_FONT)",
            );
            return;
        }
        let bare = draw_to_image(false);
        let labelled = draw_to_image(true);
        // The title `loss` sits centred above the first panel's chart, in its top margin.
        let title = (PANEL.0 / 2 - 40)..(PANEL.0 / 2 + 40);
        assert_eq!(dark_pixels(&bare, title.clone(), 0..14), 0);
        let ink = dark_pixels(&labelled, title, 0..30);
        assert!(ink > 30, "no title drawn: {ink} dark pixels");
        // The y tick labels fill the left label area, empty without a font.
        assert_eq!(dark_pixels(&bare, 14..66, 40..300), 0);
        let ticks = dark_pixels(&labelled, 14..66, 40..300);
        assert!(ticks > 100, "no tick labels drawn: {ticks} dark pixels");
    }

    #[test]
    fn losses_spanning_orders_of_magnitude_are_drawn_on_a_log_scale() {
        assert!(!wants_log_scale(0.5, 3.0));
        assert!(!wants_log_scale(-1.0, 100.0));
        assert!(wants_log_scale(1e-4, 0.5));
        // Loss 10^-r: a straight line on a log axis, so the middle of the curve sits
        // halfway between its ends (on a linear axis it would hug the bottom).
        let table: Vec<BTreeMap<String, f64>> = (0..=6)
            .map(|r| BTreeMap::from([("train_loss".to_string(), 10f64.powi(-r))]))
            .collect();
        let dir = std::env::temp_dir().join(format!("zoo-plot-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("metrics.png");
        draw(&panels(&table, "epoch"), "epoch", false, &file).unwrap();
        let img = image::open(&file).unwrap().to_rgb8();
        std::fs::remove_dir_all(dir).ok();
        let c = curve_color(0);
        let row_at = |x: u32| mean_row(&img, c, x..x + 1);
        // The chart spans x 14..406; sample near both ends and in the middle.
        let (left, mid, right) = (row_at(30), row_at(210), row_at(390));
        assert!(right > left + 200.0, "{left} {mid} {right}");
        let halfway = (left + right) / 2.0;
        assert!((mid - halfway).abs() < 15.0, "{left} {mid} {right}");
    }

    #[test]
    fn plot_rounds_writes_atomically_and_rejects_an_empty_table() {
        let dir = std::env::temp_dir().join(format!("zoo-plot-rounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = plot_rounds(&rounds(), "epoch", &dir).unwrap();
        assert_eq!(path, dir.join("metrics.png"));
        assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
        assert!(!dir.join(".metrics.png.tmp.png").exists());
        assert_eq!(
            plot_rounds(&[], "epoch", &dir).unwrap_err().to_string(),
            "no metrics to plot"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
