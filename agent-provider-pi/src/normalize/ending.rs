//! How a turn ends: a run's `agent_end` (by how the release marks it, [`RunEnds`]), a line
//! over the cap that carried a turn's end, the terminal event made from what pi reported, and
//! the process's exit (see the module docs of [`super`]).

use agent_core::exec::ExitStatus;
use agent_core::{EndCause, EventKind, TurnEnd, TurnResult, TurnStatus};
use agent_provider_kit::framing::head::{find_key, object_at, string_at};
use agent_provider_kit::framing::tail::find_root_key;
use serde_json::{Value, json};

use super::wire::Frame;
use super::{Action, BARRIER_PREFIX, Ending, Normalizer, RunEnds, STATS_PREFIX};

impl Normalizer {
    pub(super) fn on_agent_end(&mut self, frame: &Frame<'_>, actions: &mut Vec<Action>) {
        let Some(running) = self.turn.as_mut() else {
            actions.push(self.provider_event("agent_end"));
            return;
        };
        match frame.will_retry {
            Some(true) => running.ending = Ending::Retrying,
            Some(false) if self.run_ends != Some(RunEnds::MarkedAgentEnd) => running.ending = Ending::Settling,
            _ => {
                let failed = running.stop_reason.as_deref() == Some("error");
                // An aborted run that leaves steers pi cannot drop: from 0.75.4 pi starts a run
                // for them at once, which the barrier's answer would find running.
                let held = running.aborting
                    && self.queued > 0
                    && !self.clears_queue
                    && self.run_ends == Some(RunEnds::MarkedAgentEnd);
                if (failed && !running.aborting) || held {
                    self.next_barrier += 1;
                    let n = self.next_barrier;
                    running.ending = Ending::Barrier(n);
                    let id = format!("{BARRIER_PREFIX}{n}");
                    actions.push(Action::Write(json!({"id": id, "type": "get_state"})));
                } else {
                    actions.extend(self.finish(None));
                }
            }
        }
    }

    /// A stdout line over `max_line` that the connection dropped, `head` its first bytes. The
    /// assistant's `message_end` (the reply) leaves the reply unread: the turn will end failed,
    /// naming the limit, rather than completed without its text. An `agent_end` (it repeats every
    /// message of the run, so a long run or a large tool result makes one even when the reply was
    /// read) cannot say whether the run ended or pi retries: a pi that settles ends the turn at
    /// `agent_settled` (a retry's `agent_start` takes it back); before 0.80.4 nothing follows,
    /// and the turn ends at a barrier's response, unless a retry starts meanwhile.
    ///
    /// A `compaction_end` (it carries the summary) ending the compaction of a run that
    /// overflowed says in its tail whether a run follows (`willRetry`); when the tail cannot
    /// tell either, the turn ends at a barrier's response as after a failed run.
    pub(crate) fn over_long(&mut self, (head, tail): (&[u8], &[u8]), len: usize, max_line: usize) -> Vec<Action> {
        let Some(running) = self.turn.as_mut() else { return Vec::new() };
        let Some(root) = head.strip_prefix(b"{") else { return Vec::new() };
        let member = |object: &[u8], key: &str| find_key(object, key);
        match member(root, "type").and_then(|at| string_at(root, at)) {
            Some("message_end") => {
                let message = member(root, "message").and_then(|at| object_at(root, at));
                let role = message.and_then(|message| string_at(message, member(message, "role")?));
                if role == Some("assistant") {
                    running.unread.get_or_insert_with(|| {
                        format!(
                            "pi's assistant `message_end` line was {len} bytes, over the {max_line}-byte limit \
                             (`max_line_bytes`): the turn's reply could not be read"
                        )
                    });
                }
                Vec::new()
            }
            Some("agent_end") if running.ending == Ending::Running && self.run_ends == Some(RunEnds::AgentSettled) => {
                running.ending = Ending::Settling;
                Vec::new()
            }
            Some("agent_end") if running.ending == Ending::Running => {
                self.next_barrier += 1;
                let n = self.next_barrier;
                running.ending = Ending::Barrier(n);
                vec![Action::Write(json!({"id": format!("{BARRIER_PREFIX}{n}"), "type": "get_state"}))]
            }
            Some("compaction_end" | "auto_compaction_end") if running.ending == Ending::Compacting => {
                let will_retry = find_root_key(tail, "willRetry").and_then(|at| tail.get(at..at + 5));
                match will_retry {
                    Some(value) if value.starts_with(b"true") => {
                        running.ending = Ending::Retrying;
                        Vec::new()
                    }
                    Some(b"false") => self.finish(None),
                    _ => {
                        self.next_barrier += 1;
                        let n = self.next_barrier;
                        running.ending = Ending::Barrier(n);
                        vec![Action::Write(json!({"id": format!("{BARRIER_PREFIX}{n}"), "type": "get_state"}))]
                    }
                }
            }
            _ => Vec::new(),
        }
    }

