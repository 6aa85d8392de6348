//! The vision family's rows in the registry (`zoo_hub::AutoModel` reads them), and its
//! checkpoints as `zoo-core`'s [`Pretrained`]; the image classifier is also a
//! [`Classifier`] of image files, through the folder's image processor.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use zoo_core::ModelError;
use zoo_core::registry::{
    Architecture, Classes, Classifier, ClassifyInput, ForwardInput, Loader, Modality, NamedOutput,
    Pretrained, Task, encoder_outputs, named, needs,
};

use crate::clip::ClipModel;
use crate::image::ImageProcessor;
use crate::model::{
    DeiTForImageClassificationWithTeacher, ImageInput, ViTForImageClassification, ViTModel,
};

const INPUTS: &[&str] = &["pixel_values", "interpolate_pos_encoding"];

/// One row of the family: ViT's or DeiT's (`model_type`), bare or a classifier.
const fn row(
    model_type: &'static str,
    name: &'static str,
    tasks: &'static [Task],
    load: Loader,
) -> Architecture {
    Architecture {
        model_type,
        name,
        inputs: INPUTS,
        tasks,
        load,
        load_adapted: None,
    }
}

/// Every architecture the family loads; the first of a `model_type` is what a
/// `config.json` without `architectures` gets. DeiT's bare model is ViT's with its
/// distillation token, which `config.json`'s `model_type` decides.
pub const ARCHITECTURES: &[Architecture] = &[
    row("vit", "ViTModel", &[], load_base),
    row(
        "vit",
        "ViTForImageClassification",
        &[Task::Classify],
        load_linear_classifier,
    ),
    row("deit", "DeiTModel", &[], load_base),
    row(
        "deit",
        "DeiTForImageClassification",
        &[Task::Classify],
        load_linear_classifier,
    ),
    Architecture {
        model_type: "clip",
        name: "CLIPModel",
        inputs: &[
            "input_ids",
            "attention_mask",
            "pixel_values",
            "interpolate_pos_encoding",
        ],
        tasks: &[],
        load: |dir, device| {
            Ok(Box::new(
                ClipModel::from_pretrained(dir, device).map_err(ModelError::new)?,
            ))
        },
        load_adapted: None,
    },
    row(
        "deit",
        "DeiTForImageClassificationWithTeacher",
        &[Task::Classify],
        |dir, device| {
            let model = DeiTForImageClassificationWithTeacher::from_pretrained(dir, device);
            classifier(dir, model.map(ImageHead::Distilled))
        },
    ),
];

/// ViT's classifier, and DeiT's single-head one (the same model over DeiT's embeddings).
fn load_linear_classifier(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    let model = ViTForImageClassification::from_pretrained(dir, device);
    classifier(dir, model.map(ImageHead::Linear))
}

fn load_base(dir: &Path, device: &Device) -> Result<Box<dyn Pretrained>, ModelError> {
    Ok(Box::new(
        ViTModel::from_pretrained(dir, device).map_err(ModelError::new)?,
    ))
}

/// A loaded head with the folder its image processor is read from.
fn classifier(
    dir: &Path,
    model: crate::Result<ImageHead>,
) -> Result<Box<dyn Pretrained>, ModelError> {
    Ok(Box::new(ImageClassifier {
        model: model.map_err(ModelError::new)?,
        dir: dir.to_path_buf(),
    }))
}

/// HF's `pixel_values` (and `interpolate_pos_encoding`) as the zoo's input.
fn image_input(input: &ForwardInput, device: &Device) -> Result<ImageInput, ModelError> {
    let px = input
        .pixel_values
        .as_ref()
        .ok_or_else(|| needs("pixel_values"))?;
    let t = Tensor::<4>::from_data(TensorData::new(px.values.clone(), px.shape), device);
    let x = ImageInput::new(t);
    Ok(if input.interpolate_pos_encoding {
        x.interpolate_pos_encoding()
    } else {
        x
    })
}

impl Pretrained for ViTModel {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let out = ViTModel::forward(self, image_input(input, device)?).map_err(ModelError::new)?;
        encoder_outputs(out.last_hidden_state, out.pooler_output)
    }
}

