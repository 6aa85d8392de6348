//! Writing a module as HF-layout safetensors.

use std::path::Path;

use burn::module::Module;
use burn::store::{ModuleSnapshot, SafetensorsStore};

use super::keymap::Direction;
use super::{CheckpointError, KeyMap, write_config};

/// Writes `module` as HF-layout safetensors at `path`, through `map`'s names: `Linear`
/// weights transposed back to `[out, in]`, norm parameters named `weight` and `bias`.
/// The file appears whole or not at all.
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
        .map_err(|e| CheckpointError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// Writes `module` as an HF checkpoint folder, the one way every family saves: `dir`
/// created, `model.safetensors` through `map` ([`save_safetensors`]), and `config.json`
/// from `config` with `model_type` and `architectures` set ([`write_config`]). Each file
/// appears whole or not at all.
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
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::Io {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    save_safetensors(module, &dir.join("model.safetensors"), map)?;
    write_config(dir, config, model_type, architecture)
}
