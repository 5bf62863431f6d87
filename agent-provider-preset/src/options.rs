//! The options of a preset session, read from the typed provider-option slot or from JSON.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use agent_core::config::provider_options_from_json;
use agent_core::{ProviderId, ProviderOptions, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default wait for an answer to an approval before it is denied.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// What a turn does when another turn of its conversation key is running (in another session
/// of the same preset provider).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnBusy {
    /// It is admitted and waits for the other turn to end, then runs (continuing the
    /// conversation the other turn left).
    #[default]
    Wait,
    /// It is refused (`turn_failed`, rejected) without running.
    Fail,
}

/// Whether tool uses are asked about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Approvals {
    /// The CLI decides by itself, as configured (e.g. `claude -p` refuses what would need
    /// permission).
    #[default]
    Off,
    /// Each tool use the CLI needs permission for becomes a request, through the preset's
    /// approval conversation; no answer in time, a rejection or any failure denies the tool.
    Ask,
}

/// Options of one preset session, set with
/// [`SessionOptions::provider_option`](agent_core::SessionOptions::provider_option).
///
/// In a [`SessionConfig`](agent_core::SessionConfig), `provider_options` holds them as JSON,
/// merged into those already set (fields left out keep their value; unknown fields are refused):
///
/// ```json
/// {
///     "binary": "/opt/claude/bin/claude",
///     "binary_args": [],
///     "args": ["--allowedTools", "Read"],
///     "key": "ticket-42",
///     "on_busy": "wait",
///     "approvals": "ask",
///     "approval_risk": "high",
///     "approval_timeout_ms": 120000,
///     "approval_audience": "release-managers",
///     "max_turns": 8
/// }
/// ```
///
/// `Debug` shows the number of extra arguments, not their values.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PresetOptions {
    /// Runs this program instead of the preset's `program`; it must be on the
    /// [`AllowList`](crate::AllowList) too. Default: the preset's.
    pub binary: Option<PathBuf>,
    /// Arguments before the preset's own (e.g. the entry script when `binary` is `node`).
    pub binary_args: Vec<String>,
    /// Extra CLI arguments, where the preset's `{"insert": "extra_args"}` puts them (refused for
    /// a preset without one), without the preset's `reserved_args` and `reserved_words`, and
    /// without a flag it passes a value of the session with (`--model` or `-m` in a session with
    /// a model). A command line is visible to every local user: no secrets here.
    pub args: Vec<String>,
    /// The conversation key: turns with the same key continue one CLI conversation (its
    /// session ID passed with the preset's `resume` arguments) and run one at a time. Default:
    /// the harness session's ID.
    pub key: Option<String>,
    /// What a turn does while another turn of its key runs.
    pub on_busy: OnBusy,
    /// Whether tool uses are asked about (needs a preset with an approval conversation).
    pub approvals: Approvals,
    /// Put into each approval request's metadata as `risk`.
    pub approval_risk: Option<String>,
    /// How long an approval waits for an answer before the tool is denied.
    pub approval_timeout: Duration,
    /// Put into each approval request's metadata as `audience` (who should answer).
    pub approval_audience: Option<String>,
    /// The `{max_turns}` value (refused for a preset that does not use it).
    pub max_turns: Option<u32>,
}

impl Default for PresetOptions {
    fn default() -> Self {
        PresetOptions {
            binary: None,
            binary_args: Vec::new(),
            args: Vec::new(),
            key: None,
            on_busy: OnBusy::Wait,
            approvals: Approvals::Off,
            approval_risk: None,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            approval_audience: None,
            max_turns: None,
        }
    }
}

impl PresetOptions {
    /// Default options.
    pub fn new() -> Self {
        PresetOptions::default()
    }

    /// Runs this program instead of the preset's.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Adds an argument before the preset's own.
    pub fn binary_arg(mut self, arg: impl Into<String>) -> Self {
        self.binary_args.push(arg.into());
        self
    }

    /// Adds extra CLI arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the conversation key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets what a turn does while another turn of its key runs.
    pub fn on_busy(mut self, on_busy: OnBusy) -> Self {
        self.on_busy = on_busy;
        self
    }

    /// Sets whether tool uses are asked about.
    pub fn approvals(mut self, approvals: Approvals) -> Self {
        self.approvals = approvals;
        self
    }

    /// Sets the `risk` of approval requests.
    pub fn approval_risk(mut self, risk: impl Into<String>) -> Self {
        self.approval_risk = Some(risk.into());
        self
    }

    /// Sets how long an approval waits before the tool is denied.
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// Sets the `audience` of approval requests.
    pub fn approval_audience(mut self, audience: impl Into<String>) -> Self {
        self.approval_audience = Some(audience.into());
        self
    }

