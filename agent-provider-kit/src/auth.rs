//! The auth guard every provider applies under [`AuthMode::Subscription`] (see the crate docs).
//!
//! A provider declares its [`AuthGuard`] once — the environment names and configuration keys
//! that would route its CLI to another account, key or endpoint — and calls it before spawning
//! anything. Names and keys are compared after normalising them the way a CLI (or a shell, or a
//! lenient parser) might read them, so whitespace or case variants cannot slip past.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use agent_core::{AuthMode, Error, Exec, Result, SessionOptions};

/// Environment names that carry a credential, an endpoint or a cloud-provider selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvRules {
    /// Exact names.
    pub names: &'static [&'static str],
    /// Name prefixes.
    pub prefixes: &'static [&'static str],
    /// Name suffixes.
    pub suffixes: &'static [&'static str],
}

impl EnvRules {
    /// The rules every provider shares: keys and endpoints of any model provider, and the
    /// credentials and selectors of the cloud providers the CLIs can route through.
    pub const COMMON: EnvRules = EnvRules {
        names: &[
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GOOGLE_CLOUD_PROJECT",
            "GOOGLE_CLOUD_LOCATION",
            "GCLOUD_PROJECT",
            "CLOUDSDK_CORE_PROJECT",
            "CLOUD_ML_REGION",
        ],
        prefixes: &["AWS_", "AZURE_", "VERTEX_", "BEDROCK_"],
        suffixes: &["_API_KEY", "_BASE_URL", "_API_BASE", "_AUTH_TOKEN"],
    };

    /// Codex's own environment names that select a provider, an endpoint or an organisation.
    ///
    /// The shipped `codex-exec` preset lists at least these in its `auth_env`.
    pub const CODEX: EnvRules = EnvRules {
        names: &[
            "CODEX_MODEL_PROVIDER",
            "CODEX_OSS_PROVIDER",
            "CODEX_PROVIDER_BACKEND",
            "OPENAI_ORGANIZATION",
            "OPENAI_ORG_ID",
            "OPENAI_PROJECT",
            "OPENAI_PROJECT_ID",
            "OLLAMA_HOST",
        ],
        prefixes: &[],
        suffixes: &[],
    };

    /// Claude Code's own environment names that select an API key, a token, an endpoint or a
    /// cloud: every `ANTHROPIC_*` name (keys, endpoints, custom headers, a Unix socket, identity
    /// tokens), and the `CLAUDE_CODE_*` names of Claude Code 2.1 that pass a credential or pick a
    /// cloud or gateway. A token in the environment is not the CLI's saved login: passing one on is
    /// proxying a credential, which `AuthMode::Inherit` opts into.
    ///
    /// The shipped `claude-print` preset lists at least these in its `auth_env`.
    pub const CLAUDE: EnvRules = EnvRules {
        names: &[
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR",
            "CLAUDE_CODE_OAUTH_REFRESH_TOKEN",
            "CLAUDE_CODE_SESSION_ACCESS_TOKEN",
            "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
            "CLAUDE_CODE_WEBSOCKET_AUTH_FILE_DESCRIPTOR",
            "CLAUDE_CODE_API_KEY_HELPER_TTL_MS",
            "CLAUDE_CODE_CUSTOM_OAUTH_URL",
            "CLAUDE_CODE_HOST_AUTH_ENV_VAR",
            "CLAUDE_CODE_PROVIDER_MANAGED_BY_HOST",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "CLAUDE_CODE_USE_FOUNDRY",
            "CLAUDE_CODE_USE_MANTLE",
            "CLAUDE_CODE_USE_GATEWAY",
            "CLAUDE_CODE_USE_ANTHROPIC_AWS",
            "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
            "CLAUDE_CODE_SKIP_VERTEX_AUTH",
            "CLAUDE_CODE_SKIP_FOUNDRY_AUTH",
            "CLAUDE_CODE_SKIP_MANTLE_AUTH",
            "CLAUDE_CODE_SKIP_ANTHROPIC_AWS_AUTH",
        ],
        prefixes: &["ANTHROPIC_"],
        suffixes: &[],
    };

    /// Pi's own environment names that move its configuration (models, keys) elsewhere, and the
    /// credentials and selectors pi reads (`pi --help`) that the common rules do not name.
    ///
    /// The shipped `pi-print` preset lists at least these in its `auth_env`.
    pub const PI: EnvRules = EnvRules {
        names: &["PI_CODING_AGENT_DIR", "ANTHROPIC_OAUTH_TOKEN", "COPILOT_GITHUB_TOKEN"],
        prefixes: &["CLOUDFLARE_"],
        suffixes: &[],
    };

