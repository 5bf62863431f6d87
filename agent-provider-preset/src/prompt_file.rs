//! The session's system prompt in a file of its own, for `{system_prompt_file}`: a CLI that
//! reads a `--system-prompt` value naming an existing file as that file's content (pi) would
//! otherwise send a workspace file to the model for a prompt such as `notes.txt`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file holding a session's system prompt, in a directory only this user can read; both are
/// removed on drop.
#[derive(Debug)]
pub(crate) struct PromptFile {
    dir: PathBuf,
    file: PathBuf,
}

impl PromptFile {
    /// Writes `text` to `<parent>/agent-harness-preset-<pid>-<n>/system-prompt.md`.
    pub(crate) fn create(parent: &Path, text: &str) -> std::io::Result<PromptFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        let dir = loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!("agent-harness-preset-{}-{n}", std::process::id()));
            match builder.create(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        };
        let prompt = PromptFile { file: dir.join("system-prompt.md"), dir };
        std::fs::OpenOptions::new().write(true).create_new(true).open(&prompt.file)?.write_all(text.as_bytes())?;
        Ok(prompt)
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.file
    }
}

impl Drop for PromptFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_lives_in_a_private_directory_that_goes_away() {
        let prompt = PromptFile::create(&std::env::temp_dir(), "notes.txt").unwrap();
        assert_eq!(std::fs::read_to_string(prompt.path()).unwrap(), "notes.txt");
        let dir = prompt.path().parent().unwrap().to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        drop(prompt);
        assert!(!dir.exists());
    }
}
