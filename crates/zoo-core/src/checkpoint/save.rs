//! Writing a module as HF-layout safetensors.

use std::path::Path;

use burn::module::Module;
use burn::store::{ModuleSnapshot, SafetensorsStore};

use super::keymap::Direction;
use super::{CheckpointError, KeyMap};

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
