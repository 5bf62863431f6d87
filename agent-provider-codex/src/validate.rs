//! Checks of the options the provider cannot honour, the auth guard, and the child environment.

use std::collections::{BTreeMap, HashSet};

use agent_core::exec::EnvSpec;
use agent_core::{ApprovalPolicy, Error, McpServer, Result, SessionOptions};

use crate::options::CodexOptions;

/// Everything [`crate::CodexProvider`] checks before spawning.
pub(crate) fn validate(options: &SessionOptions, codex: &CodexOptions) -> Result<()> {
    if options.approval_policy == Some(ApprovalPolicy::OnFailure) {
        return Err(invalid(
            "approval_policy",
            "codex 0.171 has no `on-failure` approval policy; use OnRequest, Untrusted or Never",
        ));
    }
    validate_mcp_servers(options)?;
    validate_skills(options)?;
    validate_codex_options(codex)?;
    config_overrides(codex)?;
    auth_guard(options, codex)
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption { option, reason: reason.into() }
}

fn is_config_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_mcp_servers(options: &SessionOptions) -> Result<()> {
    for (name, server) in &options.mcp_servers {
        if !is_config_name(name) {
            return Err(invalid(
                "mcp_servers",
                format!("codex MCP server names may only contain letters, digits, `_` and `-`, got {name:?}"),
            ));
        }
        let names: Vec<&String> = match server {
            McpServer::Stdio { env, .. } => env.keys().collect(),
            McpServer::Http { headers, .. } => headers.keys().collect(),
            _ => return Err(invalid("mcp_servers", format!("server `{name}` uses a transport codex cannot express"))),
        };
        if names.iter().any(|k| k.is_empty() || k.contains(['\n', '\0'])) {
            return Err(invalid(
                "mcp_servers",
                format!("server `{name}` has an empty or malformed variable or header name"),
            ));
        }
    }
    Ok(())
}

fn validate_skills(options: &SessionOptions) -> Result<()> {
    let mut names = HashSet::new();
    for skill in &options.skills {
        if !skill.path.is_absolute() {
            return Err(invalid(
                "skills",
                format!("skill `{}` path must be absolute, got {}", skill.name, skill.path.display()),
            ));
        }
        if !names.insert(skill.name.as_str()) {
            return Err(invalid("skills", format!("skill `{}` is configured twice", skill.name)));
        }
    }
    Ok(())
}

fn validate_codex_options(codex: &CodexOptions) -> Result<()> {
    const OPTION: &str = "provider_options";
    if let Some(binary) = &codex.binary {
        let bare = binary.components().count() == 1 && !binary.as_os_str().is_empty();
        if !(binary.is_absolute() || bare) {
            return Err(invalid(
                OPTION,
                format!(
                    "CodexOptions::binary must be an absolute path or a bare program name, got {}",
                    binary.display()
                ),
            ));
        }
    }
    for (key, value) in &codex.config {
        if key.is_empty() || key.contains(['=', ' ', '\n']) || value.is_empty() {
            return Err(invalid(
                OPTION,
                format!("CodexOptions::config entry {key:?} needs a key without `=` and a value"),
            ));
        }
    }
    if codex.client_name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return Err(invalid(OPTION, "CodexOptions::client_name must not be empty"));
    }
    if codex.max_line_bytes < 1024 {
        return Err(invalid(OPTION, "CodexOptions::max_line_bytes must be at least 1024"));
    }
    Ok(())
}

/// The auth guard (DESIGN.md §6) on what the options say; the exec and codex's own state are
/// checked when the session opens ([`crate::auth`]).
fn auth_guard(options: &SessionOptions, codex: &CodexOptions) -> Result<()> {
    crate::auth::GUARD.check(options, None, codex.config.iter().map(|(key, _)| key.as_str()))
}

/// Every string in `overrides`, with the dotted path of keys it lies under (array items under
/// their array's path).
pub(crate) fn string_leaves(overrides: &BTreeMap<String, serde_json::Value>) -> Vec<(String, String)> {
    fn walk(path: &str, value: &serde_json::Value, leaves: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::String(text) => leaves.push((path.to_owned(), text.clone())),
            serde_json::Value::Array(items) => items.iter().for_each(|item| walk(path, item, leaves)),
            serde_json::Value::Object(map) => {
                map.iter().for_each(|(key, item)| walk(&format!("{path}.{key}"), item, leaves))
            }
            _ => {}
        }
    }
    let mut leaves = Vec::new();
    overrides.iter().for_each(|(key, value)| walk(key, value, &mut leaves));
    leaves
}

