//! Files that survive a crash: every file the zoo writes for a user goes to a temporary
//! name beside its final one, is flushed to the disk (`fsync`), renamed over the final
//! name, and the folder is flushed so that the rename itself is on the disk. A kill, a
//! power cut or a full disk at any moment leaves the old file or the new one, never a
//! part of either; a failed write removes its temporary file.
//!
//! The pattern is POSIX's: `rename` replaces a name atomically, and only `fsync` of a
//! file and of its folder makes the content and the new name durable (see the Linux
//! `rename(2)` and `fsync(2)` manual pages).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file operation that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file or folder.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

impl FileError {
    /// Wraps `source`, which happened at `path`.
    pub fn at(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Shorthand for results of this module.
pub type Result<T, E = FileError> = std::result::Result<T, E>;

/// The temporary name beside `path` that a write goes to first: `.{name}.partial`. A
/// leading dot keeps it out of a plain `ls`, and a loader that looks for the final name
/// never picks it up.
pub fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

/// Flushes the file at `path` to the disk.
///
/// # Errors
/// A file that cannot be opened or synced.
pub fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(FileError::at(path))
}

/// Flushes the folder `dir`, so that the names created, renamed or removed in it are on
/// the disk. A no-op where folders cannot be opened as files (Windows).
///
/// # Errors
/// A folder that cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> Result<()> {
    if cfg!(unix) {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(FileError::at(dir))?;
    }
    Ok(())
}

/// The folder that holds `path` (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `path` and flushes them to the disk, without a rename: for a
/// temporary file that [`commit`] publishes later.
///
/// # Errors
/// A file that cannot be created, written or synced.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(FileError::at(path))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(FileError::at(path))
}

/// Writes `bytes` to `path` through its temporary file: written, synced, renamed over
/// `path`, and the folder synced. On a failure the temporary file is removed and `path`
/// is left as it was.
///
/// # Errors
/// A file or folder that cannot be written, created or synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.file_name().is_none() {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name");
        return Err(FileError::at(path)(e));
    }
    let partial = partial_path(path);
    let result = write_synced(&partial, bytes)
        .and_then(|()| commit(&[(partial.clone(), path.to_path_buf())]));
    if result.is_err() {
        std::fs::remove_file(&partial).ok();
    }
    result
}

/// Renames each written and synced temporary file over its final name, in order, then
/// flushes the folders. Files written together (a checkpoint's weights and its
/// `config.json`) are all written and synced before the first rename, so a crash leaves
/// every old file or every new one but for the instants between two renames.
///
/// # Errors
/// A rename or a folder sync that fails.
pub fn commit(renames: &[(PathBuf, PathBuf)]) -> Result<()> {
    for (from, to) in renames {
        std::fs::rename(from, to).map_err(FileError::at(to))?;
    }
    let mut folders: Vec<&Path> = renames.iter().map(|(_, to)| folder_of(to)).collect();
    folders.dedup();
    for dir in folders {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zoo-durable-{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary_file() {
        let dir = temp_dir("replace");
        let path = dir.join("a.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
        std::fs::remove_dir_all(dir).ok();
    }

    /// A full disk, simulated by the temporary name pointing at `/dev/full` (every write
    /// to it fails with ENOSPC): the old file survives, the error names the path, and the
    /// temporary name is gone.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_leaves_the_old_file_and_names_the_path() {
        let dir = temp_dir("full");
        let path = dir.join("model.json");
        write_atomic(&path, b"old").unwrap();
        std::os::unix::fs::symlink("/dev/full", partial_path(&path)).unwrap();
        let err = write_atomic(&path, &[7u8; 1 << 16]).unwrap_err();
        assert_eq!(err.path, partial_path(&path));
        assert_eq!(err.source.raw_os_error(), Some(28), "{err}"); // ENOSPC
        assert!(err.to_string().contains(".model.json.partial"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert!(!partial_path(&path).exists());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn the_temporary_name_sits_beside_the_final_one() {
        assert_eq!(
            partial_path(Path::new("/m/model.safetensors")),
            Path::new("/m/.model.safetensors.partial")
        );
        assert_eq!(folder_of(Path::new("x.json")), Path::new("."));
    }
}