    /// True when `name`, normalised ([`normalize_env_name`]), matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = normalize_env_name(name);
        self.names.contains(&name.as_str())
            || self.prefixes.iter().any(|p| name.starts_with(p))
            || self.suffixes.iter().any(|s| name.ends_with(s))
    }
}

/// The value of `name` in the environment a local CLI would run with: the session's setting,
/// unless the session removes it, else this process's (an empty value counts as unset).
pub fn effective_env(options: &SessionOptions, name: &str) -> Option<OsString> {
    // A local exec applies the removals after the settings.
    if options.env.unset.iter().any(|n| n == name) {
        return None;
    }
    if let Some(value) = options.env.set.get(name) {
        return Some(value.into());
    }
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A command-line argument as a config key for [`AuthGuard::check`], when it is a long flag:
/// `--provider` and `--provider=x` → `provider`; anything else → `None`.
///
/// ```
/// use agent_provider_kit::auth::flag_key;
///
/// assert_eq!(flag_key("--api-key=sk"), Some("api-key"));
/// assert_eq!(flag_key("--settings"), Some("settings"));
/// assert_eq!(flag_key("-p"), None);
/// ```
pub fn flag_key(arg: &str) -> Option<&str> {
    let flag = arg.strip_prefix("--")?;
    Some(flag.split('=').next().unwrap_or(flag))
}

/// An environment name as the guard compares it: trimmed and in ASCII upper case.
pub fn normalize_env_name(name: &str) -> String {
    name.trim().to_ascii_uppercase()
}

/// A configuration key as a TOML-reading CLI resolves it: dotted segments, each trimmed and
/// unquoted (`"model_providers" . 'x'` is `model_providers.x`), in lower case.
pub fn config_key_path(key: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut segment = String::new();
    let mut quote = None;
    for c in key.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => segment.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '.') => segments.push(std::mem::take(&mut segment)),
            (None, c) => segment.push(c),
        }
    }
    segments.push(segment);
    segments.into_iter().map(|s| s.trim().to_lowercase()).collect()
}

/// One provider's guard.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AuthGuard {
    cli: &'static str,
    env: &'static [EnvRules],
    config_keys: &'static [&'static str],
}

impl AuthGuard {
    /// The guard of `cli`: the environment rules it refuses (usually [`EnvRules::COMMON`] plus
    /// the CLI's own names) and the dotted configuration keys that route it elsewhere.
    pub const fn new(cli: &'static str, env: &'static [EnvRules], config_keys: &'static [&'static str]) -> Self {
        AuthGuard { cli, env, config_keys }
    }

    /// True when the guard applies to `options` (`AuthMode::Subscription`).
    pub fn applies(options: &SessionOptions) -> bool {
        options.auth == AuthMode::Subscription
    }

    /// True when the environment name `name` is refused.
    pub fn refuses_env(&self, name: &str) -> bool {
        self.env.iter().any(|rules| rules.matches(name))
    }

    /// The refused configuration key that `key` sets (itself, or a table holding one), if any.
    pub fn refused_config_key(&self, key: &str) -> Option<&'static str> {
        let path = config_key_path(key);
        self.config_keys.iter().copied().find(|refused| {
            let refused: Vec<&str> = refused.split('.').collect();
            let shared = path.len().min(refused.len());
            path[..shared].iter().map(String::as_str).eq(refused[..shared].iter().copied())
        })
    }

    /// Checks a session under `AuthMode::Subscription` (and does nothing under `Inherit`): its
    /// environment, the configuration keys it overrides, and the exec it runs on.
    pub fn check<'k>(
        &self,
        options: &SessionOptions,
        exec: Option<&dyn Exec>,
        config_keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<()> {
        if !Self::applies(options) {
            return Ok(());
        }
        if let Some(name) = options.env.set.keys().find(|name| self.refuses_env(name)) {
            return Err(self.refusal(format!(
                "the session environment variable `{}` (an API key, endpoint or cloud-provider setting)",
                name.escape_debug()
            )));
        }
        for key in config_keys {
            if let Some(refused) = self.refused_config_key(key) {
                return Err(self.refusal(format!(
                    "the {} configuration override `{}` (it sets `{refused}`, which selects another model provider, \
                     endpoint or login)",
                    self.cli,
                    key.escape_debug()
                )));
            }
        }
        if let Some(exec) = exec
            && !exec.is_local()
        {
            return Err(self.refusal(format!(
                "running {} through an exec that is not local ({exec:?}): the guard can only verify this host's \
                 environment, configuration and login",
                self.cli
            )));
        }
        Ok(())
    }

    /// The names among `host` (the environment the CLI would inherit) to remove from it.
    pub fn scrub(&self, host: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
        host.into_iter().filter(|name| self.refuses_env(&name.to_string_lossy())).collect()
    }

    /// The names of this process's environment to remove from a local CLI's.
    pub fn scrub_host(&self) -> Vec<OsString> {
        self.scrub(std::env::vars_os().map(|(name, _)| name))
    }

    /// The names to remove from the environment the CLI inherits: none unless the guard
    /// [applies](AuthGuard::applies); then `own` (the CLI's names, removed whether the host sets
    /// them or not) and the [host's](AuthGuard::scrub_host) refused names, each once.
    pub fn scrubbed(&self, options: &SessionOptions, own: &[&str]) -> Vec<OsString> {
        if !AuthGuard::applies(options) {
            return Vec::new();
        }
        let mut names: Vec<OsString> = own.iter().map(OsString::from).collect();
        for name in self.scrub_host() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// A refusal of `setting` found in the CLI's own configuration or login `file`.
    pub fn refuse_file(&self, file: &Path, setting: &str) -> Error {
        self.refusal(format!("`{setting}` in {} ({} configuration the session would use)", file.display(), self.cli))
    }

    /// A refusal of `what`, saying how to opt in.
    pub fn refusal(&self, what: String) -> Error {
        Error::AuthGuard {
            reason: format!(
                "AuthMode::Subscription runs {} on its own saved login and refuses {what}; use AuthMode::Inherit to \
                 allow it",
                self.cli
            ),
        }
    }
}

