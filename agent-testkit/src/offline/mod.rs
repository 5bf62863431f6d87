//! Offline environments: a private HOME (and `CODEX_HOME` / `CLAUDE_CONFIG_DIR` /
//! `PI_CODING_AGENT_DIR`) with the config files and variables that point a real CLI at a
//! [`FakeModel`] and stop outside traffic and endless retries.
//!
//! What each environment sets (measured in `shared/protocols/`):
//!
//! | | Codex | Claude Code | Pi |
//! |---|---|---|---|
//! | model endpoint | `config.toml` provider `fake`, `wire_api = "responses"` | `ANTHROPIC_BASE_URL` | `models.json` providers `fake` (Chat Completions) and `fake-resp` (Responses) |
//! | key | `FAKE_MODEL_API_KEY` | `ANTHROPIC_API_KEY` | `FAKE_MODEL_API_KEY` |
//! | outside traffic off | `features.plugins = false`, `analytics.enabled = false` | `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`, `DISABLE_AUTOUPDATER`, `DISABLE_TELEMETRY` | `PI_OFFLINE`, `PI_TELEMETRY=0`, `enableInstallTelemetry: false` |
//! | retries bounded | `request_max_retries = 0`, `stream_max_retries = 0`, `features.unbounded_connection_retries = false` | `CLAUDE_CODE_MAX_RETRIES=1` | `retry.enabled: false`, `retry.provider.maxRetries: 0` |
//!
//! Every environment also sets `HOME`, `TMPDIR` and the XDG directories inside its own
//! directory, puts the CLI's directories first on `PATH`, points `HTTP_PROXY` / `HTTPS_PROXY` /
//! `ALL_PROXY` at the server's [`RefusingProxy`](crate::proxy::RefusingProxy) with
//! `NO_PROXY=127.0.0.1,localhost`, and removes inherited variables that would change the
//! endpoint or credentials ([`REMOVED_VARS`]).

mod config;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use agent_core::{AuthMode, SessionOptions};

use crate::clis::{Cli, Provider};
use crate::fake_model::FakeModel;
use crate::scratch::ScratchDir;

/// Inherited variables an offline environment removes: they would send the CLI elsewhere or
/// authenticate it differently.
pub const REMOVED_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "PI_CODING_AGENT_SESSION_DIR",
    "NODE_OPTIONS",
];

/// The value of the API-key variables: the fake server accepts anything.
const FAKE_API_KEY: &str = "fake-model-key";

/// Which API Pi talks to the fake model with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PiApi {
    /// OpenAI Chat Completions (`api: "openai-completions"`, model `fake/fake-model`).
    #[default]
    ChatCompletions,
    /// OpenAI Responses (`api: "openai-responses"`, model `fake-resp/fake-model`).
    Responses,
}

/// Why an offline environment could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A directory or config file could not be created.
    #[error("cannot prepare the offline environment at {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A private environment in which one CLI runs against a fake model server. The directory is
/// removed when the value is dropped (see [`OfflineEnv::keep`]).
///
/// `Debug` lists variable names only.
pub struct OfflineEnv {
    provider: Provider,
    dir: ScratchDir,
    workspace: PathBuf,
    home: PathBuf,
    vars: BTreeMap<String, String>,
    args: Vec<String>,
}

/// Options of [`OfflineEnv`]; from [`OfflineEnv::builder`].
#[derive(Debug)]
pub struct OfflineEnvBuilder<'a> {
    cli: &'a Cli,
    server: &'a FakeModel,
    pi_api: PiApi,
    root: Option<PathBuf>,
}

impl<'a> OfflineEnvBuilder<'a> {
    /// Pi only: the API used (default Chat Completions).
    pub fn pi_api(mut self, api: PiApi) -> Self {
        self.pi_api = api;
        self
    }

    /// Creates the environment directory under `root` instead of the system temp directory.
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// Creates the directories and config files.
    pub fn build(self) -> Result<OfflineEnv, EnvError> {
        let root = self.root.clone().unwrap_or_else(std::env::temp_dir);
        let dir = ScratchDir::create(&root, &format!("agent-offline-{}", self.cli.provider()))
            .map_err(|source| EnvError::Io { path: root.clone(), source })?;
        let layout = config::Layout::new(dir.path());
        layout.create()?;
        let mut vars = self.common_vars(&layout);
        let mut args = Vec::new();
        match self.cli.provider() {
            Provider::Codex => config::codex(&layout, self.cli, self.server, &mut vars)?,
            Provider::Claude => config::claude(&layout, self.server, &mut vars),
            Provider::Pi => config::pi(&layout, self.server, self.pi_api, &mut vars, &mut args)?,
        }
        Ok(OfflineEnv {
            provider: self.cli.provider(),
            workspace: layout.workspace.clone(),
            home: layout.home.clone(),
            dir,
            vars,
            args,
        })
    }

