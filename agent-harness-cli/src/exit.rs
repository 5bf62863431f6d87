//! Exit statuses and the one-line failures that lead to them.

use std::fmt;
use std::process::ExitCode;

use agent_harness::{ErrorKind, TurnStatus};

/// What the command's exit status says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Every turn completed (0).
    Completed,
    /// A turn failed, or the harness did (1).
    Failed,
    /// A turn was cancelled or interrupted, or the command was interrupted (2).
    Cancelled,
    /// `--timeout` ran out (3).
    TimedOut,
    /// The command line or its inputs are wrong (64, `EX_USAGE`).
    Usage,
    /// The provider's CLI cannot be brought up: missing, too old, no version, exiting or hanging
    /// during its start (69, `EX_UNAVAILABLE`).
    Unavailable,
}

impl Exit {
    /// The status for a turn that ended with `status` with no cancel of this command's (a
    /// Ctrl-C or `--timeout` decides the status itself). A turn interrupted then was ended by
    /// its session going down (its store failed under `store_failure: stop`, say): that failed.
    pub(crate) fn of_turn(status: TurnStatus) -> Exit {
        match status {
            TurnStatus::Completed => Exit::Completed,
            TurnStatus::Cancelled => Exit::Cancelled,
            _ => Exit::Failed,
        }
    }

    /// The status for a harness error of `kind`: what the caller got wrong is a usage error,
    /// a CLI that cannot run is unavailable, the rest failed.
    pub(crate) fn of_error(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::InvalidOption
            | ErrorKind::InvalidSessionId
            | ErrorKind::InvalidTurnId
            | ErrorKind::UnknownProvider
            | ErrorKind::Unsupported
            | ErrorKind::InvalidConfig
            | ErrorKind::AuthGuard
            | ErrorKind::SessionAlreadyExists
            | ErrorKind::SessionIdAlreadyUsed => Exit::Usage,
            // Its transport went down while it opened, or it did not open in time.
            ErrorKind::ProviderUnavailable | ErrorKind::ProviderOpenFailed | ErrorKind::StartupTimeout => {
                Exit::Unavailable
            }
            _ => Exit::Failed,
        }
    }

    /// The process exit code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Completed => 0,
            Exit::Failed => 1,
            Exit::Cancelled => 2,
            Exit::TimedOut => 3,
            Exit::Usage => 64,
            Exit::Unavailable => 69,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// A command that could not do its job: the exit status and a one-line message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

/// Writes `text` to stdout: a closed pipe (`… | head -1`) is a failure with one line, not a
/// panic.
pub(crate) fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|error| Failure::failed(format!("cannot write to stdout: {error}")))
}

/// Writes `agent-harness: <message>` to stderr. A stderr nobody reads any more (`2>&1 | head
/// -1`) loses the line: the exit status still says what happened, where `eprintln!` would
/// panic (exit 101).
pub(crate) fn complain(message: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "agent-harness: {message}").and_then(|()| err.flush());
}

impl Failure {
    /// A usage error (64).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure { exit: Exit::Usage, message: message.into() }
    }

    /// A failure (1).
    pub(crate) fn failed(message: impl Into<String>) -> Failure {
        Failure { exit: Exit::Failed, message: message.into() }
    }

    /// A harness error, its status from its kind, its message prefixed with `context`.
    pub(crate) fn harness(context: &str, error: &agent_harness::Error) -> Failure {
        Failure { exit: Exit::of_error(error.kind()), message: one_line(&format!("{context}: {error}")) }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `text` on one line: line breaks become spaces.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_turns_and_error_kinds() {
        assert_eq!(Exit::of_turn(TurnStatus::Completed).code(), 0);
        assert_eq!(Exit::of_turn(TurnStatus::Failed).code(), 1);
        assert_eq!(Exit::of_turn(TurnStatus::Cancelled).code(), 2);
        assert_eq!(Exit::of_turn(TurnStatus::Interrupted).code(), 1);
        assert_eq!(Exit::of_error(ErrorKind::ProviderUnavailable).code(), 69);
        assert_eq!(Exit::of_error(ErrorKind::ProviderOpenFailed).code(), 69);
        assert_eq!(Exit::of_error(ErrorKind::StartupTimeout).code(), 69);
        assert_eq!(Exit::of_error(ErrorKind::InvalidConfig).code(), 64);
        assert_eq!(Exit::of_error(ErrorKind::Transport).code(), 1);
        assert_eq!(one_line("a\n  b\tc"), "a b c");
    }
}
