//! Claude Code's transcripts: `<config dir>/projects/<project>/<conversation>.jsonl`, where
//! `<project>` is claude's name for the working directory the conversation ran in. Read by the
//! Claude provider and by presets that run claude, before a resume.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use agent_provider_kit::transcript::claude::{Transcripts, project_name};
//!
//! let config = std::env::temp_dir().join(format!("claude-doc-{}", std::process::id()));
//! let cwd = std::env::temp_dir();
//! let project = config.join("projects").join(project_name(&cwd).unwrap());
//! std::fs::create_dir_all(&project).unwrap();
//! // A transcript whose messages were cut off: claude would resume it as an empty conversation.
//! std::fs::write(project.join("c1.jsonl"), "{\"type\":\"summary\"}\n").unwrap();
//! let found = Transcripts::find(config.clone(), Some(cwd.clone()), "c1").await;
//! assert!(found.messageless().await.is_some());
//! assert_eq!(found.elsewhere(), None, "it is in the cwd's project");
//! std::fs::remove_dir_all(&config).unwrap();
//! # });
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{MAX_SCANNED, any_line};

/// Claude's configuration directory: `CLAUDE_CONFIG_DIR`, else `$HOME/.claude`, with the
/// variables as the CLI will see them (`var` answers for its environment). An empty value counts
/// as none here; claude would take an empty `CLAUDE_CONFIG_DIR` as its working directory, which
/// is not followed.
pub fn config_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |name: &str| var(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    var("CLAUDE_CONFIG_DIR").or_else(|| var("HOME").map(|home| home.join(".claude")))
}

/// The name claude gives the project directory of `cwd`: its real path with every character
/// but an ASCII letter or digit as `-`, one per UTF-16 unit (claude replaces JavaScript string
/// units, so an emoji makes two). `None` past 200 bytes, where claude shortens the name, and
/// for a cwd that does not resolve.
pub fn project_name(cwd: &Path) -> Option<String> {
    let real = std::fs::canonicalize(cwd).ok()?;
    let mut name = String::new();
    for c in real.to_string_lossy().chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else {
            name.extend(std::iter::repeat_n('-', c.len_utf16()));
        }
    }
    (name.len() <= 200).then_some(name)
}

/// A user or assistant message of a claude transcript.
pub fn is_message(line: &Value) -> bool {
    matches!(line["type"].as_str(), Some("user" | "assistant")) && line["message"].is_object()
}

/// The transcripts of one conversation on this host, in every project directory.
#[derive(Clone, Debug, Default)]
pub struct Transcripts {
    /// Claude's name of the cwd's project directory, when it is known.
    cwd_project: Option<String>,
    /// Each transcript found, with its project directory's name.
    found: Vec<(String, PathBuf)>,
}

