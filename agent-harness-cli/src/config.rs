//! From `run`'s flags (and `--config FILE`) to the provider and the [`SessionConfig`] of the
//! session. Everything here is checked before anything is opened or spawned.

use std::path::Path;

use agent_harness::providers::{claude::ClaudeProvider, codex::CodexProvider, pi::PiProvider};
use agent_harness::{
    ApprovalPolicy, AuthMode, Conversation, ConversationSource, DynProvider, SandboxMode, SessionConfig, SessionId,
};
use serde_json::Value;

use crate::args::{Auth, RunArgs};
use crate::exit::{Failure, one_line};
use crate::presets;

/// The providers `run` drives, by ID (and `preset:ID` for each preset).
pub(crate) const PROVIDERS: &[&str] = &["codex", "claude", "pi", "preset:ID"];

/// The provider registered under `id` (a preset's from the catalog `args` name), or a usage
/// error naming the ones there are.
pub(crate) fn provider(id: &str, args: &RunArgs) -> Result<DynProvider, Failure> {
    if matches!(id, "codex" | "claude" | "pi") {
        // Where presets come from, given for a provider that is none: they would do nothing.
        let flag = match &args.presets {
            source if source.presets_dir.is_some() => Some("--presets-dir"),
            source if !source.allow_executables.is_empty() => Some("--allow-executable"),
            _ => None,
        };
        if let Some(flag) = flag {
            return Err(Failure::usage(format!("{flag} applies to preset:ID providers only, not `{id}`")));
        }
    }
    match id {
        "codex" => Ok(CodexProvider::new().into()),
        "claude" => Ok(ClaudeProvider::new().into()),
        "pi" => Ok(PiProvider::new().into()),
        _ => match id.strip_prefix(presets::PREFIX) {
            Some(preset) => {
                let catalog = presets::catalog(&args.presets, args.cli_path.as_deref())?;
                presets::preset(&catalog, preset)?;
                Ok(catalog.provider(preset).expect("the preset loaded").into())
            }
            None => Err(Failure::usage(format!("unknown provider `{id}`: expected one of {}", PROVIDERS.join(", ")))),
        },
    }
}

