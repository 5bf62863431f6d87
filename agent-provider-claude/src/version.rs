//! The supported range of `claude` versions (`clis.toml` `[providers.claude]`). The version
//! type is the kit's.

use agent_provider_kit::version::Version;

/// The oldest Claude Code release this provider speaks to. Older binaries are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(2, 1, 197);

/// The newest Claude Code release this provider was validated against. Newer binaries run,
/// with a warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(2, 1, 197);

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
