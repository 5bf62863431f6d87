//! `cargo xtask live [codex|claude|pi]... [--yes]`: the live tests (`agent-harness-cli/tests/live.rs`)
//! against the user's own logged-in CLIs and the real model services. Never part of CI.
//!
//! Before anything is sent it builds `agent-harness` and runs `agent-harness doctor --json` for
//! the providers asked for: a CLI that is missing, too old, refused by the auth guard or not
//! logged in stops the task with what to do (which CLI to log in to). Then it warns that the
//! tests spend quota and asks to go on (`--yes` answers for it; without a terminal `--yes` is
//! required), and runs the tests with `AGENT_LIVE` naming the providers.

use std::error::Error;
use std::io::{BufRead, IsTerminal, Write};

use serde_json::Value;
use xshell::{Shell, cmd};

use crate::test::workspace_root;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const PROVIDERS: [&str; 3] = ["codex", "claude", "pi"];

/// Runs the task with its arguments.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let (providers, yes) = parse(args)?;
    if std::env::var("CI").is_ok_and(|ci| !ci.is_empty() && ci != "false" && ci != "0") {
        return Err("live tests never run in CI (CI is set)".into());
    }
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    cmd!(sh, "cargo build --locked -p agent-harness-cli --bin agent-harness").run()?;
    let agent_harness = crate::demo::target_dir().join("debug/agent-harness");
    let selected: Vec<String> = providers.iter().flat_map(|p| ["--provider".to_owned(), (*p).to_owned()]).collect();
    // doctor exits non-zero when something is not ready: its report says what.
    let report = cmd!(sh, "{agent_harness} doctor --json {selected...}").ignore_status().read()?;
    let problems = problems(&report);
    if !problems.is_empty() {
        return Err(format!("not ready for live tests:\n  {}", problems.join("\n  ")).into());
    }
    println!(
        "cargo xtask live: the live tests send real prompts to {} with your logged-in account{}: about a dozen \
         turns each, which spend your subscription's quota (or API credit).",
        providers.join(", "),
        if providers.len() > 1 { "s" } else { "" }
    );
    if !yes && !confirmed()? {
        return Err("not confirmed; nothing was sent".into());
    }
    let live = providers.join(",");
    let _live = sh.push_env("AGENT_LIVE", &live);
    cmd!(sh, "cargo test --locked -p agent-harness-cli --test live -- --nocapture --test-threads=1").run()?;
    Ok(())
}

/// The providers named (all when none is) and whether `--yes` was given.
fn parse(args: &[String]) -> Result<(Vec<&'static str>, bool)> {
    let mut providers = Vec::new();
    let mut yes = false;
    for arg in args {
        match arg.as_str() {
            "--yes" | "-y" => yes = true,
            name => {
                let provider = PROVIDERS.iter().copied().find(|p| *p == name).ok_or_else(|| {
                    format!("cargo xtask live: `{name}` is not a provider (usage: cargo xtask live [codex|claude|pi]... [--yes])")
                })?;
                if !providers.contains(&provider) {
                    providers.push(provider);
                }
            }
        }
    }
    if providers.is_empty() {
        providers = PROVIDERS.to_vec();
    }
    Ok((providers, yes))
}

/// What stands between each provider of a `doctor --json` report and a live run, one line each
/// (empty when every one is ready).
fn problems(report: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(found) = serde_json::from_str::<Value>(line) else {
            problems.push(format!("agent-harness doctor printed something else than JSON: {line}"));
            continue;
        };
        let provider = found["provider"].as_str().unwrap_or("?");
        let text = |key: &str| found[key].as_str().unwrap_or_default().to_owned();
        match found["status"].as_str().unwrap_or_default() {
            "ready" => {}
            "not_logged_in" => {
                problems.push(format!("{provider}: not logged in — log in to {provider}: {}", login_hint(provider)))
            }
            "refused" => {
                problems.push(format!("{provider}: {}", found["auth"]["refused"].as_str().unwrap_or_default()))
            }
            "too_old" => problems.push(format!(
                "{provider}: {} is older than the minimum supported {}; upgrade it",
                text("version"),
                text("min_supported")
            )),
            _ => problems.push(format!("{provider}: {}", text("error"))),
        }
    }
    problems
}

/// How to log in to `provider`'s CLI.
fn login_hint(provider: &str) -> &'static str {
    match provider {
        "codex" => "run `codex login`",
        "claude" => "run `claude` and then `/login`",
        _ => "run `pi` and then `/login`",
    }
}

/// Asks on the terminal whether to go on.
fn confirmed() -> Result<bool> {
    if !std::io::stdin().is_terminal() {
        return Err("no terminal to confirm on: pass --yes to spend the quota".into());
    }
    print!("go on? [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_and_yes_are_parsed() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse(&args(&[])).unwrap(), (PROVIDERS.to_vec(), false));
        assert_eq!(parse(&args(&["pi", "--yes", "pi", "codex"])).unwrap(), (vec!["pi", "codex"], true));
        let error = parse(&args(&["gemini"])).unwrap_err().to_string();
        assert!(error.contains("`gemini` is not a provider"), "{error}");
    }

    #[test]
    fn a_report_names_the_cli_to_log_in_to() {
        let report = [
            r#"{"provider":"codex","status":"ready"}"#,
            r#"{"provider":"claude","status":"not_logged_in"}"#,
            r#"{"provider":"pi","status":"unavailable","error":"`pi` was not found; install pi"}"#,
        ]
        .join("\n");
        let problems = problems(&report);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("log in to claude") && problems[0].contains("/login"), "{problems:?}");
        assert!(problems[1].contains("`pi` was not found"), "{problems:?}");
        assert!(self::problems(r#"{"provider":"codex","status":"ready"}"#).is_empty());
        let refused = r#"{"provider":"codex","status":"refused","auth":{"refused":"refuses `model_provider`"}}"#;
        assert!(self::problems(refused)[0].contains("model_provider"));
    }
}
