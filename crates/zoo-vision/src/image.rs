//! Image files to model inputs, as HF's image processors prepare them: decode (PNG,
//! JPEG), convert to RGB (or grey for one-channel models), resize, rescale to `[0, 1]`,
//! normalise by channel, and batch as `[B, C, H, W]`.
//!
//! The settings come from a checkpoint's `preprocessor_config.json`
//! ([`ImageProcessor::from_pretrained`]), with HF's field names. Resizing runs on 8-bit
//! pixels with the same separable filters PIL uses (bilinear is a triangle filter widened
//! when shrinking), so results agree with HF's to about one grey level.

use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};
use image::DynamicImage;
use image::imageops::FilterType;
use serde::Deserialize;

use crate::error::{Result, VisionError};

/// PIL's resampling filters, by the numbers HF writes in `resample`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// `0`, nearest neighbour.
    Nearest,
    /// `2`, bilinear (HF ViT's default).
    Bilinear,
    /// `3`, bicubic.
    Bicubic,
    /// `1`, Lanczos.
    Lanczos,
}

impl Resample {
    /// The filter of PIL's number `code`.
    ///
    /// # Errors
    /// A number PIL does not use for these filters.
    pub fn from_pil(code: u32) -> Result<Self> {
        Ok(match code {
            0 => Self::Nearest,
            1 => Self::Lanczos,
            2 => Self::Bilinear,
            3 => Self::Bicubic,
            other => {
                return Err(VisionError::Image(format!(
                    "resample {other} is not a supported PIL filter (0 nearest, 1 lanczos, \
                     2 bilinear, 3 bicubic)"
                )));
            }
        })
    }

    fn filter(self) -> FilterType {
        match self {
            Self::Nearest => FilterType::Nearest,
            Self::Bilinear => FilterType::Triangle,
            Self::Bicubic => FilterType::CatmullRom,
            Self::Lanczos => FilterType::Lanczos3,
        }
    }
}

/// `preprocessor_config.json` as HF writes it for ViT.
#[derive(Debug, Deserialize)]
struct RawConfig {
    #[serde(default = "yes")]
    do_resize: bool,
    #[serde(default)]
    size: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default = "bilinear")]
    resample: u32,
    #[serde(default)]
    do_center_crop: bool,
    #[serde(default)]
    crop_size: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default = "yes")]
    do_rescale: bool,
    #[serde(default = "one_255th")]
    rescale_factor: f64,
    #[serde(default = "yes")]
    do_normalize: bool,
    #[serde(default = "half")]
    image_mean: Vec<f32>,
    #[serde(default = "half")]
    image_std: Vec<f32>,
}

fn yes() -> bool {
    true
}
fn bilinear() -> u32 {
    2
}
fn one_255th() -> f64 {
    1.0 / 255.0
}
fn half() -> Vec<f32> {
    vec![0.5; 3]
}

/// The largest height or width a `preprocessor_config.json` may resize to: far above
/// any vision transformer's input (224 to 1024), and far below a size whose resized
/// image alone would exhaust memory (a side of 2^32 asked for 171 GB).
pub const MAX_SIDE: usize = 16384;

/// A positive side of a `size` or `crop_size` object.
fn side(size: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<usize> {
    size.get(key)
        .and_then(serde_json::Value::as_u64)
        .filter(|v| *v > 0)
        .map(|v| v as usize)
}

/// `(h, w)`, when neither passes [`MAX_SIDE`].
fn checked(h: usize, w: usize) -> Result<(usize, usize)> {
    if h > MAX_SIDE || w > MAX_SIDE {
        return Err(VisionError::Image(format!(
            "size {h}x{w} is larger than the {MAX_SIDE} pixels a side an image may be \
             resized to"
        )));
    }
    Ok((h, w))
}

/// How an image is resized (HF's `size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// To exactly `(height, width)` (`{"height", "width"}`, ViT's).
    Exact(usize, usize),
    /// The shorter side to this length and the longer in proportion, rounded down
    /// (`{"shortest_edge"}`, CLIP's).
    ShortestEdge(usize),
}

