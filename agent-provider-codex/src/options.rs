//! Codex-specific session and turn options, read from the typed provider-option slots.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use agent_core::config::provider_options_from_json;
use agent_core::{ProviderId, ProviderOptions, Result};
use serde::Deserialize;
use serde_json::Value;

/// The program run when [`CodexOptions::binary`] is not set: `codex`, looked up on `PATH`.
pub const DEFAULT_PROGRAM: &str = "codex";

/// The `clientInfo.name` sent in `initialize` by default. Codex reports it to the model server
/// as the `originator` header and records it on threads.
pub const DEFAULT_CLIENT_NAME: &str = "agent_harness";

/// Longest stdout line the provider accepts by default; longer lines are dropped with a
/// `warning` event.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Codex options of one session. Set with
/// [`SessionOptions::provider_option`](agent_core::SessionOptions::provider_option), which
/// replaces any set before; to change some fields and keep the rest (a `binary` a config or a
/// preset chose), use
/// [`SessionOptions::update_provider_option`](agent_core::SessionOptions::update_provider_option):
/// `options.update_provider_option(|codex: &mut CodexOptions| codex.questions = false)`.
///
/// In a [`SessionConfig`](agent_core::SessionConfig), `provider_options` holds them as JSON,
/// merged into those already set: each field given replaces its value, `config` entries are
/// added (replacing an entry with the same key), and fields left out keep theirs. Unknown
/// fields, including another provider's options, are refused.
///
/// ```json
/// {
///     "binary": "/opt/codex/bin/codex",
///     "config": { "model_reasoning_effort": "\"high\"" },
///     "client_name": "my_app",
///     "experimental_api": false,
///     "unbounded_connection_retries": false,
///     "questions": true,
///     "max_line_bytes": 16777216
/// }
/// ```
///
/// ```
/// use agent_core::SessionOptions;
/// use agent_provider_codex::CodexOptions;
///
/// let options = SessionOptions::new(std::env::temp_dir()).provider_option(
///     CodexOptions::new()
///         .binary("/opt/codex/bin/codex")
///         .config("model_reasoning_effort", "\"high\""),
/// );
/// # let _ = options;
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct CodexOptions {
    /// The `codex` executable: an absolute path or a bare name looked up on `PATH`.
    /// Default [`DEFAULT_PROGRAM`]. Point it at the native binary (see
    /// [`CodexOptions::npm_native_binary`]) to skip the Node launcher.
    pub binary: Option<PathBuf>,
    /// Config overrides (`key`, TOML `value`), applied like codex's `-c key=value` but sent in
    /// the thread's `config` over stdin, so values never appear on a command line. They apply
    /// to the thread: a key codex reads when its process starts, such as `features.plugins`
    /// (its sync starts before the first thread), does not take effect this way; give such a
    /// key in codex's `config.toml` (`CODEX_HOME`).
    pub config: Vec<(String, String)>,
    /// `clientInfo.name` for `initialize`; default [`DEFAULT_CLIENT_NAME`].
    pub client_name: Option<String>,
    /// Opt into Codex's experimental app-server API (`capabilities.experimentalApi`).
    pub experimental_api: bool,
    /// Keep Codex's default of retrying an unreachable model server forever. By default the
    /// provider passes `-c features.unbounded_connection_retries=false`, so such a turn fails
    /// with Codex's reason instead of never ending.
    pub unbounded_connection_retries: bool,
    /// Let the agent ask questions (`request_user_input`) outside plan mode. On by default: the
    /// provider passes `-c features.default_mode_request_user_input=true` (a codex feature
    /// marked under development, hence the `questions` capability is experimental) and
    /// `-c suppress_unstable_features_warning=true` (codex's warning about it says nothing a
    /// caller can act on).
    pub questions: bool,
    /// Longest stdout line accepted; default [`DEFAULT_MAX_LINE_BYTES`]. Also the most bytes of
    /// a streamed message's text the provider keeps for the turn's result in case the turn ends
    /// before the message completes (`item/completed` brings the whole text otherwise, in one
    /// line within this bound); a longer one is cut, with a `warning` event.
    pub max_line_bytes: usize,
}

