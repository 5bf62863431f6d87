//! Finding the program and the working directory before anything is spawned.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agent_core::exec::ExecError;

use crate::validate::Env;

/// Checks that `cwd` is an existing directory and makes it absolute.
pub(super) fn check_cwd(cwd: &Path) -> Result<PathBuf, ExecError> {
    let invalid = |reason: String| ExecError::InvalidCwd { cwd: cwd.to_path_buf(), reason };
    let metadata = fs::metadata(cwd).map_err(|error| invalid(error.to_string()))?;
    if !metadata.is_dir() {
        return Err(invalid("not a directory".into()));
    }
    std::path::absolute(cwd).map_err(|error| invalid(error.to_string()))
}

/// Resolves `program` to an absolute path of an executable file, without spawning anything.
///
/// A name with a `/` is taken as a path, relative to `cwd` (the child's working directory, the
/// host's when `None`). A bare name is looked up on the `PATH` of the child's environment, or
/// the host's `PATH` when the child's has none; empty `PATH` entries are skipped rather than
/// meaning the current directory, and relative entries are relative to `cwd`.
pub(super) fn resolve_program(program: &OsStr, env: &Env, cwd: Option<&Path>) -> Result<PathBuf, ExecError> {
    let base = || match cwd {
        Some(cwd) => Ok(cwd.to_path_buf()),
        None => std::env::current_dir(),
    };
    let not_found = |searched_path| ExecError::ProgramNotFound { program: program.to_os_string(), searched_path };
    if program.as_encoded_bytes().contains(&b'/') {
        let candidate = base().map_err(|_| not_found(false))?.join(program);
        return if is_executable_file(&candidate) { Ok(candidate) } else { Err(not_found(false)) };
    }
    let search: OsString = match env.get(OsStr::new("PATH")) {
        Some(path) => path.clone(),
        None => std::env::var_os("PATH").unwrap_or_default(),
    };
    for dir in std::env::split_paths(&search).filter(|dir| !dir.as_os_str().is_empty()) {
        let dir = if dir.is_absolute() { dir } else { base().map_err(|_| not_found(true))?.join(dir) };
        let candidate = dir.join(program);
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(not_found(true))
}

/// Resolves an allow-list entry the way a host-side bare name or path resolves, then to its
/// canonical path.
pub(super) fn resolve_allowed(entry: &Path) -> Result<PathBuf, ExecError> {
    let resolved = resolve_program(entry.as_os_str(), &Env::new(), None)?;
    fs::canonicalize(&resolved)
        .map_err(|_| ExecError::ProgramNotFound { program: entry.as_os_str().to_os_string(), searched_path: false })
}

/// A regular file (after following links) with an execute bit set.
fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with_path(path: &str) -> Env {
        [(OsString::from("PATH"), OsString::from(path))].into_iter().collect()
    }

    #[test]
    fn bare_names_use_the_child_path_first() {
        let found = resolve_program(OsStr::new("sh"), &env_with_path("/nonexistent::/bin"), None).expect("sh");
        assert_eq!(found, Path::new("/bin/sh"));
        let missing = resolve_program(OsStr::new("sh"), &env_with_path("/nonexistent"), None);
        assert!(matches!(missing, Err(ExecError::ProgramNotFound { searched_path: true, .. })), "{missing:?}");
    }

    #[test]
    fn paths_are_relative_to_the_child_cwd() {
        let found = resolve_program(OsStr::new("./sh"), &Env::new(), Some(Path::new("/bin"))).expect("sh");
        assert_eq!(found, Path::new("/bin/./sh"));
        let missing = resolve_program(OsStr::new("./sh"), &Env::new(), Some(Path::new("/")));
        assert!(matches!(missing, Err(ExecError::ProgramNotFound { searched_path: false, .. })), "{missing:?}");
    }

    #[test]
    fn directories_and_plain_files_are_not_programs() {
        assert!(resolve_program(OsStr::new("/bin"), &Env::new(), None).is_err());
        assert!(resolve_program(OsStr::new("/etc/passwd"), &Env::new(), None).is_err());
    }

    #[test]
    fn cwd_must_be_a_directory() {
        assert!(matches!(check_cwd(Path::new("/nonexistent-dir")), Err(ExecError::InvalidCwd { .. })));
        let file = check_cwd(Path::new("/bin/sh")).expect_err("a file");
        assert_eq!(file.to_string(), "invalid cwd \"/bin/sh\": not a directory");
        assert_eq!(check_cwd(Path::new("/tmp")).expect("dir"), Path::new("/tmp"));
    }
}