impl Transcripts {
    /// Conversation `id`'s transcripts under `config_dir` (see [`config_dir`]) for a claude run
    /// in `cwd`, looked for on a blocking thread (a user's projects directory may hold many).
    /// An ID that is not a file name finds none.
    pub async fn find(config_dir: PathBuf, cwd: Option<PathBuf>, id: &str) -> Transcripts {
        if id.is_empty() || id.contains('/') || id.contains('\0') || id == "." || id == ".." {
            return Transcripts::default();
        }
        let transcript = format!("{id}.jsonl");
        let look = move || {
            let cwd_project = cwd.as_deref().and_then(project_name);
            let found = std::fs::read_dir(config_dir.join("projects"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|project| {
                    let file = project.path().join(&transcript);
                    file.is_file().then(|| (project.file_name().to_string_lossy().into_owned(), file))
                })
                .collect();
            Transcripts { cwd_project, found }
        };
        tokio::task::spawn_blocking(look).await.unwrap_or_default()
    }

    /// The project directory (under `<config dir>/projects/`) that holds the transcript when
    /// the cwd's does not: claude looks only in the one named after the cwd.
    pub fn elsewhere(&self) -> Option<&str> {
        let in_cwd = |project: &String| self.cwd_project.as_ref() == Some(project);
        if self.found.iter().any(|(project, _)| in_cwd(project)) {
            return None;
        }
        self.found.first().map(|(project, _)| project.as_str())
    }

    /// The project directory of the transcript when the one claude would read (the cwd's;
    /// every one found when claude's name for the cwd's is not known) holds no message: its
    /// lines were lost or replaced, and claude would take the rest as a conversation with
    /// nothing in it, reported as continued. A file that cannot be read in full counts as
    /// holding one (claude is left to judge it).
    pub async fn messageless(&self) -> Option<&str> {
        let read = self
            .found
            .iter()
            .filter(|(project, _)| self.cwd_project.is_none() || self.cwd_project.as_ref() == Some(project));
        let mut empty = None;
        for (project, file) in read {
            if any_line(file.clone(), MAX_SCANNED, is_message).await != Some(false) {
                return None;
            }
            empty.get_or_insert(project.as_str());
        }
        empty
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_dir::PrivateDir;

    /// Claude's project directory name: every character but an ASCII letter or digit becomes
    /// `-`, one per UTF-16 unit.
    #[test]
    fn a_project_is_named_after_the_cwds_real_path() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "claude-project").unwrap();
        let cwd = dir.path().join("my dir_é😀");
        std::fs::create_dir(&cwd).unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let base: String =
            real.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        assert_eq!(project_name(&cwd), Some(format!("{base}-my-dir----")));
        assert_eq!(project_name(&dir.path().join("missing")), None);
        let long = dir.path().join("x".repeat(200));
        std::fs::create_dir(&long).unwrap();
        assert_eq!(project_name(&long), None, "past 200 bytes claude shortens the name");
    }

    #[tokio::test]
    async fn transcripts_are_found_by_project_and_judged_by_their_messages() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "claude-transcripts").unwrap();
        let config = dir.path().join("config");
        let cwd = dir.path().join("work");
        std::fs::create_dir(&cwd).unwrap();
        let here = config.join("projects").join(project_name(&cwd).unwrap());
        let other = config.join("projects").join("-somewhere-else");
        std::fs::create_dir_all(&here).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let message = "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
        std::fs::write(here.join("kept.jsonl"), message).unwrap();
        std::fs::write(here.join("cut.jsonl"), "{\"type\":\"summary\"}\n{\"type\":\"user\"}\n").unwrap();
        std::fs::write(other.join("moved.jsonl"), "").unwrap();
        std::fs::write(other.join("cut.jsonl"), message).unwrap();

        let kept = Transcripts::find(config.clone(), Some(cwd.clone()), "kept").await;
        assert_eq!((kept.messageless().await, kept.elsewhere()), (None, None));
        let cut = Transcripts::find(config.clone(), Some(cwd.clone()), "cut").await;
        assert_eq!(
            cut.messageless().await,
            Some(here.file_name().unwrap().to_str().unwrap()),
            "only the cwd's is read"
        );
        let moved = Transcripts::find(config.clone(), Some(cwd.clone()), "moved").await;
        assert_eq!((moved.messageless().await, moved.elsewhere()), (None, Some("-somewhere-else")));
        // Without the cwd's name every project's transcript is read: one with messages is enough.
        let unknown = Transcripts::find(config.clone(), None, "cut").await;
        assert_eq!(unknown.messageless().await, None);
        for id in ["missing", "../work", "", ".."] {
            let none = Transcripts::find(config.clone(), Some(cwd.clone()), id).await;
            assert_eq!((none.messageless().await, none.elsewhere()), (None, None), "{id:?}");
        }
        let env = |name: &str| match name {
            "HOME" => Some(OsString::from("/home/me")),
            _ => None,
        };
        assert_eq!(config_dir(env), Some(PathBuf::from("/home/me/.claude")));
        let set = |name: &str| (name == "CLAUDE_CONFIG_DIR").then(|| OsString::from("/etc/claude"));
        assert_eq!(config_dir(set), Some(PathBuf::from("/etc/claude")));
        assert_eq!(config_dir(|_| None), None);
        assert_eq!(config_dir(|_| Some(OsString::new())), None, "empty values are none");
    }
}
