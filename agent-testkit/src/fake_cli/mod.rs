//! Fake CLI binaries (`fake-codex`, `fake-claude`, `fake-pi`) that speak each CLI's wire
//! protocol from a script, with fault injection.
//!
//! A fake reads its [`FakeScript`] from the file named by `$FAKE_CLI_SCRIPT` (or
//! `--fake-script <path>` on its command line) and plays it against the client on stdin/stdout,
//! so a provider adapter can complete turns, approvals, questions and interrupts against it, and
//! meet every fault of the matrix on purpose. It ignores the real CLI's flags, except:
//!
//! - `--version` prints what the real CLI prints, for the `latest_validated` version in
//!   `clis.toml` (`codex-cli 0.171.0`, `2.1.332 (Claude Code)`, `1.6.0`), or `$FAKE_CLI_VERSION`;
//! - `fake-claude` streams `stream_event`s only with `--include-partial-messages`, and takes its
//!   session ID from `--resume` / `--session-id`.
//!
//! With `$FAKE_CLI_RECORD` set, the fake writes a transcript there in the format of the captured
//! ones in `shared/protocols/` (`{"dir":"in"|"out"|"note","t":..,"msg":..}` per line; see
//! [`TranscriptLine`]). A script that is not valid JSON or names an unknown step makes the fake
//! exit with code 2 and a message naming the line on stderr.
//!
//! Tests of this crate find the binaries with `env!("CARGO_BIN_EXE_fake-codex")`; tests of other
//! packages use [`FakeCli::binary`], which looks next to the running test executable and fails
//! with the command that builds them ([`BUILD_COMMAND`]) when they are missing or stale.
//! [`FakeCliEnv`] puts a script, a workspace and a transcript into a private directory.
//!
//! ```no_run
//! use agent_testkit::fake_cli::{FakeCli, FakeCliEnv, FakeScript};
//!
//! let script = FakeScript::new().handshake().turn_start().deltas(["Hel", "lo"]).complete();
//! let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
//! // For a provider adapter: cwd and the fake's variables; point the adapter's binary option
//! // at `env.program()`.
//! let options = env.session_options();
//! # let _ = options;
//! ```

mod env;
mod run;
mod script;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Mutex, OnceLock};

pub use env::{Direction, FakeCliEnv, TranscriptLine};
pub use script::{
    AFTER_START_MS, ApprovalKind, DEFAULT_HUGE_LINE_BYTES, DEFAULT_STDERR_FLOOD_BYTES, EndStatus, EofAction,
    ExpectKind, FakeScript, FakeScriptError, FakeStep, InterruptMode, NOW_NS,
};

use crate::clis::Provider;

/// The variable naming the script file.
pub const SCRIPT_ENV: &str = "FAKE_CLI_SCRIPT";
/// The command-line flag naming the script file (takes precedence over [`SCRIPT_ENV`]).
pub const SCRIPT_ARG: &str = "--fake-script";
/// The variable naming the transcript file the fake writes.
pub const RECORD_ENV: &str = "FAKE_CLI_RECORD";
/// The variable overriding the version `--version` prints.
pub const VERSION_ENV: &str = "FAKE_CLI_VERSION";
/// The command that builds the fake CLI binaries.
pub const BUILD_COMMAND: &str = "cargo build -p agent-testkit --bins";

/// The thread ID `fake-codex` gives every new thread (a resumed thread keeps its own).
pub const CODEX_THREAD_ID: &str = "00000000-0000-7000-8000-00000000c0de";
/// The session ID `fake-claude` uses when neither `--resume` nor `--session-id` names one.
pub const CLAUDE_SESSION_ID: &str = "00000000-0000-4000-8000-0000000c1a0d";

/// The ID `fake-codex` gives the `n`-th turn it starts (from 1): `fake-turn-<n>`.
pub fn codex_turn_id(n: u64) -> String {
    format!("fake-turn-{n}")
}

/// The flag a fake answers with the fingerprint of the sources it was built from.
const BUILD_ID_ARG: &str = "--fake-cli-build-id";

/// The sources of the fakes: a binary built from other sources than the running test's copy of
/// this crate is stale.
const SOURCES: &[&[u8]] = &[
    include_bytes!("mod.rs"),
    include_bytes!("env.rs"),
    include_bytes!("script.rs"),
    include_bytes!("run/mod.rs"),
    include_bytes!("run/io.rs"),
    include_bytes!("run/template.rs"),
    include_bytes!("run/codex.rs"),
    include_bytes!("run/claude.rs"),
    include_bytes!("run/pi.rs"),
];

/// The pinned CLI manifest, for the versions the fakes report.
const MANIFEST: &str = include_str!("../../../clis.toml");

/// One of the fake CLI binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FakeCli {
    /// `fake-codex`: `codex app-server` (JSON-RPC over stdio).
    Codex,
    /// `fake-claude`: `claude -p` with stream-json and the control protocol.
    Claude,
    /// `fake-pi`: `pi --mode rpc`.
    Pi,
}