impl fmt::Debug for AuthGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthGuard").field("cli", &self.cli).finish_non_exhaustive()
    }
}

/// A CLI's saved login, as far as its files on this host tell without the network. Never holds
/// a credential: only how the CLI is logged in and where that is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoginState {
    /// A saved login: how (`chatgpt`, `api_key`, `claude.ai`, or pi's providers) and the file
    /// holding it.
    Found {
        /// How the CLI is logged in.
        method: String,
        /// The file that says so.
        file: PathBuf,
    },
    /// No saved login where the CLI keeps it.
    Missing {
        /// Where the CLI keeps it.
        file: PathBuf,
    },
    /// The files do not tell (no home directory, an unreadable or unparsable file): why.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl LoginState {
    /// The login state a JSON login file at `file` gives: `Missing` when it does not exist,
    /// `Unknown` when it cannot be read or parsed, else what `method` finds in it (`None`:
    /// no login in it).
    pub fn from_json_file(file: PathBuf, method: impl FnOnce(&serde_json::Value) -> Option<String>) -> LoginState {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return LoginState::Missing { file },
            Err(error) => {
                return LoginState::Unknown { reason: format!("{} cannot be read: {}", file.display(), error.kind()) };
            }
        };
        match serde_json::from_str(&text) {
            Ok(json) => match method(&json) {
                Some(method) => LoginState::Found { method, file },
                None => LoginState::Missing { file },
            },
            Err(_) => LoginState::Unknown { reason: format!("{} is not JSON", file.display()) },
        }
    }
}

/// What the auth guard makes of this host for one CLI: for reports such as `agent-harness
/// doctor`. Names settings, files and variables, never their values.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthReport {
    /// Why a session with these options would be refused under `AuthMode::Subscription` (the
    /// guard's text: the file and setting, or the variable's name); `None` when it is allowed.
    pub refused: Option<String>,
    /// The names in this process's environment that are removed from the CLI's under
    /// `AuthMode::Subscription` (keys, endpoints, cloud selectors); `AuthMode::Inherit` passes
    /// them through.
    pub removed_env: Vec<String>,
    /// The CLI's saved login.
    pub login: LoginState,
}

