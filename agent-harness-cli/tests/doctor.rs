//! `agent-harness doctor` run as a process with a controlled environment (`PATH`, `HOME`,
//! nothing inherited): fake CLIs written by the test, then the real pinned codex, claude and pi
//! (from `cargo xtask clis`).

use std::path::Path;
use std::process::Output;

use agent_testkit::programs::ProgramDir;
use agent_testkit::{Cli, Provider};
use serde_json::Value;

/// A value that must never be printed: an API key in the environment and in a login file.
const SECRET: &str = "sk-doctor-secret-0c4e";

/// `agent-harness doctor ARGS` with only `vars` set, run in `cwd`.
fn doctor(args: &[&str], vars: &[(&str, &str)], cwd: &Path) -> Output {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"))
        .arg("doctor")
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .current_dir(cwd)
        .output()
        .expect("agent-harness runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET), "a secret was printed:\n{stdout}\n{stderr}");
    output
}

/// The JSON lines of a `doctor --json`, by provider.
fn reports(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

fn report<'a>(reports: &'a [Value], provider: &str) -> &'a Value {
    reports.iter().find(|r| r["provider"] == provider).unwrap_or_else(|| panic!("no {provider} in {reports:?}"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("directory");
    std::fs::write(path, text).expect("written");
}

#[test]
fn fake_clis_an_api_key_login_and_a_missing_cli_are_each_reported() {
    let bin = ProgramDir::new("doctor");
    bin.script("codex", "echo 'codex-cli 0.100.0'");
    bin.script("claude", "echo '2.1.400 (Claude Code)'");
    let home = ProgramDir::new("doctor-home");
    write(&home.path().join(".codex/auth.json"), &format!(r#"{{"OPENAI_API_KEY": "{SECRET}", "tokens": null}}"#));
    write(
        &home.path().join(".claude/.credentials.json"),
        &format!(r#"{{"claudeAiOauth": {{"accessToken": "{SECRET}"}}}}"#),
    );
    let path = bin.path().display().to_string();
    let home_dir = home.path().display().to_string();
    let vars = [("PATH", path.as_str()), ("HOME", home_dir.as_str()), ("ANTHROPIC_API_KEY", SECRET)];

    let output = doctor(&["--json"], &vars, home.path());
    assert_eq!(output.status.code(), Some(69), "a missing or too old CLI: {output:?}");
    let all = reports(&output);
    assert_eq!(all.len(), 3, "{all:?}");

    let codex = report(&all, "codex");
    assert_eq!(codex["status"], "too_old", "{codex}");
    assert_eq!(codex["found"], true);
    assert_eq!(codex["path"], bin.path().join("codex").display().to_string());
    assert_eq!((&codex["version"], &codex["support"]), (&"0.100.0".into(), &"too_old".into()));
    assert_eq!(codex["min_supported"], agent_harness::providers::codex::MIN_SUPPORTED.to_string());
    let refused = codex["auth"]["refused"].as_str().expect("the API-key login is refused");
    assert!(refused.contains("auth.json") && refused.contains("OPENAI_API_KEY"), "{refused}");
    assert_eq!(codex["login"]["state"], "found");
    assert_eq!(codex["login"]["method"], "api_key");

    let claude = report(&all, "claude");
    assert_eq!(claude["status"], "ready", "{claude}");
    assert_eq!((&claude["version"], &claude["support"]), (&"2.1.400".into(), &"newer".into()));
    assert_eq!(claude["login"]["method"], "claude.ai");
    assert_eq!(claude["auth"]["refused"], Value::Null);
    let removed: Vec<&str> =
        claude["auth"]["removed_env"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(removed, ["ANTHROPIC_API_KEY"], "only the name of the key in the environment");

    let pi = report(&all, "pi");
    assert_eq!(pi["status"], "unavailable", "{pi}");
    assert_eq!((&pi["found"], &pi["path"], &pi["version"]), (&false.into(), &Value::Null, &Value::Null));
    assert!(pi["error"].as_str().is_some_and(|e| e.contains("`pi` was not found")), "{pi}");
    assert_eq!(pi["login"]["state"], "missing");

    // One ready provider alone: exit 0; the same report as text names what it found.
    let output = doctor(&["--provider", "claude"], &vars, home.path());
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.starts_with("claude: ready"), "{text}");
    for shown in ["2.1.400: newer than validated", "claude.ai (", "ANTHROPIC_API_KEY"] {
        assert!(text.contains(shown), "{shown:?} not in:\n{text}");
    }
    assert!(!text.contains("codex") && !text.contains("\npi:"), "{text}");

    // A login that is not an API key and no refusal: only the missing login remains (exit 1).
    write(
        &home.path().join(".codex/auth.json"),
        &format!(r#"{{"OPENAI_API_KEY": null, "tokens": {{"id_token": "{SECRET}"}}}}"#),
    );
    bin.script("codex", "echo 'codex-cli 0.171.0'");
    let home_only = [("PATH", path.as_str()), ("HOME", home_dir.as_str())];
    let output = doctor(&["--json", "--provider", "codex"], &home_only, home.path());
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let codex = &reports(&output)[0];
    assert_eq!((&codex["status"], &codex["login"]["method"]), (&"ready".into(), &"chatgpt".into()), "{codex}");
    std::fs::remove_file(home.path().join(".codex/auth.json")).expect("removed");
    let output = doctor(&["--json", "--provider", "codex"], &home_only, home.path());
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(reports(&output)[0]["status"], "not_logged_in");
}

#[test]
fn an_unknown_provider_is_a_usage_error() {
    let dir = ProgramDir::new("doctor-usage");
    let output = doctor(&["--provider", "gemini"], &[("PATH", "/nonexistent")], dir.path());
    assert_eq!(output.status.code(), Some(64));
    assert_eq!(output.stdout, b"");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown provider `gemini`"), "{stderr}");
}

#[test]
fn the_real_pinned_clis_are_found_on_path_with_their_versions() {
    let clis: Vec<Cli> = [Provider::Codex, Provider::Claude, Provider::Pi]
        .into_iter()
        .map(|p| Cli::latest(p).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`")))
        .collect();
    let dirs = clis.iter().flat_map(|cli| cli.path_dirs().iter().cloned()).chain(["/usr/bin".into(), "/bin".into()]);
    let path = std::env::join_paths(dirs).expect("PATH").to_string_lossy().into_owned();
    let home = ProgramDir::new("doctor-real-home");
    let home_dir = home.path().display().to_string();
    let vars = [("PATH", path.as_str()), ("HOME", home_dir.as_str())];

    let output = doctor(&["--json"], &vars, home.path());
    let all = reports(&output);
    assert_eq!(all.len(), 3, "{output:?}");
    for cli in &clis {
        let found = report(&all, cli.provider().id());
        assert_eq!(found["version"], cli.version(), "{found}");
        assert_eq!(found["support"], "validated", "{found}");
        assert_eq!(found["found"], true, "{found}");
        assert_eq!(found["auth"]["refused"], Value::Null, "{found}");
        assert_eq!(found["login"]["state"], "missing", "a fresh HOME has no login: {found}");
        assert_eq!(found["status"], "not_logged_in", "{found}");
    }
    assert_eq!(output.status.code(), Some(1), "nobody is logged in: {output:?}");
}

/// What a CLI writes on a failed `--version` is shown as text: its control characters as
/// symbols, never acted on by the terminal.
#[test]
fn a_failed_probe_shows_control_characters_as_symbols() {
    let bin = ProgramDir::new("doctor-escapes");
    bin.script("codex", "printf 'broken \\033]0;PWNED\\007 install\\n' >&2; exit 1");
    let path = bin.path().display().to_string();
    let output = doctor(&["--provider", "codex"], &[("PATH", path.as_str()), ("HOME", path.as_str())], bin.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("PWNED␇ install"), "{stdout}");
    assert!(!stdout.contains(['\u{1b}', '\u{7}']), "{stdout:?}");
}