/// HF's `CLIPModel` outputs: every image against every text, and both embeddings.
impl Pretrained for ClipModel {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        Self::save_pretrained(self, dir).map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        let ids = input.ids()?.to_tensor(device);
        let padding = input.attention_mask.as_ref().map(|m| m.to_padding(device));
        let out = ClipModel::forward(self, ids, padding, image_input(input, device)?)?;
        Ok(vec![
            named("logits_per_image", out.logits_per_image)?,
            named("logits_per_text", out.logits_per_text)?,
            named("text_embeds", out.text_embeds)?,
            named("image_embeds", out.image_embeds)?,
        ])
    }
}

/// An image classifier of the family: ViT's one head, or DeiT's two.
#[derive(Module, Debug)]
pub enum ImageHead {
    /// `ViTForImageClassification`.
    Linear(ViTForImageClassification),
    /// `DeiTForImageClassificationWithTeacher`.
    Distilled(DeiTForImageClassificationWithTeacher),
}

impl ImageHead {
    fn encoder(&self) -> &ViTModel {
        match self {
            Self::Linear(m) => &m.vit,
            Self::Distilled(m) => &m.vit,
        }
    }

    /// The predicted class logits: ViT's head, or the mean of DeiT's two.
    fn logits(&self, input: ImageInput) -> Result<Tensor<2>, ModelError> {
        match self {
            Self::Linear(m) => Ok(m.forward(input).map_err(ModelError::new)?.0),
            Self::Distilled(m) => Ok(m.forward(input).map_err(ModelError::new)?.logits),
        }
    }

    /// HF's named outputs: `logits`, and DeiT's `cls_logits` and `distillation_logits`.
    fn outputs(&self, input: ImageInput) -> Result<Vec<NamedOutput>, ModelError> {
        match self {
            Self::Linear(m) => {
                let (logits, _) = m.forward(input).map_err(ModelError::new)?;
                Ok(vec![named("logits", logits)?])
            }
            Self::Distilled(m) => {
                let out = m.forward(input).map_err(ModelError::new)?;
                Ok(vec![
                    named("logits", out.logits)?,
                    named("cls_logits", out.cls_logits)?,
                    named("distillation_logits", out.distillation_logits)?,
                ])
            }
        }
    }
}

/// An image classifier with the folder its image processor is read from.
#[derive(Module, Debug)]
pub struct ImageClassifier {
    /// The model.
    pub model: ImageHead,
    /// The checkpoint folder.
    #[module(skip)]
    pub dir: PathBuf,
}

impl Pretrained for ImageClassifier {
    fn save_pretrained(&self, dir: &Path) -> Result<(), ModelError> {
        match &self.model {
            ImageHead::Linear(m) => m.save_pretrained(dir),
            ImageHead::Distilled(m) => m.save_pretrained(dir),
        }
        .map_err(ModelError::new)
    }

    fn forward(
        &self,
        input: &ForwardInput,
        device: &Device,
    ) -> Result<Vec<NamedOutput>, ModelError> {
        self.model.outputs(image_input(input, device)?)
    }

    fn classifier(&self) -> Option<&dyn Classifier> {
        Some(self)
    }
}

impl Classifier for ImageClassifier {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    /// Preprocesses with the folder's `preprocessor_config.json`, or ViT's defaults at
    /// the model's image size when there is none.
    fn classify(&self, input: ClassifyInput<'_>, device: &Device) -> Result<Classes, ModelError> {
        let ClassifyInput::Image(path) = input else {
            return Err(ModelError::msg(
                "ViTForImageClassification classifies images, not text",
            ));
        };
        let config = self.model.encoder().config();
        let processor = if self.dir.join("preprocessor_config.json").is_file() {
            ImageProcessor::from_pretrained(&self.dir).map_err(ModelError::new)?
        } else {
            ImageProcessor::vit(config.image_size)
        };
        let pixels = processor.load(&[path], device).map_err(ModelError::new)?;
        let logits = self.model.logits(ImageInput::new(pixels))?;
        Ok(Classes {
            logits,
            labels: config.labels(),
        })
    }
}
