//! Private directories removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes directories created by one process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh directory, removed with its content on drop unless kept.
#[derive(Debug)]
pub(crate) struct ScratchDir {
    path: PathBuf,
    keep: bool,
}

impl ScratchDir {
    /// Creates `<root>/<prefix>-<pid>-<n>`.
    pub(crate) fn create(root: &Path, prefix: &str) -> std::io::Result<ScratchDir> {
        std::fs::create_dir_all(root)?;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = root.join(format!("{prefix}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(ScratchDir { path, keep: false }),
                // Left behind by an earlier process with the same pid.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory after drop; returns its path.
    pub(crate) fn keep(&mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a CLI still running may recreate files; nothing else depends on it.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
