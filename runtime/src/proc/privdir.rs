//! Files only the user can change: the rule for the directories and files
//! wprobe keeps state in (the compiled-module cache, whose entries are
//! executed; the attach journal, which `wprobe repair` writes into a
//! process). A directory is used only when it is a real directory (not a
//! symlink) owned by the effective user and writable by no one else; files
//! in it are opened without following symlinks and checked the same way.
//! Shared directories such as `/tmp` can be planted in by any local user
//! (`/tmp/wprobe-0` before root ever ran wprobe): these checks are what
//! keeps such a plant from redirecting a write.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// The effective user id.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Creates `dir` (mode 0700, parents too) if missing, then checks that it
/// is a directory, not a symlink, owned by the effective user and not
/// writable by group or others. `Err` says what is wrong.
pub fn ensure_dir(dir: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create it: {e}"))?;
            std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    owner_and_mode(&meta)
}

/// Owned by the effective user, not writable by group or others.
pub fn owner_and_mode(meta: &std::fs::Metadata) -> Result<(), String> {
    if meta.uid() != euid() {
        return Err(format!(
            "owned by uid {}, not by the current user (uid {})",
            meta.uid(),
            euid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "mode {:o} lets group or others write it",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}