/// Why a fake CLI cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeCliError {
    /// The binary was not built.
    #[error("{binary} not found at {} (looked next to the test executable); build the fake CLIs with: {BUILD_COMMAND}", path.display())]
    NotBuilt {
        /// The binary's name.
        binary: &'static str,
        /// Where it was expected.
        path: PathBuf,
    },
    /// The binary was built from other sources than the running test's agent-testkit.
    #[error("{binary} at {} is stale (built from other agent-testkit sources); rebuild the fake CLIs with: {BUILD_COMMAND}", path.display())]
    Stale {
        /// The binary's name.
        binary: &'static str,
        /// The binary.
        path: PathBuf,
    },
    /// A file or directory could not be read or written.
    #[error("fake CLI: {} : {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl FakeCli {
    /// Every fake.
    pub const ALL: [FakeCli; 3] = [FakeCli::Codex, FakeCli::Claude, FakeCli::Pi];

    /// The binary's name (`fake-codex`, ...).
    pub fn binary_name(self) -> &'static str {
        match self {
            FakeCli::Codex => "fake-codex",
            FakeCli::Claude => "fake-claude",
            FakeCli::Pi => "fake-pi",
        }
    }

    /// The real CLI it imitates.
    pub fn provider(self) -> Provider {
        match self {
            FakeCli::Codex => Provider::Codex,
            FakeCli::Claude => Provider::Claude,
            FakeCli::Pi => Provider::Pi,
        }
    }

    /// The arguments a provider adapter starts the real CLI with (the fake ignores most).
    pub fn protocol_args(self) -> &'static [&'static str] {
        match self {
            FakeCli::Codex => &["app-server"],
            FakeCli::Claude => &[
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--permission-prompt-tool",
                "stdio",
            ],
            FakeCli::Pi => &["--mode", "rpc"],
        }
    }

    /// The version the fake reports: `$FAKE_CLI_VERSION`, else the provider's `latest_validated`
    /// in `clis.toml`.
    pub fn version(self) -> String {
        std::env::var(VERSION_ENV).unwrap_or_else(|_| latest_validated(self.provider()))
    }

    /// What `--version` prints.
    pub fn version_line(self) -> String {
        let version = self.version();
        match self {
            FakeCli::Codex => format!("codex-cli {version}"),
            FakeCli::Claude => format!("{version} (Claude Code)"),
            FakeCli::Pi => version,
        }
    }

    /// The built binary next to the running test executable (`target/<profile>/fake-codex` for
    /// a test in `target/<profile>/deps/`). Missing or stale binaries are errors that end with
    /// [`BUILD_COMMAND`].
    pub fn binary(self) -> Result<PathBuf, FakeCliError> {
        let exe = std::env::current_exe()
            .map_err(|source| FakeCliError::Io { path: PathBuf::from("<current exe>"), source })?;
        let dir = exe.parent().unwrap_or(Path::new("."));
        let candidates = [Some(dir), dir.parent()];
        let found = candidates.into_iter().flatten().map(|d| d.join(self.binary_name())).find(|p| p.is_file());
        match found {
            Some(path) => self.check_fresh(path),
            None => Err(FakeCliError::NotBuilt {
                binary: self.binary_name(),
                path: dir.parent().unwrap_or(dir).join(self.binary_name()),
            }),
        }
    }

    /// Checks (once per path) that `path` was built from this crate's sources.
    fn check_fresh(self, path: PathBuf) -> Result<PathBuf, FakeCliError> {
        static CHECKED: OnceLock<Mutex<HashMap<PathBuf, bool>>> = OnceLock::new();
        let checked = CHECKED.get_or_init(Mutex::default);
        let known = checked.lock().unwrap_or_else(|p| p.into_inner()).get(&path).copied();
        let fresh = match known {
            Some(fresh) => fresh,
            None => {
                let output = std::process::Command::new(&path)
                    .arg(BUILD_ID_ARG)
                    .output()
                    .map_err(|source| FakeCliError::Io { path: path.clone(), source })?;
                let fresh = String::from_utf8_lossy(&output.stdout).trim() == build_id();
                checked.lock().unwrap_or_else(|p| p.into_inner()).insert(path.clone(), fresh);
                fresh
            }
        };
        if fresh { Ok(path) } else { Err(FakeCliError::Stale { binary: self.binary_name(), path }) }
    }
}

/// The entry point of the fake CLI binaries: `fn main() -> ExitCode { main(FakeCli::Codex) }`.
pub fn main(cli: FakeCli) -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(BUILD_ID_ARG) {
        println!("{}", build_id());
        return ExitCode::SUCCESS;
    }
    run::main(cli)
}

/// A fingerprint of [`SOURCES`] (FNV-1a).
fn build_id() -> String {
    let hash = SOURCES
        .iter()
        .flat_map(|source| source.iter())
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{hash:016x}")
}

/// `[providers.<id>].latest_validated` of the embedded `clis.toml`.
fn latest_validated(provider: Provider) -> String {
    #[derive(serde::Deserialize)]
    struct Manifest {
        providers: HashMap<String, Versions>,
    }
    #[derive(serde::Deserialize)]
    struct Versions {
        latest_validated: String,
    }
    toml::from_str::<Manifest>(MANIFEST)
        .ok()
        .and_then(|mut manifest| manifest.providers.remove(provider.id()))
        .map(|versions| versions.latest_validated)
        .unwrap_or_else(|| "0.0.0".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_manifest() {
        assert_eq!(latest_validated(Provider::Codex), "0.171.0");
        assert_eq!(FakeCli::Claude.version_line(), format!("{} (Claude Code)", latest_validated(Provider::Claude)));
        assert!(FakeCli::Codex.version_line().starts_with("codex-cli "));
    }

    #[test]
    fn the_build_id_is_stable() {
        assert_eq!(build_id(), build_id());
        assert_eq!(build_id().len(), 16);
    }
}