/// The session `args` describe: the config file (if any) with every flag laid over it; and
/// whether its working directory was given (`--cwd`, or the config's) rather than taken as the
/// current one.
pub(crate) fn session_config(args: &RunArgs) -> Result<(SessionConfig, bool), Failure> {
    let file = args.config.as_deref().map(read_config).transpose()?;
    let provider = match (&args.provider, &file) {
        (Some(provider), _) => provider.clone(),
        (None, Some(config)) => config.provider.to_string(),
        (None, None) => {
            return Err(Failure::usage(
                "no provider: pass --provider codex|claude|pi|preset:ID or a --config naming one",
            ));
        }
    };
    // Checked here so an unknown provider is a usage error before anything else.
    self::provider(&provider, args)?;
    let mut config = match file {
        Some(mut config) => {
            config.provider = provider.as_str().into();
            config
        }
        None => SessionConfig::new(provider.as_str()),
    };
    let cwd_given = args.cwd.is_some() || config.cwd.is_some();
    let cwd = match (&args.cwd, &config.cwd) {
        (Some(dir), _) => Some(dir.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(".".into()),
    };
    if let Some(dir) = cwd {
        config.cwd = Some(absolute_dir(&dir)?);
    }
    if let Some(model) = &args.model {
        config.model = Some(model.clone());
    }
    if let Some(prompt) = &args.system_prompt {
        config.system_prompt = Some(prompt.clone());
    }
    if let Some(policy) = &args.approval_policy {
        config.approval_policy = Some(enum_value::<ApprovalPolicy>(
            "--approval-policy",
            policy,
            "untrusted, on-failure, on-request, never",
        )?);
    }
    if let Some(sandbox) = &args.sandbox {
        config.sandbox =
            Some(enum_value::<SandboxMode>("--sandbox", sandbox, "read-only, workspace-write, danger-full-access")?);
    }
    for (index, pair) in args.env.iter().enumerate() {
        let (key, value) = env_pair(pair).ok_or_else(|| {
            // The value may be a secret: the message names the position only.
            Failure::usage(format!("--env #{}: expected KEY=VALUE with a non-empty KEY", index + 1))
        })?;
        // Over the config's word on the name, removal included.
        config.env = std::mem::take(&mut config.env).set(key, value);
    }
    if let Some(auth) = args.auth {
        config.auth = Some(match auth {
            Auth::Subscription => AuthMode::Subscription,
            Auth::Inherit => AuthMode::Inherit,
        });
    }
    if let Some(path) = &args.cli_path {
        set_binary(&mut config, path)?;
    }
    if let Some(preset) = provider.strip_prefix(presets::PREFIX) {
        ask_through_preset(&mut config, args, preset)?;
    }
    if let Some(id) = &args.session_id {
        config.id = Some(session_id("--session-id", id)?);
    }
    if let Some(id) = &args.resume {
        let id = session_id("--resume", id)?;
        config.id = Some(id.clone());
        config.conversation = Some(Conversation::Resume(ConversationSource::Session(id)));
    }
    Ok((config, cwd_given))
}

/// A session ID from a flag, or a usage error saying why it is not one.
pub(crate) fn session_id(flag: &str, id: &str) -> Result<SessionId, Failure> {
    SessionId::new(id).map_err(|error| Failure::usage(one_line(&format!("{flag}: {error}"))))
}

/// The largest `--config` file read, in bytes: a session's settings, not a data file.
const MAX_CONFIG_FILE: u64 = 4 << 20;

/// Reads `--config`: a regular file (not a FIFO that never ends, not `/dev/zero`) of at most
/// [`MAX_CONFIG_FILE`] bytes, in UTF-8 (a leading byte-order mark is skipped).
fn read_config(path: &Path) -> Result<SessionConfig, Failure> {
    use std::io::Read;
    let failed = |why: &dyn std::fmt::Display| Failure::usage(one_line(&format!("--config {}: {why}", path.display())));
    // Looked at before it is opened: opening a FIFO waits for a writer.
    if !std::fs::metadata(path).map_err(|error| failed(&error))?.is_file() {
        return Err(failed(&"not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|error| failed(&error))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_FILE + 1).read_to_string(&mut text).map_err(|error| failed(&error))?;
    if text.len() as u64 > MAX_CONFIG_FILE {
        return Err(failed(&format!("the file is larger than {MAX_CONFIG_FILE} bytes")));
    }
    SessionConfig::from_json_str(text.strip_prefix('\u{feff}').unwrap_or(&text)).map_err(|error| failed(&error))
}

fn absolute_dir(dir: &Path) -> Result<std::path::PathBuf, Failure> {
    let absolute = std::path::absolute(dir).map_err(|e| Failure::usage(format!("--cwd {}: {e}", dir.display())))?;
    if !absolute.is_dir() {
        return Err(Failure::usage(format!("--cwd {}: not a directory", dir.display())));
    }
    Ok(absolute)
}

/// `KEY=VALUE` split at the first `=`; `None` without one or with an empty key.
fn env_pair(pair: &str) -> Option<(&str, &str)> {
    pair.split_once('=').filter(|(key, _)| !key.is_empty() && !key.contains('\0'))
}

/// A snake_case enum value from a flag written in kebab or snake case.
fn enum_value<T: serde::de::DeserializeOwned>(flag: &str, text: &str, expected: &str) -> Result<T, Failure> {
    serde_json::from_value(Value::String(text.replace('-', "_")))
        .map_err(|_| Failure::usage(format!("{flag} `{text}`: expected one of {expected}")))
}

/// A preset with an approval conversation asks its approvals (`approvals: ask`) unless the
/// config says otherwise: `run` answers them by `--approvals` like any provider's, where without
/// asking the CLI would decide by itself.
fn ask_through_preset(config: &mut SessionConfig, args: &RunArgs, preset: &str) -> Result<(), Failure> {
    let catalog = presets::catalog(&args.presets, args.cli_path.as_deref())?;
    if presets::preset(&catalog, preset)?.approval_conversation().is_none() {
        return Ok(());
    }
    match &mut config.provider_options {
        Value::Object(options) => {
            options.entry("approvals").or_insert_with(|| Value::String("ask".into()));
        }
        Value::Null => config.provider_options = serde_json::json!({ "approvals": "ask" }),
        _ => return Err(Failure::usage("--config: provider_options must be an object")),
    }
    Ok(())
}

/// Points the provider at `path` through its `binary` option (each provider takes one).
fn set_binary(config: &mut SessionConfig, path: &Path) -> Result<(), Failure> {
    let binary = Value::String(path.to_string_lossy().into_owned());
    match &mut config.provider_options {
        Value::Object(options) => {
            options.insert("binary".into(), binary);
        }
        Value::Null => config.provider_options = serde_json::json!({ "binary": binary }),
        _ => return Err(Failure::usage("--config: provider_options must be an object to take --cli-path")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_pairs_need_a_key_and_an_equals_sign() {
        assert_eq!(env_pair("A=b=c"), Some(("A", "b=c")));
        assert_eq!(env_pair("A="), Some(("A", "")));
        assert_eq!(env_pair("=x"), None);
        assert_eq!(env_pair("secret"), None);
    }

    /// `--config` is a settings file: a FIFO or a device is refused before anything reads it,
    /// a file over the limit after reading one byte past it; a byte-order mark is skipped.
    #[test]
    fn a_config_is_a_regular_file_of_bounded_size() {
        let dir = std::env::temp_dir().join(format!("cli-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let message = |path: &Path| read_config(path).unwrap_err().message;
        assert!(message(Path::new("/dev/zero")).ends_with("not a regular file"));
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        assert!(message(&fifo).ends_with("not a regular file"), "a FIFO is not waited on");
        let big = dir.join("big.json");
        std::fs::write(&big, vec![b' '; (MAX_CONFIG_FILE + 1) as usize]).expect("written");
        assert!(message(&big).contains("larger than 4194304 bytes"), "{}", message(&big));
        let bom = dir.join("bom.json");
        std::fs::write(&bom, "\u{feff}{\"provider\": \"codex\"}").expect("written");
        assert!(read_config(&bom).is_ok(), "a byte-order mark is skipped");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn enum_flags_take_kebab_and_snake_case() {
        let policy: ApprovalPolicy = enum_value("--approval-policy", "on-request", "").unwrap();
        assert_eq!(policy, ApprovalPolicy::OnRequest);
        let sandbox: SandboxMode = enum_value("--sandbox", "workspace_write", "").unwrap();
        assert_eq!(sandbox, SandboxMode::WorkspaceWrite);
        assert!(enum_value::<SandboxMode>("--sandbox", "wide", "x").unwrap_err().message.contains("`wide`"));
    }
}
