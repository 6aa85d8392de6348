//! The weights file of a checkpoint folder: one safetensors file, a sharded one, or
//! `pytorch_model.bin`, read with each float tensor cast to the module's float type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::store::{ModuleStore, PytorchStore, bridge};
use burn::tensor::quantization::{QuantStore, QuantizedBytes};
use burn::tensor::{DType, TensorData};

use super::{CheckpointError, PackTensor};

/// The weights file of a checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsFile {
    /// `model.safetensors`.
    Safetensors(PathBuf),
    /// `model.safetensors.index.json`, whose `weight_map` names the shard of each tensor.
    Sharded(PathBuf),
    /// `model.bpk`, a burnpack file under HF names, as the zoo saves a model with
    /// quantized weights (`zoo quantize`).
    Burnpack(PathBuf),
    /// `pytorch_model.bin`, a pickled `state_dict`.
    Pytorch(PathBuf),
}

impl WeightsFile {
    /// The weights file of `dir`: `model.safetensors` when present, else `model.bpk`,
    /// else the index of a sharded one (`model.safetensors.index.json`), else
    /// `pytorch_model.bin`.
    ///
    /// # Errors
    /// [`CheckpointError::NoWeights`] when there is none of them.
    pub fn find(dir: &Path) -> Result<Self, CheckpointError> {
        let safetensors = dir.join("model.safetensors");
        if safetensors.is_file() {
            return Ok(Self::Safetensors(safetensors));
        }
        let burnpack = dir.join("model.bpk");
        if burnpack.is_file() {
            return Ok(Self::Burnpack(burnpack));
        }
        let index = dir.join("model.safetensors.index.json");
        if index.is_file() {
            return Ok(Self::Sharded(index));
        }
        let bin = dir.join("pytorch_model.bin");
        if bin.is_file() {
            return Ok(Self::Pytorch(bin));
        }
        Err(CheckpointError::NoWeights {
            dir: dir.to_path_buf(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        match self {
            Self::Safetensors(p) | Self::Sharded(p) | Self::Burnpack(p) | Self::Pytorch(p) => p,
        }
    }

    /// Every tensor of the file, by its checkpoint name. Data is read lazily.
    ///
    /// # Errors
    /// [`CheckpointError::Format`] for a file the reader rejects.
    pub fn tensors(&self) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
        self.tensors_as(None)
    }

    /// [`Self::tensors`], with the f32 tensors of a safetensors file (or of its shards)
    /// read as `narrow` when that is f16 or bf16: converted a slice at a time as they are
    /// read, where a conversion after reading would hold a tensor's f32 values and its
    /// half-precision ones at once. Other files and types are read as they are stored.
    ///
    /// # Errors
    /// As [`Self::tensors`].
    pub fn tensors_as(
        &self,
        narrow: Option<DType>,
    ) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
        let format = |message: String| CheckpointError::Format {
            path: self.path().to_path_buf(),
            message,
        };
        if !self.path().is_file() {
            return Err(CheckpointError::Io {
                path: self.path().to_path_buf(),
                message: "no such file".into(),
            });
        }
        match self {
            Self::Safetensors(p) => super::safetensors_file::read(p, narrow),
            Self::Pytorch(p) => PytorchStore::from_file(p)
                .get_all_tensors()
                .cloned()
                .map_err(|e| format(e.to_string())),
            Self::Burnpack(p) => burn::store::BurnpackStore::from_file(p)
                .auto_extension(false)
                .get_all_tensors()
                .cloned()
                .map_err(|e| format(e.to_string())),
            Self::Sharded(index) => sharded_tensors(index, narrow),
        }
    }
}

/// A tensor of a checkpoint file: its name, shape and stored little-endian bytes.
pub type StoredTensor = (String, Vec<usize>, Vec<u8>);

impl WeightsFile {
    /// Every tensor as its name, shape and stored bytes (in the file's own dtype), sorted
    /// by name: what a bit-for-bit comparison of two checkpoints needs.
    ///
    /// # Errors
    /// As [`Self::tensors`], and a tensor whose bytes cannot be read.
    pub fn contents(&self) -> Result<Vec<StoredTensor>, CheckpointError> {
        self.tensors()?
            .into_iter()
            .map(|(name, t)| {
                let bytes = t.to_bytes().map_err(|e| CheckpointError::Format {
                    path: self.path().to_path_buf(),
                    message: format!("{name}: {e}"),
                })?;
                Ok((name, t.shape.to_vec(), bytes.to_vec()))
            })
            .collect()
    }
}

/// A tensor of a checkpoint that holds NaN or infinite values.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFinite {
    /// Its checkpoint name.
    pub name: String,
    /// How many of its values are not finite.
    pub count: usize,
    /// The flat index of the first one.
    pub first: usize,
    /// That value: NaN, inf or -inf.
    pub value: f32,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} holds {} non-finite value{}, the first {} at flat index {}",
            self.name,
            self.count,
            if self.count == 1 { "" } else { "s" },
            self.value,
            self.first
        )
    }
}

