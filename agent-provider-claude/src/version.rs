//! The supported range of `claude` versions (`clis.toml` `[providers.claude]`). The version
//! type is the kit's.

use std::time::Duration;

use agent_provider_kit::version::{Version, VersionCheck, VersionRange};

/// The oldest Claude Code release this provider speaks to. Older binaries are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(2, 1, 197);

/// The newest Claude Code release this provider was validated against. Newer binaries run,
/// with a warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(2, 1, 332);

/// The supported range, [`MIN_SUPPORTED`] to [`LATEST_VALIDATED`].
pub const RANGE: VersionRange = VersionRange { min_supported: MIN_SUPPORTED, latest_validated: LATEST_VALIDATED };

/// How `claude --version` is read and checked before `claude` is spawned.
pub(crate) const CHECK: VersionCheck = VersionCheck {
    cli: "Claude Code",
    range: RANGE,
    marker: Some("Claude Code"),
    stderr_too: false,
    upgrade: "upgrade it (`npm install -g @anthropic-ai/claude-code@latest`) or point ClaudeOptions::binary at a newer claude",
    timeout: Duration::from_secs(10),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_matches_clis_toml() {
        let manifest: toml::Table = include_str!("../../clis.toml").parse().unwrap();
        let claude = &manifest["providers"]["claude"];
        assert_eq!(claude["min_supported"].as_str(), Some(MIN_SUPPORTED.to_string().as_str()));
        assert_eq!(claude["latest_validated"].as_str(), Some(LATEST_VALIDATED.to_string().as_str()));
        assert_eq!(Version::from_cli_output("2.1.197 (Claude Code)\n"), Some(MIN_SUPPORTED));
    }
}
