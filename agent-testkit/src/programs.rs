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

    /// Writes a `name` that records every run's environment and arguments, prints `version` for
    /// `--version` and fails any other run (exit 3): a CLI for tests of what a provider passes
    /// its program. Read the runs with [`RecordingCli::runs`].
    #[track_caller]
    pub fn recording_cli(&self, name: &str, version: &str) -> RecordingCli {
        let runs = self.dir(&format!("{name}-runs"));
        let body = format!(
            "run='{}/'$$\nenv > \"$run.env\"\nprintf '%s\\n' \"$@\" > \"$run.args\"\n\
             case \"$1\" in --version) echo '{version}' ;; *) exit 3 ;; esac",
            runs.display()
        );
        RecordingCli { path: self.script(name, &body), runs }
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

/// A CLI written by [`ProgramDir::recording_cli`].
#[derive(Debug)]
pub struct RecordingCli {
    /// The program.
    pub path: PathBuf,
    runs: PathBuf,
}

/// One run of a [`RecordingCli`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its environment, as `env` prints it (`NAME=value` lines).
    pub env: String,
    /// Its arguments, one a line as recorded (an argument holding a newline reads as two).
    pub args: Vec<String>,
}

impl RecordingCli {
    /// The runs so far, in no particular order.
    #[track_caller]
    pub fn runs(&self) -> Vec<Run> {
        let read = |path: &Path| fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let entries = fs::read_dir(&self.runs).unwrap_or_else(|e| panic!("{}: {e}", self.runs.display()));
        entries
            .map(|entry| entry.expect("a run's file").path())
            .filter(|path| path.extension().is_some_and(|e| e == "env"))
            .map(|env| Run {
                args: read(&env.with_extension("args")).lines().map(str::to_owned).collect(),
                env: read(&env),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_cli_keeps_each_runs_environment_and_arguments() {
        let dir = ProgramDir::new("recording");
        let cli = dir.recording_cli("tool", "tool 1.2.3");
        let version = std::process::Command::new(&cli.path).arg("--version").output().unwrap();
        assert_eq!((version.status.code(), version.stdout.as_slice()), (Some(0), &b"tool 1.2.3\n"[..]));
        let run = std::process::Command::new(&cli.path).args(["serve", "a b"]).env("MARK", "run-2").status().unwrap();
        assert_eq!(run.code(), Some(3), "any other run fails");
        let mut runs = cli.runs();
        runs.sort_by_key(|run| run.args.len());
        assert_eq!(runs.iter().map(|r| r.args.clone()).collect::<Vec<_>>(), [vec!["--version"], vec!["serve", "a b"]]);
        assert!(runs[1].env.lines().any(|line| line == "MARK=run-2") && !runs[0].env.contains("MARK="));
    }
}
