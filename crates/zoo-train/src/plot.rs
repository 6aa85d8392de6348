//! `metrics.png`: the loss and metric curves of a run, drawn with plotters after training.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::{Result, TrainError, io_err};

/// Where a TrueType font for titles, ticks and legends is looked for (Debian's
/// `fonts-dejavu-core` first); the `ZOO_PLOT_FONT` variable names another file.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/Library/Fonts/Arial Unicode.ttf",
];

/// Size of one panel in pixels.
pub const PANEL: (u32, u32) = (420, 360);

/// Registers a font with plotters once; `false` when none was found, and the plot is then
/// drawn without text.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let candidates = std::env::var("ZOO_PLOT_FONT")
            .ok()
            .into_iter()
            .chain(FONT_PATHS.iter().map(|p| p.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // plotters keeps registered fonts for the life of the program.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        log::warn!("no font found for the plot's labels; set ZOO_PLOT_FONT to a .ttf file");
        false
    })
}

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
/// Titles, ticks and legends need a font (see [`FONT_PATHS`]); without one the curves are
/// drawn alone and a warning is logged.
///
/// # Errors
/// An empty table, or a failure to draw or write the file.
pub fn plot_rounds(rounds: &[BTreeMap<String, f64>], x_axis: &str, dir: &Path) -> Result<PathBuf> {
    let panels = panels(rounds, x_axis);
    if panels.is_empty() {
        return Err(TrainError::Format("no metrics to plot".into()));
    }
    let path = dir.join("metrics.png");
    // The bitmap backend picks its encoder from the extension, so the name ends in .png.
    let tmp = dir.join(".metrics.tmp.png");
    draw(&panels, x_axis, font_ready(), &tmp)
        .map_err(|e| TrainError::Format(format!("plot {}: {e}", path.display())))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    Ok(path)
}

/// The colour of the `i`-th curve of a panel.
pub fn curve_color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(i).rgb();
    RGBColor(r, g, b)
}

