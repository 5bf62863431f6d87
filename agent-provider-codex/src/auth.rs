//! Codex's auth guard under [`AuthMode::Subscription`]: the generic rules of the provider kit
//! for codex's names and config keys, and the checks of codex's own state — the `config.toml`
//! layers it would load and the login stored in `auth.json`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agent_core::{AuthMode, Result, SessionOptions};
use agent_provider_kit::auth::{AuthGuard, AuthReport, EnvRules, LoginState, effective_env};
use serde_json::Value as Json;
use toml::Value as Toml;

/// Config keys (also the roots of tables) that route codex to another provider, endpoint or
/// login.
const REFUSED_CONFIG: &[&str] = &[
    "model_provider",
    "model_providers",
    "oss_provider",
    "openai_base_url",
    "chatgpt_base_url",
    "profile",
    "profiles",
    "forced_login_method",
    "cli_auth_credentials_store",
];

/// The guard of the codex provider.
pub(crate) const GUARD: AuthGuard = AuthGuard::new("codex", &[EnvRules::COMMON, EnvRules::CODEX], REFUSED_CONFIG);

/// Names always removed from the environment codex inherits under `Subscription`, whether or not
/// the host sets them (the host's other matching names are found by the same rules).
pub const SCRUBBED_UNDER_SUBSCRIPTION: &[&str] = &[
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "CODEX_MODEL_PROVIDER",
    "CODEX_OSS_BASE_URL",
    "CODEX_OSS_PROVIDER",
    "CODEX_PROVIDER_BACKEND",
];

/// The model provider a subscription session is pinned to: codex's built-in ChatGPT login.
pub(crate) const PINNED_MODEL_PROVIDER: &str = "openai";

/// The names to remove from the environment codex inherits, under `Subscription`.
pub(crate) fn scrubbed(options: &SessionOptions) -> Vec<OsString> {
    GUARD.scrubbed(options, SCRUBBED_UNDER_SUBSCRIPTION)
}

/// The `CODEX_HOME` codex would use: the environment's, else `~/.codex`.
pub(crate) fn codex_home(options: &SessionOptions) -> Option<PathBuf> {
    effective_env(options, "CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| effective_env(options, "HOME").map(|home| PathBuf::from(home).join(".codex")))
}

/// The config layers codex loads, lowest first: the system files, the user's, and the projects'
/// `.codex/config.toml` from the filesystem root down to the working directory.
fn config_layers(options: &SessionOptions, home: Option<&Path>) -> Vec<PathBuf> {
    let mut layers = vec![PathBuf::from("/etc/codex/config.toml"), PathBuf::from("/etc/codex/managed_config.toml")];
    layers.extend(home.map(|home| home.join("config.toml")));
    if let Some(cwd) = &options.cwd {
        let mut projects: Vec<PathBuf> = cwd.ancestors().map(|dir| dir.join(".codex/config.toml")).collect();
        projects.reverse();
        layers.extend(projects);
    }
    layers
}

/// Checks codex's own state under `Subscription`: no config layer routes it elsewhere and the
/// stored login is not an API key. Each refusal names the file and the setting, never a value.
pub(crate) fn check_local_state(options: &SessionOptions) -> Result<()> {
    if options.auth != AuthMode::Subscription {
        return Ok(());
    }
    let home = codex_home(options);
    for layer in config_layers(options, home.as_deref()) {
        let Some(text) = read(&layer)? else { continue };
        let config: toml::Table =
            toml::from_str(&text).map_err(|_| GUARD.refuse_file(&layer, "(a file codex cannot parse)"))?;
        if let Some(setting) = routing_setting(&config) {
            return Err(GUARD.refuse_file(&layer, &setting));
        }
    }
    if let Some(home) = home {
        let file = home.join("auth.json");
        if let Some(text) = read(&file)? {
            let login: Json =
                serde_json::from_str(&text).map_err(|_| GUARD.refuse_file(&file, "(a file codex cannot parse)"))?;
            if let Some(setting) = api_key_login(&login) {
                return Err(GUARD.refuse_file(&file, setting));
            }
        }
    }
    Ok(())
}

/// What the auth guard makes of this host for a codex session with `options` under
/// `AuthMode::Subscription`, and codex's saved login (`$CODEX_HOME/auth.json`, read without the
/// network): for reports such as `agent-harness doctor`. Names only, never values.
pub fn auth_report(options: &SessionOptions) -> AuthReport {
    let options = options.clone().auth(AuthMode::Subscription);
    let verdict = GUARD.check(&options, None, std::iter::empty()).and_then(|()| check_local_state(&options));
    let login = match codex_home(&options) {
        Some(home) => LoginState::from_json_file(home.join("auth.json"), |login| {
            if api_key_login(login).is_some() {
                Some("api_key".to_owned())
            } else {
                login.get("tokens").is_some_and(|t| t.is_object()).then(|| "chatgpt".to_owned())
            }
        }),
        None => LoginState::Unknown { reason: "neither CODEX_HOME nor HOME is set".into() },
    };
    AuthReport::new(verdict, &GUARD, login)
}

/// A file's text, `None` when it does not exist.
fn read(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(GUARD.refuse_file(path, &format!("(unreadable: {})", error.kind()))),
    }
}

