//! The host's credentials a CLI inherits are secrets of its session in every auth mode: under
//! `AuthMode::Subscription` the guard scrubs the names it refuses, and the CLI inherits the
//! others — a `GITHUB_TOKEN` a tool prints with `env` must not reach events or the store.
//!
//! A test binary of its own: it changes this process's environment.

use agent_core::{AuthMode, SessionOptions};
use agent_provider_kit::secrets::Secrets;

const TOKEN: &str = "ghp-host-token-0123456789";

#[test]
fn a_credential_the_cli_inherits_is_redacted_in_every_auth_mode() {
    // SAFETY: this binary's only test changes the environment before anything else in the
    // process reads it.
    unsafe { std::env::set_var("HOST_GITHUB_TOKEN", TOKEN) };
    let printed = format!("HOST_GITHUB_TOKEN={TOKEN}");
    let refused = |name: &str| name == "OPENAI_API_KEY";
    for auth in [AuthMode::Subscription, AuthMode::Inherit] {
        let secrets = Secrets::of_session(&SessionOptions::new("/tmp").auth(auth), refused);
        assert!(secrets.credentials().any(|c| c == TOKEN), "{auth:?}: the inherited token is a credential");
        assert_eq!(secrets.redact_credentials(&printed), "HOST_GITHUB_TOKEN=[redacted]", "{auth:?}");
    }

    // A session that removes the name, or sets its own value, does not pass the host's on.
    let mut unset = SessionOptions::new("/tmp");
    unset.env.unset.push("HOST_GITHUB_TOKEN".into());
    let own = SessionOptions::new("/tmp").env("HOST_GITHUB_TOKEN", "session-token-98765");
    for (what, options) in [("unset", unset), ("set", own)] {
        let secrets = Secrets::of_session(&options, refused);
        assert!(!secrets.credentials().any(|c| c == TOKEN), "{what}: the host's value is not the CLI's");
    }
}
