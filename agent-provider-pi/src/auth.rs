//! Pi's auth guard under [`AuthMode::Subscription`](agent_core::AuthMode): the kit's rules for
//! the names and flags that route pi to another provider, endpoint or key.

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::PathBuf;

use agent_core::{AuthMode, SessionOptions};
use agent_provider_kit::auth::{AuthGuard, AuthReport, EnvRules, LoginState, effective_env, flag_key};

use crate::PiOptions;

/// The guard of the pi provider. Pi's "config keys" are its command-line flags.
pub(crate) const GUARD: AuthGuard = AuthGuard::new("pi", &[EnvRules::COMMON, EnvRules::PI], &["provider", "api-key"]);

/// The flags the guard checks, as config keys (`--provider` → `provider`): pi's `args` and the
/// `binary_args` placed before them, which pi reads as its command line too.
pub(crate) fn flag_keys(pi: &PiOptions) -> Vec<String> {
    let binary_args = pi.binary_args.iter().map(|a| a.to_string_lossy());
    binary_args
        .chain(pi.args.iter().map(|a| Cow::Borrowed(a.as_str())))
        .filter_map(|arg| flag_key(&arg).map(str::to_owned))
        .collect()
}

/// The names to remove from the environment pi inherits, under `Subscription`.
pub(crate) fn scrubbed(options: &SessionOptions) -> Vec<OsString> {
    GUARD.scrubbed(options, &[])
}

/// What the auth guard makes of this host for a pi session with `options` under
/// `AuthMode::Subscription`, and pi's saved logins (the providers in `~/.pi/agent/auth.json`,
/// read without the network; `PI_CODING_AGENT_DIR` is removed under `Subscription`): for reports
/// such as `agent-harness doctor`. Names only, never values.
pub fn auth_report(options: &SessionOptions) -> AuthReport {
    let options = options.clone().auth(AuthMode::Subscription);
    let pi = options.provider_options.get::<crate::PiOptions>().cloned().unwrap_or_default();
    let verdict = GUARD.check(&options, None, flag_keys(&pi).iter().map(String::as_str));
    let login = match effective_env(&options, "HOME") {
        Some(home) => LoginState::from_json_file(PathBuf::from(home).join(".pi/agent/auth.json"), |logins| {
            let entries: Vec<String> = logins
                .as_object()?
                .iter()
                .map(|(provider, login)| match login.get("type").and_then(|t| t.as_str()) {
                    Some(kind) => format!("{provider} ({kind})"),
                    None => provider.clone(),
                })
                .collect();
            (!entries.is_empty()).then(|| entries.join(", "))
        }),
        None => LoginState::Unknown { reason: "HOME is not set".into() },
    };
    AuthReport::new(verdict, &GUARD, login)
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
        let check = |options: &SessionOptions, pi: &PiOptions| {
            GUARD.check(options, None, flag_keys(pi).iter().map(String::as_str)).map_err(|e| e.to_string())
        };
        for name in ["ANTHROPIC_OAUTH_TOKEN", "COPILOT_GITHUB_TOKEN", "CLOUDFLARE_ACCOUNT_ID"] {
            let options = SessionOptions::new("/work").auth(AuthMode::Subscription).env(name, "value-0123456789");
            let error = GUARD.check(&options, None, std::iter::empty()).unwrap_err().to_string();
            assert!(error.contains(name) && !error.contains("value-0123456789"), "{error}");
        }
        for pi in [
            PiOptions::new().arg("--provider=openai"),
            PiOptions::new().binary_arg("--api-key").binary_arg("sk-secret"),
            PiOptions::new().binary_arg("/opt/pi/cli.js").binary_arg("--provider").binary_arg("openai"),
        ] {
            let error = check(&options, &pi).unwrap_err();
            assert!(!error.contains("sk-secret"), "{error}");
            assert!(check(&options.clone().auth(AuthMode::Inherit), &pi).is_ok());
        }
        assert!(check(&options, &PiOptions::new().binary_arg("/opt/pi/cli.js").arg("--no-skills")).is_ok());
    }
}
