//! Pi-specific session options, read from the typed provider-option slot.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use agent_core::config::provider_options_from_json;
use agent_core::{ProviderId, ProviderOptions, Result};
use serde::Deserialize;
use serde_json::Value;

/// The program run when [`PiOptions::binary`] is not set: `pi`, looked up on `PATH`.
pub const DEFAULT_PROGRAM: &str = "pi";

/// Longest stdout line the provider accepts by default; longer lines are dropped with a
/// `warning` event. (Pi 0.73.1 repeats the whole partial message in every `message_update`, so
/// lines grow with the answer.)
pub const DEFAULT_MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// Pi options of one session, set with
/// [`SessionOptions::provider_option`](agent_core::SessionOptions::provider_option).
///
/// Pi takes no per-turn options: `PiOptions` given to a turn
/// ([`TurnOptions::provider_option`](agent_core::TurnOptions::provider_option)) fail
/// `start_turn` with `InvalidOption` before the turn is recorded.
///
/// In a [`SessionConfig`](agent_core::SessionConfig), `provider_options` holds them as JSON,
/// merged into those already set (fields left out keep their value; unknown fields are
/// refused):
///
/// ```json
/// {
///     "binary": "/usr/bin/node",
///     "binary_args": ["/opt/pi/dist/cli.js"],
///     "args": ["--no-context-files"],
///     "session_dir": "/var/lib/app/pi-sessions",
///     "max_line_bytes": 33554432,
///     "steer_as_follow_up": false
/// }
/// ```
///
/// ```
/// use agent_core::SessionOptions;
/// use agent_provider_pi::PiOptions;
///
/// let options = SessionOptions::new(std::env::temp_dir())
///     .provider_option(PiOptions::new().binary("/opt/pi/bin/pi").arg("--no-context-files"));
/// # let _ = options;
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PiOptions {
    /// The program to run; default [`DEFAULT_PROGRAM`] on `PATH`. May be `node` with the entry
    /// script in [`PiOptions::binary_args`].
    pub binary: Option<PathBuf>,
    /// Arguments placed before pi's own (e.g. the entry script when `binary` is `node`).
    pub binary_args: Vec<OsString>,
    /// Extra pi flags, after the provider's (`--no-context-files`, `--no-skills`, …). Never put
    /// secrets here: a command line is visible to every local user (`--api-key` is refused).
    pub args: Vec<String>,
    /// Where pi stores and looks up session files (`--session-dir`); default pi's own
    /// (`<agent dir>/sessions/--<cwd>--/`).
    pub session_dir: Option<PathBuf>,
    /// Longest stdout line accepted.
    pub max_line_bytes: usize,
    /// `Harness::steer` sends pi's `follow_up` (handled once the agent would stop) instead of
    /// `steer` (delivered after the running tool calls). Default false.
    pub steer_as_follow_up: bool,
}

impl Default for PiOptions {
    fn default() -> Self {
        PiOptions {
            binary: None,
            binary_args: Vec::new(),
            args: Vec::new(),
            session_dir: None,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            steer_as_follow_up: false,
        }
    }
}

impl PiOptions {
    /// Default options.
    pub fn new() -> Self {
        PiOptions::default()
    }

    /// Runs this program instead of `pi` on `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Adds an argument before pi's own (e.g. the entry script run by `node`).
    pub fn binary_arg(mut self, arg: impl Into<OsString>) -> Self {
        self.binary_args.push(arg.into());
        self
    }

    /// Adds an extra pi flag.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds extra pi flags.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Stores and looks up sessions in `dir`.
    pub fn session_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.session_dir = Some(dir.into());
        self
    }

    /// The longest stdout line accepted.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Sends steering input as pi `follow_up` messages instead of `steer`.
    pub fn steer_as_follow_up(mut self, yes: bool) -> Self {
        self.steer_as_follow_up = yes;
        self
    }

    /// The program to spawn.
    pub(crate) fn program(&self) -> OsString {
        self.binary.as_ref().map_or_else(|| OsString::from(DEFAULT_PROGRAM), |p| p.clone().into_os_string())
    }
}

impl fmt::Debug for PiOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every field is named, so a new one cannot be printed without a decision.
        let PiOptions { binary, binary_args, args, session_dir, max_line_bytes, steer_as_follow_up } = self;
        f.debug_struct("PiOptions")
            .field("binary", binary)
            .field("binary_args", &binary_args.len())
            .field("args", &args.len())
            .field("session_dir", session_dir)
            .field("max_line_bytes", max_line_bytes)
            .field("steer_as_follow_up", steer_as_follow_up)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PiOptionsJson {
    binary: Option<PathBuf>,
    binary_args: Option<Vec<String>>,
    args: Option<Vec<String>>,
    session_dir: Option<PathBuf>,
    max_line_bytes: Option<usize>,
    steer_as_follow_up: Option<bool>,
}

/// Merges `provider_options` JSON into the [`PiOptions`] already in `into`.
pub(crate) fn merge_json(provider: &ProviderId, options: &Value, into: &mut ProviderOptions) -> Result<()> {
    if options.is_null() {
        return Ok(());
    }
    let PiOptionsJson { binary, binary_args, args, session_dir, max_line_bytes, steer_as_follow_up } =
        provider_options_from_json(provider, options)?;
    into.update(|pi: &mut PiOptions| {
        if binary.is_some() {
            pi.binary = binary;
        }
        if let Some(binary_args) = binary_args {
            pi.binary_args = binary_args.into_iter().map(OsString::from).collect();
        }
        if let Some(args) = args {
            pi.args = args;
        }
        if session_dir.is_some() {
            pi.session_dir = session_dir;
        }
        if let Some(bytes) = max_line_bytes {
            pi.max_line_bytes = bytes;
        }
        if let Some(yes) = steer_as_follow_up {
            pi.steer_as_follow_up = yes;
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use agent_core::{Provider, SessionConfig, SessionOptions};
    use serde_json::json;

    use super::*;
    use crate::PiProvider;

    #[test]
    fn a_config_merges_its_pi_options_into_those_set_in_code() {
        let provider = PiProvider::new();
        let config = SessionConfig::from_json_value(json!({
            "provider": "pi",
            "provider_options": { "args": ["--no-context-files"], "steer_as_follow_up": true }
        }))
        .unwrap();
        let base = SessionOptions::new("/work").provider_option(PiOptions::new().binary("/opt/pi/bin/pi"));
        let options = config.apply_to(&provider, base).unwrap();
        let pi = options.provider_options.get::<PiOptions>().unwrap();
        assert_eq!(pi.binary.as_deref(), Some(std::path::Path::new("/opt/pi/bin/pi")), "fields left out stay");
        assert_eq!(pi.args, ["--no-context-files"]);
        assert!(pi.steer_as_follow_up);
    }

    #[test]
    fn unknown_fields_and_other_providers_options_are_refused() {
        let provider = PiProvider::new();
        let mut into = ProviderOptions::default();
        let error = provider.options_from_json(&json!({"questions": false}), &mut into).unwrap_err().to_string();
        assert!(error.contains("provider_options") && error.contains("questions"), "{error}");
        assert!(into.get::<PiOptions>().is_none(), "nothing applied");
        assert!(provider.options_from_json(&json!("pi"), &mut into).is_err());
    }

    #[test]
    fn debug_leaves_out_the_extra_args() {
        let options = PiOptions::new().arg("--provider-secret=abc");
        assert!(!format!("{options:?}").contains("abc"));
    }
}
