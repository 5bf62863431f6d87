//! CLI versions: parsed from `--version` output, compared by number, and the `--version` check
//! every provider runs before spawning its CLI ([`VersionCheck`]), worded per CLI.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use agent_core::exec::{Command, Exec, ExecError, ExitStatus};
use agent_core::{DynExec, Error, ProviderId};

use crate::framing::stderr_note;
use crate::probe::{self, FileStamp, ProbeCache, ProbeError, ProbeLimits};

/// A `major.minor.patch` CLI version. Pre-release and build suffixes are ignored, also when
/// comparing: a pre-release of a supported version is supported (semantic-version precedence
/// would put `0.171.0-alpha.1` before `0.171.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
}

impl Version {
    /// A version.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Version { major, minor, patch }
    }

    /// Finds the version in a CLI's `--version` output: the last word that is a semantic
    /// version, with an optional `v` before it (`codex-cli 0.171.0`, `1.0.3 (Claude Code)`,
    /// `v0.9.1`).
    pub fn from_cli_output(output: &str) -> Option<Version> {
        output.split_whitespace().rev().find_map(|word| word.trim_start_matches('v').parse().ok())
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a version string did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a semantic version (major.minor.patch)")]
pub struct ParseVersionError;

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Parses a semantic version (`0.171.0`, `0.172.0-alpha.3`, `1.0.0+build`) by the
    /// semantic-versioning rules Cargo and npm share. The pre-release and build parts are
    /// dropped.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let version = semver::Version::parse(s).map_err(|_| ParseVersionError)?;
        Ok(Version::new(version.major, version.minor, version.patch))
    }
}

/// The versions of a CLI a provider supports: the oldest it speaks to and the newest it was
/// validated against (`clis.toml`'s `[providers.<id>]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionRange {
    /// The oldest supported version; older ones are refused at open.
    pub min_supported: Version,
    /// The newest validated version; newer ones run, with a warning in the logs.
    pub latest_validated: Version,
}

impl VersionRange {
    /// Where `version` falls in the range.
    pub fn support(&self, version: Version) -> VersionSupport {
        if version < self.min_supported {
            VersionSupport::TooOld
        } else if version > self.latest_validated {
            VersionSupport::Newer
        } else {
            VersionSupport::Validated
        }
    }
}

/// Where a version falls in a [`VersionRange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VersionSupport {
    /// Older than the minimum supported: refused.
    TooOld,
    /// From the minimum supported to the latest validated.
    Validated,
    /// Newer than the latest validated: runs, with a warning.
    Newer,
}

impl VersionSupport {
    /// The stable snake_case name (`too_old`, `validated`, `newer`).
    pub fn as_str(self) -> &'static str {
        match self {
            VersionSupport::TooOld => "too_old",
            VersionSupport::Validated => "validated",
            VersionSupport::Newer => "newer",
        }
    }
}

/// How one CLI's `--version` output is read and its problems worded: the check a provider runs
/// before spawning its CLI, and what a report such as `agent-harness doctor` runs too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionCheck {
    /// The CLI's name in texts (`codex`, `Claude Code`, `pi`).
    pub cli: &'static str,
    /// The supported range.
    pub range: VersionRange,
    /// Text the output must contain to be this CLI's (Claude Code prints `(Claude Code)`).
    pub marker: Option<&'static str>,
    /// Whether the version may be printed on stderr (pi 0.73.1 does).
    pub stderr_too: bool,
    /// What to do about a version that is too old, ending the refusal ("upgrade it (…) or point
    /// CodexOptions::binary at a newer codex").
    pub upgrade: &'static str,
    /// Longest wait for the answer.
    pub timeout: Duration,
}

/// Bytes of `--version` stdout kept (the rest is read and dropped).
const OUTPUT_LIMIT: usize = 4096;
/// Lines of `--version` stderr kept for an error report.
const STDERR_LINES: usize = 10;

impl VersionCheck {
    /// Runs `command` (the CLI with `--version`) through `exec` within `min(deadline,
    /// self.timeout)` and reads the version it prints. The version is not compared with the
    /// range: see [`VersionCheck::require`].
    pub async fn probe(&self, exec: &dyn Exec, command: Command, deadline: Duration) -> Result<Version, VersionError> {
        let limits = ProbeLimits::new(deadline.min(self.timeout)).stdout_bytes(OUTPUT_LIMIT).stderr_lines(STDERR_LINES);
        let output = match probe::run(exec, command, limits).await {
            Ok(output) => output,
            Err(ProbeError::Spawn(error)) => return Err(VersionError::Spawn(error)),
            Err(ProbeError::Wait(error)) => return Err(VersionError::Wait(error)),
            Err(ProbeError::TimedOut { timeout, stderr_tail }) => {
                return Err(VersionError::TimedOut { timeout, stderr_tail });
            }
        };
        let (status, stderr_tail) = (output.status, output.stderr_tail);
        if !status.success() {
            return Err(VersionError::Failed { status, stderr_tail });
        }
        let marked = |text: &str| self.marker.is_none_or(|marker| text.contains(marker));
        let found = Version::from_cli_output(&output.stdout).filter(|_| marked(&output.stdout)).or_else(|| {
            let tail = stderr_tail.as_deref().filter(|_| self.stderr_too)?;
            Version::from_cli_output(tail).filter(|_| marked(tail))
        });
        found.ok_or(VersionError::NoVersion { status, stderr_tail })
    }