impl WeightsFile {
    /// Reads every floating-point tensor of the file, in its own precision widened to
    /// f32, and lists those that hold NaN or infinite values, by name: weights that would
    /// turn every output into garbage without an error. Integer tensors are skipped.
    ///
    /// # Errors
    /// As [`Self::tensors`], and a tensor whose values cannot be read.
    pub fn non_finite(&self) -> Result<Vec<NonFinite>, CheckpointError> {
        let mut out = Vec::new();
        for (name, t) in self.tensors()? {
            if !matches!(t.dtype, DType::F64 | DType::F32 | DType::F16 | DType::BF16) {
                continue;
            }
            let values = bridge::to_data(&t)
                .map(|d| d.convert::<f32>().try_to_vec::<f32>())
                .map_err(|e| e.to_string())
                .and_then(|v| v.map_err(|e| format!("{e:?}")))
                .map_err(|message| CheckpointError::Format {
                    path: self.path().to_path_buf(),
                    message: format!("{name}: {message}"),
                })?;
            let mut bad = values.iter().enumerate().filter(|(_, v)| !v.is_finite());
            if let Some((first, &value)) = bad.next() {
                let count = 1 + bad.count();
                out.push(NonFinite {
                    name,
                    count,
                    first,
                    value,
                });
            }
        }
        Ok(out)
    }
}

impl WeightsFile {
    /// The float type the file stores its weights in, read from its headers: the type of
    /// its floating-point tensors, f32 where they mix types (f16 and bf16, or half and
    /// f32) or where there are none. Quantized tensors do not count: a folder that `zoo
    /// quantize` wrote stores the rest in the type it computed in.
    ///
    /// This is the type a checkpoint runs in unless asked otherwise: select the device
    /// with it (`zoo_device::select_as(backend, 0, file.stored_float()?)`), falling back
    /// to f32 on a backend that lacks it.
    ///
    /// # Errors
    /// As [`Self::tensors`].
    pub fn stored_float(&self) -> Result<zoo_device::FloatType, CheckpointError> {
        use zoo_device::FloatType;
        let types: std::collections::BTreeSet<FloatType> = self
            .tensors()?
            .values()
            .filter_map(|t| match t.dtype {
                DType::F16 => Some(FloatType::F16),
                DType::BF16 => Some(FloatType::BF16),
                DType::F32 | DType::F64 => Some(FloatType::F32),
                _ => None,
            })
            .collect();
        Ok(match types.len() {
            1 => types.into_iter().next().unwrap_or_default(),
            _ => FloatType::F32,
        })
    }
}