impl Default for CodexOptions {
    fn default() -> Self {
        CodexOptions {
            binary: None,
            config: Vec::new(),
            client_name: None,
            experimental_api: false,
            unbounded_connection_retries: false,
            questions: true,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

impl CodexOptions {
    /// Default options: `codex` on `PATH`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs this executable.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Adds a config override (`value` is TOML, e.g. `"\"high\""` or `false`), sent in the
    /// thread's `config` (never on the command line).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// Sets `clientInfo.name`.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Opts into the experimental app-server API.
    pub fn experimental_api(mut self, enabled: bool) -> Self {
        self.experimental_api = enabled;
        self
    }

    /// Keeps Codex's unbounded connection retries (see the field).
    pub fn unbounded_connection_retries(mut self, enabled: bool) -> Self {
        self.unbounded_connection_retries = enabled;
        self
    }

    /// Lets the agent ask questions outside plan mode (see the field).
    pub fn questions(mut self, enabled: bool) -> Self {
        self.questions = enabled;
        self
    }

    /// Sets the longest accepted stdout line, and the most text kept of an unfinished message
    /// (see [`CodexOptions::max_line_bytes`](#structfield.max_line_bytes)).
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// The native `codex` binary inside an npm install of `@openai/codex` under `npm_prefix`
    /// (the `--prefix` given to npm), for the platform this library was built for; `None` on
    /// platforms Codex does not ship.
    pub fn npm_native_binary(npm_prefix: impl AsRef<Path>) -> Option<PathBuf> {
        let (package, triple) = native_target()?;
        let exe = if cfg!(windows) { "codex.exe" } else { "codex" };
        Some(
            npm_prefix
                .as_ref()
                .join("node_modules/@openai")
                .join(package)
                .join("vendor")
                .join(triple)
                .join("bin")
                .join(exe),
        )
    }

    /// The program to spawn.
    pub(crate) fn program(&self) -> OsString {
        self.binary.as_ref().map_or_else(|| OsString::from(DEFAULT_PROGRAM), |p| p.clone().into_os_string())
    }

    /// The `clientInfo.name` to send.
    pub(crate) fn client_name_or_default(&self) -> &str {
        self.client_name.as_deref().unwrap_or(DEFAULT_CLIENT_NAME)
    }
}

/// The JSON form of [`CodexOptions`] in a config's `provider_options`: every field optional, so
/// only the fields given change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodexOptionsJson {
    binary: Option<PathBuf>,
    /// TOML values by key, like [`CodexOptions::config`].
    config: Option<BTreeMap<String, String>>,
    client_name: Option<String>,
    experimental_api: Option<bool>,
    unbounded_connection_retries: Option<bool>,
    questions: Option<bool>,
    max_line_bytes: Option<usize>,
}

/// Reads Codex options from a config's `provider_options` and merges them into `into` (see
/// [`CodexOptions`]); on error `into` is unchanged. `null` and `{}` change nothing.
pub(crate) fn merge_json(provider: &ProviderId, options: &Value, into: &mut ProviderOptions) -> Result<()> {
    if options.is_null() {
        return Ok(());
    }
    // Every field is named: a new one does not compile until it is merged.
    let CodexOptionsJson {
        binary,
        config,
        client_name,
        experimental_api,
        unbounded_connection_retries,
        questions,
        max_line_bytes,
    } = provider_options_from_json(provider, options)?;
    into.update(|codex: &mut CodexOptions| {
        fn set<T>(field: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *field = value;
            }
        }
        if binary.is_some() {
            codex.binary = binary;
        }
        for (key, value) in config.into_iter().flatten() {
            codex.config.retain(|(k, _)| *k != key);
            codex.config.push((key, value));
        }
        if client_name.is_some() {
            codex.client_name = client_name;
        }
        set(&mut codex.experimental_api, experimental_api);
        set(&mut codex.unbounded_connection_retries, unbounded_connection_retries);
        set(&mut codex.questions, questions);
        set(&mut codex.max_line_bytes, max_line_bytes);
    });
    Ok(())
}

fn native_target() -> Option<(&'static str, &'static str)> {
    let target = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => ("codex-linux-x64", "x86_64-unknown-linux-musl"),
        ("linux", "aarch64") => ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
        ("macos", "x86_64") => ("codex-darwin-x64", "x86_64-apple-darwin"),
        ("macos", "aarch64") => ("codex-darwin-arm64", "aarch64-apple-darwin"),
        ("windows", "x86_64") => ("codex-win32-x64", "x86_64-pc-windows-msvc"),
        ("windows", "aarch64") => ("codex-win32-arm64", "aarch64-pc-windows-msvc"),
        _ => return None,
    };
    Some(target)
}

impl fmt::Debug for CodexOptions {
    // Config values can carry tokens or URLs with credentials: keys only. Every field is named
    // (the destructuring fails to compile when one is added), so a new one is a decision.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let CodexOptions {
            binary,
            config,
            client_name,
            experimental_api,
            unbounded_connection_retries,
            questions,
            max_line_bytes,
        } = self;
        f.debug_struct("CodexOptions")
            .field("binary", binary)
            .field("config_keys", &config.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("client_name", client_name)
            .field("experimental_api", experimental_api)
            .field("unbounded_connection_retries", unbounded_connection_retries)
            .field("questions", questions)
            .field("max_line_bytes", max_line_bytes)
            .finish()
    }
}

