//! The optical handwritten digits (`datasets/digits/digits.csv.gz`): 1,797 grey images of
//! 8×8 pixels with values 0..=16, each row 64 pixels then the label 0..=9.

use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use zoo_core::ClassificationBatch;

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

/// Splits `images` into `(train, test)` with the same share of every digit in both:
/// each class is shuffled with `seed`, and its first `round(test_fraction · n)` images go
/// to the test split.
///
/// # Errors
/// A fraction outside `(0, 1)`.
pub fn stratified_split(
    images: &[DigitImage],
    test_fraction: f64,
    seed: u64,
) -> Result<(Vec<DigitImage>, Vec<DigitImage>)> {
    if !(test_fraction > 0.0 && test_fraction < 1.0) {
        return Err(DataError::Invalid(format!(
            "test fraction must be in (0, 1), got {test_fraction}"
        )));
    }
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for class in 0..CLASSES {
        let mut members: Vec<DigitImage> = images
            .iter()
            .filter(|i| i.label == class)
            .cloned()
            .collect();
        crate::seeded_shuffle(&mut members, seed.wrapping_add(class as u64));
        let n_test = (test_fraction * members.len() as f64).round() as usize;
        train.extend(members.split_off(n_test));
        test.extend(members);
    }
    crate::seeded_shuffle(&mut train, seed);
    Ok((train, test))
}

/// The image moved by `(dy, dx)` pixels, zeros shifted in.
pub fn shifted(image: &DigitImage, dy: i64, dx: i64) -> DigitImage {
    let side = SIDE as i64;
    let mut pixels = vec![0.0; SIDE * SIDE];
    for y in 0..side {
        for x in 0..side {
            let (sy, sx) = (y - dy, x - dx);
            if (0..side).contains(&sy) && (0..side).contains(&sx) {
                pixels[(y * side + x) as usize] = image.pixels[(sy * side + sx) as usize];
            }
        }
    }
    DigitImage {
        pixels,
        label: image.label,
    }
}

/// Training images, each read as it is with probability `1 - p`, else shifted by a
/// random offset of at most `max_shift` pixels in each direction (drawn afresh at every
/// read, from a seeded generator): the augmentation that lets a model without a
/// convolution's built-in translation invariance learn it.
#[derive(Debug)]
pub struct ShiftedDigits {
    images: Vec<DigitImage>,
    max_shift: i64,
    p: f64,
    rng: Mutex<rand::rngs::StdRng>,
}

impl ShiftedDigits {
    /// `images`, shifted by up to `max_shift` pixels at a read with probability `p`
    /// (clamped to `[0, 1]`).
    pub fn new(images: Vec<DigitImage>, max_shift: usize, p: f64, seed: u64) -> Self {
        Self {
            images,
            max_shift: max_shift as i64,
            p: p.clamp(0.0, 1.0),
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
    }
}

impl Dataset<DigitImage> for ShiftedDigits {
    /// # Panics
    /// An index past the end, as every Burn dataset.
    fn get(&self, index: usize) -> std::result::Result<DigitImage, DatasetError> {
        let image = &self.images[index];
        let m = self.max_shift;
        let (dy, dx) = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            if rng.random_bool(self.p) {
                (rng.random_range(-m..=m), rng.random_range(-m..=m))
            } else {
                (0, 0)
            }
        };
        Ok(shifted(image, dy, dx))
    }

    fn len(&self) -> usize {
        self.images.len()
    }
}

/// Batches digits as `[B, 1, 8, 8]` images with their labels.
#[derive(Debug, Clone, Default)]
pub struct DigitBatcher;

impl Batcher<DigitImage, ClassificationBatch<Tensor<4>>> for DigitBatcher {
    fn batch(&self, items: Vec<DigitImage>, device: &Device) -> ClassificationBatch<Tensor<4>> {
        let n = items.len();
        let x: Vec<f32> = items
            .iter()
            .flat_map(|i| i.pixels.iter().copied())
            .collect();
        let y: Vec<i64> = items.iter().map(|i| i.label as i64).collect();
        ClassificationBatch::new(
            Tensor::from_data(TensorData::new(x, [n, 1, SIDE, SIDE]), device),
            Tensor::<1, Int>::from_data(TensorData::new(y, [n]), device),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_has_1797_images_of_every_digit() {
        let images = load_digits(&crate::dataset_file("digits/digits.csv.gz").unwrap()).unwrap();
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

    #[test]
    fn the_split_is_stratified_disjoint_and_seeded() {
        let images = load_digits(&crate::dataset_file("digits/digits.csv.gz").unwrap()).unwrap();
        let (train, test) = stratified_split(&images, 0.2, 3).unwrap();
        assert_eq!(train.len() + test.len(), 1797);
        for class in 0..CLASSES {
            let n = images.iter().filter(|i| i.label == class).count();
            let t = test.iter().filter(|i| i.label == class).count();
            assert_eq!(t, (0.2 * n as f64).round() as usize, "class {class}");
        }
        // No image is in both splits (the file has no exact duplicates across these).
        let key = |i: &DigitImage| format!("{:?}", i.pixels);
        let train_keys: std::collections::HashSet<String> = train.iter().map(key).collect();
        assert!(test.iter().all(|i| !train_keys.contains(&key(i))));
        assert_eq!(stratified_split(&images, 0.2, 3).unwrap().1, test);
        assert_ne!(stratified_split(&images, 0.2, 4).unwrap().1, test);
        assert_eq!(
            stratified_split(&images, 1.0, 3).unwrap_err().to_string(),
            "test fraction must be in (0, 1), got 1"
        );
    }

    #[test]
    fn shifts_move_pixels_and_fill_zeros() {
        let mut pixels = vec![0.0; 64];
        pixels[0] = 1.0; // top-left
        pixels[63] = 0.5; // bottom-right
        let im = DigitImage { pixels, label: 3 };
        let s = shifted(&im, 1, 2);
        assert_eq!(s.pixels[8 + 2], 1.0);
        assert_eq!(
            s.pixels.iter().filter(|p| **p != 0.0).count(),
            1,
            "0.5 fell off"
        );
        assert_eq!(shifted(&im, 0, 0), im);
        let data = ShiftedDigits::new(vec![im.clone(); 50], 1, 1.0, 7);
        let reads: Vec<DigitImage> = (0..50).map(|i| data.get(i).unwrap()).collect();
        assert!(reads.iter().all(|r| r.label == 3));
        assert!(
            reads.iter().any(|r| r.pixels != im.pixels),
            "some reads are shifted"
        );
        assert!(reads.iter().any(|r| r.pixels == im.pixels), "some are not");
        let never = ShiftedDigits::new(vec![im.clone(); 20], 1, 0.0, 7);
        assert!(
            (0..20).all(|i| never.get(i).unwrap() == im),
            "p = 0 never shifts"
        );
    }
}
