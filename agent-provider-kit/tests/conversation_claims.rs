//! A conversation another process holds is refused here, with that process and its session
//! named, until that process ends: the test runs its own binary again as the holder.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use agent_core::SessionId;
use agent_provider_kit::conversations::Claim;

/// Set in the copy of this test that holds the conversation: its ID.
const HOLD: &str = "AGENT_HARNESS_TEST_HOLD_CONVERSATION";
const PLACE: &str = "/conversations/claims-test";

#[test]
fn a_conversation_another_process_holds_is_refused_until_that_process_ends() {
    if let Some(id) = std::env::var_os(HOLD) {
        hold(&id.to_string_lossy());
        return;
    }
    let id = format!("cross-process-{}", std::process::id());
    // The holder's environment names other temp and runtime directories (a service's, a cron
    // job's): the lock is found all the same.
    let elsewhere = std::env::temp_dir().join(format!("agent-harness-claims-env-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).expect("a directory");
    std::fs::set_permissions(&elsewhere, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("private");
    let mut holder = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "a_conversation_another_process_holds_is_refused_until_that_process_ends", "--nocapture"])
        .env(HOLD, &id)
        .env("TMPDIR", &elsewhere)
        .env("XDG_RUNTIME_DIR", &elsewhere)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the holder starts");
    let stdout = BufReader::new(holder.stdout.take().expect("its stdout"));
    assert!(stdout.lines().map_while(Result::ok).any(|line| line == "held"), "the holder took the claim");

    let ours = SessionId::new("ours").unwrap();
    let refused = Claim::take("cli", Path::new(PLACE), &id, &ours).expect_err("held by the other process");
    assert_eq!(refused.process, Some(holder.id()));
    assert_eq!(refused.holder, Some(SessionId::new("theirs").unwrap()));
    assert!(refused.to_string().contains(&format!("live session `theirs` of process {}", holder.id())), "{refused}");

    // The holder ends (its stdin closes) without letting go, as a killed process would: the
    // kernel closed its files, and with them its lock, by the time it is reaped.
    drop(holder.stdin.take());
    assert!(holder.wait().expect("the holder ends").success());
    let claim = Claim::take("cli", Path::new(PLACE), &id, &ours).expect("free once its holder is gone");
    drop(claim);
    std::fs::remove_dir_all(&elsewhere).expect("removed");
}

/// Takes the claim, says so on stdout, and keeps it until stdin closes; then exits without
/// releasing it, as a killed process would.
fn hold(id: &str) {
    let claim = Claim::take("cli", Path::new(PLACE), id, &SessionId::new("theirs").unwrap()).expect("free");
    println!("held");
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
    std::mem::forget(claim);
    std::process::exit(0);
}