    /// Ends the running turn from what pi reported (or `exit` when the process died).
    pub(super) fn finish(&mut self, exit: Option<(String, Option<ExitStatus>, Option<String>)>) -> Vec<Action> {
        let Some(running) = self.turn.take() else { return Vec::new() };
        // Dialogs of the turn went with it.
        self.dialogs.retain(|_, d| d.turn != running.id);
        let mut actions = Vec::new();
        if self.queued > 0 && exit.is_none() {
            // Pi keeps what it did not deliver for its next run: the next prompt's turn would
            // answer this one's steer.
            let fate = if self.clears_queue {
                "they are dropped"
            } else {
                "this pi cannot drop them (`clear_queue` came with pi 0.84.4), so the model gets them with the next prompt"
            };
            let message =
                format!("the turn ended before pi delivered {} steer message(s) sent to it; {fate}", self.queued);
            actions.push(Action::Emit {
                turn: Some(running.id.clone()),
                kind: EventKind::Warning { message },
                raw: None,
            });
        }
        if let Some(usage) = running.usage {
            actions.push(Action::Emit {
                turn: Some(running.id.clone()),
                kind: EventKind::UsageUpdated(Box::new(usage)),
                raw: None,
            });
        }
        let mut result = TurnResult::default();
        result.text = running.text.clone();
        result.usage = running.usage;
        if let Some(stop) = &running.stop_reason {
            result.details = Some(json!({"stopReason": stop}));
        }
        let result_has_no_exit = exit.is_none();
        let status = if let Some((reason, status, tail)) = exit {
            result.reason = Some(reason);
            result.exit_status = status;
            result.stderr_tail = tail;
            result.ended_by = Some(EndCause::TransportLost);
            TurnStatus::Failed
        } else if let Some(refused) = running.refused.filter(|_| !running.aborting) {
            result.reason = Some(refused);
            result.ended_by = Some(EndCause::Rejected);
            TurnStatus::Failed
        } else {
            match running.stop_reason.as_deref() {
                Some("aborted") => {
                    result.reason = running.error.clone().or_else(|| Some("aborted".into()));
                    TurnStatus::Interrupted
                }
                _ if running.aborting => TurnStatus::Interrupted,
                Some("error") => {
                    let message = running.error.clone().unwrap_or_else(|| "the model request failed".into());
                    // A request that failed for good, before the turn's end, as codex and claude say it.
                    let kind =
                        EventKind::ProviderError { message: message.clone(), code: None, will_retry: Some(false) };
                    actions.push(Action::Emit { turn: Some(running.id.clone()), kind, raw: None });
                    result.reason = Some(message);
                    result.error = running.error.clone().map(Value::String);
                    TurnStatus::Failed
                }
                _ => match &running.unread {
                    Some(unread) => {
                        result.reason = Some(unread.clone());
                        TurnStatus::Failed
                    }
                    None => TurnStatus::Completed,
                },
            }
        };
        let end = Box::new(TurnEnd::new(status, result));
        let kind = match status {
            TurnStatus::Completed => EventKind::TurnCompleted(end),
            TurnStatus::Interrupted => EventKind::TurnInterrupted(end),
            _ => EventKind::TurnFailed(end),
        };
        actions.push(Action::Emit { turn: Some(running.id), kind, raw: None });
        if result_has_no_exit {
            // Pi's session totals follow as a session-level usage event.
            self.next_stats += 1;
            actions.push(Action::Write(
                json!({"id": format!("{STATS_PREFIX}{}", self.next_stats), "type": "get_session_stats"}),
            ));
        }
        actions
    }

    /// The process exited: fail the running turn.
    pub(crate) fn on_exit(&mut self, reason: &str, status: Option<ExitStatus>, tail: Option<String>) -> Vec<Action> {
        self.dialogs.clear();
        self.finish(Some((reason.to_owned(), status, tail)))
    }
}
