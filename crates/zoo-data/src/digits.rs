//! The optical handwritten digits (`datasets/digits/digits.csv.gz`): 1,797 grey images of
//! 8×8 pixels with values 0..=16, each row 64 pixels then the label 0..=9.

use std::io::Read;
use std::path::Path;

use crate::error::{DataError, Result};

/// Pixels per image side.
pub const SIDE: usize = 8;
/// Number of classes.
pub const CLASSES: usize = 10;

/// One image.
#[derive(Debug, Clone, PartialEq)]
pub struct DigitImage {
    /// Row-major pixels scaled to `[0, 1]` (the file's 0..=16 divided by 16).
    pub pixels: Vec<f32>,
    /// The digit, 0..=9.
    pub label: usize,
}

/// Reads the gzipped CSV. Every row must hold 64 pixels in 0..=16 and a label in 0..=9.
///
/// # Errors
/// An unreadable file, or the first malformed row, named by its line number.
pub fn load_digits(path: &Path) -> Result<Vec<DigitImage>> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .map_err(io)?;
    parse_digits(&text).map_err(|e| DataError::Invalid(format!("{}: {e}", path.display())))
}

/// Parses the CSV text of [`load_digits`].
///
/// # Errors
/// The first malformed row, named by its line number.
pub fn parse_digits(text: &str) -> Result<Vec<DigitImage>> {
    let pixels_per_image = SIDE * SIDE;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| DataError::Invalid(format!("line {}: {why}", i + 1));
        let values = line
            .split(',')
            .map(|v| v.trim().parse::<u8>())
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|e| bad(format!("not a small integer ({e})")))?;
        if values.len() != pixels_per_image + 1 {
            return Err(bad(format!(
                "{} values, expected {} pixels and a label",
                values.len(),
                pixels_per_image
            )));
        }
        let (pixels, label) = values.split_at(pixels_per_image);
        if let Some(p) = pixels.iter().find(|&&p| p > 16) {
            return Err(bad(format!("pixel {p} outside 0..=16")));
        }
        let label = label[0] as usize;
        if label >= CLASSES {
            return Err(bad(format!("label {label} outside 0..=9")));
        }
        out.push(DigitImage {
            pixels: pixels.iter().map(|&p| f32::from(p) / 16.0).collect(),
            label,
        });
    }
    if out.is_empty() {
        return Err(DataError::Invalid("no images".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_has_1797_images_of_every_digit() {
        let images = load_digits(&crate::datasets_dir().join("digits/digits.csv.gz")).unwrap();
        assert_eq!(images.len(), 1797);
        let mut counts = [0usize; CLASSES];
        for im in &images {
            counts[im.label] += 1;
            assert_eq!(im.pixels.len(), 64);
        }
        // 174 to 183 images per digit (counted from the file).
        assert!(
            counts.iter().all(|&c| (174..=183).contains(&c)),
            "{counts:?}"
        );
        // The first image is a 0: its first row is 0,0,5,13,9,1,0,0.
        assert_eq!(images[0].label, 0);
        assert_eq!(images[0].pixels[2], 5.0 / 16.0);
        assert_eq!(images[0].pixels[3], 13.0 / 16.0);
    }

    #[test]
    fn malformed_rows_are_named_by_line() {
        let row = |px: &str, label: &str| format!("{}{px},{label}\n", "0,".repeat(63));
        let good = row("16", "9");
        assert_eq!(parse_digits(&good).unwrap()[0].pixels[63], 1.0);
        let text = format!("{good}{}", row("17", "1"));
        assert_eq!(
            parse_digits(&text).unwrap_err().to_string(),
            "line 2: pixel 17 outside 0..=16"
        );
        assert_eq!(
            parse_digits(&row("0", "10")).unwrap_err().to_string(),
            "line 1: label 10 outside 0..=9"
        );
        assert_eq!(
            parse_digits("1,2,3\n").unwrap_err().to_string(),
            "line 1: 3 values, expected 64 pixels and a label"
        );
        assert!(
            parse_digits(&row("x", "1"))
                .unwrap_err()
                .to_string()
                .starts_with("line 1: not a small integer")
        );
    }
}