    fn common_vars(&self, layout: &config::Layout) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        let mut set = |key: &str, value: String| {
            vars.insert(key.to_owned(), value);
        };
        let display = |path: &Path| path.display().to_string();
        set("HOME", display(&layout.home));
        set("TMPDIR", display(&layout.tmp));
        set("XDG_CONFIG_HOME", display(&layout.home.join(".config")));
        set("XDG_CACHE_HOME", display(&layout.home.join(".cache")));
        set("XDG_DATA_HOME", display(&layout.home.join(".local/share")));
        set("XDG_STATE_HOME", display(&layout.home.join(".local/state")));
        let inherited = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        let dirs = self.cli.path_dirs().iter().cloned().chain(std::env::split_paths(&inherited));
        let path = std::env::join_paths(dirs).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        set("PATH", path);
        let proxy = self.server.proxy().url();
        for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
            set(key, proxy.clone());
        }
        for key in ["NO_PROXY", "no_proxy"] {
            set(key, "127.0.0.1,localhost".to_owned());
        }
        vars
    }
}

impl OfflineEnv {
    /// An environment for `cli` talking to `server`, with default options.
    pub fn new(cli: &Cli, server: &FakeModel) -> Result<OfflineEnv, EnvError> {
        OfflineEnv::builder(cli, server).build()
    }

    /// Options for an environment for `cli` talking to `server`.
    pub fn builder<'a>(cli: &'a Cli, server: &'a FakeModel) -> OfflineEnvBuilder<'a> {
        OfflineEnvBuilder { cli, server, pi_api: PiApi::default(), root: None }
    }

    /// The provider the environment is for.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The environment's directory (everything below is removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The first file found under the environment's directory whose name ends with `suffix`
    /// (`<conversation>.jsonl`): where the CLI kept a conversation, for tests that read or
    /// damage it.
    pub fn find_file(&self, suffix: &str) -> Option<PathBuf> {
        fn under(dir: &Path, suffix: &str) -> Option<PathBuf> {
            std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
                let path = entry.path();
                match entry.file_type().ok()?.is_dir() {
                    true => under(&path, suffix),
                    false => entry.file_name().to_string_lossy().ends_with(suffix).then_some(path),
                }
            })
        }
        under(self.dir(), suffix)
    }

    /// An empty directory to run the CLI in (its working directory).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The private HOME.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The variables to set, by name.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// One variable.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Turns pi's own auto-retry on (the environment has it off), `max_retries` times after
    /// `base_delay_ms` doubling; retries of the model request inside pi's provider stay off.
    /// Panics for an environment that is not pi's.
    #[track_caller]
    pub fn pi_retries(&self, max_retries: u32, base_delay_ms: u64) {
        let retry = serde_json::json!({
            "enabled": true, "maxRetries": max_retries, "baseDelayMs": base_delay_ms, "provider": {"maxRetries": 0}
        });
        self.pi_setting("retry", retry);
    }

    /// Makes pi compact its context after any reply: the threshold is a few tokens under the
    /// fake model's context window (the fake server reports a handful of tokens per request),
    /// and at most `keep_recent_tokens` of the newest messages are kept out of the summary.
    /// Panics for an environment that is not pi's.
    #[track_caller]
    pub fn pi_compact_always(&self, keep_recent_tokens: u64) {
        let compaction = serde_json::json!({
            "enabled": true, "reserveTokens": config::PI_CONTEXT_WINDOW - 5, "keepRecentTokens": keep_recent_tokens
        });
        self.pi_setting("compaction", compaction);
    }

    /// Keeps at most `keep_recent_tokens` of the newest messages out of pi's compaction summary
    /// (with the fake server's short messages, pi otherwise has nothing to summarize), at pi's
    /// own compaction threshold. Panics for an environment that is not pi's.
    #[track_caller]
    pub fn pi_keep_recent_tokens(&self, keep_recent_tokens: u64) {
        self.pi_setting("compaction", serde_json::json!({"enabled": true, "keepRecentTokens": keep_recent_tokens}));
    }

    /// Sets the top-level `key` of pi's `settings.json`. Panics for an environment that is not
    /// pi's.
    #[track_caller]
    pub fn pi_setting(&self, key: &str, value: serde_json::Value) {
        let dir = self.var("PI_CODING_AGENT_DIR").expect("a pi environment");
        let file = Path::new(dir).join("settings.json");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut settings: serde_json::Value = serde_json::from_str(&text).expect("pi's settings are JSON");
        settings[key] = value;
        std::fs::write(&file, settings.to_string()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }

    /// Arguments the CLI needs offline, after its leading args (Pi: the model and the flags
    /// that keep out the host's extensions, skills, templates and context files).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// `cli` with a cleared environment plus [`OfflineEnv::vars`], run in the workspace, with
    /// [`OfflineEnv::args`] appended; add the protocol flags (`app-server`, `-p ...`, `--mode rpc`).
    pub fn command(&self, cli: &Cli) -> std::process::Command {
        let mut command = cli.command();
        command.env_clear().envs(&self.vars).current_dir(&self.workspace).args(&self.args);
        command
    }

    /// Session options for this environment: the workspace as `cwd`, every variable set,
    /// [`REMOVED_VARS`] removed, and `auth(AuthMode::Inherit)` so the fake key and endpoint pass
    /// the auth guard.
    pub fn session_options(&self) -> SessionOptions {
        let options = SessionOptions::new(&self.workspace).auth(AuthMode::Inherit);
        let options = self.vars.iter().fold(options, |options, (key, value)| options.env(key, value));
        REMOVED_VARS.iter().fold(options, |options, key| options.env_remove(*key))
    }

    /// Keeps the directory after drop (to look at logs and sessions); returns its path.
    pub fn keep(&mut self) -> PathBuf {
        self.dir.keep()
    }
}

