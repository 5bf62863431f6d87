//! A turn's `prompt` and its reply: admission in reader order, early while pi compacts for
//! the prompt, and the reply the reader acts on when nobody took it (see the module docs of
//! [`super`]).

use agent_core::TurnId;
use serde_json::json;

use super::{Action, BARRIER_PREFIX, Normalizer};

impl Normalizer {
    /// The running `turn`'s `prompt` is sent with `id`.
    pub(crate) fn prompting(&mut self, turn: &TurnId, id: &str) {
        if let Some(running) = self.turn.as_mut().filter(|r| r.id == *turn) {
            running.prompt = Some(id.to_owned());
        }
    }

    /// True once `turn`, whose `prompt` has no reply yet, is admitted because pi compacts its
    /// context before running it: the reply comes after the compaction (a model request of its
    /// own, which may take longer than an admission may wait), and pi refuses almost nothing
    /// after it. The reply still reaches [`Normalizer::prompt_reply`].
    pub(crate) fn admitted_early(&mut self, turn: &TurnId) -> bool {
        let Some(running) = self.turn.as_mut().filter(|r| r.id == *turn) else { return false };
        if running.compacted && running.prompt.is_some() && !running.admitted {
            running.admitted = true;
            running.early = true;
        }
        running.early
    }

    /// True when `id` is the running turn's `prompt`, whose reply has not come.
    pub(crate) fn is_prompt(&self, id: &str) -> bool {
        self.turn.as_ref().is_some_and(|r| r.prompt.as_deref() == Some(id))
    }

    /// The reply to a `prompt` came: `Ok` with 1.6.0's disposition, or `Err` with why pi
    /// refused it; `taken` when its caller took it (it still waited). `None` when `id` is not
    /// the running turn's `prompt`; otherwise what the reply does to the turn. A reply nobody
    /// took (the turn was admitted early, or its caller stopped waiting) is the reader's to act
    /// on: a refusal ends the turn.
    pub(crate) fn prompt_reply(
        &mut self,
        id: &str,
        reply: Result<Option<&str>, String>,
        taken: bool,
    ) -> Option<Vec<Action>> {
        let running = self.turn.as_mut().filter(|r| r.prompt.as_deref() == Some(id))?;
        running.prompt = None;
        let (turn, early, aborting) = (running.id.clone(), running.early, running.aborting);
        let actions = match reply {
            Ok(disposition) => {
                let mut actions = self.admitted(&turn, disposition);
                // Cancelled while pi compacted for it: 0.73.1's `abort` does not stop a
                // compaction, and the run pi starts right after this reply is stopped now
                // (unless the reply ended the turn: an extension command took the prompt).
                if early && aborting && self.is_running(&turn) {
                    actions.push(Action::Write(json!({"type": "abort"})));
                }
                actions
            }
            // The caller takes the refusal and forgets the turn.
            Err(_) if taken => Vec::new(),
            Err(message) => {
                running.refused = Some(format!("pi refused the prompt: {message}"));
                self.finish(None)
            }
        };
        Some(actions)
    }

    /// `prompt` was accepted. `disposition` is 1.6.0's `data.disposition`: `handled` means no
    /// agent run follows (an extension command took it), so the turn completes now. 0.73.1
    /// replies the same way either way: a `get_state` sent after the reply tells (pi reads it
    /// once the prompt's run, if any, has begun; idle and no `agent_start` means none follows).
    pub(crate) fn admitted(&mut self, turn: &TurnId, disposition: Option<&str>) -> Vec<Action> {
        let Some(running) = self.turn.as_mut().filter(|r| r.id == *turn) else { return Vec::new() };
        running.admitted = true;
        if disposition == Some("handled") {
            return self.finish(None);
        }
        if disposition.is_none() && !running.started {
            self.next_barrier += 1;
            let n = self.next_barrier;
            running.start_barrier = Some(n);
            return vec![Action::Write(json!({"id": format!("{BARRIER_PREFIX}{n}"), "type": "get_state"}))];
        }
        Vec::new()
    }

    /// `prompt` was refused: forget the turn.
    pub(crate) fn abort_turn(&mut self, turn: &TurnId) {
        if self.turn.as_ref().is_some_and(|r| r.id == *turn) {
            self.turn = None;
        }
    }
}
