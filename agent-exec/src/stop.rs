//! The graceful stop every backend shares: SIGINT, then SIGTERM, then SIGKILL.

use agent_core::exec::{ChildHandle, ExecError, ExitStatus, KillPolicy};

/// SIGINT (the same number on Linux and macOS).
pub(crate) const SIGINT: i32 = 2;
/// SIGKILL.
pub(crate) const SIGKILL: i32 = 9;
/// SIGTERM.
pub(crate) const SIGTERM: i32 = 15;

/// A handle that can signal its process (group) on behalf of the harness.
pub(crate) trait Signal: ChildHandle {
    /// Sends `signal`, recording a requested stop. Signalling an exited process is `Ok`.
    fn send_signal(&self, signal: i32) -> Result<(), ExecError>;
}

/// Stops `handle` with `policy`: SIGINT, wait up to `interrupt_grace`, SIGTERM, wait up to
/// `terminate_grace`, SIGKILL, wait for the exit.
pub(crate) async fn escalate<H: Signal + ?Sized>(handle: &H, policy: KillPolicy) -> Result<ExitStatus, ExecError> {
    if let Some(status) = handle.try_status() {
        return Ok(status);
    }
    for (signal, grace) in [(SIGINT, policy.interrupt_grace), (SIGTERM, policy.terminate_grace)] {
        handle.send_signal(signal)?;
        if let Ok(status) = tokio::time::timeout(grace, handle.wait()).await {
            return status;
        }
    }
    handle.send_signal(SIGKILL)?;
    handle.wait().await
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_the_platform() {
        use rustix::process::Signal;
        assert_eq!((SIGINT, SIGKILL, SIGTERM), (Signal::INT.as_raw(), Signal::KILL.as_raw(), Signal::TERM.as_raw()));
    }
}
