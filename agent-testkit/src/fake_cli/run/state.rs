//! What the engine and the dispatcher share: the turn, the `on` rules, the counters and the
//! session.

use std::collections::BTreeMap;

use serde_json::Value;

use super::FakeCli;
use crate::fake_cli::script::{EofAction, InterruptMode};

/// An `on` rule.
#[derive(Debug)]
pub(super) struct Rule {
    pub(super) pattern: Value,
    pub(super) reply: Option<Value>,
    pub(super) error: Option<String>,
    pub(super) frames: Vec<Value>,
    pub(super) remaining: Option<u32>,
}

/// The turn being played.
#[derive(Debug)]
pub(in crate::fake_cli) struct Turn {
    /// The protocol's turn ID (Codex); a counter elsewhere.
    pub(super) id: String,
    /// The text of the turn's last assistant message.
    pub(super) text: String,
    /// The client's reference of a request the turn waits on (to withdraw it on interrupt).
    pub(super) pending: Option<Value>,
}

/// What the engine and the dispatcher share.
#[derive(Debug)]
pub(in crate::fake_cli) struct State {
    pub(super) hung: bool,
    pub(super) handshake_done: bool,
    pub(super) interrupts: InterruptMode,
    pub(super) eof: (EofAction, i32),
    /// Stdin closed under [`EofAction::FinishTurn`]: exit with this code once no turn runs.
    pub(super) exit_when_idle: Option<i32>,
    pub(super) rules: Vec<Rule>,
    pub(super) turn: Option<Turn>,
    /// The turn is answered but not announced yet: interrupts are refused.
    pub(super) unannounced: bool,
    /// How many turns started.
    pub(super) turns: u64,
    /// The last turn's ID, for frames written after it ended.
    pub(super) last_turn: Option<String>,
    /// `prompt`, `answer`, `decision`, `tool_output`.
    pub(super) vars: BTreeMap<&'static str, String>,
    /// The message the last `expect` took.
    pub(super) last_in: Option<Value>,
    /// IDs of the fake's own objects (items, tool calls, UI requests).
    pub(super) counter: u64,
    /// Codex server-request IDs, from 0.
    pub(super) server_requests: u64,
    /// Codex thread ID, Claude or Pi session ID.
    pub(super) session: String,
    pub(super) cwd: String,
    /// Messages so far (Pi `messageCount`).
    pub(super) messages: u64,
}

impl State {
    /// The state a fake of `cli` starts with, on thread or session `session`.
    pub(super) fn new(cli: FakeCli, session: String) -> State {
        let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
        State {
            hung: false,
            handshake_done: false,
            interrupts: InterruptMode::Honor,
            eof: (if cli == FakeCli::Claude { EofAction::FinishTurn } else { EofAction::Exit }, 0),
            exit_when_idle: None,
            rules: Vec::new(),
            turn: None,
            unannounced: false,
            turns: 0,
            last_turn: None,
            vars: BTreeMap::new(),
            last_in: None,
            counter: 0,
            server_requests: 0,
            session,
            cwd,
            messages: 0,
        }
    }

    /// The active turn's ID, else the last one's.
    pub(super) fn turn_id(&self) -> String {
        self.turn.as_ref().map(|t| t.id.clone()).or_else(|| self.last_turn.clone()).unwrap_or_default()
    }
}
