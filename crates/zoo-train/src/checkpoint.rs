//! The training checkpoints on disk: `checkpoint/{model,optim,scheduler}-N.bpk`, each
//! with its checksum beside it (`.bpk.crc32`), and the choice of the one a resumed run
//! continues from.
//!
//! A checkpoint is written under a temporary name, synced, its CRC-32 written, then
//! renamed into place and the folder synced ([`zoo_core::durable`]). The rename makes a
//! kill harmless; the checksum catches what a rename cannot: a file damaged after it was
//! written (a disk error, a copy cut short, a power cut on a file system that reorders
//! writes). A resume verifies the checkpoint it would continue from, and falls back to
//! the one before when it fails, with a warning that names both.

use std::path::{Path, PathBuf};

use burn::train::checkpoint::{Checkpoint, Checkpointer, CheckpointerError};
use zoo_core::durable;

/// The three records a round's checkpoint is made of.
const PARTS: [&str; 3] = ["model", "optim", "scheduler"];

/// Writes each checkpoint through a temporary file, synced, with its CRC-32 beside it,
/// then renames it and syncs the folder, so neither a kill nor a power cut during a
/// write leaves a corrupt checkpoint under its final name.
pub struct AtomicFileCheckpointer {
    directory: PathBuf,
    name: String,
}

impl AtomicFileCheckpointer {
    /// Checkpoints named `{name}-{epoch}.bpk` in `directory`.
    pub fn new(directory: &Path, name: &str) -> Self {
        std::fs::create_dir_all(directory).ok();
        Self {
            directory: directory.to_path_buf(),
            name: name.to_string(),
        }
    }

    fn path(&self, epoch: usize) -> PathBuf {
        part_path(&self.directory, &self.name, epoch)
    }
}

fn part_path(dir: &Path, name: &str, epoch: usize) -> PathBuf {
    dir.join(format!("{name}-{epoch}.bpk"))
}

/// Where the CRC-32 of the checkpoint file `path` is kept: `path` with `.crc32` added.
fn checksum_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".crc32");
    path.with_file_name(name)
}

/// The CRC-32 of the file at `path`, as eight hex digits.
fn crc32_of(path: &Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(format!("{:08x}", crc32fast::hash(&bytes)))
}

impl<R: Checkpoint> Checkpointer<R> for AtomicFileCheckpointer {
    fn save(&self, epoch: usize, record: R) -> std::result::Result<(), CheckpointerError> {
        let path = self.path(epoch);
        let tmp = durable::partial_path(&path);
        record.save(tmp.clone())?;
        prepare(&tmp, &path)
            .and_then(|()| durable::commit(&[(tmp, path)]).map_err(|e| e.source))
            .map_err(CheckpointerError::IOError)
    }

    fn restore(&self, epoch: usize) -> std::result::Result<R, CheckpointerError> {
        R::load(self.path(epoch))
    }

    fn delete(&self, epoch: usize) -> std::result::Result<(), CheckpointerError> {
        let path = self.path(epoch);
        for p in [checksum_path(&path), path] {
            if p.exists() {
                std::fs::remove_file(p).map_err(CheckpointerError::IOError)?;
            }
        }
        Ok(())
    }
}

/// Everything before the rename that puts the written file `tmp` at `path`: it is synced,
/// an earlier file at `path` is removed, and the new file's checksum written beside it.
/// A round is written again when a resumed run redoes the rounds after its checkpoint;
/// removing the old file first means a file under its final name matches the checksum
/// beside it whenever a kill comes (the soak found an old file beside a new checksum,
/// killed between the two).
fn prepare(tmp: &Path, path: &Path) -> std::io::Result<()> {
    let crc = crc32_of(tmp)?;
    durable::sync_file(tmp).map_err(|e| e.source)?;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    durable::write_atomic(&checksum_path(path), crc.as_bytes()).map_err(|e| e.source)
}

/// Why a round's checkpoint cannot be resumed from, in words, or `None` when its three
/// files exist and match their checksums. A file written before checksums were kept
/// has none, and is taken as it is.
fn damage(dir: &Path, epoch: usize) -> Option<String> {
    for part in PARTS {
        let path = part_path(dir, part, epoch);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let Ok(want) = std::fs::read_to_string(checksum_path(&path)) else {
            if path.exists() {
                continue;
            }
            return Some(format!("{name} is missing"));
        };
        match crc32_of(&path) {
            Ok(got) if got == want.trim() => {}
            Ok(got) => {
                return Some(format!(
                    "{name} fails its checksum (CRC-32 {got}, written as {})",
                    want.trim()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some(format!("{name} is missing"));
            }
            Err(e) => return Some(format!("{name} cannot be read: {e}")),
        }
    }
    None
}

/// The last round whose model, optimiser and scheduler checkpoints all exist and match
/// their checksums: the one a resumed run continues from. A later round whose files are
/// incomplete or damaged is passed over with a warning that names it and the round
/// used instead.
pub fn last_complete_checkpoint(artifact_dir: &Path) -> Option<usize> {
    let dir = artifact_dir.join("checkpoint");
    let entries = std::fs::read_dir(&dir).ok()?;
    let mut epochs: Vec<usize> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            n.strip_prefix("model-")?
                .strip_suffix(".bpk")?
                .parse::<usize>()
                .ok()
        })
        .collect();
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    let mut passed_over = Vec::new();
    for epoch in epochs {
        match damage(&dir, epoch) {
            None => {
                for (bad, why) in passed_over {
                    log::warn!(
                        "checkpoint {bad} in {} is not usable ({why}): resuming from \
                         checkpoint {epoch} instead",
                        dir.display()
                    );
                }
                return Some(epoch);
            }
            Some(why) => passed_over.push((epoch, why)),
        }
    }
    for (bad, why) in passed_over {
        log::warn!(
            "checkpoint {bad} in {} is not usable ({why}), and no earlier one is",
            dir.display()
        );
    }
    None
}

