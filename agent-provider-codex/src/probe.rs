//! Running a short informational command (`<cli> --version`) and collecting its answer.
//!
//! Both output pipes are drained for as long as the process runs: a CLI that writes a warning to
//! a closed stderr dies of `EPIPE` or `SIGPIPE` before it prints anything useful, and one that
//! fills an unread pipe blocks forever. Stdout is kept up to a byte limit and stderr as a short
//! tail, for error reports. A process that does not exit in time is killed and reaped, so a
//! failed probe leaves nothing running.
//!
//! Nothing here knows about a particular CLI: it takes the exec, the command and the limits
//! (with [`crate::lines`] for the stderr tail, it is the piece every provider's version check
//! shares).

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::{ChildHandle, ChildOutput, Command, Exec, ExecError, ExitStatus};
use tokio::io::AsyncReadExt;

use crate::lines::{Line, LineReader, StderrTail};

/// Longest stderr line read; the rest of a longer line is skipped (the tail keeps 500
/// characters of a line anyway).
const MAX_STDERR_LINE: usize = 64 * 1024;
/// How long a killed probe may take to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);
/// Bytes read from stdout at a time.
const READ_CHUNK: usize = 8 * 1024;

/// Bounds of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProbeLimits {
    /// Longest wait for the process to exit and close its pipes.
    pub(crate) timeout: Duration,
    /// Stdout bytes kept; the rest is read and dropped.
    pub(crate) stdout_bytes: usize,
    /// Stderr lines kept (the last ones).
    pub(crate) stderr_lines: usize,
}

/// What a probe that ran to its exit produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProbeOutput {
    /// Stdout (invalid UTF-8 replaced), at most [`ProbeLimits::stdout_bytes`].
    pub(crate) stdout: String,
    /// How the process ended.
    pub(crate) status: ExitStatus,
    /// The last lines of stderr, colour codes removed; `None` when it wrote nothing.
    pub(crate) stderr_tail: Option<String>,
}

/// Why a probe produced no [`ProbeOutput`].
#[derive(Debug)]
pub(crate) enum ProbeError {
    /// The exec did not start it; nothing runs.
    Spawn(ExecError),
    /// It did not exit within [`ProbeLimits::timeout`]; it was killed and reaped.
    TimedOut {
        /// What it wrote to stderr until then.
        stderr_tail: Option<String>,
    },
    /// Its exit could not be observed; it was killed.
    Wait(ExecError),
}

/// Runs `command` through `exec` within `limits`. Its stdin is closed at once.
pub(crate) async fn run(exec: &dyn Exec, command: Command, limits: ProbeLimits) -> Result<ProbeOutput, ProbeError> {
    let mut child = exec.spawn(command).await.map_err(ProbeError::Spawn)?;
    // Nothing is written to it: it reads end-of-file.
    drop(child.stdin.take());
    let handle = Arc::clone(&child.handle);
    let mut stdout = Vec::new();
    let mut tail = StderrTail::new(limits.stderr_lines);
    let finished = tokio::time::timeout(limits.timeout, async {
        let (_, _, status) = tokio::join!(
            read_capped(child.stdout.take(), limits.stdout_bytes, &mut stdout),
            read_tail(child.stderr.take(), &mut tail),
            handle.wait(),
        );
        status
    })
    .await;
    match finished {
        Ok(Ok(status)) => {
            Ok(ProbeOutput { stdout: String::from_utf8_lossy(&stdout).into_owned(), status, stderr_tail: tail.text() })
        }
        Ok(Err(error)) => {
            let _ = handle.kill();
            Err(ProbeError::Wait(error))
        }
        Err(_) => {
            stop(handle.as_ref()).await;
            Err(ProbeError::TimedOut { stderr_tail: tail.text() })
        }
    }
}

/// Kills the process and waits, briefly, until it is reaped.
async fn stop(handle: &dyn ChildHandle) {
    if let Err(error) = handle.kill() {
        tracing::warn!(%error, pid = ?handle.id(), "could not kill a probe that did not answer");
    }
    if tokio::time::timeout(REAP_WAIT, handle.wait()).await.is_err() {
        tracing::warn!(pid = ?handle.id(), "a killed probe was not reaped within {REAP_WAIT:?}");
    }
}

/// Reads `output` to its end, keeping the first `cap` bytes.
async fn read_capped(output: Option<ChildOutput>, cap: usize, kept: &mut Vec<u8>) {
    let Some(mut output) = output else { return };
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        match output.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// Reads `output` to its end, keeping its last lines in `tail`.
async fn read_tail(output: Option<ChildOutput>, tail: &mut StderrTail) {
    let Some(output) = output else { return };
    let mut lines = LineReader::new(output, MAX_STDERR_LINE);
    while let Ok(Some(line)) = lines.next_line().await {
        if let Line::Text(bytes) = line {
            tail.push(&bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use agent_exec::LocalExec;
    use agent_exec::scripted::ScriptedExec;
    use agent_testkit::programs::ProgramDir;

    use super::*;

    const LIMITS: ProbeLimits = ProbeLimits { timeout: Duration::from_secs(10), stdout_bytes: 64, stderr_lines: 3 };

    #[tokio::test]
    async fn stdout_is_capped_and_stderr_keeps_its_last_lines() {
        let programs = ProgramDir::new("probe-output");
        let cli = programs.script(
            "cli",
            "for i in 1 2 3 4 5; do echo \"warning $i\" >&2; done\nhead -c 100000 /dev/zero | tr '\\0' v\nexit 3",
        );
        let output = run(&LocalExec::new(), Command::new(cli), LIMITS).await.expect("the probe runs");
        assert_eq!(output.stdout, "v".repeat(64));
        assert_eq!(output.status.code, Some(3));
        assert_eq!(output.stderr_tail.as_deref(), Some("warning 3\nwarning 4\nwarning 5"));
    }

    #[tokio::test]
    async fn a_probe_past_its_timeout_is_killed_and_reaped() {
        let programs = ProgramDir::new("probe-hang");
        let cli = programs.script("cli", "echo 'still starting' >&2\nexec sleep 60");
        let exec = agent_testkit::recording::RecordingExec::new(Arc::new(LocalExec::new()));
        let limits = ProbeLimits { timeout: Duration::from_secs(1), ..LIMITS };
        match run(&exec, Command::new(cli), limits).await {
            Err(ProbeError::TimedOut { stderr_tail }) => assert_eq!(stderr_tail.as_deref(), Some("still starting")),
            other => panic!("expected a timeout, got {other:?}"),
        }
        let [child] = exec.children().try_into().expect("one process");
        let status = child.try_status().expect("reaped before the probe returned");
        assert_eq!(status.signal, Some(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_spawn_failure_starts_nothing() {
        let exec = ScriptedExec::new();
        let refused = run(&exec, Command::new("cli"), LIMITS).await;
        assert!(matches!(refused, Err(ProbeError::Spawn(ExecError::ProgramNotFound { .. }))), "{refused:?}");
        assert!(exec.runs().is_empty());
    }
}
