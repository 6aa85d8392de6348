//! One run per artifact folder: a run holds an exclusive advisory lock on the folder's
//! `.lock` file from its start to its end, and writes its process id there, so a second
//! run on the same folder stops before it reads or clears anything and says who holds it.
//! The operating system drops the lock when the holder exits, however it exits, so a
//! killed run never leaves the folder locked.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;

use crate::error::{Result, TrainError, io_err};

/// The lock of a run's folder; released when dropped.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: File,
}

/// Takes the lock of `dir` (created if needed) for this process.
///
/// # Errors
/// [`TrainError::Busy`] when another run holds it; a folder or lock file that cannot be
/// created.
pub(crate) fn lock_run(dir: &Path) -> Result<RunLock> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join(".lock");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_err(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(TrainError::Busy {
                dir: dir.to_path_buf(),
                holder: holder.trim().to_string(),
            });
        }
        // Some network file systems have no locks: run unguarded rather than not at all.
        Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
            log::warn!(
                "{}: the file system takes no locks, so nothing stops a second run on this \
                 folder",
                path.display()
            );
            return Ok(RunLock { _file: file });
        }
        Err(TryLockError::Error(e)) => return Err(io_err(&path)(e)),
    }
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .and_then(|()| file.flush())
        .map_err(io_err(&path))?;
    Ok(RunLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_folder_names_the_holder_and_the_first_release_frees_it() {
        let pid = std::process::id().to_string();
        let dir = std::env::temp_dir().join(format!("zoo-train-lock-{pid}"));
        std::fs::remove_dir_all(&dir).ok();
        let first = lock_run(&dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(".lock")).unwrap().trim(),
            pid
        );
        let err = lock_run(&dir).unwrap_err();
        assert!(
            matches!(&err, TrainError::Busy { holder, .. } if *holder == pid),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{} is in use by another run (process {pid}); wait for it to end, or choose \
                 another folder",
                dir.display()
            )
        );
        drop(first);
        drop(lock_run(&dir).unwrap());
        std::fs::remove_dir_all(&dir).ok();
    }
}
