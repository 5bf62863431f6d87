//! `agent-harness doctor`: what each provider would find on this host before a session starts —
//! its CLI (the same discovery and `--version` check as the provider's `open`), where the version
//! falls against the supported range, what the auth guard would refuse or remove under
//! `--auth subscription`, and the CLI's saved login as its files tell it (no network). Names
//! settings, files and variables, never their values.

use std::path::Path;

use agent_harness::SessionOptions;
use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::{AuthReport, CliProbe, LoginState, VersionSupport};
use agent_harness::providers::{claude, codex, pi};
use serde_json::{Value, json};

use crate::args::DoctorArgs;
use crate::exit::{Exit, Failure, one_line};
use crate::render::visible_field;

/// One provider's findings.
struct Finding {
    provider: &'static str,
    cli: CliProbe,
    auth: AuthReport,
}

/// How ready a provider is for `agent-harness run --auth subscription`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// Its CLI runs, is supported, and a login is saved (or the files cannot tell).
    Ready,
    /// The auth guard refuses a subscription session here.
    Refused,
    /// No saved login.
    NotLoggedIn,
    /// The CLI is older than the minimum supported.
    TooOld,
    /// The CLI is missing or does not answer `--version`.
    Unavailable,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Refused => "refused",
            Verdict::NotLoggedIn => "not_logged_in",
            Verdict::TooOld => "too_old",
            Verdict::Unavailable => "unavailable",
        }
    }

    /// The exit status of a report whose worst verdict is this one.
    fn exit(self) -> Exit {
        match self {
            Verdict::Ready => Exit::Completed,
            Verdict::Refused | Verdict::NotLoggedIn => Exit::Failed,
            Verdict::TooOld | Verdict::Unavailable => Exit::Unavailable,
        }
    }
}

impl Finding {
    fn verdict(&self) -> Verdict {
        match self.cli.support() {
            None => Verdict::Unavailable,
            Some(VersionSupport::TooOld) => Verdict::TooOld,
            Some(_) if self.auth.refused.is_some() => Verdict::Refused,
            Some(_) if matches!(self.auth.login, LoginState::Missing { .. }) => Verdict::NotLoggedIn,
            Some(_) => Verdict::Ready,
        }
    }
}

/// Runs `agent-harness doctor`.
pub(crate) async fn doctor(args: DoctorArgs) -> Result<Exit, Failure> {
    let selected = selected(&args.providers)?;
    let cwd = std::env::current_dir()
        .map_err(|error| Failure::failed(format!("cannot read the current directory: {error}")))?;
    let options = SessionOptions::new(cwd);
    let exec = LocalExec::new();
    let findings = futures::future::join_all(selected.iter().map(|id| check(id, &exec, &options))).await;
    for finding in &findings {
        if args.json {
            crate::exit::print(&format!("{}\n", to_json(finding)))?;
        } else {
            crate::exit::print(&to_text(finding))?;
        }
    }
    Ok(findings.iter().map(Finding::verdict).max().unwrap_or(Verdict::Ready).exit())
}

/// The providers doctor checks: the native ones (presets run the same CLIs).
const PROVIDERS: &[&str] = &["codex", "claude", "pi"];

/// The providers named (each once, in the order given), or all of them.
fn selected(named: &[String]) -> Result<Vec<&'static str>, Failure> {
    if named.is_empty() {
        return Ok(PROVIDERS.to_vec());
    }
    let mut selected = Vec::new();
    for name in named {
        let id = PROVIDERS.iter().copied().find(|id| id == name).ok_or_else(|| {
            Failure::usage(format!("unknown provider `{name}`: expected one of {}", PROVIDERS.join(", ")))
        })?;
        if !selected.contains(&id) {
            selected.push(id);
        }
    }
    Ok(selected)
}

async fn check(provider: &'static str, exec: &LocalExec, options: &SessionOptions) -> Finding {
    let (cli, auth) = match provider {
        "codex" => (codex::CodexProvider::new().probe_cli(exec, options).await, codex::auth_report(options)),
        "claude" => (claude::ClaudeProvider::new().probe_cli(exec, options).await, claude::auth_report(options)),
        _ => (pi::PiProvider::new().probe_cli(exec, options).await, pi::auth_report(options)),
    };
    Finding { provider, cli, auth }
}

