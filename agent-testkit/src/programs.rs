//! Programs written by a test: shell scripts standing in for a CLI, and paths that look like a
//! program but cannot run (a directory, a file without execute permission, a dangling symbolic
//! link), in a private directory removed on drop.
//!
//! ```no_run
//! use agent_testkit::programs::ProgramDir;
//!
//! let dir = ProgramDir::new("probe");
//! // A `codex` that warns on stderr before printing its version.
//! let codex = dir.script("codex", "echo 'WARNING: no helper binaries' >&2\necho 'codex-cli 0.171.0'");
//! let not_a_program = dir.file("plain", 0o644);
//! # let _ = (codex, not_a_program);
//! ```
//!
//! Every method panics with the path when the filesystem refuses: that is a broken test setup,
//! not an outcome to assert.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::scratch::ScratchDir;

/// A private directory for test programs, under the system temp directory.
#[derive(Debug)]
pub struct ProgramDir {
    dir: ScratchDir,
}

impl ProgramDir {
    /// Creates `<temp>/agent-programs-<label>-<pid>-<n>`.
    #[track_caller]
    pub fn new(label: &str) -> ProgramDir {
        let root = std::env::temp_dir();
        let dir = ScratchDir::create(&root, &format!("agent-programs-{label}"))
            .unwrap_or_else(|e| panic!("cannot create a program directory under {}: {e}", root.display()));
        ProgramDir { dir }
    }

    /// The directory (to put on a `PATH`).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes an executable `#!/bin/sh` script `name` running `body`; returns its path.
    #[track_caller]
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path().join(name);
        write(&path, format!("#!/bin/sh\n{body}\n").as_bytes());
        chmod(&path, 0o755);
        path
    }

    /// Writes an empty file `name` with permission bits `mode`; returns its path.
    #[track_caller]
    pub fn file(&self, name: &str, mode: u32) -> PathBuf {
        let path = self.path().join(name);
        write(&path, b"");
        chmod(&path, mode);
        path
    }

    /// Creates a directory `name`; returns its path.
    #[track_caller]
    pub fn dir(&self, name: &str) -> PathBuf {
        let path = self.path().join(name);
        fs::create_dir(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        path
    }

    /// Creates a symbolic link `name` to `target` (which need not exist); returns its path.
    #[track_caller]
    pub fn symlink(&self, name: &str, target: impl AsRef<Path>) -> PathBuf {
        let path = self.path().join(name);
        std::os::unix::fs::symlink(target.as_ref(), &path)
            .unwrap_or_else(|e| panic!("cannot create the link {}: {e}", path.display()));
        path
    }
}

#[track_caller]
fn write(path: &Path, contents: &[u8]) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

#[track_caller]
fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("cannot set the mode of {}: {e}", path.display()));
}
