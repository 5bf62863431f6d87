//! A directory only this user can read, for the files a provider hands its CLI (an extension, a
//! system prompt), removed with the value.
//!
//! ```
//! use agent_provider_kit::private_dir::PrivateDir;
//!
//! let dir = PrivateDir::create(&std::env::temp_dir(), "example").unwrap();
//! let file = dir.write("prompt.md", "Be brief.").unwrap();
//! assert_eq!(std::fs::read_to_string(&file).unwrap(), "Be brief.");
//! let path = dir.path().to_path_buf();
//! drop(dir);
//! assert!(!path.exists());
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory (mode 0700) under a parent; removed, with what it holds, on drop.
#[derive(Debug)]
pub struct PrivateDir {
    dir: PathBuf,
}

impl PrivateDir {
    /// Creates `<parent>/agent-harness-<prefix>-<pid>-<stamp>-<n>/`, a name no other process or
    /// value uses.
    pub fn create(parent: &Path, prefix: &str) -> std::io::Result<PrivateDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!("agent-harness-{prefix}-{}-{stamp:x}-{n}", std::process::id()));
            match builder.create(&dir) {
                Ok(()) => return Ok(PrivateDir { dir }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `contents` to a new file `name` in the directory and returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> std::io::Result<PathBuf> {
        let file = self.dir.join(name);
        std::fs::OpenOptions::new().write(true).create_new(true).open(&file)?.write_all(contents.as_ref())?;
        Ok(file)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_user_reads_it_and_a_name_is_written_once() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "kit-test").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        dir.write("a", "1").unwrap();
        let again = dir.write("a", "2").unwrap_err();
        assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
        let other = PrivateDir::create(&std::env::temp_dir(), "kit-test").unwrap();
        assert_ne!(other.path(), dir.path());
    }
}
