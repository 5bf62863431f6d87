//! The exec conformance suite, run against `LocalExec` (every check, real processes) and
//! `ScriptedExec` (the portable checks, with scripted look-alikes under a paused clock).

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::Command;
use agent_exec::LocalExec;
use agent_exec::scripted::{Script, ScriptedExec};
use agent_testkit::conformance::exec::{run_all, run_portable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_exec_passes_the_whole_suite() {
    run_all(Arc::new(LocalExec::new())).await;
}

#[tokio::test(flavor = "current_thread")]
async fn local_exec_passes_on_a_current_thread_runtime() {
    run_all(Arc::new(LocalExec::new())).await;
}

#[tokio::test(start_paused = true)]
async fn scripted_exec_passes_the_portable_suite() {
    let exec = look_alikes();
    run_portable(Arc::new(exec.clone())).await;
    exec.verify();
}

/// Scripted `cat`, `true`, `echo` and `sleep`.
fn look_alikes() -> ScriptedExec {
    let exec = ScriptedExec::new();
    exec.program("cat", |_| Script::new().echo_lines().wait_eof())
        .program("true", |_| Script::new())
        .program("echo", |command: &Command| {
            let words: Vec<_> = command.args.iter().map(|arg| arg.to_string_lossy()).collect();
            Script::new().stdout(words.join(" "))
        })
        .program("sleep", |command: &Command| {
            let seconds = command.args.first().and_then(|arg| arg.to_str()?.parse().ok()).unwrap_or(0);
            Script::new().sleep(Duration::from_secs(seconds))
        });
    exec
}
