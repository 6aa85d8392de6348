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
        // The checksum reaches the disk first: a checkpoint under its final name always
        // has its checksum beside it.
        let crc = crc32_of(&tmp).map_err(CheckpointerError::IOError)?;
        durable::sync_file(&tmp)
            .and_then(|()| durable::write_atomic(&checksum_path(&path), crc.as_bytes()))
            .and_then(|()| durable::commit(&[(tmp, path)]))
            .map_err(|e| CheckpointerError::IOError(e.source))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let root = std::env::temp_dir().join(format!("zoo-train-ckpt-{}", std::process::id()));
        let dir = root.join("checkpoint");
        std::fs::remove_dir_all(&root).ok();
        std::fs::create_dir_all(&dir).unwrap();
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