impl Resize {
    /// The `(height, width)` an `h × w` image is resized to.
    pub fn output(self, h: usize, w: usize) -> (usize, usize) {
        match self {
            Self::Exact(h, w) => (h, w),
            Self::ShortestEdge(side) => {
                // HF's `get_resize_output_image_size` with `default_to_square=False`.
                let (short, long) = if w <= h { (w, h) } else { (h, w) };
                let long = (side as f64 * long as f64 / short.max(1) as f64) as usize;
                if w <= h { (long, side) } else { (side, long) }
            }
        }
    }
}

/// How images become pixel values: HF's `ViTImageProcessor` and `CLIPImageProcessor`
/// settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    /// How to resize, when resizing.
    pub resize: Option<Resize>,
    /// The centre `(height, width)` cut out after resizing, when set (HF's
    /// `do_center_crop` with `crop_size`).
    pub center_crop: Option<(usize, usize)>,
    /// Resizing filter.
    pub resample: Resample,
    /// Multiplies the 8-bit values, when set (HF: `1/255`).
    pub rescale_factor: Option<f32>,
    /// Per-channel `(mean, std)`: `(x - mean) / std`, when set. Its length is the
    /// channel count: 3 for RGB, 1 for grey.
    pub normalize: Option<(Vec<f32>, Vec<f32>)>,
    /// Channels of the output: 3 (RGB) or 1 (grey).
    pub channels: usize,
}

impl ImageProcessor {
    /// HF's `ViTImageProcessor` defaults: bilinear resize to `size × size`, rescale by
    /// 1/255, normalise with mean 0.5 and std 0.5 per RGB channel.
    pub fn vit(size: usize) -> Self {
        Self {
            resize: Some(Resize::Exact(size, size)),
            center_crop: None,
            resample: Resample::Bilinear,
            rescale_factor: Some(1.0 / 255.0),
            normalize: Some((vec![0.5; 3], vec![0.5; 3])),
            channels: 3,
        }
    }