/// The `config` overrides of [`CodexOptions::config`] as JSON, for the thread's `config`: they
/// reach codex over its stdin, never on its command line. A value that is not TOML is refused.
pub(crate) fn config_overrides(codex: &CodexOptions) -> Result<BTreeMap<String, serde_json::Value>> {
    codex
        .config
        .iter()
        .map(|(key, value)| {
            let parsed: toml::Table = toml::from_str(&format!("value = {value}")).map_err(|_| {
                invalid(
                    "provider_options",
                    format!("CodexOptions::config `{}` needs a TOML value (strings in quotes)", key.escape_debug()),
                )
            })?;
            let json = serde_json::to_value(&parsed["value"]).map_err(|_| {
                invalid(
                    "provider_options",
                    format!("CodexOptions::config `{}` has a value JSON cannot hold", key.escape_debug()),
                )
            })?;
            Ok((key.trim().to_owned(), json))
        })
        .collect()
}

/// The child environment: the session's changes plus, under [`AuthMode::Subscription`], the
/// scrubbed variables.
pub(crate) fn env_spec(options: &SessionOptions) -> EnvSpec {
    let mut spec = EnvSpec::default();
    spec.set = options.env.set.iter().map(|(k, v)| (k.into(), v.into())).collect();
    spec.unset = options.env.unset.iter().map(Into::into).collect();
    spec.unset.extend(crate::auth::scrubbed(options));
    spec
}

#[cfg(test)]
mod tests {
    use agent_core::{AuthMode, Skill};

    use super::*;

    fn options() -> SessionOptions {
        SessionOptions::new(std::env::temp_dir()).auth(AuthMode::Inherit)
    }

    #[track_caller]
    fn invalid_option(options: SessionOptions, codex: CodexOptions, option: &str) {
        match validate(&options, &codex) {
            Err(Error::InvalidOption { option: got, .. }) => assert_eq!(got, option),
            other => panic!("expected invalid `{option}`, got {other:?}"),
        }
    }

    #[track_caller]
    fn refused(options: SessionOptions, codex: CodexOptions, name: &str) {
        match validate(&options, &codex) {
            Err(Error::AuthGuard { reason }) => {
                assert!(reason.contains(name), "{reason}");
                assert!(!reason.contains("sekrit"), "{reason}");
            }
            other => panic!("expected the auth guard to refuse `{name}`, got {other:?}"),
        }
    }

    #[test]
    fn options_codex_cannot_honour_are_named() {
        let none = CodexOptions::new;
        invalid_option(options().approval_policy(ApprovalPolicy::OnFailure), none(), "approval_policy");
        invalid_option(options().mcp_server("bad.name", McpServer::stdio("x", ["y"])), none(), "mcp_servers");
        invalid_option(options().skill(Skill::new("s", "rel/SKILL.md")), none(), "skills");
        invalid_option(
            options().skill(Skill::new("s", "/a/SKILL.md")).skill(Skill::new("s", "/b/SKILL.md")),
            none(),
            "skills",
        );
        invalid_option(options(), none().binary("bin/codex"), "provider_options");
        invalid_option(options(), none().config("a=b", "1"), "provider_options");
        invalid_option(options(), none().max_line_bytes(10), "provider_options");
        assert!(validate(&options().mcp_server("ok_name-1", McpServer::http("https://x")), &none()).is_ok());
        assert!(validate(&options(), &none().binary("codex")).is_ok());
    }

    #[test]
    fn subscription_refuses_keys_endpoints_and_cloud_overrides() {
        let sub = || SessionOptions::new(std::env::temp_dir());
        for name in ["OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL", "MOCK_API_KEY", "AZURE_OPENAI_ENDPOINT"] {
            refused(sub().env(name, "sekrit"), CodexOptions::new(), name);
        }
        for name in ["AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS", "openai_api_key"] {
            refused(sub().env(name, "sekrit"), CodexOptions::new(), name);
        }
        refused(sub(), CodexOptions::new().config("model_provider", "\"mock\""), "model_provider");
        refused(sub(), CodexOptions::new().config("model_providers.mock.base_url", "\"sekrit\""), "model_providers");
        assert!(validate(&sub().env("RUST_LOG", "warn").env("CODEX_HOME", "/x"), &CodexOptions::new()).is_ok());
        assert!(validate(&sub().env_remove("OPENAI_API_KEY"), &CodexOptions::new()).is_ok());
    }

    #[test]
    fn inherit_passes_everything_through() {
        let o = options().env("OPENAI_API_KEY", "k").env("MOCK_API_KEY", "k");
        assert!(validate(&o, &CodexOptions::new().config("model_provider", "\"mock\"")).is_ok());
        let spec = env_spec(&o);
        assert_eq!(spec.set.len(), 2);
        assert!(spec.unset.is_empty());
    }

    #[test]
    fn subscription_scrubs_inherited_keys() {
        let spec = env_spec(&SessionOptions::new(std::env::temp_dir()).env("RUST_LOG", "warn").env_remove("X"));
        assert_eq!(spec.set, vec![("RUST_LOG".into(), "warn".into())]);
        assert!(spec.unset.contains(&"X".into()));
        assert!(spec.unset.contains(&"OPENAI_API_KEY".into()));
        assert!(spec.unset.contains(&"CODEX_API_KEY".into()));
    }
}
