//! [`FakeCliEnv`]: a private directory with a fake CLI's script, workspace and transcript.

use std::path::{Path, PathBuf};

use agent_core::SessionOptions;
use serde::Deserialize;
use serde_json::Value;

use super::{FakeCli, FakeCliError, FakeScript, RECORD_ENV, SCRIPT_ENV};
use crate::scratch::ScratchDir;

/// Which way a transcript line went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Direction {
    /// Client to fake (stdin).
    In,
    /// Fake to client (stdout).
    Out,
    /// The fake's own note: its argv, an exit, a fault it injected.
    Note,
}

/// One line of a fake CLI's transcript (`$FAKE_CLI_RECORD`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct TranscriptLine {
    /// Which way.
    pub dir: Direction,
    /// Seconds since the fake started.
    pub t: f64,
    /// The message, when the line was JSON (or the note).
    #[serde(default)]
    pub msg: Option<Value>,
    /// The line, when it was not JSON.
    #[serde(default)]
    pub text: Option<String>,
    /// The line's length, when it was too long to keep.
    #[serde(default)]
    pub bytes: Option<usize>,
}

/// A private directory for one fake CLI run: the script, an empty workspace to run in, and the
/// transcript the fake writes. Removed on drop.
#[derive(Debug)]
pub struct FakeCliEnv {
    cli: FakeCli,
    program: PathBuf,
    dir: ScratchDir,
    workspace: PathBuf,
    script: PathBuf,
    record: PathBuf,
}

impl FakeCliEnv {
    /// Locates the `cli` binary ([`FakeCli::binary`]) and writes `script` into a new directory
    /// under the system temp directory.
    pub fn new(cli: FakeCli, script: &FakeScript) -> Result<FakeCliEnv, FakeCliError> {
        FakeCliEnv::with_program(cli, cli.binary()?, script)
    }

    /// Like [`FakeCliEnv::new`], running `program` (e.g. `env!("CARGO_BIN_EXE_fake-codex")`).
    pub fn with_program(
        cli: FakeCli,
        program: impl Into<PathBuf>,
        script: &FakeScript,
    ) -> Result<FakeCliEnv, FakeCliError> {
        let root = std::env::temp_dir();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FakeCliError::Io { path, source }
        };
        let dir = ScratchDir::create(&root, cli.binary_name()).map_err(io(&root))?;
        let workspace = dir.path().join("workspace");
        std::fs::create_dir(&workspace).map_err(io(&workspace))?;
        let script_path = dir.path().join("script.jsonl");
        std::fs::write(&script_path, script.to_script()).map_err(io(&script_path))?;
        let record = dir.path().join("transcript.jsonl");
        Ok(FakeCliEnv { cli, program: program.into(), dir, workspace, script: script_path, record })
    }

    /// Which fake.
    pub fn cli(&self) -> FakeCli {
        self.cli
    }

    /// The binary to run.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The script file.
    pub fn script_path(&self) -> &Path {
        &self.script
    }

    /// The transcript file (exists once the fake started).
    pub fn record_path(&self) -> &Path {
        &self.record
    }

    /// An empty directory to run the fake in.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The variables that point the fake at the script and the transcript.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [(SCRIPT_ENV, self.script.display().to_string()), (RECORD_ENV, self.record.display().to_string())]
    }

    /// The fake with its variables, run in the workspace with the real CLI's protocol
    /// arguments ([`FakeCli::protocol_args`]).
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(self.cli.protocol_args()).envs(self.vars()).current_dir(&self.workspace);
        command
    }

    /// Session options for a provider adapter: the workspace as `cwd` and the fake's
    /// variables. Point the adapter's binary option at [`FakeCliEnv::program`].
    pub fn session_options(&self) -> SessionOptions {
        self.vars()
            .into_iter()
            .fold(SessionOptions::new(&self.workspace), |options, (key, value)| options.env(key, value))
    }

    /// The transcript so far (a line being written is skipped).
    pub fn transcript(&self) -> Result<Vec<TranscriptLine>, FakeCliError> {
        let text = match std::fs::read_to_string(&self.record) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(FakeCliError::Io { path: self.record.clone(), source }),
        };
        Ok(text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect())
    }

    /// The JSON messages the client sent, in order.
    pub fn received(&self) -> Result<Vec<Value>, FakeCliError> {
        Ok(self.transcript()?.into_iter().filter(|l| l.dir == Direction::In).filter_map(|l| l.msg).collect())
    }

    /// Keeps the directory after drop (to read the transcript); returns its path.
    pub fn keep(&mut self) -> PathBuf {
        self.dir.keep()
    }
}
