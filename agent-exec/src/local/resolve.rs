//! Finding the program and the working directory before anything is spawned.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use agent_core::exec::{ExecError, ProgramProblem};

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
/// meaning the current directory, and relative entries are relative to `cwd`. Like `execvp`,
/// the search passes over matches that cannot run; when nothing runnable is found, the first of
/// them is reported with what is wrong with it ([`ExecError::ProgramNotExecutable`]).
pub(super) fn resolve_program(program: &OsStr, env: &Env, cwd: Option<&Path>) -> Result<PathBuf, ExecError> {
    let base = || match cwd {
        Some(cwd) => Ok(cwd.to_path_buf()),
        None => std::env::current_dir(),
    };
    let not_found = |searched_path| ExecError::ProgramNotFound { program: program.to_os_string(), searched_path };
    let not_runnable = |path, searched_path, problem| ExecError::ProgramNotExecutable {
        program: program.to_os_string(),
        path,
        searched_path,
        problem,
    };
    if program.as_encoded_bytes().contains(&b'/') {
        let candidate = base().map_err(|_| not_found(false))?.join(program);
        return match inspect(&candidate) {
            Candidate::Runnable => Ok(candidate),
            Candidate::Missing => Err(not_found(false)),
            Candidate::Unreadable(error) => {
                Err(not_runnable(candidate, false, ProgramProblem::Inaccessible { reason: error.to_string() }))
            }
            Candidate::Unusable(problem) => Err(not_runnable(candidate, false, problem)),
        };
    }
    let search: OsString = match env.get(OsStr::new("PATH")) {
        Some(path) => path.clone(),
        None => std::env::var_os("PATH").unwrap_or_default(),
    };
    let mut first_unusable = None;
    for dir in std::env::split_paths(&search).filter(|dir| !dir.as_os_str().is_empty()) {
        let dir = if dir.is_absolute() { dir } else { base().map_err(|_| not_found(true))?.join(dir) };
        let candidate = dir.join(program);
        match inspect(&candidate) {
            Candidate::Runnable => return Ok(candidate),
            // A `PATH` entry that cannot be read says nothing about the program.
            Candidate::Missing | Candidate::Unreadable(_) => {}
            Candidate::Unusable(problem) => {
                first_unusable.get_or_insert((candidate, problem));
            }
        }
    }
    Err(match first_unusable {
        Some((path, problem)) => not_runnable(path, true, problem),
        None => not_found(true),
    })
}

/// Resolves an allow-list entry the way a host-side bare name or path resolves, then to its
/// canonical path.
pub(super) fn resolve_allowed(entry: &Path) -> Result<PathBuf, ExecError> {
    let resolved = resolve_program(entry.as_os_str(), &Env::new(), None)?;
    fs::canonicalize(&resolved)
        .map_err(|_| ExecError::ProgramNotFound { program: entry.as_os_str().to_os_string(), searched_path: false })
}

/// Why the OS answered "not found" for `program`, a file [`resolve_program`] found runnable:
/// a `#!` line naming an interpreter that does not exist. `None` when that is not why (the
/// file went away since, or it is a binary whose loader is missing).
pub(super) fn missing_interpreter(program: &Path) -> Option<ProgramProblem> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = fs::File::open(program).ok()?;
    let mut len = 0;
    while len < head.len() {
        match file.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(read) => len += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let line = head[..len].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let start = line.iter().position(|&b| b != b' ' && b != b'\t')?;
    let rest = &line[start..];
    let interpreter = &rest[..rest.iter().position(|&b| b == b' ' || b == b'\t').unwrap_or(rest.len())];
    let interpreter = Path::new(OsStr::from_bytes(interpreter));
    if !interpreter.is_absolute() {
        // Relative to the child's working directory: not checked here.
        return None;
    }
    let absent = matches!(fs::metadata(interpreter), Err(error) if error.kind() == io::ErrorKind::NotFound);
    absent.then(|| ProgramProblem::InterpreterNotFound { interpreter: interpreter.to_path_buf() })
}

/// What is at a candidate path.
#[derive(Debug)]
enum Candidate {
    /// A regular file (after following links) with an execute bit set.
    Runnable,
    /// Nothing (or a path through something that is not a directory).
    Missing,
    /// Whether something is there cannot be told (e.g. a directory that may not be searched).
    Unreadable(io::Error),
    /// Something that cannot run.
    Unusable(ProgramProblem),
}

fn inspect(path: &Path) -> Candidate {
    let absent = |error: &io::Error| matches!(error.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory);
    let link = match fs::symlink_metadata(path) {
        Ok(link) => link,
        Err(error) if absent(&error) => return Candidate::Missing,
        Err(error) => return Candidate::Unreadable(error),
    };
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if link.file_type().is_symlink() && absent(&error) => {
            let target = fs::read_link(path).unwrap_or_default();
            return Candidate::Unusable(ProgramProblem::DanglingSymlink { target });
        }
        Err(error) => return Candidate::Unusable(ProgramProblem::Inaccessible { reason: error.to_string() }),
    };
    match ProgramProblem::of_metadata(&metadata) {
        None => Candidate::Runnable,
        Some(problem) => Candidate::Unusable(problem),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

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

    #[track_caller]
    fn check_unusable(program: &str, env: &Env, path: &str, problem: ProgramProblem) {
        match resolve_program(OsStr::new(program), env, None) {
            Err(ExecError::ProgramNotExecutable { path: found, problem: got, searched_path, .. }) => {
                assert_eq!((found.as_path(), got), (Path::new(path), problem));
                assert_eq!(searched_path, !program.contains('/'));
            }
            other => panic!("{program}: expected ProgramNotExecutable, got {other:?}"),
        }
    }

    #[test]
    fn directories_and_plain_files_are_not_programs() {
        check_unusable("/bin", &Env::new(), "/bin", ProgramProblem::IsDirectory);
        let mode = fs::metadata("/etc/passwd").expect("/etc/passwd").permissions().mode() & 0o7777;
        check_unusable("/etc/passwd", &Env::new(), "/etc/passwd", ProgramProblem::NotExecutable { mode });
        check_unusable(
            "/dev/null",
            &Env::new(),
            "/dev/null",
            ProgramProblem::NotRegularFile { kind: "a character device" },
        );
        // On `PATH`, a match that cannot run is reported when nothing runnable follows.
        check_unusable(
            "passwd",
            &env_with_path("/nonexistent:/etc"),
            "/etc/passwd",
            ProgramProblem::NotExecutable { mode },
        );
    }

    #[test]
    fn cwd_must_be_a_directory() {
        assert!(matches!(check_cwd(Path::new("/nonexistent-dir")), Err(ExecError::InvalidCwd { .. })));
        let file = check_cwd(Path::new("/bin/sh")).expect_err("a file");
        assert_eq!(file.to_string(), "invalid cwd \"/bin/sh\": not a directory");
        assert_eq!(check_cwd(Path::new("/tmp")).expect("dir"), Path::new("/tmp"));
    }
}
