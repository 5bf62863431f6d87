//! The per-CLI config files and variables of an offline environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::{EnvError, FAKE_API_KEY, PiApi};
use crate::clis::{Cli, FAKE_MODEL as MODEL};
use crate::fake_model::FakeModel;

/// The directories of an environment.
pub(super) struct Layout {
    pub(super) home: PathBuf,
    pub(super) tmp: PathBuf,
    pub(super) workspace: PathBuf,
    codex_home: PathBuf,
    pi_agent: PathBuf,
}

impl Layout {
    pub(super) fn new(dir: &Path) -> Layout {
        Layout {
            home: dir.join("home"),
            tmp: dir.join("tmp"),
            workspace: dir.join("workspace"),
            // Outside TMPDIR: Codex refuses to create its helper links under the temp dir.
            codex_home: dir.join("codex-home"),
            pi_agent: dir.join("pi-agent"),
        }
    }

    pub(super) fn create(&self) -> Result<(), EnvError> {
        for dir in [&self.home, &self.tmp, &self.workspace] {
            std::fs::create_dir_all(dir).map_err(|source| EnvError::Io { path: dir.clone(), source })?;
        }
        Ok(())
    }
}

fn write(path: &Path, text: &str) -> Result<(), EnvError> {
    let io = |source| EnvError::Io { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, text).map_err(|source| EnvError::Io { path: path.to_path_buf(), source })
}

fn set(vars: &mut BTreeMap<String, String>, key: &str, value: impl Into<String>) {
    vars.insert(key.to_owned(), value.into());
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

pub(super) fn codex(
    layout: &Layout,
    cli: &Cli,
    server: &FakeModel,
    vars: &mut BTreeMap<String, String>,
) -> Result<(), EnvError> {
    // Top-level keys must come before the first table.
    let mut config = format!(
        "model = \"{MODEL}\"\nmodel_provider = \"fake\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n"
    );
    if let Some(catalog) = cli.model_catalog() {
        config += &format!("model_catalog_json = {}\n", toml_string(&catalog.display().to_string()));
    }
    config += &format!(
        "
[model_providers.fake]
name = \"Fake model\"
base_url = {}
wire_api = \"responses\"
env_key = \"FAKE_MODEL_API_KEY\"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 300000

[features]
plugins = false
unbounded_connection_retries = false

[analytics]
enabled = false
",
        toml_string(&server.openai_base_url())
    );
    write(&layout.codex_home.join("config.toml"), &config)?;
    set(vars, "CODEX_HOME", layout.codex_home.display().to_string());
    set(vars, "FAKE_MODEL_API_KEY", FAKE_API_KEY);
    Ok(())
}

pub(super) fn claude(layout: &Layout, server: &FakeModel, vars: &mut BTreeMap<String, String>) {
    set(vars, "CLAUDE_CONFIG_DIR", layout.home.join(".claude").display().to_string());
    set(vars, "ANTHROPIC_BASE_URL", server.base_url());
    set(vars, "ANTHROPIC_API_KEY", FAKE_API_KEY);
    set(vars, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    set(vars, "DISABLE_AUTOUPDATER", "1");
    set(vars, "DISABLE_TELEMETRY", "1");
    set(vars, "DISABLE_ERROR_REPORTING", "1");
    set(vars, "BUN_ENABLE_CRASH_REPORTING", "0");
    set(vars, "CLAUDE_CODE_MAX_RETRIES", "1");
}

/// The context window pi's fake models have, in tokens.
pub(super) const PI_CONTEXT_WINDOW: u64 = 128_000;

pub(super) fn pi(
    layout: &Layout,
    server: &FakeModel,
    api: PiApi,
    vars: &mut BTreeMap<String, String>,
    args: &mut Vec<String>,
) -> Result<(), EnvError> {
    let model = json!({"id": MODEL, "name": "Fake model", "contextWindow": PI_CONTEXT_WINDOW, "maxTokens": 4096});
    let models = json!({"providers": {
        "fake": {
            "baseUrl": server.openai_base_url(),
            "api": "openai-completions",
            "apiKey": "FAKE_MODEL_API_KEY",
            "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
            "models": [model],
        },
        "fake-resp": {
            "baseUrl": server.openai_base_url(),
            "api": "openai-responses",
            "apiKey": "FAKE_MODEL_API_KEY",
            "models": [model],
        },
    }});
    let provider = match api {
        PiApi::ChatCompletions => "fake",
        PiApi::Responses => "fake-resp",
    };
    let settings = json!({
        "defaultProvider": provider,
        "defaultModel": MODEL,
        "enableInstallTelemetry": false,
        "quietStartup": true,
        "retry": {"enabled": false, "provider": {"maxRetries": 0}},
    });
    write(&layout.pi_agent.join("models.json"), &models.to_string())?;
    write(&layout.pi_agent.join("settings.json"), &settings.to_string())?;
    set(vars, "PI_CODING_AGENT_DIR", layout.pi_agent.display().to_string());
    set(vars, "PI_OFFLINE", "1");
    set(vars, "PI_SKIP_VERSION_CHECK", "1");
    set(vars, "PI_TELEMETRY", "0");
    set(vars, "FAKE_MODEL_API_KEY", FAKE_API_KEY);
    args.extend(
        [
            "--model",
            &format!("{provider}/{MODEL}"),
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-context-files",
        ]
        .map(str::to_owned),
    );
    Ok(())
}