/// Removes the temporary files that writes cut short by a kill left in the run's folder
/// and its `checkpoint/` (`.NAME.partial`, see [`durable::partial_path`]): they are never
/// read, only written again. Called with the run's lock held, so no write is under way.
/// Returns how many were removed.
pub(crate) fn remove_partial_writes(artifact_dir: &Path) -> usize {
    let mut removed = 0;
    for dir in [artifact_dir.to_path_buf(), artifact_dir.join("checkpoint")] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.')
                && name.ends_with(".partial")
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round written again and killed before its rename: the old file is gone, not
    /// left beside the new file's checksum, so the round reads as incomplete (the run
    /// resumes from the round before) and no file under its final name fails its
    /// checksum.
    #[test]
    fn a_round_written_again_and_killed_before_the_rename_is_incomplete() {
        let (root, dir) = fresh_run("zoo-train-again");
        for epoch in 1..=2 {
            write_round(&dir, epoch);
        }
        let optim = part_path(&dir, "optim", 2);
        let tmp = durable::partial_path(&optim);
        std::fs::write(&tmp, "optim of round 2, written again").unwrap();
        prepare(&tmp, &optim).unwrap(); // the kill comes here, before the rename
        assert_eq!(damage(&dir, 2).unwrap(), "optim-2.bpk is missing");
        assert_eq!(last_complete_checkpoint(&root), Some(1));
        durable::commit(&[(tmp, optim)]).unwrap();
        assert_eq!(damage(&dir, 2), None);
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn writes_cut_short_are_removed_and_nothing_else() {
        let (root, dir) = fresh_run("zoo-train-partial");
        write_round(&dir, 1);
        let cut = durable::partial_path(&part_path(&dir, "model", 2));
        std::fs::write(&cut, "half a checkpoint").unwrap();
        let csv = durable::partial_path(&root.join("metrics.csv"));
        std::fs::write(&csv, "epoch,").unwrap();
        std::fs::write(root.join("metrics.csv"), "epoch\n1\n").unwrap();
        assert_eq!(remove_partial_writes(&root), 2);
        assert!(!cut.exists() && !csv.exists());
        assert!(root.join("metrics.csv").exists());
        assert_eq!(last_complete_checkpoint(&root), Some(1));
        assert_eq!(remove_partial_writes(&root), 0);
        std::fs::remove_dir_all(&root).ok();
    }

    /// An empty run folder `root` for one test, and its `checkpoint/` folder.
    fn fresh_run(name: &str) -> (PathBuf, PathBuf) {
        let root = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&root).ok();
        let dir = root.join("checkpoint");
        std::fs::create_dir_all(&dir).unwrap();
        (root, dir)
    }

    /// Writes round `epoch`'s three files with their checksums, as `save` does.
    fn write_round(dir: &Path, epoch: usize) {
        for part in PARTS {
            let path = part_path(dir, part, epoch);
            std::fs::write(&path, format!("{part} of round {epoch}")).unwrap();
            std::fs::write(checksum_path(&path), crc32_of(&path).unwrap()).unwrap();
        }
    }

    #[test]
    fn a_damaged_or_incomplete_last_round_falls_back_to_the_one_before() {
        let (root, dir) = fresh_run("zoo-train-ckpt");
        for epoch in 1..=3 {
            write_round(&dir, epoch);
        }
        assert_eq!(last_complete_checkpoint(&root), Some(3));
        // One flipped byte in round 3's optimiser state.
        let optim = part_path(&dir, "optim", 3);
        let mut bytes = std::fs::read(&optim).unwrap();
        bytes[2] ^= 0x20;
        std::fs::write(&optim, bytes).unwrap();
        assert_eq!(
            damage(&dir, 3).unwrap(),
            format!(
                "optim-3.bpk fails its checksum (CRC-32 {}, written as {})",
                crc32_of(&optim).unwrap(),
                std::fs::read_to_string(checksum_path(&optim)).unwrap()
            )
        );
        assert_eq!(last_complete_checkpoint(&root), Some(2));
        // Round 2 without its scheduler: round 1.
        std::fs::remove_file(part_path(&dir, "scheduler", 2)).unwrap();
        std::fs::remove_file(checksum_path(&part_path(&dir, "scheduler", 2))).unwrap();
        assert_eq!(damage(&dir, 2).unwrap(), "scheduler-2.bpk is missing");
        assert_eq!(last_complete_checkpoint(&root), Some(1));
        // A file without a checksum (written before checksums were kept) is taken.
        std::fs::remove_file(checksum_path(&part_path(&dir, "model", 1))).unwrap();
        assert_eq!(last_complete_checkpoint(&root), Some(1));
        std::fs::remove_dir_all(&root).ok();
    }
}
