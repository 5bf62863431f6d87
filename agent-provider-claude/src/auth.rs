//! Claude Code's auth guard under [`AuthMode::Subscription`](agent_core::AuthMode): the kit's
//! common rules plus the names that route Claude Code to another account, endpoint or cloud, and
//! the check of Claude Code's own settings layers (an `apiKeyHelper`, or such a name in `env`).

use std::ffi::OsString;
use std::path::PathBuf;

use agent_core::{AuthMode, Result, SessionOptions};
use agent_provider_kit::auth::{AuthGuard, AuthReport, EnvRules, LoginState, effective_env, flag_key};
use serde_json::Value;

/// The guard of the Claude provider. Its one refused flag, `--settings`, can carry an `env`
/// with any of the names above, or an `apiKeyHelper`.
pub(crate) const GUARD: AuthGuard = AuthGuard::new("claude", &[EnvRules::COMMON, EnvRules::CLAUDE], &["settings"]);

/// The flags of `ClaudeOptions::extra_args` the guard checks, as config keys
/// (`--settings=…` → `settings`).
pub(crate) fn flag_keys(claude: &crate::ClaudeOptions) -> impl Iterator<Item = &str> {
    claude.extra_args.iter().filter_map(|arg| flag_key(arg))
}

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
    GUARD.scrubbed(options, SCRUBBED_UNDER_SUBSCRIPTION)
}

/// The settings files claude reads: managed, the user's (`$CLAUDE_CONFIG_DIR`, else
/// `~/.claude`), and the project's shared and local settings in the working directory.
fn settings_layers(options: &SessionOptions) -> Vec<PathBuf> {
    let mut layers = vec![PathBuf::from("/etc/claude-code/managed-settings.json")];
    layers.extend(config_dir(options).map(|dir| dir.join("settings.json")));
    if let Some(cwd) = &options.cwd {
        layers.push(cwd.join(".claude/settings.json"));
        layers.push(cwd.join(".claude/settings.local.json"));
    }
    layers
}

/// The user's claude directory: `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
pub(crate) fn config_dir(options: &SessionOptions) -> Option<PathBuf> {
    agent_provider_kit::transcript::claude::config_dir(|name| effective_env(options, name))
}

/// What the auth guard makes of this host for a claude session with `options` under
/// `AuthMode::Subscription`, and claude's saved login (the claude.ai login in the user's
/// `.credentials.json`, read without the network): for reports such as `agent-harness doctor`.
/// Names only, never values.
pub fn auth_report(options: &SessionOptions) -> AuthReport {
    let options = options.clone().auth(AuthMode::Subscription);
    let claude = options.provider_options.get::<crate::ClaudeOptions>().cloned().unwrap_or_default();
    let verdict = GUARD.check(&options, None, flag_keys(&claude)).and_then(|()| check_local_state(&options));
    let login = match config_dir(&options) {
        Some(dir) => LoginState::from_json_file(dir.join(".credentials.json"), |credentials| {
            credentials.get("claudeAiOauth").is_some_and(|o| o.is_object()).then(|| "claude.ai".to_owned())
        }),
        None => LoginState::Unknown { reason: "neither CLAUDE_CONFIG_DIR nor HOME is set".into() },
    };
    AuthReport::new(verdict, &GUARD, login)
}

/// The setting of a settings file that routes claude to a key, an endpoint or a cloud: an
/// `apiKeyHelper`, or an `env` entry the guard refuses.
fn routing_setting(settings: &Value) -> Option<String> {
    if settings.get("apiKeyHelper").is_some_and(|v| !v.is_null()) {
        return Some("apiKeyHelper".into());
    }
    let env = settings.get("env")?.as_object()?;
    env.keys().find(|name| GUARD.refuses_env(name)).map(|name| format!("env.{name}"))
}