/// The tensors of a sharded safetensors checkpoint: every shard the index's `weight_map`
/// names is read once, and every tensor it lists must be in its shard.
fn sharded_tensors(
    index: &Path,
    narrow: Option<DType>,
) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: BTreeMap<String, String>,
    }
    let format = |message: String| CheckpointError::Format {
        path: index.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(index).map_err(|e| CheckpointError::Io {
        path: index.to_path_buf(),
        message: e.to_string(),
    })?;
    let parsed: Index = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, shard) in &parsed.weight_map {
        by_shard.entry(shard).or_default().push(name);
    }
    if by_shard.is_empty() {
        return Err(format("its weight_map names no tensors".into()));
    }
    let mut out = BTreeMap::new();
    for (shard, names) in by_shard {
        if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
            return Err(format(format!(
                "shard {shard:?} is not a file of this folder"
            )));
        }
        let mut tensors = WeightsFile::Safetensors(dir.join(shard)).tensors_as(narrow)?;
        for name in names {
            let tensor = tensors
                .remove(name)
                .ok_or_else(|| format(format!("{name} is not in its shard {shard}")))?;
            out.insert(name.to_string(), tensor);
        }
    }
    Ok(out)
}

/// A floating-point tensor in `target`, the float type of the module it goes into,
/// converted when it is read: an f16 or bf16 file widened for a model that computes in
/// f32, an f32 file narrowed for one configured for half precision. burn-store would
/// otherwise keep the file's float type in the parameter, and a model whose parameters
/// differ in type from its device's default fails in its first product.
pub(super) fn cast_float(tensor: PackTensor, target: DType) -> PackTensor {
    let float = matches!(
        tensor.dtype,
        DType::F64 | DType::F32 | DType::F16 | DType::BF16
    );
    if !float || tensor.dtype == target {
        return tensor;
    }
    let (name, shape, id) = (tensor.name.clone(), tensor.shape.clone(), tensor.param_id);
    bridge::deferred(name, target, shape, id, move || {
        Ok(bridge::to_data(&tensor)?.convert_dtype(target))
    })
}

/// A quantized tensor in `store`, the packing that the device it loads on runs: flex
/// keeps 8-bit values one per byte, while WGSL has no bytes and wgpu packs four to a
/// `u32`. The values and their scales are unpacked and packed again, unchanged; a tensor
/// already in `store`, or not quantized, passes as it is.
pub(super) fn repack(tensor: PackTensor, store: QuantStore) -> PackTensor {
    let DType::QFloat(scheme) = tensor.dtype else {
        return tensor;
    };
    if scheme.store == store {
        return tensor;
    }
    let target = scheme.with_store(store);
    let (name, shape, id) = (tensor.name.clone(), tensor.shape.clone(), tensor.param_id);
    bridge::deferred(name, DType::QFloat(target), shape, id, move || {
        let data = bridge::to_data(&tensor)?;
        let shape = data.shape().clone();
        let packed = QuantizedBytes {
            bytes: data.into_bytes(),
            scheme,
            shape: shape.clone(),
        };
        let (values, scales) = packed.into_vec_i8();
        Ok(match target.store {
            QuantStore::PackedU32(0) if scales.global.is_none() => {
                let bits = target.size_bits_value();
                let line = shape.to_vec().last().copied().unwrap_or(1).max(1);
                let mut bytes = pack_lines_u32(&values, line, bits);
                for scale in &scales.block {
                    bytes.extend(scale.to_ne_bytes());
                }
                TensorData::from_bytes_vec(bytes, shape, DType::QFloat(target))
            }
            _ => TensorData::quantized(values, shape, target, &scales.block, scales.global),
        })
    })
}

/// Signed `bits`-wide values packed into little-endian `u32` words, the first value in
/// the lowest bits, each line of `line` values starting a new word, as CubeCL's
/// `PackedU32` store along the innermost dimension lays them out.
fn pack_lines_u32(values: &[i8], line: usize, bits: usize) -> Vec<u8> {
    let per_word = 32 / bits;
    let mask = (1u32 << bits) - 1;
    let mut out = Vec::with_capacity(values.len() * bits / 8 + 4);
    for row in values.chunks(line) {
        for group in row.chunks(per_word) {
            let word = group
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, v)| acc | ((*v as u32) & mask) << (i * bits));
            out.extend(word.to_le_bytes());
        }
    }
    out
}
