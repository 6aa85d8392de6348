//! Writing a module as HF-layout safetensors, or, when it holds quantized weights, as a
//! burnpack file under the same names.

use std::path::Path;

use burn::module::Module;
use burn::store::{ModuleSnapshot, SafetensorsStore};
use burn::tensor::DType;

use super::keymap::Direction;
use super::{CheckpointError, KeyMap, config_text};
use crate::durable::{self, partial_path};

/// Writes `module` as HF-layout safetensors at `path`, through `map`'s names: `Linear`
/// weights transposed back to `[out, in]`, norm parameters named `weight` and `bias`.
/// burn-store builds the file beside `path`, syncs it and renames it into place, so the
/// file appears whole or not at all.
///
/// # Errors
/// A folder that cannot be written.
pub fn save_safetensors<M: Module>(
    module: &M,
    path: &Path,
    map: &KeyMap,
) -> Result<(), CheckpointError> {
    let mut store = SafetensorsStore::from_file(path)
        .with_to_adapter(map.adapter(Direction::ToPytorch))
        .remap(KeyMap::remapper(&map.save_patterns()))
        .skip_enum_variants(true)
        .metadata("format", "pt")
        .overwrite(true);
    module
        .save_into(&mut store)
        .map_err(|e| CheckpointError::io(path, e))
}

/// Whether `module` holds quantized weights (Burn's `QFloat` tensors), which safetensors
/// cannot store.
pub fn is_quantized<M: Module>(module: &M) -> bool {
    crate::quant::has_packed_q4(module)
        || module
            .collect(None, None, true)
            .iter()
            .any(|t| matches!(t.dtype, DType::QFloat(_)))
}

/// Writes `module` as a burnpack file (Burn's own format, which stores quantized tensors
/// as they are in memory: packed values with their scales) at `path`, under the HF names
/// of `map`, as [`save_safetensors`] names them. Float tensors are in HF's layout
/// (`Linear` weights `[out, in]`); quantized weights stay in Burn's `[in, out]`, since
/// their packed blocks cannot be transposed, and load back as they are. Written beside
/// `path` and renamed into place.
///
/// # Errors
/// A folder that cannot be written, or a tensor that cannot be read back.
pub fn save_burnpack<M: Module>(
    module: &M,
    path: &Path,
    map: &KeyMap,
) -> Result<(), CheckpointError> {
    let unpacked = crate::quant::unpacked(module);
    let module = unpacked.as_ref().unwrap_or(module);
    let tensors = module.collect(
        None,
        Some(Box::new(map.adapter(Direction::ToPytorch))),
        true,
    );
    let (named, _) = KeyMap::remapper(&map.save_patterns()).remap(tensors);
    burn::store::burn_pack::Writer::new(named)
        .with_metadata("format", "burn-model-zoo")
        .auto_extension(false)
        .overwrite(true)
        .write_to_file(path)
        .map_err(|e| CheckpointError::io(path, e))
}

/// Writes `module` as an HF checkpoint folder, the one way every family saves: `dir`
/// created, `model.safetensors` through `map` ([`save_safetensors`]), or `model.bpk`
/// when the module holds quantized weights ([`save_burnpack`]), and `config.json` from
/// `config` with `model_type` and `architectures` set ([`config_text`]).
///
/// Both files are written under temporary names and synced before either is renamed
/// into place, and the folder is synced after: a crash or a full disk while writing
/// leaves the old checkpoint whole, weights and config together ([`crate::durable`]).
///
/// # Errors
/// A folder that cannot be written, or a config that is not a JSON object.
pub fn save_pretrained<M: Module, C: serde::Serialize>(
    module: &M,
    dir: &Path,
    map: &KeyMap,
    config: &C,
    model_type: &str,
    architecture: &str,
) -> Result<(), CheckpointError> {
    // Weights packed two 4-bit values to a byte are written as Burn's quantized tensors.
    let unpacked = crate::quant::unpacked(module);
    let module = unpacked.as_ref().unwrap_or(module);
    let quantized = is_quantized(module);
    let weights = if quantized {
        "model.bpk"
    } else {
        "model.safetensors"
    };
    let files = [dir.join(weights), dir.join("config.json")];
    let text = config_text(config, model_type, architecture).map_err(|message| {
        CheckpointError::Config {
            path: files[1].clone(),
            message,
        }
    })?;
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))?;
    let partials = files.clone().map(|f| partial_path(&f));
    let saved = if quantized {
        save_burnpack(module, &partials[0], map)
    } else {
        save_safetensors(module, &partials[0], map)
    };
    let written = saved
        .and_then(|()| Ok(durable::write_synced(&partials[1], text.as_bytes())?))
        .and_then(|()| {
            let renames = [
                (partials[0].clone(), files[0].clone()),
                (partials[1].clone(), files[1].clone()),
            ];
            Ok(durable::commit(&renames)?)
        });
    if written.is_err() {
        for p in &partials {
            std::fs::remove_file(p).ok();
        }
    } else {
        // The other format's file of an earlier save would be found first, or be stale.
        let other = if quantized {
            "model.safetensors"
        } else {
            "model.bpk"
        };
        let other = dir.join(other);
        if other.is_file() {
            std::fs::remove_file(&other).map_err(|e| CheckpointError::io(&other, e))?;
        }
    }
    written
}
