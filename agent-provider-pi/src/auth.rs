//! Pi's auth guard under [`AuthMode::Subscription`](agent_core::AuthMode): the kit's rules for
//! the names and flags that route pi to another provider, endpoint or key.

use std::ffi::OsString;

use agent_core::SessionOptions;
use agent_provider_kit::auth::{AuthGuard, EnvRules};

/// Pi's own environment names that move its configuration (models, keys) elsewhere.
const PI_ENV: EnvRules = EnvRules { names: &["PI_CODING_AGENT_DIR"], prefixes: &[], suffixes: &[] };

/// The guard of the pi provider. Pi's "config keys" are its command-line flags.
pub(crate) const GUARD: AuthGuard = AuthGuard::new("pi", &[EnvRules::COMMON, PI_ENV], &["provider", "api-key"]);

/// The flags in `args` the guard checks, as config keys (`--provider` → `provider`).
pub(crate) fn flag_keys(args: &[String]) -> impl Iterator<Item = &str> {
    args.iter().filter_map(|a| a.strip_prefix("--")).map(|a| a.split('=').next().unwrap_or(a))
}

/// The names to remove from the environment pi inherits, under `Subscription`.
pub(crate) fn scrubbed(options: &SessionOptions) -> Vec<OsString> {
    GUARD.scrubbed(options, &[])
}

#[cfg(test)]
mod tests {
    use agent_core::AuthMode;

    use super::*;

    #[test]
    fn keys_and_provider_flags_are_refused_under_subscription() {
        let options = SessionOptions::new("/work").auth(AuthMode::Subscription).env("OPENAI_API_KEY", "sk-secret");
        let error = GUARD.check(&options, None, std::iter::empty()).unwrap_err().to_string();
        assert!(error.contains("OPENAI_API_KEY") && !error.contains("sk-secret"), "{error}");
        let options = SessionOptions::new("/work").auth(AuthMode::Subscription);
        let args = ["--provider=openai".to_owned()];
        assert!(GUARD.check(&options, None, flag_keys(&args)).is_err());
        assert!(GUARD.check(&options.auth(AuthMode::Inherit), None, flag_keys(&args)).is_ok());
    }
}