/// Codex options of one turn. Set with
/// [`TurnOptions::provider_option`](agent_core::TurnOptions::provider_option).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct CodexTurnOptions {
    /// Reasoning effort for this turn (`minimal`, `low`, `medium`, `high`, …), sent as `effort`.
    /// Codex's protocol takes any non-empty name a model advertises, and passes it on as given:
    /// only a blank one is refused here; a name the model does not know is the model server's
    /// to refuse.
    pub effort: Option<String>,
    /// A JSON schema the final message must follow, sent as `outputSchema`.
    pub output_schema: Option<Value>,
}

impl CodexTurnOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the reasoning effort.
    pub fn effort(mut self, effort: impl Into<String>) -> Self {
        self.effort = Some(effort.into());
        self
    }

    /// Sets the output schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_config_values() {
        let options = CodexOptions::new().config("model_providers.x.http_headers.Authorization", "\"Bearer sekrit\"");
        let text = format!("{options:?}");
        assert!(!text.contains("sekrit"), "{text}");
        assert!(text.contains("http_headers.Authorization"), "{text}");
    }

    /// Merges `json` into options that already hold `CodexOptions` with a binary and a config entry.
    fn merged(json: Value) -> Result<CodexOptions> {
        let mut options = ProviderOptions::default();
        options.insert(CodexOptions::new().binary("/opt/codex").config("model", "\"a\""));
        merge_json(&ProviderId::new("codex"), &json, &mut options)?;
        Ok(options.get::<CodexOptions>().cloned().unwrap_or_default())
    }

    #[track_caller]
    fn refused(json: Value, starts: &str) {
        match merged(json) {
            Err(agent_core::Error::InvalidConfig(message)) => {
                assert!(message.starts_with(starts), "{message:?} starts with {starts:?}");
                assert!(message.ends_with("(provider `codex`)"), "{message}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn json_options_merge_into_those_set_before() {
        let codex = merged(serde_json::json!({
            "questions": false,
            "config": { "model": "\"b\"", "model_reasoning_effort": "\"high\"" },
            "max_line_bytes": 4096
        }))
        .expect("merged");
        assert_eq!(codex.binary.as_deref(), Some(Path::new("/opt/codex")), "kept");
        assert!(!codex.questions);
        assert_eq!(codex.max_line_bytes, 4096);
        assert_eq!(
            codex.config,
            [("model".into(), "\"b\"".into()), ("model_reasoning_effort".into(), "\"high\"".into())]
        );
        for nothing in [Value::Null, serde_json::json!({})] {
            assert_eq!(
                merged(nothing).expect("merged"),
                CodexOptions::new().binary("/opt/codex").config("model", "\"a\"")
            );
        }
        let mut empty = ProviderOptions::default();
        merge_json(&ProviderId::new("codex"), &serde_json::json!({ "experimental_api": true }), &mut empty).unwrap();
        assert_eq!(empty.get::<CodexOptions>(), Some(&CodexOptions::new().experimental_api(true)));
    }

    #[test]
    fn bad_json_options_are_refused_by_path_and_change_nothing() {
        refused(serde_json::json!({ "binaryy": "/x" }), "provider_options.binaryy: unknown field `binaryy`");
        refused(
            serde_json::json!({ "questions": "no" }),
            "provider_options.questions: invalid type: a string, expected a boolean",
        );
        refused(serde_json::json!({ "config": { "a": 1 } }), "provider_options.config.a: invalid type: an integer");
        // A Claude option in a Codex config.
        refused(serde_json::json!({ "max_turns": 3 }), "provider_options.max_turns: unknown field `max_turns`");
        refused(serde_json::json!(["binary"]), "provider_options: expected a JSON object, found an array");

        let mut options = ProviderOptions::default();
        options.insert(CodexOptions::new().binary("/opt/codex"));
        let bad = serde_json::json!({ "questions": false, "max_line_bytes": -1 });
        assert!(merge_json(&ProviderId::new("codex"), &bad, &mut options).is_err());
        assert_eq!(options.get::<CodexOptions>(), Some(&CodexOptions::new().binary("/opt/codex")));
    }

    #[test]
    fn program_defaults_to_codex_on_path() {
        assert_eq!(CodexOptions::new().program(), OsString::from("codex"));
        assert_eq!(CodexOptions::new().binary("/x/codex").program(), OsString::from("/x/codex"));
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn native_binary_sits_in_the_platform_package() {
        assert_eq!(
            CodexOptions::npm_native_binary("/prefix"),
            Some(PathBuf::from(
                "/prefix/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
            ))
        );
    }
}