impl fmt::Debug for OfflineEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfflineEnv")
            .field("provider", &self.provider)
            .field("dir", &self.dir.path())
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn fake_cli(provider: Provider, catalog: Option<&str>) -> Cli {
        Cli::for_tests(
            provider,
            PathBuf::from("/opt/cli/bin/cli"),
            vec![PathBuf::from("/opt/cli/bin")],
            catalog.map(PathBuf::from),
        )
    }

    #[tokio::test]
    async fn codex_config_points_at_the_server_and_turns_off_outside_traffic() {
        let server = FakeModel::start(Scenario::new()).await.unwrap();
        let cli = fake_cli(Provider::Codex, Some("/opt/cli/catalog.json"));
        let env = OfflineEnv::new(&cli, &server).unwrap();
        let codex_home = PathBuf::from(env.var("CODEX_HOME").unwrap());
        let config: toml::Table =
            toml::from_str(&std::fs::read_to_string(codex_home.join("config.toml")).unwrap()).unwrap();
        assert_eq!(config["model"].as_str(), Some("fake-model"));
        assert_eq!(config["model_catalog_json"].as_str(), Some("/opt/cli/catalog.json"));
        let provider = &config["model_providers"]["fake"];
        assert_eq!(provider["base_url"].as_str(), Some(server.openai_base_url().as_str()));
        assert_eq!(provider["request_max_retries"].as_integer(), Some(0));
        assert_eq!(config["features"]["plugins"].as_bool(), Some(false));
        assert_eq!(config["features"]["unbounded_connection_retries"].as_bool(), Some(false));
        assert!(!codex_home.starts_with(env.var("TMPDIR").unwrap()));
        assert!(env.var("PATH").unwrap().starts_with("/opt/cli/bin:"));
        assert_eq!(env.var("HTTPS_PROXY"), Some(server.proxy().url().as_str()));
        assert_eq!(env.var("NO_PROXY"), Some("127.0.0.1,localhost"));
        assert!(env.args().is_empty());
    }

    #[tokio::test]
    async fn session_options_carry_cwd_env_and_inherit_auth() {
        let server = FakeModel::start(Scenario::new()).await.unwrap();
        let env = OfflineEnv::new(&fake_cli(Provider::Claude, None), &server).unwrap();
        let options = env.session_options();
        assert_eq!(options.cwd.as_deref(), Some(env.workspace()));
        assert_eq!(options.auth, AuthMode::Inherit);
        assert_eq!(options.env.set.get("ANTHROPIC_BASE_URL"), Some(&server.base_url()));
        assert_eq!(options.env.set.get("HOME").map(PathBuf::from).as_deref(), Some(env.home()));
        assert!(REMOVED_VARS.iter().all(|v| options.env.unset.iter().any(|u| u == v)));
        assert!(options.validate().is_ok());
        let debug = format!("{env:?}");
        assert!(debug.contains("ANTHROPIC_API_KEY") && !debug.contains(FAKE_API_KEY), "{debug}");
    }

    #[tokio::test]
    async fn pi_settings_select_the_fake_provider_and_the_directory_goes_away() {
        let server = FakeModel::start(Scenario::new()).await.unwrap();
        let cli = fake_cli(Provider::Pi, None);
        let env = OfflineEnv::builder(&cli, &server).pi_api(PiApi::Responses).build().unwrap();
        let agent_dir = PathBuf::from(env.var("PI_CODING_AGENT_DIR").unwrap());
        let settings: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(agent_dir.join("settings.json")).unwrap()).unwrap();
        assert_eq!(settings["defaultProvider"], "fake-resp");
        assert_eq!(settings["retry"]["enabled"], false);
        env.pi_retries(2, 50);
        let retried: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(agent_dir.join("settings.json")).unwrap()).unwrap();
        assert_eq!(
            (retried["retry"]["enabled"].clone(), retried["retry"]["maxRetries"].clone()),
            (true.into(), 2.into())
        );
        assert_eq!(retried["defaultProvider"], "fake-resp", "the rest is kept");
        let models: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(agent_dir.join("models.json")).unwrap()).unwrap();
        assert_eq!(models["providers"]["fake-resp"]["baseUrl"], server.openai_base_url());
        assert_eq!(env.args()[..2], ["--model", "fake-resp/fake-model"]);
        let dir = env.dir().to_path_buf();
        drop(env);
        assert!(!dir.exists());
    }
}