/// Checks claude's own settings under `Subscription`: no layer sets an API key helper or a
/// refused variable. Each refusal names the file and the setting, never a value.
pub(crate) fn check_local_state(options: &SessionOptions) -> Result<()> {
    if options.auth != AuthMode::Subscription {
        return Ok(());
    }
    for layer in settings_layers(options) {
        let text = match std::fs::read_to_string(&layer) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Err(GUARD.refuse_file(&layer, "(a file that cannot be read)")),
        };
        let settings: Value =
            serde_json::from_str(&text).map_err(|_| GUARD.refuse_file(&layer, "(a file claude cannot parse)"))?;
        if let Some(setting) = routing_setting(&settings) {
            return Err(GUARD.refuse_file(&layer, &setting));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tokens_gateways_and_the_settings_flag_are_refused_under_subscription() {
        let subscription = || SessionOptions::new("/work").auth(AuthMode::Subscription);
        for name in [
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
            "CLAUDE_CODE_USE_MANTLE",
            "CLAUDE_CODE_USE_GATEWAY",
            "CLAUDE_CODE_USE_ANTHROPIC_AWS",
            "ANTHROPIC_UNIX_SOCKET",
            "anthropic_identity_token",
        ] {
            let options = subscription().env(name, "sk-SENTINEL");
            let error = GUARD.check(&options, None, std::iter::empty()).unwrap_err().to_string();
            assert!(error.contains(name) && !error.contains("sk-SENTINEL"), "{error}");
            assert!(GUARD.check(&options.auth(AuthMode::Inherit), None, std::iter::empty()).is_ok());
        }
        let allowed = subscription().env("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "1000");
        assert!(GUARD.check(&allowed, None, std::iter::empty()).is_ok());

        for args in [&["--settings", r#"{"env":{"ANTHROPIC_API_KEY":"sk-SENTINEL"}}"#][..], &["--settings=/tmp/s.json"]]
        {
            let claude = args.iter().fold(crate::ClaudeOptions::new(), |claude, arg| claude.extra_arg(*arg));
            let error = GUARD.check(&subscription(), None, flag_keys(&claude)).unwrap_err().to_string();
            assert!(error.contains("`settings`") && !error.contains("sk-SENTINEL"), "{error}");
            assert!(GUARD.check(&subscription().auth(AuthMode::Inherit), None, flag_keys(&claude)).is_ok());
        }
        let claude = crate::ClaudeOptions::new().extra_arg("--add-dir").extra_arg("/tmp");
        assert!(GUARD.check(&subscription(), None, flag_keys(&claude)).is_ok());
    }

    #[test]
    fn settings_that_route_elsewhere_are_named() {
        assert_eq!(routing_setting(&json!({"apiKeyHelper": "/bin/key"})).as_deref(), Some("apiKeyHelper"));
        let env = json!({"env": {"ANTHROPIC_BASE_URL": "http://x", "FOO": "1"}});
        assert_eq!(routing_setting(&env).as_deref(), Some("env.ANTHROPIC_BASE_URL"));
        assert_eq!(
            routing_setting(&json!({"env": {"CLAUDE_CODE_USE_BEDROCK": "1"}})).as_deref(),
            Some("env.CLAUDE_CODE_USE_BEDROCK")
        );
        assert_eq!(routing_setting(&json!({"model": "opus", "env": {"FOO": "1"}})), None);
    }

    #[test]
    fn a_settings_layer_in_the_project_refuses_a_subscription_session() {
        let dir = std::env::temp_dir().join(format!("claude-auth-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".claude")).unwrap();
        std::fs::write(dir.join(".claude/settings.local.json"), r#"{"env": {"ANTHROPIC_API_KEY": "sekrit"}}"#).unwrap();
        let home = dir.join("home");
        let options = SessionOptions::new(&dir).env("HOME", home.display().to_string());
        match check_local_state(&options) {
            Err(agent_core::Error::AuthGuard { reason }) => {
                assert!(reason.contains("settings.local.json") && reason.contains("env.ANTHROPIC_API_KEY"), "{reason}");
                assert!(!reason.contains("sekrit"), "{reason}");
            }
            other => panic!("expected the guard to refuse, got {other:?}"),
        }
        assert!(check_local_state(&options.clone().auth(AuthMode::Inherit)).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(check_local_state(&options).is_ok());
    }
}