/// The error text of a failed probe, on one line, without the provider name `Error` puts first.
fn probe_error(error: &agent_harness::Error) -> String {
    match error {
        agent_harness::Error::ProviderUnavailable { reason, .. } => one_line(reason),
        other => one_line(&other.to_string()),
    }
}

fn to_json(finding: &Finding) -> Value {
    let Finding { provider, cli, auth } = finding;
    let (version, error) = match &cli.version {
        Ok(version) => (Some(version.to_string()), None),
        Err(error) => (None, Some(probe_error(error))),
    };
    let login = match &auth.login {
        LoginState::Found { method, file } => json!({ "state": "found", "method": method, "file": file }),
        LoginState::Missing { file } => json!({ "state": "missing", "file": file }),
        LoginState::Unknown { reason } => json!({ "state": "unknown", "reason": reason }),
        _ => json!({ "state": "unknown" }),
    };
    json!({
        "provider": provider,
        "status": finding.verdict().as_str(),
        "program": cli.program.to_string_lossy(),
        "found": cli.path.is_some() || cli.version.is_ok(),
        "path": cli.path,
        "version": version,
        "support": cli.support().map(VersionSupport::as_str),
        "min_supported": cli.range.min_supported.to_string(),
        "latest_validated": cli.range.latest_validated.to_string(),
        "error": error,
        "auth": { "refused": auth.refused, "removed_env": auth.removed_env },
        "login": login,
    })
}

fn to_text(finding: &Finding) -> String {
    let Finding { provider, cli, auth } = finding;
    let range = format!("supported {} to {}", cli.range.min_supported, cli.range.latest_validated);
    let where_ = match &cli.path {
        Some(path) => format!("{} ({})", shown(path), visible_field(&cli.program.to_string_lossy())),
        None => format!("{} (not found)", visible_field(&cli.program.to_string_lossy())),
    };
    let version = match (&cli.version, cli.support()) {
        (Ok(version), Some(VersionSupport::TooOld)) => format!("{version}: too old ({range})"),
        (Ok(version), Some(VersionSupport::Newer)) => format!("{version}: newer than validated ({range})"),
        (Ok(version), _) => format!("{version} ({range})"),
        // What the CLI wrote on stderr is text, not for the terminal to act on.
        (Err(error), _) => visible_field(&probe_error(error)).into_owned(),
    };
    let login = match &auth.login {
        LoginState::Found { method, file } => format!("{method} ({})", shown(file)),
        LoginState::Missing { file } => format!("none (no login in {})", shown(file)),
        LoginState::Unknown { reason } => format!("unknown ({})", visible_field(reason)),
        _ => "unknown".to_owned(),
    };
    let guard = match &auth.refused {
        Some(reason) => format!("refused: {}", visible_field(&one_line(reason))),
        None => "allowed".to_owned(),
    };
    let removed = if auth.removed_env.is_empty() { "none".to_owned() } else { auth.removed_env.join(", ") };
    format!(
        "{provider}: {}\n  cli:        {where_}\n  version:    {version}\n  login:      {login}\n  \
         subscription: {guard}\n  removed env (--auth subscription): {removed}\n",
        finding.verdict().as_str().replace('_', " ")
    )
}

fn shown(path: &Path) -> String {
    visible_field(&path.display().to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_verdict_decides_the_exit_status() {
        assert_eq!(Verdict::Ready.exit().code(), 0);
        assert_eq!(Verdict::NotLoggedIn.exit().code(), 1);
        assert_eq!(Verdict::Refused.exit().code(), 1);
        assert_eq!(Verdict::TooOld.exit().code(), 69);
        assert_eq!(
            [Verdict::Ready, Verdict::Unavailable, Verdict::Refused].into_iter().max(),
            Some(Verdict::Unavailable)
        );
    }

    #[test]
    fn providers_are_named_once_or_all_taken() {
        assert_eq!(selected(&[]).unwrap(), PROVIDERS);
        assert_eq!(selected(&["pi".into(), "codex".into(), "pi".into()]).unwrap(), ["pi", "codex"]);
        let error = selected(&["gemini".into()]).unwrap_err();
        assert_eq!(error.exit, Exit::Usage);
        assert!(error.message.contains("`gemini`"), "{}", error.message);
    }
}
