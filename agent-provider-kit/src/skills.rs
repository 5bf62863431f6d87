//! The check that a session's skills are there before its CLI starts: a CLI given a missing
//! skill path runs without it, warning (pi in a startup diagnostic) where no caller looks.
//!
//! ```
//! use agent_core::{Exec, SessionOptions, Skill};
//! use agent_provider_kit::skills::require_skills;
//!
//! let options = SessionOptions::new(std::env::temp_dir()).skill(Skill::new("review", "/nowhere/review"));
//! let local = agent_exec::LocalExec::new();
//! let error = require_skills(&options, &local, |skill| skill.path.clone()).unwrap_err();
//! assert!(error.to_string().contains("/nowhere/review"));
//! ```

use std::path::{Path, PathBuf};

use agent_core::exec::Exec;
use agent_core::{Error, Result, SessionOptions, Skill};

/// Refuses a session whose skill is missing on this host: `path` gives, for each skill, the
/// file or directory its CLI reads. The error is [`Error::InvalidOption`] for `skills`, naming
/// the skill and the path. Only a local exec is checked: another backend's filesystem is not
/// this host's.
pub fn require_skills(options: &SessionOptions, exec: &dyn Exec, path: impl Fn(&Skill) -> PathBuf) -> Result<()> {
    if !exec.is_local() {
        return Ok(());
    }
    for skill in &options.skills {
        let wanted = path(skill);
        if let Err(error) = std::fs::metadata(&wanted) {
            let why = match error.kind() {
                std::io::ErrorKind::NotFound => "does not exist".to_owned(),
                _ => format!("cannot be read ({error})"),
            };
            let reason = format!("skill `{}`: {} {why}", skill.name, wanted.display());
            return Err(Error::InvalidOption { option: "skills", reason });
        }
    }
    Ok(())
}

/// The `SKILL.md` of a skill given as its directory or as the file itself.
pub fn skill_file(path: &Path) -> PathBuf {
    if path.file_name().is_some_and(|n| n == "SKILL.md") { path.to_path_buf() } else { path.join("SKILL.md") }
}

#[cfg(test)]
mod tests {
    use agent_exec::LocalExec;
    use agent_exec::scripted::ScriptedExec;

    use super::*;

    #[test]
    fn a_missing_skill_is_refused_on_a_local_exec_only() {
        let dir = std::env::temp_dir();
        let options = SessionOptions::new(&dir)
            .skill(Skill::new("here", &dir))
            .skill(Skill::new("gone", dir.join("gone-skill-0")));
        let local = LocalExec::new();
        match require_skills(&options, &local, |skill| skill.path.clone()) {
            Err(Error::InvalidOption { option: "skills", reason }) => {
                assert!(
                    reason.starts_with("skill `gone`: ") && reason.ends_with("gone-skill-0 does not exist"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let present = SessionOptions::new(&dir).skill(Skill::new("here", &dir));
        assert!(require_skills(&present, &local, |skill| skill.path.clone()).is_ok());
        let remote = ScriptedExec::new();
        assert!(require_skills(&options, &remote, |skill| skill.path.clone()).is_ok());
    }

    #[test]
    fn skill_paths_point_at_skill_md() {
        assert_eq!(skill_file(Path::new("/s/release/SKILL.md")), PathBuf::from("/s/release/SKILL.md"));
        assert_eq!(skill_file(Path::new("/s/release")), PathBuf::from("/s/release/SKILL.md"));
    }
}
