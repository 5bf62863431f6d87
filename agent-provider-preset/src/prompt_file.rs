//! The session's system prompt in a file of its own, for `{system_prompt_file}`: a CLI that
//! reads a `--system-prompt` value naming an existing file as that file's content (pi) would
//! otherwise send a workspace file to the model for a prompt such as `notes.txt`.

use std::path::{Path, PathBuf};

use agent_provider_kit::private_dir::PrivateDir;

/// A file holding a session's system prompt, in a directory only this user can read; both are
/// removed on drop.
#[derive(Debug)]
pub(crate) struct PromptFile {
    _dir: PrivateDir,
    file: PathBuf,
}

impl PromptFile {
    /// Writes `text` to `<parent>/agent-harness-preset-…/system-prompt.md`.
    pub(crate) fn create(parent: &Path, text: &str) -> std::io::Result<PromptFile> {
        let dir = PrivateDir::create(parent, "preset")?;
        let file = dir.write("system-prompt.md", text)?;
        Ok(PromptFile { _dir: dir, file })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.file
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
        drop(prompt);
        assert!(!dir.exists());
    }
}