    /// Sets `{max_turns}`.
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// The options of `options`' slot, or the defaults.
    pub(crate) fn of(options: &agent_core::SessionOptions) -> PresetOptions {
        options.provider_options.get::<PresetOptions>().cloned().unwrap_or_default()
    }
}

impl fmt::Debug for PresetOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PresetOptions {
            binary,
            binary_args,
            args,
            key,
            on_busy,
            approvals,
            approval_risk,
            approval_timeout,
            approval_audience,
            max_turns,
        } = self;
        f.debug_struct("PresetOptions")
            .field("binary", binary)
            .field("binary_args", &binary_args.len())
            .field("args", &args.len())
            .field("key", key)
            .field("on_busy", on_busy)
            .field("approvals", approvals)
            .field("approval_risk", approval_risk)
            .field("approval_timeout", approval_timeout)
            .field("approval_audience", approval_audience)
            .field("max_turns", max_turns)
            .finish()
    }
}

/// The JSON form; every field optional, so a config changes only what it names.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetOptionsJson {
    #[serde(default)]
    binary: Option<PathBuf>,
    #[serde(default)]
    binary_args: Option<Vec<String>>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    on_busy: Option<OnBusy>,
    #[serde(default)]
    approvals: Option<Approvals>,
    #[serde(default)]
    approval_risk: Option<String>,
    #[serde(default)]
    approval_timeout_ms: Option<std::num::NonZeroU64>,
    #[serde(default)]
    approval_audience: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
}

/// Merges the JSON `options` into the [`PresetOptions`] of `into`.
pub(crate) fn merge_json(provider: &ProviderId, options: &Value, into: &mut ProviderOptions) -> Result<()> {
    if options.is_null() {
        return Ok(());
    }
    let json: PresetOptionsJson = provider_options_from_json(provider, options)?;
    let PresetOptionsJson {
        binary,
        binary_args,
        args,
        key,
        on_busy,
        approvals,
        approval_risk,
        approval_timeout_ms,
        approval_audience,
        max_turns,
    } = json;
    into.update::<PresetOptions>(|o| {
        if binary.is_some() {
            o.binary = binary;
        }
        if let Some(v) = binary_args {
            o.binary_args = v;
        }
        if let Some(v) = args {
            o.args = v;
        }
        if key.is_some() {
            o.key = key;
        }
        if let Some(v) = on_busy {
            o.on_busy = v;
        }
        if let Some(v) = approvals {
            o.approvals = v;
        }
        if approval_risk.is_some() {
            o.approval_risk = approval_risk;
        }
        if let Some(ms) = approval_timeout_ms {
            o.approval_timeout = Duration::from_millis(ms.get());
        }
        if approval_audience.is_some() {
            o.approval_audience = approval_audience;
        }
        if max_turns.is_some() {
            o.max_turns = max_turns;
        }
    });
    Ok(())
}

/// One option a preset takes, for discovery (`agent-harness presets`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OptionInfo {
    /// The name in `provider_options`.
    pub name: &'static str,
    /// The default value, as JSON (`null`: unset).
    pub default: Value,
    /// What it does.
    pub description: &'static str,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_merges_into_what_is_set() {
        let provider = ProviderId::new("preset:x");
        let mut slot = ProviderOptions::default();
        slot.insert(PresetOptions::new().binary("/opt/cli").key("k1"));
        merge_json(
            &provider,
            &json!({"on_busy": "fail", "approvals": "ask", "approval_timeout_ms": 1500, "args": ["--a"]}),
            &mut slot,
        )
        .unwrap();
        let options = slot.get::<PresetOptions>().unwrap();
        assert_eq!(options.binary.as_deref(), Some(std::path::Path::new("/opt/cli")));
        assert_eq!(options.key.as_deref(), Some("k1"));
        assert_eq!((options.on_busy, options.approvals), (OnBusy::Fail, Approvals::Ask));
        assert_eq!(options.approval_timeout, Duration::from_millis(1500));
        assert_eq!(options.args, ["--a"]);
        for bad in [json!({"on_busy": "later"}), json!({"keys": "x"}), json!({"approval_timeout_ms": 0})] {
            let before = slot.get::<PresetOptions>().cloned();
            let error = merge_json(&provider, &bad, &mut slot).unwrap_err().to_string();
            assert!(error.contains("provider_options"), "{error}");
            assert_eq!(slot.get::<PresetOptions>().cloned(), before, "a refused config changes nothing");
        }
        assert!(merge_json(&provider, &Value::Null, &mut slot).is_ok());
    }

    #[test]
    fn debug_shows_no_argument_values() {
        let options = PresetOptions::new().args(["--token", "sekrit"]).binary_arg("also-sekrit");
        let debug = format!("{options:?}");
        assert!(!debug.contains("sekrit") && debug.contains("args: 2"), "{debug}");
    }
}
