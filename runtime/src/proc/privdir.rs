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

/// Why a directory or file is not one only the user can change (its
/// path is the caller's to say).
#[derive(Debug, thiserror::Error)]
pub enum PrivDirError {
    /// The directory was missing and could not be created.
    #[error("cannot create it: {0}")]
    Create(std::io::Error),
    /// Its metadata could not be read.
    #[error("{0}")]
    Stat(std::io::Error),
    /// It is a symbolic link.
    #[error("it is a symbolic link")]
    Symlink,
    /// It is not a directory.
    #[error("not a directory")]
    NotDirectory,
    /// Another user owns it.
    #[error("owned by uid {uid}, not by the current user (uid {euid})")]
    Owner {
        /// Its owner.
        uid: u32,
        /// The effective user.
        euid: u32,
    },
    /// Group or others may write it.
    #[error("mode {mode:o} lets group or others write it")]
    Mode {
        /// Its permission bits.
        mode: u32,
    },
}

impl PrivDirError {
    /// The errno of an I/O failure.
    pub fn errno(&self) -> Option<i32> {
        match self {
            PrivDirError::Create(e) | PrivDirError::Stat(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

/// Creates `dir` (mode 0700, parents too) if missing, then checks that it
/// is a directory, not a symlink, owned by the effective user and not
/// writable by group or others. `Err` says what is wrong.
pub fn ensure_dir(dir: &Path) -> Result<(), PrivDirError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(PrivDirError::Create)?;
            std::fs::symlink_metadata(dir).map_err(PrivDirError::Stat)?
        }
        Err(e) => return Err(PrivDirError::Stat(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(PrivDirError::Symlink);
    }
    if !meta.is_dir() {
        return Err(PrivDirError::NotDirectory);
    }
    owner_and_mode(&meta)
}

/// Owned by the effective user, not writable by group or others.
pub fn owner_and_mode(meta: &std::fs::Metadata) -> Result<(), PrivDirError> {
    if meta.uid() != euid() {
        return Err(PrivDirError::Owner {
            uid: meta.uid(),
            euid: euid(),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(PrivDirError::Mode {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}
