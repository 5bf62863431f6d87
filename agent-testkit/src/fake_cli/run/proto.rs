//! The wire protocol a fake speaks: what its CLI module says of a message, and the frames it
//! answers with.

use serde_json::{Value, json};

use super::state::State;
use super::{FakeCli, claude, codex, pi};

/// Which wire protocol the fake speaks.
#[derive(Clone, Copy, Debug)]
pub(super) enum Proto {
    Codex,
    /// `partial`: started with `--include-partial-messages`, so text streams as `stream_event`s.
    Claude {
        partial: bool,
    },
    Pi,
}

impl Proto {
    pub(super) fn new(cli: FakeCli, args: &[String]) -> Proto {
        match cli {
            FakeCli::Codex => Proto::Codex,
            FakeCli::Claude => Proto::Claude { partial: args.iter().any(|a| a == "--include-partial-messages") },
            FakeCli::Pi => Proto::Pi,
        }
    }

    /// The thread or session the process starts on, from its command line.
    pub(super) fn first_session(self, args: &[String]) -> String {
        match self {
            Proto::Codex => codex::first_session(),
            Proto::Claude { .. } => claude::first_session(args),
            Proto::Pi => pi::first_session(args),
        }
    }

    pub(super) fn is_handshake(self, msg: &Value) -> bool {
        match self {
            Proto::Codex => codex::is_handshake(msg),
            Proto::Claude { .. } => claude::is_handshake(msg),
            Proto::Pi => pi::is_handshake(msg),
        }
    }

    pub(super) fn is_turn_start(self, msg: &Value) -> bool {
        match self {
            Proto::Codex => codex::is_turn_start(msg),
            Proto::Claude { .. } => claude::is_turn_start(msg),
            Proto::Pi => pi::is_turn_start(msg),
        }
    }

    pub(super) fn is_interrupt(self, msg: &Value) -> bool {
        match self {
            Proto::Codex => codex::is_interrupt(msg),
            Proto::Claude { .. } => claude::is_interrupt(msg),
            Proto::Pi => pi::is_interrupt(msg),
        }
    }

    /// Answers for requests the real CLI answers by itself; `None` queues the message.
    pub(super) fn housekeeping(self, msg: &Value, state: &State) -> Option<Vec<Value>> {
        match self {
            Proto::Codex => codex::housekeeping(msg, state),
            Proto::Claude { .. } => claude::housekeeping(msg, state),
            Proto::Pi => pi::housekeeping(msg, state),
        }
    }

    /// The protocol's response to `msg`, if it is a request.
    pub(super) fn reply(self, msg: &Value, result: Option<Value>, error: Option<&str>) -> Option<Value> {
        match self {
            Proto::Codex => codex::reply(msg, result, error),
            Proto::Claude { .. } => claude::reply(msg, result, error),
            Proto::Pi => pi::reply(msg, result, error),
        }
    }

    /// What the CLI answers to a line that is not JSON.
    pub(super) fn non_json(self, line: &[u8]) -> Option<Value> {
        match self {
            Proto::Pi => Some(pi::parse_error(line)),
            Proto::Codex | Proto::Claude { .. } => None,
        }
    }

    /// The acknowledgement of an interrupt that does not end a turn.
    pub(super) fn interrupt_ack(self, msg: &Value, turn_active: bool) -> Vec<Value> {
        match self {
            Proto::Codex => codex::interrupt_ack(msg, turn_active),
            Proto::Claude { .. } => claude::interrupt_ack(msg),
            Proto::Pi => pi::interrupt_ack(msg),
        }
    }

    /// A valid frame the protocol does not know, with `padding` inside.
    pub(super) fn padding(self, padding: String) -> Value {
        match self {
            Proto::Codex => json!({"method": "fake/padding", "params": {"padding": padding}}),
            Proto::Claude { .. } | Proto::Pi => json!({"type": "fake_padding", "padding": padding}),
        }
    }
}
