//! A host process for containment tests: spawns one child through `LocalExec`, prints PIDs on
//! one stdout line, then waits until it is killed.
//!
//! - `exec-host-helper child`: spawns `sleep 30`; prints `<child pid>`.
//! - `exec-host-helper grandchild <session>`: spawns `sh -c 'sleep 30 & echo $!; wait'` stamped
//!   with `<session>` of harness number 1; prints `<child pid> <grandchild pid>`.
//! - `exec-host-helper escaped <session> exit|return`: spawns a child stamped with `<session>`
//!   whose `sleep 30` runs in a session of its own (`setsid`); prints `<child pid> <grandchild
//!   pid>`, then, once its stdin ends, does not wait to be killed: it calls
//!   `std::process::exit(0)`, or returns from `main` without ending the child. Its `tracing`
//!   subscriber panics on any event from then on, as one whose thread-locals are gone at exit
//!   does.

use std::io::Write;
use std::process::ExitCode;

use agent_core::SessionId;
use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set once the host has started leaving: every event after it panics.
static LEAVING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A `tracing` subscriber that records nothing and panics on an event on the main thread once
/// the host is leaving, as `tracing_subscriber::fmt` does in exit handlers (the main thread's
/// thread-local buffer is destroyed by then).
struct PanicsWhenLeaving(std::thread::ThreadId);

impl tracing::Subscriber for PanicsWhenLeaving {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if LEAVING.load(std::sync::atomic::Ordering::Relaxed) && std::thread::current().id() == self.0 {
            panic!("an event while the host exits: {}", event.metadata().name());
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn main() -> ExitCode {
    let _ = tracing::subscriber::set_global_default(PanicsWhenLeaving(std::thread::current().id()));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    match runtime.block_on(host(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("exec-host-helper: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The harness number the `grandchild` mode stamps, as a harness's session would be.
const HARNESS: u64 = 1;

async fn host(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let exec = LocalExec::new();
    let (command, reads_grandchild, leave) = match args {
        [mode] if mode == "child" => (Command::new("sleep").arg("30"), false, None),
        [mode, session] if mode == "grandchild" => {
            let script = "sleep 30 & echo $!; wait";
            let command = Command::new("sh").args(["-c", script]).session(SessionId::new(session.as_str())?);
            (command.harness(HARNESS), true, None)
        }
        [mode, session, how] if mode == "escaped" && (how == "exit" || how == "return") => {
            let script = "setsid sh -c 'echo $$; exec sleep 30' </dev/null 2>/dev/null & wait";
            (Command::new("sh").args(["-c", script]).session(SessionId::new(session.as_str())?), true, Some(how))
        }
        _ => return Err("usage: exec-host-helper child | grandchild <session> | escaped <session> exit|return".into()),
    };
    let mut child = exec.spawn(command).await?;
    let pid = child.handle.id().ok_or("no pid")?;
    let mut line = pid.to_string();
    if reads_grandchild {
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let grandchild = BufReader::new(stdout).lines().next_line().await?.ok_or("no grandchild pid")?;
        line = format!("{line} {grandchild}");
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    if leave.is_some() {
        // Once the test saw the processes run: it closes our stdin.
        let _ = BufReader::new(tokio::io::stdin()).read_line(&mut String::new()).await;
        LEAVING.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    match leave.map(String::as_str) {
        Some("exit") => std::process::exit(0),
        Some(_) => return Ok(()),
        None => {}
    }
    child.handle.wait().await?;
    Err("the child exited before the host was killed".into())
}