    /// [`VersionCheck::probe`] with its failures as the provider's errors: a CLI that cannot
    /// start is worded by `spawn_error` (which knows the provider's option names), one whose exit
    /// cannot be observed is [`Error::Exec`], the rest [`Error::ProviderUnavailable`] with
    /// [`VersionError::describe`]'s text.
    pub async fn probe_as(
        &self,
        provider: &ProviderId,
        exec: &dyn Exec,
        command: Command,
        deadline: Duration,
        spawn_error: impl FnOnce(ExecError) -> Error,
    ) -> Result<Version, Error> {
        let program = command.program.to_string_lossy().into_owned();
        self.probe(exec, command, deadline).await.map_err(|error| match error {
            VersionError::Spawn(error) => spawn_error(error),
            VersionError::Wait(error) => Error::Exec(error),
            other => Error::ProviderUnavailable { provider: provider.clone(), reason: other.describe(self, &program) },
        })
    }

    /// The check a provider's `open` runs: the version `cache` holds for the program file
    /// `command` runs, else [`VersionCheck::probe_as`] and [`VersionCheck::require`] (a version
    /// too old is [`Error::ProviderUnavailable`]), remembered in `cache`.
    pub async fn check(
        &self,
        provider: &ProviderId,
        cache: &ProbeCache<Version>,
        exec: &DynExec,
        command: Command,
        deadline: Duration,
        spawn_error: impl FnOnce(ExecError) -> Error,
    ) -> Result<Version, Error> {
        let program = command.program.clone();
        let stamp = FileStamp::of_command(exec.as_ref(), &command);
        if let Some(version) = cache.get(exec, &program, stamp.as_ref()) {
            return Ok(version);
        }
        let version = self.probe_as(provider, exec.as_ref(), command, deadline, spawn_error).await?;
        self.require(version).map_err(|reason| Error::ProviderUnavailable { provider: provider.clone(), reason })?;
        cache.insert(exec, &program, stamp, version);
        Ok(version)
    }

    /// What a provider finds of its CLI with `command` (its `--version` command) through
    /// `exec`, for a report: where the program resolves and [`VersionCheck::probe_as`]'s
    /// answer, an old version included. Not cached.
    pub async fn probe_cli(
        &self,
        provider: &ProviderId,
        exec: &dyn Exec,
        command: Command,
        spawn_error: impl FnOnce(ExecError) -> Error,
    ) -> CliProbe {
        let program = command.program.clone();
        let path = FileStamp::of_command(exec, &command).map(|stamp| stamp.path().to_path_buf());
        let version = self.probe_as(provider, exec, command, self.timeout, spawn_error).await;
        CliProbe::new(program, path, version, self.range)
    }

    /// Refuses a version older than the minimum supported (the text says what to do), and logs a
    /// warning for one newer than the latest validated.
    pub fn require(&self, version: Version) -> Result<Version, String> {
        let VersionRange { min_supported, latest_validated } = self.range;
        match self.range.support(version) {
            VersionSupport::TooOld => Err(format!(
                "{} {version} is older than the minimum supported {min_supported}; {}",
                self.cli, self.upgrade
            )),
            VersionSupport::Newer => {
                tracing::warn!(%version, validated = %latest_validated, "{} is newer than the latest validated version", self.cli);
                Ok(version)
            }
            VersionSupport::Validated => Ok(version),
        }
    }
}

/// What a provider finds of its CLI for a session's options, without starting a session: the
/// program, where it resolves and the version it prints (for `agent-harness doctor`).
#[derive(Debug)]
#[non_exhaustive]
pub struct CliProbe {
    /// The program as the options name it (the default name, or the configured binary).
    pub program: OsString,
    /// The file it resolves to on this host; `None` when it is not found (or the exec is not
    /// local).
    pub path: Option<PathBuf>,
    /// The version it printed, or the error the provider's `open` would report instead. A
    /// version older than the range is returned here, not refused.
    pub version: Result<Version, agent_core::Error>,
    /// The versions the provider supports.
    pub range: VersionRange,
}

impl CliProbe {
    /// A probe's result.
    pub fn new(
        program: OsString,
        path: Option<PathBuf>,
        version: Result<Version, agent_core::Error>,
        range: VersionRange,
    ) -> Self {
        CliProbe { program, path, version, range }
    }

    /// Where the version found falls in the range; `None` without a version.
    pub fn support(&self) -> Option<VersionSupport> {
        self.version.as_ref().ok().map(|v| self.range.support(*v))
    }
}

