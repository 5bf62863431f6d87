//! The supported range of `pi` versions (`clis.toml`'s `[providers.pi]`). The version type is
//! the kit's.

use std::time::Duration;

use agent_provider_kit::version::{Version, VersionCheck, VersionRange};

use crate::normalize::RunEnds;

/// The oldest `pi` release this provider speaks to (`@mariozechner/pi-coding-agent` 0.73.1).
/// Older ones are refused at open.
pub const MIN_SUPPORTED: Version = Version::new(0, 73, 1);

/// The newest `pi` release this provider was validated against
/// (`@earendil-works/pi-coding-agent` 1.6.0). Newer ones run, with a warning in the logs.
pub const LATEST_VALIDATED: Version = Version::new(1, 6, 0);

/// The first `pi` release that drops its queued steer and follow-up messages on request
/// (`clear_queue`); older ones deliver them with their next run whatever happens.
pub(crate) const CLEAR_QUEUE: Version = Version::new(0, 84, 4);

/// The first `pi` release whose `agent_end` says whether a retry follows (`willRetry`).
pub(crate) const WILL_RETRY: Version = Version::new(0, 75, 4);

/// The first `pi` release that ends its runs with `agent_settled`: from [`WILL_RETRY`] to this
/// one, nothing follows a run's last `agent_end` (0.73.1 marks neither).
pub(crate) const SETTLED: Version = Version::new(0, 80, 4);

/// How `pi` at `version` marks the end of its runs.
pub(crate) fn run_ends(version: Version) -> RunEnds {
    match version {
        v if v >= SETTLED => RunEnds::AgentSettled,
        v if v >= WILL_RETRY => RunEnds::MarkedAgentEnd,
        _ => RunEnds::AgentEnd,
    }
}

/// The supported range, [`MIN_SUPPORTED`] to [`LATEST_VALIDATED`].
pub const RANGE: VersionRange = VersionRange { min_supported: MIN_SUPPORTED, latest_validated: LATEST_VALIDATED };

/// How `pi --version` is read and checked before `pi` is spawned (Node 20 takes about 1.2 s).
pub(crate) const CHECK: VersionCheck = VersionCheck {
    cli: "pi",
    range: RANGE,
    marker: None,
    stderr_too: true,
    upgrade: "upgrade it or point PiOptions::binary at a newer pi",
    timeout: Duration::from_secs(15),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_matches_clis_toml() {
        let manifest = include_str!("../../clis.toml");
        let section = manifest.split("[providers.pi]").nth(1).expect("clis.toml has [providers.pi]");
        let value = |key: &str| {
            let line = section.lines().find(|l| l.trim_start().starts_with(key)).expect(key);
            line.split('"').nth(1).and_then(|v| v.parse::<Version>().ok()).expect("a version")
        };
        assert_eq!(value("min_supported"), MIN_SUPPORTED);
        assert_eq!(value("latest_validated"), LATEST_VALIDATED);
        assert!(MIN_SUPPORTED <= LATEST_VALIDATED);
    }

    #[test]
    fn each_release_is_told_how_its_runs_end() {
        let at = |v: &str| run_ends(v.parse().expect("a version"));
        assert_eq!([at("0.73.1"), at("0.75.3")], [RunEnds::AgentEnd; 2]);
        assert_eq!([at("0.75.4"), at("0.79.10"), at("0.80.3")], [RunEnds::MarkedAgentEnd; 3]);
        assert_eq!([at("0.80.4"), at("1.6.0")], [RunEnds::AgentSettled; 2]);
    }
}
