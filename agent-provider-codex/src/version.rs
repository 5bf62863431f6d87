//! CLI version parsing and the supported range.

use std::fmt;
use std::str::FromStr;

/// The oldest `codex` release this provider speaks to. Older binaries are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(0, 171, 0);

/// The newest `codex` release this provider was validated against. Newer binaries run, with a
/// warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(0, 171, 0);

/// A `major.minor.patch` CLI version. Pre-release and build suffixes are ignored, also when
/// comparing: a pre-release of a supported version is supported (semantic-version precedence
/// would put `0.171.0-alpha.1` before [`MIN_SUPPORTED`]).
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

    /// Finds the version in `codex --version` output (`codex-cli 0.171.0`).
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

    /// Parses a semantic version as Cargo does (`0.171.0`, `0.172.0-alpha.3`, `1.0.0+build`):
    /// codex is a Cargo package, so its releases follow those rules. The pre-release and build
    /// parts are dropped.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let version = semver::Version::parse(s).map_err(|_| ParseVersionError)?;
        Ok(Version::new(version.major, version.minor, version.patch))
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
        assert!(Version::new(0, 99, 0) < MIN_SUPPORTED);
        assert!(Version::new(0, 171, 1) > MIN_SUPPORTED);
        assert!(Version::new(1, 0, 0) > Version::new(0, 999, 999));
        assert!(MIN_SUPPORTED <= LATEST_VALIDATED);
        assert_eq!(MIN_SUPPORTED.to_string(), "0.171.0");
        assert_eq!("0.171.0-alpha.1".parse::<Version>(), Ok(MIN_SUPPORTED));
        assert_eq!("0.171.0-".parse::<Version>(), Err(ParseVersionError));
    }
}