impl AuthReport {
    /// A report from the guard's verdict on a subscription session, the guard (for the host
    /// names it removes) and the login state.
    pub fn new(verdict: Result<()>, guard: &AuthGuard, login: LoginState) -> Self {
        let refused = verdict.err().map(|error| match error {
            Error::AuthGuard { reason } => reason,
            other => other.to_string(),
        });
        let mut removed_env: Vec<String> =
            guard.scrub_host().into_iter().map(|name| name.to_string_lossy().into_owned()).collect();
        removed_env.sort();
        AuthReport { refused, removed_env, login }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARD: AuthGuard = AuthGuard::new(
        "testcli",
        &[EnvRules::COMMON, EnvRules { names: &["TESTCLI_HOME_OVERRIDE"], prefixes: &[], suffixes: &[] }],
        &["model_provider", "model_providers", "profiles"],
    );

    fn subscription() -> SessionOptions {
        SessionOptions::new(std::env::temp_dir())
    }

    #[track_caller]
    fn refused(result: Result<()>, named: &str) {
        match result {
            Err(Error::AuthGuard { reason }) => {
                assert!(reason.contains(named), "{reason}");
                assert!(reason.contains("AuthMode::Inherit"), "{reason}");
                assert!(!reason.contains("sekrit"), "{reason}");
            }
            other => panic!("expected a refusal naming {named}, got {other:?}"),
        }
    }

    #[test]
    fn names_are_compared_as_a_lenient_reader_would_read_them() {
        for name in [
            "OPENAI_API_KEY",
            " openai_api_key",
            "OpenAI_Api_Key\t",
            "AZURE_OPENAI_ENDPOINT",
            "aws_profile",
            "ANTHROPIC_BASE_URL",
            "OPENAI_API_BASE",
            "ANTHROPIC_AUTH_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "testcli_home_override",
        ] {
            assert!(GUARD.refuses_env(name), "{name:?}");
            refused(GUARD.check(&subscription().env(name, "sekrit"), None, []), name.trim());
        }
        for name in ["RUST_LOG", "PATH", "HOME", "API_KEYS_DIR", "MY_KEY"] {
            assert!(!GUARD.refuses_env(name), "{name:?}");
        }
    }

    #[test]
    fn scrubbed_names_start_with_the_clis_own_and_come_once() {
        assert!(GUARD.scrubbed(&subscription().auth(AuthMode::Inherit), &["TESTCLI_HOME_OVERRIDE"]).is_empty());
        let names = GUARD.scrubbed(&subscription(), &["TESTCLI_HOME_OVERRIDE", "OPENAI_API_KEY"]);
        assert_eq!(names[..2], [OsString::from("TESTCLI_HOME_OVERRIDE"), OsString::from("OPENAI_API_KEY")]);
        for (i, name) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(name), "{name:?} twice");
        }
        assert_eq!(GUARD.scrubbed(&subscription(), &[]), GUARD.scrub_host());
    }

    #[test]
    fn the_effective_env_is_the_sessions_then_this_processs() {
        let host = std::env::var_os("PATH").filter(|v| !v.is_empty());
        assert!(host.is_some(), "the test needs PATH set");
        assert_eq!(effective_env(&subscription(), "PATH"), host);
        assert_eq!(effective_env(&subscription().env("PATH", "/x"), "PATH"), Some("/x".into()));
        let mut removed = subscription();
        removed.env.unset.push("PATH".into());
        assert_eq!(effective_env(&removed, "PATH"), None);
        // Set and removed: removed, as a local exec applies removals last.
        let mut both = subscription().env("PATH", "/x");
        both.env.unset.push("PATH".into());
        assert_eq!(effective_env(&both, "PATH"), None);
    }

    #[test]
    fn config_keys_are_read_segment_by_segment() {
        assert_eq!(config_key_path("\tmodel_provider "), ["model_provider"]);
        assert_eq!(config_key_path(r#" "model_providers" . 'x'.base_url"#), ["model_providers", "x", "base_url"]);
        assert_eq!(config_key_path("Model_Provider"), ["model_provider"]);
        for key in ["\tmodel_provider", "model_providers.x.base_url", "\tmodel_providers.x.base_url", "\"profiles\".p"]
        {
            assert!(GUARD.refused_config_key(key).is_some(), "{key:?}");
            refused(GUARD.check(&subscription(), None, [key]), &key.escape_debug().to_string());
        }
        for key in ["model_reasoning_effort", "model", "model_provider_notes", "features.x"] {
            assert_eq!(GUARD.refused_config_key(key), None, "{key:?}");
        }
    }

    #[test]
    fn inherit_lets_everything_through() {
        let inherit = subscription().auth(AuthMode::Inherit).env("OPENAI_API_KEY", "sekrit");
        assert!(GUARD.check(&inherit, None, ["model_provider"]).is_ok());
    }

    #[test]
    fn the_host_environment_is_scrubbed_by_the_same_rules() {
        let host = ["PATH", "AZURE_OPENAI_API_KEY", " openai_base_url", "HOME", "AWS_REGION"].map(OsString::from);
        let scrubbed = GUARD.scrub(host);
        assert_eq!(scrubbed, ["AZURE_OPENAI_API_KEY", " openai_base_url", "AWS_REGION"].map(OsString::from));
    }
}