/// Why a `--version` check found no version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VersionError {
    /// The exec did not start the CLI (not found, not executable, not allowed); the provider
    /// words it with its option names.
    #[error("could not start: {0}")]
    Spawn(#[source] ExecError),
    /// The CLI's exit could not be observed; it was killed.
    #[error("its exit could not be observed: {0}")]
    Wait(#[source] ExecError),
    /// No answer in time; the CLI was killed and reaped.
    #[error("no answer within {timeout:?}")]
    TimedOut {
        /// The timeout it exceeded.
        timeout: Duration,
        /// What it wrote to stderr until then.
        stderr_tail: Option<String>,
    },
    /// It exited unsuccessfully.
    #[error("failed ({status})")]
    Failed {
        /// How it ended.
        status: ExitStatus,
        /// The last lines of its stderr.
        stderr_tail: Option<String>,
    },
    /// It printed no version of this CLI.
    #[error("printed no version ({status})")]
    NoVersion {
        /// How it ended.
        status: ExitStatus,
        /// The last lines of its stderr.
        stderr_tail: Option<String>,
    },
}

impl VersionError {
    /// The one text a provider reports for `program` (as the user wrote it), naming the CLI
    /// `check` expects and carrying the stderr tail. [`VersionError::Spawn`] is better worded
    /// by the provider, which knows its option names; this gives a generic text for it.
    pub fn describe(&self, check: &VersionCheck, program: &str) -> String {
        let cli = check.cli;
        match self {
            VersionError::Spawn(error) => format!("`{program} --version` could not start: {error}"),
            VersionError::Wait(error) => format!("`{program} --version`: its exit could not be observed: {error}"),
            VersionError::TimedOut { timeout, stderr_tail } => {
                format!(
                    "`{program} --version` did not answer within {timeout:?}{}",
                    stderr_note(stderr_tail.as_deref())
                )
            }
            VersionError::Failed { status, stderr_tail } => format!(
                "`{program} --version` failed ({status}); is it the {cli} CLI?{}",
                stderr_note(stderr_tail.as_deref())
            ),
            VersionError::NoVersion { status, stderr_tail } => format!(
                "`{program} --version` ({status}) did not print a {cli} version; is it the {cli} CLI?{}",
                stderr_note(stderr_tail.as_deref())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(output: &str, expected: Option<Version>) {
        assert_eq!(Version::from_cli_output(output), expected, "{output:?}");
    }

    #[test]
    fn parses_cli_output() {
        check("codex-cli 0.171.0\n", Some(Version::new(0, 171, 0)));
        check("codex-cli 0.172.0-alpha.3", Some(Version::new(0, 172, 0)));
        check("codex v1.2.3", Some(Version::new(1, 2, 3)));
        check("2.0.14 (Claude Code)", Some(Version::new(2, 0, 14)));
        check("0.9.1", Some(Version::new(0, 9, 1)));
        check("codex-cli", None);
        check("codex-cli 0.171.0+8d1f2e0", Some(Version::new(0, 171, 0)));
        check("codex-cli 0.171.0 (Homebrew)", Some(Version::new(0, 171, 0)));
        check("codex-cli 0.171", None);
        check("codex-cli 0.171.0.1", None);
        check("codex-cli 0.0171.0", None);
        check("codex-cli 0.171.x", None);
        check("", None);
    }

    #[test]
    fn orders_numerically() {
        let v = Version::new(0, 171, 0);
        assert!(Version::new(0, 99, 0) < v);
        assert!(Version::new(0, 171, 1) > v);
        assert!(Version::new(1, 0, 0) > Version::new(0, 999, 999));
        assert_eq!(v.to_string(), "0.171.0");
        assert_eq!("0.171.0-alpha.1".parse::<Version>(), Ok(v));
        assert_eq!("0.171.0-".parse::<Version>(), Err(ParseVersionError));
    }

    #[test]
    fn a_range_places_versions() {
        let range = VersionRange { min_supported: Version::new(0, 73, 1), latest_validated: Version::new(1, 6, 0) };
        assert_eq!(range.support(Version::new(0, 73, 0)), VersionSupport::TooOld);
        assert_eq!(range.support(Version::new(0, 73, 1)), VersionSupport::Validated);
        assert_eq!(range.support(Version::new(1, 6, 0)), VersionSupport::Validated);
        assert_eq!(range.support(Version::new(1, 6, 1)), VersionSupport::Newer);
        assert_eq!(VersionSupport::TooOld.as_str(), "too_old");
        let check = VersionCheck {
            cli: "pi",
            range,
            marker: None,
            stderr_too: true,
            upgrade: "upgrade it",
            timeout: Duration::from_secs(1),
        };
        let refused = check.require(Version::new(0, 50, 2)).unwrap_err();
        assert_eq!(refused, "pi 0.50.2 is older than the minimum supported 0.73.1; upgrade it");
        assert_eq!(check.require(Version::new(2, 0, 0)), Ok(Version::new(2, 0, 0)));
    }
}
