//! The supported range of `codex` versions. The version type is the kit's.

use agent_provider_kit::version::Version;

/// The oldest `codex` release this provider speaks to. Older binaries are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(0, 171, 0);

/// The newest `codex` release this provider was validated against. Newer binaries run, with a
/// warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(0, 171, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_ordered() {
        assert!(MIN_SUPPORTED <= LATEST_VALIDATED);
        assert_eq!(MIN_SUPPORTED.to_string(), "0.171.0");
        assert_eq!(Version::from_cli_output("codex-cli 0.171.0-alpha.1\n"), Some(MIN_SUPPORTED));
    }
}
