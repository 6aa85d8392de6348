//! Heatmaps of matrices, one or a grid of panels, each on its own scale.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::{Result, TrainError};

use super::{font_ready, write_png};

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
    let text = font_ready();
    let layout = HeatmapLayout::new(first.len(), n_cols, rows, cols, text);
    let per_row = per_row.clamp(1, panels.len());
    let grid_rows = panels.len().div_ceil(per_row);
    write_png(path, "heatmap", |tmp, _| {
        let root = BitMapBackend::new(
            tmp,
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
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{LineChart, line_chart};

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