/// The first setting of a config layer that selects another model provider, endpoint or login.
fn routing_setting(config: &toml::Table) -> Option<String> {
    let text = |key: &str| config.get(key).and_then(Toml::as_str);
    if text("model_provider").is_some_and(|p| p != PINNED_MODEL_PROVIDER) {
        return Some("model_provider".into());
    }
    for key in ["openai_base_url", "chatgpt_base_url", "oss_provider"] {
        if config.contains_key(key) {
            return Some(key.into());
        }
    }
    if text("forced_login_method").is_some_and(|m| m != "chatgpt") {
        return Some("forced_login_method".into());
    }
    if text("cli_auth_credentials_store").is_some_and(|s| s != "file") {
        // A keyring login cannot be inspected: it could be an API key.
        return Some("cli_auth_credentials_store".into());
    }
    if let Some(providers) = config.get("model_providers").and_then(Toml::as_table)
        && providers.contains_key(PINNED_MODEL_PROVIDER)
    {
        return Some(format!("model_providers.{PINNED_MODEL_PROVIDER}"));
    }
    let profile = text("profile")?;
    let selected = config.get("profiles").and_then(|p| p.get(profile)).and_then(Toml::as_table)?;
    routing_setting(selected).map(|setting| format!("profiles.{profile}.{setting}"))
}

/// The setting of a stored login that makes it an API-key login.
fn api_key_login(login: &Json) -> Option<&'static str> {
    if login.get("OPENAI_API_KEY").and_then(Json::as_str).is_some_and(|key| !key.trim().is_empty()) {
        return Some("OPENAI_API_KEY");
    }
    let mode = login.get("auth_mode").and_then(Json::as_str).map(|m| m.to_ascii_lowercase().replace(['_', '-'], ""));
    match mode.as_deref() {
        Some("apikey" | "bedrockapikey") => Some("auth_mode"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn config_layers_that_route_elsewhere_are_named() {
        let routed = [
            ("model_provider = \"mock\"", "model_provider"),
            ("openai_base_url = \"http://127.0.0.1:1\"", "openai_base_url"),
            ("forced_login_method = \"api\"", "forced_login_method"),
            ("cli_auth_credentials_store = \"keyring\"", "cli_auth_credentials_store"),
            ("[model_providers.openai]\nbase_url = \"http://x\"", "model_providers.openai"),
            ("profile = \"p\"\n[profiles.p]\nmodel_provider = \"mock\"", "profiles.p.model_provider"),
        ];
        for (text, setting) in routed {
            assert_eq!(routing_setting(&table(text)).as_deref(), Some(setting), "{text}");
        }
        let fine = [
            "model = \"gpt-5\"",
            "model_provider = \"openai\"",
            "[model_providers.mock]\nbase_url = \"http://x\"",
            "profile = \"p\"\n[profiles.p]\nmodel = \"o3\"",
            "cli_auth_credentials_store = \"file\"",
        ];
        for text in fine {
            assert_eq!(routing_setting(&table(text)), None, "{text}");
        }
    }

    #[test]
    fn api_key_logins_are_named() {
        let api = serde_json::json!({"OPENAI_API_KEY": "sk-sekrit", "tokens": null});
        assert_eq!(api_key_login(&api), Some("OPENAI_API_KEY"));
        assert_eq!(api_key_login(&serde_json::json!({"auth_mode": "ApiKey"})), Some("auth_mode"));
        let chatgpt = serde_json::json!({"OPENAI_API_KEY": null, "auth_mode": "chatgpt", "tokens": {"id_token": "x"}});
        assert_eq!(api_key_login(&chatgpt), None);
    }
}
