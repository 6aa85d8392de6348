//! The zoo's figures, drawn with plotters: a run's metric curves (`metrics.png`,
//! `curves`), heatmaps of matrices ([`heatmap`]), and line charts of named series
//! (`lines`). Each is written through a temporary file, so it appears whole.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::error::{Result, TrainError, io_err};

mod curves;
mod heatmap;
mod lines;

pub use curves::{Panel, panels, plot_rounds};
pub use heatmap::{heatmap, heatmap_grid};
pub use lines::{LineChart, line_chart};

/// Where a TrueType font for titles, ticks and legends is looked for (Debian's
/// `fonts-dejavu-core` first); the `ZOO_PLOT_FONT` variable names another file.
pub(crate) const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/Library/Fonts/Arial Unicode.ttf",
];

/// Size of one panel in pixels.
pub const PANEL: (u32, u32) = (420, 360);

/// Registers a font with plotters once; `false` when none was found, and the plot is then
/// drawn without text.
pub(crate) fn font_ready() -> bool {
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

/// The result of drawing into a bitmap: plotters' errors, boxed.
pub(crate) type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

/// Writes the PNG figure `path` whole or not at all: `draw` paints a temporary file beside
/// it (told whether a font is ready for text), which replaces `path` only once drawn and
/// is removed when drawing fails. `what` names the figure in the error.
pub(crate) fn write_png(
    path: &Path,
    what: &str,
    draw: impl FnOnce(&Path, bool) -> Drawn,
) -> Result<PathBuf> {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The bitmap backend picks its encoder from the extension, so the name ends in .png.
    let tmp = path.with_file_name(format!(".{file}.tmp.png"));
    if let Err(e) = draw(&tmp, font_ready()) {
        let _ = std::fs::remove_file(&tmp);
        return Err(TrainError::Format(format!(
            "{what} {}: {e}",
            path.display()
        )));
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    Ok(path.to_path_buf())
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