/// Whether a panel's values are better read on a log scale: all positive and spanning
/// more than a factor of 30 (a loss that falls by orders of magnitude).
pub fn wants_log_scale(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo > 30.0
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
        assert!(!dir.join(".metrics.tmp.png").exists());
        assert_eq!(
            plot_rounds(&[], "epoch", &dir).unwrap_err().to_string(),
            "no metrics to plot"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}

/// A matrix as a heatmap PNG at `path` (a white-to-blue scale from the smallest value to
/// the largest, each cell's value printed when the grid is small), with row and column
/// labels and a title. Written through a temporary file, so `path` appears whole.
///
/// # Errors
/// An empty or ragged matrix, labels that do not match it, or a file that cannot be
/// written.
pub fn heatmap(
    path: &Path,
    values: &[Vec<f32>],
    rows: &[String],
    cols: &[String],
    title: &str,
) -> Result<PathBuf> {
    heatmap_grid(path, &[(title.to_string(), values.to_vec())], rows, cols, 1)
}

/// Several heatmaps of one shape side by side in one PNG, `per_row` to a row of the grid
/// (an attention matrix per head, say), each with its title and the shared row and column
/// labels; each panel is shaded on its own scale. Written through a temporary file.
///
/// # Errors
/// No panel, an empty or ragged matrix, panels of different shapes, labels that do not
/// match, or a file that cannot be written.
pub fn heatmap_grid(
    path: &Path,
    panels: &[(String, Vec<Vec<f32>>)],
    rows: &[String],
    cols: &[String],
    per_row: usize,
) -> Result<PathBuf> {
    let Some((_, first)) = panels.first() else {
        return Err(TrainError::Format("a heatmap grid needs a panel".into()));
    };
    let n_cols = first.first().map_or(0, Vec::len);
    for (_, values) in panels {
        if values.is_empty() || n_cols == 0 || values.iter().any(|r| r.len() != n_cols) {
            return Err(TrainError::Format(
                "a heatmap needs a non-empty rectangular matrix".into(),
            ));
        }
        if values.len() != first.len() {
            return Err(TrainError::Format(format!(
                "heatmap panels differ in shape: {}x{n_cols} and {}x{}",
                first.len(),
                values.len(),
                values[0].len()
            )));
        }
    }
    if rows.len() != first.len() || cols.len() != n_cols {
        return Err(TrainError::Format(format!(
            "a {}x{n_cols} heatmap got {} row and {} column labels",
            first.len(),
            rows.len(),
            cols.len()
        )));
    }
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file}.tmp.png"));
    let text = font_ready();
    let layout = HeatmapLayout::new(first.len(), n_cols, rows, cols, text);
    let per_row = per_row.clamp(1, panels.len());
    let grid_rows = panels.len().div_ceil(per_row);
    let drawn = (|| -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(
            &tmp,
            (
                layout.width * per_row as u32,
                layout.height * grid_rows as u32,
            ),
        )
        .into_drawing_area();
        root.fill(&WHITE)?;
        let areas = root.split_evenly((grid_rows, per_row));
        for (area, (title, values)) in areas.iter().zip(panels) {
            draw_heatmap(area, &layout, values, rows, cols, title)?;
        }
        root.present()?;
        Ok(())
    })();
    drawn.map_err(|e| TrainError::Format(format!("heatmap {}: {e}", path.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    Ok(path.to_path_buf())
}

/// Cell size and margins of one heatmap panel.
struct HeatmapLayout {
    cell: u32,
    label_w: u32,
    title_h: u32,
    width: u32,
    height: u32,
    text: bool,
}

impl HeatmapLayout {
    fn new(n_rows: usize, n_cols: usize, rows: &[String], cols: &[String], text: bool) -> Self {
        let cell = (640 / n_cols.max(n_rows)).clamp(12, 80) as u32;
        let label_w = if text {
            rows.iter().map(|r| r.chars().count()).max().unwrap_or(0) as u32 * 8 + 16
        } else {
            8
        };
        let label_h = if text {
            cols.iter().map(|c| c.chars().count()).max().unwrap_or(0) as u32 * 7 + 16
        } else {
            8
        };
        let title_h = if text { 30 } else { 8 };
        Self {
            cell,
            label_w,
            title_h,
            width: label_w + cell * n_cols as u32 + 16,
            height: title_h + cell * n_rows as u32 + label_h,
            text,
        }
    }
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    layout: &HeatmapLayout,
    values: &[Vec<f32>],
    rows: &[String],
    cols: &[String],
    title: &str,
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let HeatmapLayout {
        cell,
        label_w,
        title_h,
        text,
        ..
    } = *layout;
    let (n_rows, n_cols) = (values.len(), values[0].len());
    let (lo, hi) = values
        .iter()
        .flatten()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let span = (hi - lo).max(1e-12);
    let small = n_rows * n_cols <= 144 && cell >= 36;
    for (r, row) in values.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let x = label_w as i32 + (c as u32 * cell) as i32;
            let y = title_h as i32 + (r as u32 * cell) as i32;
            let t = if v.is_finite() { (v - lo) / span } else { 0.0 };
            let shade = |full: f32| (255.0 - t * (255.0 - full)) as u8;
            let color = RGBColor(shade(20.0), shade(70.0), shade(160.0));
            root.draw(&Rectangle::new(
                [(x, y), (x + cell as i32, y + cell as i32)],
                color.filled(),
            ))?;
            if text && small {
                let ink = if t > 0.5 { WHITE } else { BLACK };
                root.draw(&Text::new(
                    format!("{v:.2}"),
                    (x + 4, y + cell as i32 / 2 - 6),
                    ("sans-serif", 12).into_font().color(&ink),
                ))?;
            }
        }
    }
    if text {
        root.draw(&Text::new(
            title.to_string(),
            (label_w as i32, 8),
            ("sans-serif", 16).into_font(),
        ))?;
        for (r, label) in rows.iter().enumerate() {
            let y = title_h as i32 + (r as u32 * cell + cell / 2) as i32 - 6;
            root.draw(&Text::new(
                label.clone(),
                (4, y),
                ("sans-serif", 12).into_font(),
            ))?;
        }
        let below = (title_h + cell * n_rows as u32 + 4) as i32;
        for (c, label) in cols.iter().enumerate() {
            let x = label_w as i32 + (c as u32 * cell + cell / 2) as i32 - 6;
            root.draw(&Text::new(
                label.clone(),
                (x, below),
                ("sans-serif", 12)
                    .into_font()
                    .transform(FontTransform::Rotate90),
            ))?;
        }
    }
    Ok(())
}

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
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file}.tmp.png"));
    let text = font_ready();
    let drawn = (|| -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(&tmp, (720, 480)).into_drawing_area();
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
    })();
    drawn.map_err(|e| TrainError::Format(format!("line chart {}: {e}", path.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    Ok(path.to_path_buf())
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

#[cfg(test)]
mod heatmap_tests {
    use super::*;

    #[test]
    fn a_heatmap_shades_cells_by_value_and_rejects_ragged_input() {
        let dir = std::env::temp_dir().join(format!("zoo-heatmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.png");
        let labels = |n: usize| (0..n).map(|i| format!("r{i}")).collect::<Vec<_>>();
        let values = vec![vec![0.0, 1.0], vec![0.5, 0.25]];
        heatmap(&path, &values, &labels(2), &labels(2), "test").unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        // The layout of draw_heatmap: 80-pixel cells after the row labels and the title
        // (2 characters each here), narrower margins when no font was found.
        let (left, top) = if font_ready() { (32, 30) } else { (8, 8) };
        // A corner of each cell, away from its printed value.
        let at = |r: u32, c: u32| img.get_pixel(left + c * 80 + 72, top + r * 80 + 8).0;
        assert_eq!(
            at(0, 1),
            [20, 70, 160],
            "the largest value is the darkest blue"
        );
        assert_eq!(at(0, 0), [255, 255, 255], "the smallest is white");
        let mid = at(1, 0);
        assert!(mid[0] < 255 && mid[0] > 20, "0.5 is in between: {mid:?}");
        assert!(!dir.join(".h.png.tmp.png").exists());
        let e = heatmap(&path, &[vec![1.0], vec![]], &labels(2), &labels(1), "x").unwrap_err();
        assert!(e.to_string().contains("rectangular"), "{e}");
        let e = heatmap(&path, &values, &labels(1), &labels(2), "x").unwrap_err();
        assert!(
            e.to_string().contains("got 1 row and 2 column labels"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_grid_shades_each_panel_on_its_own_scale_and_line_charts_check_log_axes() {
        let dir = std::env::temp_dir().join(format!("zoo-grid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("g.png");
        let labels = |n: usize| (0..n).map(|i| format!("r{i}")).collect::<Vec<_>>();
        let a = vec![vec![0.0, 1.0], vec![0.5, 0.25]];
        // Ten times larger values: the same shades on its own scale.
        let b: Vec<Vec<f32>> = a
            .iter()
            .map(|r| r.iter().map(|v| v * 10.0).collect())
            .collect();
        heatmap_grid(
            &path,
            &[("a".into(), a.clone()), ("b".into(), b)],
            &labels(2),
            &labels(2),
            2,
        )
        .unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        let one = HeatmapLayout::new(2, 2, &labels(2), &labels(2), font_ready());
        assert_eq!(img.dimensions(), (2 * one.width, one.height));
        let (left, top) = if font_ready() { (32, 30) } else { (8, 8) };
        for panel in 0..2 {
            let x0 = panel * one.width + left;
            assert_eq!(
                img.get_pixel(x0 + 80 + 72, top + 8).0,
                [20, 70, 160],
                "panel {panel}"
            );
            assert_eq!(
                img.get_pixel(x0 + 72, top + 8).0,
                [255, 255, 255],
                "panel {panel}"
            );
        }
        let e = heatmap_grid(
            &path,
            &[("a".into(), a), ("c".into(), vec![vec![1.0, 2.0]; 3])],
            &labels(2),
            &labels(2),
            2,
        )
        .unwrap_err();
        assert!(e.to_string().contains("differ in shape"), "{e}");
        assert!(heatmap_grid(&path, &[], &[], &[], 1).is_err());

        let mut chart = LineChart {
            title: "t".into(),
            x_desc: "x".into(),
            y_desc: "y".into(),
            series: vec![("s".into(), vec![(1.0, 1.0), (10.0, 100.0)])],
            log_x: true,
            log_y: true,
        };
        let lines = dir.join("l.png");
        line_chart(&lines, &chart).unwrap();
        assert_eq!(
            image::open(&lines).unwrap().to_rgb8().dimensions(),
            (720, 480)
        );
        chart.series[0].1.push((0.0, 5.0));
        let e = line_chart(&lines, &chart).unwrap_err();
        assert!(
            e.to_string()
                .contains("a log axis needs positive values, got x from 0"),
            "{e}"
        );
        chart.series = vec![("s".into(), vec![(f64::NAN, 1.0)])];
        assert!(
            line_chart(&lines, &chart)
                .unwrap_err()
                .to_string()
                .contains("no finite point")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
