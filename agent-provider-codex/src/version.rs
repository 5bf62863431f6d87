//! The supported range of `codex` versions. The version type is the kit's.

use std::time::Duration;

use agent_provider_kit::version::{Version, VersionCheck, VersionRange};

/// The oldest `codex` release this provider speaks to. Older binaries are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(0, 171, 0);

/// The newest `codex` release this provider was validated against. Newer binaries run, with a
/// warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(0, 171, 0);

/// The supported range, [`MIN_SUPPORTED`] to [`LATEST_VALIDATED`].
pub const RANGE: VersionRange = VersionRange { min_supported: MIN_SUPPORTED, latest_validated: LATEST_VALIDATED };

/// How `codex --version` is read and checked before `codex` is spawned.
pub(crate) const CHECK: VersionCheck = VersionCheck {
    cli: "codex",
    range: RANGE,
    marker: None,
    stderr_too: false,
    upgrade: "upgrade it (`npm install -g @openai/codex@latest`) or point CodexOptions::binary at a newer codex",
    timeout: Duration::from_secs(10),
};

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
