//! The gate of the live tests (testing tier 5): tests against the user's own logged-in CLIs and
//! the real model services, which spend the user's quota.
//!
//! Live tests are compiled and run by every `cargo test`, and return early — printing why —
//! unless `AGENT_LIVE` names their provider (`AGENT_LIVE=codex,claude,pi`, or `all`). They never
//! run in CI: with `CI` set (to anything but `false` or `0`) they return early whatever
//! `AGENT_LIVE` says. `cargo xtask live [codex|claude|pi]` checks the logins, warns about quota and
//! sets `AGENT_LIVE`.
//!
//! ```
//! use agent_testkit::{Provider, live};
//!
//! // At the top of a live test:
//! if !live::selected(Provider::Codex) {
//!     return; // `selected` printed the reason
//! }
//! ```

use crate::clis::Provider;

/// The variable naming the providers whose live tests run.
pub const ENV: &str = "AGENT_LIVE";

/// Extra `agent-harness run` arguments for every live run (a cheaper `--model`, say), split at
/// whitespace.
pub const ARGS_ENV: &str = "AGENT_LIVE_ARGS";

/// Whether `provider`'s live tests run in this environment, as [`selection`] decides from
/// `AGENT_LIVE` and `CI`; prints the reason when they do not.
///
/// # Panics
///
/// When `AGENT_LIVE` names something that is not a provider (a typo must not silently skip).
pub fn selected(provider: Provider) -> bool {
    let live = std::env::var(ENV).ok();
    let ci = std::env::var("CI").ok();
    match selection(live.as_deref(), ci.as_deref()) {
        Ok(providers) if providers.contains(&provider) => true,
        Ok(_) => {
            println!("{}", skip_reason(provider, live.as_deref(), ci.as_deref()));
            false
        }
        Err(error) => panic!("{error}"),
    }
}

/// The providers the live tests run for, from the values of `AGENT_LIVE` and `CI`: none in CI,
/// none without `AGENT_LIVE`, else the providers it names (comma- or space-separated; `all`).
pub fn selection(live: Option<&str>, ci: Option<&str>) -> Result<Vec<Provider>, String> {
    if in_ci(ci) {
        return Ok(Vec::new());
    }
    let mut providers = Vec::new();
    for name in live.unwrap_or_default().split([',', ' ']).map(str::trim).filter(|n| !n.is_empty()) {
        let named = match name {
            "all" => Provider::ALL.to_vec(),
            _ => vec![Provider::ALL.into_iter().find(|p| p.id() == name).ok_or_else(|| {
                format!("{ENV}={}: `{name}` is not a provider (codex, claude, pi or all)", live.unwrap_or_default())
            })?],
        };
        for provider in named {
            if !providers.contains(&provider) {
                providers.push(provider);
            }
        }
    }
    Ok(providers)
}

/// The extra `agent-harness run` arguments from [`ARGS_ENV`].
pub fn extra_args() -> Vec<String> {
    std::env::var(ARGS_ENV).unwrap_or_default().split_whitespace().map(str::to_owned).collect()
}

fn in_ci(ci: Option<&str>) -> bool {
    ci.is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn skip_reason(provider: Provider, live: Option<&str>, ci: Option<&str>) -> String {
    if in_ci(ci) {
        format!("live {provider} test skipped: live tests never run in CI (CI is set)")
    } else if live.is_none_or(|v| v.trim().is_empty()) {
        format!("live {provider} test skipped: {ENV} is not set (`cargo xtask live {provider}` runs it)")
    } else {
        format!("live {provider} test skipped: {ENV} does not name {provider}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_live_selects_providers_and_ci_selects_none() {
        assert_eq!(selection(None, None), Ok(vec![]));
        assert_eq!(selection(Some(""), None), Ok(vec![]));
        assert_eq!(selection(Some("codex"), None), Ok(vec![Provider::Codex]));
        assert_eq!(selection(Some("pi, codex,pi"), None), Ok(vec![Provider::Pi, Provider::Codex]));
        assert_eq!(selection(Some("all"), None), Ok(Provider::ALL.to_vec()));
        assert_eq!(selection(Some("all"), Some("true")), Ok(vec![]), "never in CI");
        assert_eq!(selection(Some("codex"), Some("1")), Ok(vec![]));
        assert_eq!(selection(Some("codex"), Some("false")), Ok(vec![Provider::Codex]));
        assert_eq!(selection(Some("codex"), Some("")), Ok(vec![Provider::Codex]));
        let typo = selection(Some("codex,cluade"), None).unwrap_err();
        assert!(typo.contains("`cluade` is not a provider"), "{typo}");
    }

    #[test]
    fn the_reason_says_how_to_run_a_skipped_test() {
        assert!(skip_reason(Provider::Pi, None, None).contains("`cargo xtask live pi`"));
        assert!(skip_reason(Provider::Pi, Some("codex"), None).contains("does not name pi"));
        assert!(skip_reason(Provider::Pi, Some("pi"), Some("true")).contains("never run in CI"));
    }
}
