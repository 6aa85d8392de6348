//! Writing a module as HF-layout safetensors.

use std::path::Path;

use burn::module::Module;
use burn::store::{ModuleSnapshot, SafetensorsStore};

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

/// Writes `module` as an HF checkpoint folder, the one way every family saves: `dir`
/// created, `model.safetensors` through `map` ([`save_safetensors`]), and `config.json`
/// from `config` with `model_type` and `architectures` set ([`config_text`]).
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
    let files = [dir.join("model.safetensors"), dir.join("config.json")];
    let text = config_text(config, model_type, architecture).map_err(|message| {
        CheckpointError::Config {
            path: files[1].clone(),
            message,
        }
    })?;
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))?;
    let partials = files.clone().map(|f| partial_path(&f));
    let written = save_safetensors(module, &partials[0], map)
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
    }
    written
}
