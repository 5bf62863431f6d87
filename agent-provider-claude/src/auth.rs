//! Claude Code's auth guard under [`AuthMode::Subscription`](agent_core::AuthMode): the kit's
//! common rules plus the names that route Claude Code to another account, endpoint or cloud.

use std::ffi::OsString;

use agent_core::{AuthMode, SessionOptions};
use agent_provider_kit::auth::{AuthGuard, EnvRules};

/// Claude Code's own environment names that select an API key, an endpoint or a cloud.
const CLAUDE_ENV: EnvRules = EnvRules {
    names: &[
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "ANTHROPIC_VERTEX_BASE_URL",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "ANTHROPIC_FOUNDRY_BASE_URL",
        "ANTHROPIC_FOUNDRY_RESOURCE",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CODE_USE_FOUNDRY",
        "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
        "CLAUDE_CODE_SKIP_VERTEX_AUTH",
        "CLAUDE_CODE_API_KEY_HELPER_TTL_MS",
    ],
    prefixes: &[],
    suffixes: &[],
};

/// The guard of the Claude provider. Claude Code takes no configuration overrides from the
/// harness, so no config key is refused.
pub(crate) const GUARD: AuthGuard = AuthGuard::new("claude", &[EnvRules::COMMON, CLAUDE_ENV], &[]);

/// Names always removed from the environment claude inherits under `Subscription`, whether or
/// not the host sets them (the host's other matching names are found by the same rules).
pub const SCRUBBED_UNDER_SUBSCRIPTION: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
];

/// The names to remove from the environment claude inherits, under `Subscription`.
pub(crate) fn scrubbed(options: &SessionOptions) -> Vec<OsString> {
    if options.auth != AuthMode::Subscription {
        return Vec::new();
    }
    let mut names: Vec<OsString> = SCRUBBED_UNDER_SUBSCRIPTION.iter().map(OsString::from).collect();
    for name in GUARD.scrub_host() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}