    /// Reads `dir/preprocessor_config.json`.
    ///
    /// # Errors
    /// A missing or malformed file, a `size` without `height` and `width` or
    /// `shortest_edge`, a centre crop without `crop_size`, an unknown filter, or means and
    /// stds of different lengths or with a zero std.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        let path = dir.as_ref().join("preprocessor_config.json");
        let named = |m: String| VisionError::Image(format!("{}: {m}", path.display()));
        let text = std::fs::read_to_string(&path).map_err(|e| named(e.to_string()))?;
        Self::from_json(&text).map_err(|e| named(e.to_string()))
    }

    /// Parses the text of a `preprocessor_config.json`.
    ///
    /// # Errors
    /// As [`Self::from_pretrained`].
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| VisionError::Image(e.to_string()))?;
        let resize = if raw.do_resize {
            let size = raw.size.unwrap_or_default();
            Some(match (side(&size, "height"), side(&size, "width")) {
                (Some(h), Some(w)) => Resize::Exact(checked(h, w)?.0, w),
                _ => match side(&size, "shortest_edge") {
                    Some(s) => Resize::ShortestEdge(checked(s, s)?.0),
                    None => {
                        return Err(VisionError::Image(format!(
                            "size {} is not supported: give a positive \"height\" and \
                             \"width\", or \"shortest_edge\"",
                            serde_json::Value::Object(size)
                        )));
                    }
                },
            })
        } else {
            None
        };
        let center_crop = if raw.do_center_crop {
            let size = raw.crop_size.unwrap_or_default();
            match (side(&size, "height"), side(&size, "width")) {
                (Some(h), Some(w)) => Some(checked(h, w)?),
                _ => {
                    return Err(VisionError::Image(format!(
                        "crop_size {} is not supported: give a positive \"height\" and \
                         \"width\"",
                        serde_json::Value::Object(size)
                    )));
                }
            }
        } else {
            None
        };
        let channels = raw.image_mean.len();
        if raw.do_normalize {
            if raw.image_std.len() != channels || !matches!(channels, 1 | 3) {
                return Err(VisionError::Image(format!(
                    "image_mean has {} values and image_std {}; both need 3 (RGB) or 1 (grey)",
                    channels,
                    raw.image_std.len()
                )));
            }
            if let Some(s) = raw.image_std.iter().find(|s| **s == 0.0 || !s.is_finite()) {
                return Err(VisionError::Image(format!(
                    "image_std {s} cannot divide pixel values"
                )));
            }
        }
        Ok(Self {
            resize,
            center_crop,
            resample: Resample::from_pil(raw.resample)?,
            rescale_factor: raw.do_rescale.then_some(raw.rescale_factor as f32),
            normalize: raw.do_normalize.then_some((raw.image_mean, raw.image_std)),
            channels: if raw.do_normalize { channels } else { 3 },
        })
    }

    /// The `(height, width)` an `h × w` image is resized to, when resizing.
    ///
    /// # Errors
    /// A side above [`MAX_SIDE`] (a long thin image resized by its shortest edge).
    fn resize_to(&self, h0: usize, w0: usize) -> Result<Option<(usize, usize)>> {
        let target = self.resize.map(|r| r.output(h0, w0));
        if let Some((h, w)) = target.filter(|(h, w)| *h > MAX_SIDE || *w > MAX_SIDE) {
            return Err(VisionError::Image(format!(
                "the {h0}x{w0} image would be resized to {h}x{w}, larger than the \
                 {MAX_SIDE} pixels a side an image may be resized to"
            )));
        }
        Ok(target)
    }

    /// The `(height, width)` of an `h × w` image after resizing and cropping.
    pub fn output_size(&self, h: usize, w: usize) -> (usize, usize) {
        let resized = self.resize.map_or((h, w), |r| r.output(h, w));
        self.center_crop.unwrap_or(resized)
    }

    /// The pixel values of one image, `[C, H, W]` row-major.
    ///
    /// # Errors
    /// A resized side above [`MAX_SIDE`] (a long thin image resized by its shortest
    /// edge), or a centre crop larger than the resized image.
    pub fn preprocess(&self, image: &DynamicImage) -> Result<Vec<f32>> {
        let (h0, w0) = (image.height() as usize, image.width() as usize);
        let target = self.resize_to(h0, w0)?;
        let resized;
        let mut image = match target {
            Some((h, w)) if (h0, w0) != (h, w) => {
                resized = image.resize_exact(w as u32, h as u32, self.resample.filter());
                &resized
            }
            _ => image,
        };
        let cropped;
        if let Some((ch, cw)) = self.center_crop {
            let (h, w) = (image.height() as usize, image.width() as usize);
            if ch > h || cw > w {
                return Err(VisionError::Image(format!(
                    "crop_size {ch}x{cw} is larger than the {h}x{w} image it cuts"
                )));
            }
            // HF's `center_crop`: the offsets rounded down.
            let (top, left) = ((h - ch) / 2, (w - cw) / 2);
            cropped = image.crop_imm(left as u32, top as u32, cw as u32, ch as u32);
            image = &cropped;
        }
        let (w, h) = (image.width() as usize, image.height() as usize);
        // Interleaved 8-bit samples, `[H, W, C]`.
        let samples = if self.channels == 1 {
            image.to_luma8().into_raw()
        } else {
            image.to_rgb8().into_raw()
        };
        let c = self.channels;
        let scale = self.rescale_factor.unwrap_or(1.0);
        let mut out = vec![0.0f32; c * h * w];
        for (i, v) in samples.iter().enumerate() {
            let (pixel, ch) = (i / c, i % c);
            let mut x = f32::from(*v) * scale;
            if let Some((mean, std)) = &self.normalize {
                x = (x - mean[ch]) / std[ch];
            }
            out[ch * h * w + pixel] = x;
        }
        Ok(out)
    }

    /// Pixel values of several images of one size after preprocessing, `[B, C, H, W]`.
    ///
    /// # Errors
    /// No images, or images of different sizes (when not resizing).
    pub fn batch(&self, images: &[DynamicImage], device: &Device) -> Result<Tensor<4>> {
        let first = images
            .first()
            .ok_or_else(|| VisionError::Input("empty batch of images".into()))?;
        let size = |im: &DynamicImage| self.output_size(im.height() as usize, im.width() as usize);
        // Checked before the batch's memory is reserved.
        self.resize_to(first.height() as usize, first.width() as usize)?;
        let (h, w) = size(first);
        let mut values = Vec::with_capacity(images.len() * self.channels * h * w);
        for (i, im) in images.iter().enumerate() {
            if size(im) != (h, w) {
                return Err(VisionError::Input(format!(
                    "image {i} is {}x{} once preprocessed, image 0 is {h}x{w}; resize them \
                     to one size",
                    size(im).0,
                    size(im).1
                )));
            }
            values.extend(self.preprocess(im)?);
        }
        Ok(Tensor::from_data(
            TensorData::new(values, [images.len(), self.channels, h, w]),
            device,
        ))
    }

    /// Reads image files and batches them, `[B, C, H, W]`.
    ///
    /// # Errors
    /// A file that cannot be read or decoded, named; or as [`Self::batch`].
    pub fn load(&self, paths: &[impl AsRef<Path>], device: &Device) -> Result<Tensor<4>> {
        let images = paths
            .iter()
            .map(|p| open(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        self.batch(&images, device)
    }
}

/// Decodes a PNG or JPEG file (the format is read from its bytes, not its name).
///
/// # Errors
/// A file that is missing, unreadable, or not a decodable image, named.
pub fn open(path: &Path) -> Result<DynamicImage> {
    let bad = |e: String| VisionError::Image(format!("cannot read image {}: {e}", path.display()));
    image::io::Reader::open(path)
        .map_err(|e| bad(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?
        .decode()
        .map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescale_and_normalise_without_resizing_are_exact() {
        let mut im = image::RgbImage::new(2, 1);
        im.put_pixel(0, 0, image::Rgb([0, 51, 255]));
        im.put_pixel(1, 0, image::Rgb([255, 102, 0]));
        let p = ImageProcessor::vit(7);
        let no_resize = ImageProcessor {
            resize: None,
            ..p.clone()
        };
        let v = no_resize.preprocess(&DynamicImage::ImageRgb8(im)).unwrap();
        // Channel-major: R of both pixels, then G, then B; (x/255 - 0.5) / 0.5.
        let expected = [-1.0, 1.0, -0.6, -0.2, 1.0, -1.0];
        for (got, want) in v.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{v:?}");
        }
    }

    #[test]
    fn the_shortest_edge_and_the_centre_crop_follow_hf() {
        // int(30 · 45 / 37) = 36, the longer side rounded down.
        assert_eq!(Resize::ShortestEdge(30).output(45, 37), (36, 30));
        assert_eq!(Resize::ShortestEdge(30).output(37, 45), (30, 36));
        assert_eq!(Resize::ShortestEdge(30).output(30, 30), (30, 30));
        assert_eq!(Resize::Exact(7, 9).output(30, 30), (7, 9));
        let thin = DynamicImage::new_rgb8(1, 600);
        let mut p = ImageProcessor::vit(4);
        p.resize = Some(Resize::ShortestEdge(30));
        assert_eq!(
            p.preprocess(&thin).unwrap_err().to_string(),
            "the 600x1 image would be resized to 18000x30, larger than the 16384 pixels a side \
             an image may be resized to"
        );
        // A 5-wide, 2-high image whose red is its column: a 1x2 crop takes row 0
        // ((2 - 1) / 2 = 0) and columns 1 and 2 ((5 - 2) / 2 = 1), as HF's offsets.
        let mut im = image::RgbImage::new(5, 2);
        for (x, y, p) in im.enumerate_pixels_mut() {
            *p = image::Rgb([x as u8 * 10, y as u8, 0]);
        }
        let crop = ImageProcessor {
            resize: None,
            center_crop: Some((1, 2)),
            resample: Resample::Bilinear,
            rescale_factor: None,
            normalize: None,
            channels: 3,
        };
        let im = DynamicImage::ImageRgb8(im);
        assert_eq!(crop.output_size(2, 5), (1, 2));
        assert_eq!(
            crop.preprocess(&im).unwrap(),
            [10.0, 20.0, 0.0, 0.0, 0.0, 0.0]
        );
        let too_big = ImageProcessor {
            center_crop: Some((3, 2)),
            ..crop
        };
        assert_eq!(
            too_big.preprocess(&im).unwrap_err().to_string(),
            "crop_size 3x2 is larger than the 2x5 image it cuts"
        );
    }

    #[test]
    fn preprocessor_configs_read_hf_names_and_reject_what_cannot_work() {
        let p = ImageProcessor::from_json(
            r#"{"do_resize": true, "size": {"height": 30, "width": 40}, "resample": 3,
                "rescale_factor": 0.5, "image_mean": [0.1, 0.2, 0.3], "image_std": [1, 2, 4]}"#,
        )
        .unwrap();
        assert_eq!(p.resize, Some(Resize::Exact(30, 40)));
        assert_eq!(p.resample, Resample::Bicubic);
        assert_eq!(p.rescale_factor, Some(0.5));
        assert_eq!(p.normalize.unwrap().1, vec![1.0, 2.0, 4.0]);
        for (json, message) in [
            (
                "{}",
                "size {} is not supported: give a positive \"height\" and \"width\", or \
                 \"shortest_edge\"",
            ),
            (
                r#"{"size": {"longest_edge": 224}}"#,
                "size {\"longest_edge\":224} is not supported: give a positive \"height\" and \
                 \"width\", or \"shortest_edge\"",
            ),
            (
                r#"{"do_resize": false, "do_center_crop": true, "crop_size": {"height": 9}}"#,
                "crop_size {\"height\":9} is not supported: give a positive \"height\" and \
                 \"width\"",
            ),
            (
                r#"{"do_resize": false, "resample": 7}"#,
                "resample 7 is not a supported PIL filter (0 nearest, 1 lanczos, 2 bilinear, 3 bicubic)",
            ),
            (
                r#"{"do_resize": false, "image_std": [0.5, 0.5]}"#,
                "image_mean has 3 values and image_std 2; both need 3 (RGB) or 1 (grey)",
            ),
            (
                r#"{"do_resize": false, "image_std": [0.5, 0, 0.5]}"#,
                "image_std 0 cannot divide pixel values",
            ),
            // Found by the fuzzer: resizing to this aborted the process on a 171 GB
            // allocation.
            (
                r#"{"size": {"height": 4294967296, "width": 224}}"#,
                "size 4294967296x224 is larger than the 16384 pixels a side an image may be \
                 resized to",
            ),
        ] {
            let e = ImageProcessor::from_json(json).unwrap_err();
            assert_eq!(e.to_string(), message, "{json}");
        }
    }

    #[test]
    fn unreadable_files_are_named() {
        let dir = std::env::temp_dir().join(format!("zoo-vision-image-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.png");
        std::fs::write(&junk, b"not an image at all").unwrap();
        let e = open(&junk).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read image {}: ", junk.display())),
            "{e}"
        );
        let missing = dir.join("missing.jpg");
        let e = open(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read image {}: ", missing.display())),
            "{e}"
        );
        std::fs::remove_dir_all(dir).ok();
        let dev = zoo_device::test_device();
        assert_eq!(
            ImageProcessor::vit(4)
                .batch(&[], &dev)
                .unwrap_err()
                .to_string(),
            "empty batch of images"
        );
    }
}
