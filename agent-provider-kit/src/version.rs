//! CLI versions: parsed from `--version` output and compared by number.

use std::fmt;
use std::str::FromStr;

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
}
