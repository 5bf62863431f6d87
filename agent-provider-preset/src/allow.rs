//! The executables presets may start.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The executables presets may start: bare names (run as found on the session's `PATH`) and
/// absolute paths. A preset's `program`, and any [`PresetOptions::binary`](crate::PresetOptions)
/// that replaces it, must be on it: a bare name matches only that bare name, an absolute path
/// only itself (so allowing `claude` does not allow `/tmp/x/claude`). Nothing is allowed until
/// something is added; [`AllowList::shipped`] allows the programs of the shipped presets.
///
/// The exec's own allow-list (`LocalExec`'s, if set) applies on top, at spawn.
///
/// ```
/// use agent_provider_preset::AllowList;
///
/// let allow = AllowList::shipped().allow("/opt/tools/bin/mycli");
/// assert!(allow.allows("claude").is_ok());
/// assert!(allow.allows("/opt/tools/bin/mycli").is_ok());
/// assert!(allow.allows("mycli").is_err());
/// assert!(allow.allows("./claude").is_err());
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    names: BTreeSet<String>,
    paths: BTreeSet<PathBuf>,
}

/// Why a program is not allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotAllowed {
    /// Neither a bare name nor an absolute path (`bin/cli`, `./cli`, empty).
    #[error("`{0}` is neither a bare program name nor an absolute path")]
    NotAProgram(String),
    /// Not on the allow-list.
    #[error("`{0}` is not on the executable allow-list")]
    NotListed(String),
}

impl AllowList {
    /// An empty list: nothing may run.
    pub fn new() -> Self {
        AllowList::default()
    }

    /// The programs of the shipped presets: `claude`, `codex`, `pi`, as bare names.
    pub fn shipped() -> Self {
        AllowList::new().allow("claude").allow("codex").allow("pi")
    }

    /// Allows `program`: a bare name or an absolute path. Anything else is ignored (it could
    /// never match).
    pub fn allow(mut self, program: impl AsRef<Path>) -> Self {
        let program = program.as_ref();
        if program.is_absolute() {
            self.paths.insert(program.to_path_buf());
        } else if let Some(name) = bare_name(program) {
            self.names.insert(name.to_owned());
        }
        self
    }

    /// Whether `program` may run.
    pub fn allows(&self, program: impl AsRef<Path>) -> Result<(), NotAllowed> {
        let program = program.as_ref();
        let shown = || program.display().to_string();
        if program.is_absolute() {
            return if self.paths.contains(program) { Ok(()) } else { Err(NotAllowed::NotListed(shown())) };
        }
        match bare_name(program) {
            Some(name) if self.names.contains(name) => Ok(()),
            Some(_) => Err(NotAllowed::NotListed(shown())),
            None => Err(NotAllowed::NotAProgram(shown())),
        }
    }

    /// The entries, names first.
    pub fn entries(&self) -> impl Iterator<Item = String> + '_ {
        self.names.iter().cloned().chain(self.paths.iter().map(|p| p.display().to_string()))
    }
}

/// `program` as a bare name: one normal path component.
fn bare_name(program: &Path) -> Option<&str> {
    let mut components = program.components();
    match (components.next(), components.next()) {
        (Some(std::path::Component::Normal(name)), None) => name.to_str().filter(|n| !n.is_empty()),
        _ => None,
    }
}

impl fmt::Debug for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_match_only_themselves() {
        let allow = AllowList::new().allow("codex").allow("/usr/local/bin/claude").allow("bin/relative");
        assert!(allow.allows("codex").is_ok());
        assert!(allow.allows("/usr/local/bin/claude").is_ok());
        assert_eq!(allow.allows("claude"), Err(NotAllowed::NotListed("claude".into())));
        assert_eq!(allow.allows("/tmp/codex"), Err(NotAllowed::NotListed("/tmp/codex".into())));
        assert_eq!(allow.allows("bin/relative"), Err(NotAllowed::NotAProgram("bin/relative".into())));
        assert_eq!(allow.allows(""), Err(NotAllowed::NotAProgram(String::new())));
        assert_eq!(format!("{allow:?}"), r#"["codex", "/usr/local/bin/claude"]"#);
        assert!(AllowList::new().allows("codex").is_err());
    }
}
