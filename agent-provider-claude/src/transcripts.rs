//! Parser and normalizer tests fed from the captured Claude Code 2.1.197 transcripts in
//! `testdata/transcripts/` (copied from `shared/protocols/claude-files/transcripts/`; one
//! `{"dir":"in"|"out"|"note","t":..,"msg":..}` per line).
//!
//! The driver plays the host's side: `in` prompts start turns, `in` interrupts mark them, `in`
//! answers to `can_use_tool` are matched with the pending request (and compared with what
//! [`requests::encode`] sends); `out` lines are parsed and normalized exactly as the connection
//! does it.

use std::path::PathBuf;

use agent_core::event::ToolStatus;
use agent_core::{EventKind, RequestKind, Response, TurnId, TurnResult, TurnStatus};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::normalize::{Action, Normalizer, attach};
use crate::requests::{self, PendingTool};
use crate::wire::Envelope;

#[derive(Deserialize)]
struct Line<'a> {
    dir: &'a str,
    #[serde(borrow, default)]
    msg: Option<&'a RawValue>,
}

/// Everything one transcript produced.
struct Played {
    actions: Vec<Action>,
    turns: Vec<TurnId>,
    /// `can_use_tool`s answered in the transcript: the pending tool and the host's answer.
    answered: Vec<(PendingTool, Value)>,
    normalizer: Normalizer,
}

const ALL: &[&str] = &[
    "a_simple_partial",
    "b_initialize",
    "c_permission_allow",
    "c_permission_deny",
    "c_permission_none",
    "c_write_acceptEdits",
    "d_interrupt",
    "d_interrupt_pending_permission",
    "e_multiturn",
    "f_resume",
    "g_ask_user_question",
    "g_mcp_sdk",
    "g_mcp_stdio",
    "h_hook_callback",
    "i_api_error_400",
    "i_api_error_529",
    "i_no_api_key",
    "i_server_down",
    "j_set_mode_bypass",
    "j_set_mode_bypass_allowed",
    "k_stdin_eof_midturn",
];

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/transcripts").join(format!("{name}.jsonl"))
}

fn play(name: &str) -> Played {
    play_expecting(name, None)
}

/// [`play`] with claude expected in session `expected`.
fn play_expecting(name: &str, expected: Option<&str>) -> Played {
    let text = std::fs::read_to_string(path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let normalizer = Normalizer::new(expected.map(str::to_owned));
    let mut played = Played { actions: Vec::new(), turns: Vec::new(), answered: Vec::new(), normalizer };
    for line in text.lines() {
        let line: Line<'_> = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some(msg) = line.msg else { continue };
        let msg = msg.get();
        match line.dir {
            "in" => {
                let value: Value = serde_json::from_str(msg).unwrap();
                match value["type"].as_str() {
                    Some("user") => {
                        let turn = TurnId::from_string(format!("turn-{}", played.turns.len() + 1));
                        if played.normalizer.begin_turn(turn.clone()).is_ok() {
                            played.turns.push(turn);
                        }
                    }
                    Some("control_request") if value["request"]["subtype"] == "interrupt" => {
                        let turn = played.turns.last().expect("an interrupted turn").clone();
                        played.normalizer.mark_interrupted(&turn);
                    }
                    Some("control_response") => {
                        let id = value["response"]["request_id"].as_str().unwrap();
                        // An answer to a request the CLI cancelled is dropped, like the CLI does.
                        if let Some(pending) = played.normalizer.take_request(id) {
                            let answer = value["response"]["response"].clone();
                            let denied = answer["behavior"] == "deny";
                            played.normalizer.answered(&pending, None, denied);
                            played.answered.push((pending, answer));
                        }
                    }
                    _ => {}
                }
            }
            "out" => {
                let envelope = Envelope::parse(msg).unwrap_or_else(|e| panic!("{name}: {e}: {msg}"));
                crate::wire::assert_scan_agrees(msg);
                let mut actions = Vec::new();
                played.normalizer.on_line(msg, None, &envelope, &mut actions);
                attach(&mut actions, agent_core::event::RawJson::parsed(msg.to_owned()));
                played.actions.extend(actions);
            }
            _ => {}
        }
    }
    played
}

impl Played {
    fn events(&self) -> impl Iterator<Item = (&Option<TurnId>, &EventKind)> {
        self.actions.iter().filter_map(|a| match a {
            Action::Emit { turn, kind, .. } => Some((turn, kind)),
            _ => None,
        })
    }

    fn ends(&self) -> Vec<(TurnId, TurnStatus, TurnResult)> {
        self.events()
            .filter_map(|(turn, kind)| {
                kind.terminal_end().map(|end| (turn.clone().expect("a turn"), end.status, end.result.clone()))
            })
            .collect()
    }

    fn end(&self, n: usize) -> (TurnStatus, TurnResult) {
        let ends = self.ends();
        let (turn, status, result) = ends.get(n).unwrap_or_else(|| panic!("no terminal event {n}: {ends:?}")).clone();
        assert_eq!(turn, self.turns[n]);
        (status, result)
    }

    fn deltas(&self) -> String {
        self.events()
            .filter_map(|(_, kind)| match kind {
                EventKind::MessageDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn requests(&self) -> Vec<&agent_core::request::RequestSpec> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Request { spec, .. } => Some(&**spec),
                _ => None,
            })
            .collect()
    }

    fn writes(&self) -> Vec<&Value> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Write(v) => Some(v),
                _ => None,
            })
            .collect()
    }

    fn tools_completed(&self) -> Vec<(ToolStatus, Option<String>)> {
        self.events()
            .filter_map(|(_, kind)| match kind {
                EventKind::ToolCompleted { status, output, .. } => Some((*status, output.clone())),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn every_transcript_parses_and_every_turn_ends_once() {
    for name in ALL {
        let played = play(name);
        // `j_set_mode_bypass` only changes the permission mode (and is refused).
        assert!(!played.turns.is_empty() || *name == "j_set_mode_bypass", "{name}: no turn");
        let ends = played.ends();
        assert_eq!(ends.len(), played.turns.len(), "{name}: one terminal event per turn: {ends:?}");
        for (n, (turn, _, _)) in ends.iter().enumerate() {
            assert_eq!(turn, &played.turns[n], "{name}: terminal events in turn order");
        }
        for (_, kind) in played.events() {
            assert!(!matches!(kind, EventKind::Warning { .. }), "{name}: {kind:?}");
        }
        assert_eq!(played.normalizer.unknown_frames(), 0, "{name}: unknown kinds");
        // Every reporting action carries the line it came from.
        for action in &played.actions {
            match action {
                Action::Emit { raw, .. } | Action::Request { raw, .. } | Action::Resolved { raw, .. } => {
                    assert!(raw.is_some(), "{name}: {action:?} without raw")
                }
                _ => {}
            }
        }
    }
}

#[test]
fn a_text_turn_streams_deltas_and_reports_usage_and_cost() {
    let played = play("a_simple_partial");
    let (status, result) = played.end(0);
    assert_eq!(status, TurnStatus::Completed);
    assert_eq!(played.deltas(), result.text.clone().unwrap());
    assert_eq!(result.text.as_deref(), Some("Hello from the fake model. You said: Say hello please"));
    let usage = result.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (Some(1669), Some(3)));
    assert!(usage.cost_usd.is_some_and(|c| c > 0.0));
    let messages = played.events().filter(|(_, k)| matches!(k, EventKind::AssistantMessage { .. })).count();
    assert_eq!(messages, 1);
    assert!(played.events().any(|(_, k)| matches!(k, EventKind::UsageUpdated(_))));
    // The session ID arrives with `system/init`.
    assert!(played.actions.iter().any(|a| matches!(a, Action::SessionUpdated { .. })));
}

#[test]
fn cost_per_turn_is_the_difference_of_the_cumulative_total() {
    let played = play("e_multiturn");
    let text = std::fs::read_to_string(path("e_multiturn")).unwrap();
    let totals: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["msg"]["type"] == "result")
        .map(|l| l["msg"]["total_cost_usd"].as_f64().unwrap())
        .collect();
    assert!(totals.len() >= 2 && totals.windows(2).all(|w| w[1] > w[0]), "cumulative: {totals:?}");
    let costs: Vec<f64> = (0..totals.len()).map(|n| played.end(n).1.usage.unwrap().cost_usd.unwrap()).collect();
    assert!((costs[0] - totals[0]).abs() < 1e-12);
    for n in 1..totals.len() {
        assert!((costs[n] - (totals[n] - totals[n - 1])).abs() < 1e-12, "{costs:?} {totals:?}");
    }
}

#[test]
fn an_approved_command_asks_once_and_its_edited_input_is_what_the_host_sent() {
    let played = play("c_permission_allow");
    let requests = played.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].kind, RequestKind::CommandApproval);
    assert_eq!(requests[0].metadata["command"], "touch bash_marker.txt && echo hi");
    let (pending, answer) = &played.answered[0];
    let edited = answer["updatedInput"].clone();
    let ours = requests::encode(pending, &Response::approve_edited(edited)).unwrap();
    assert_eq!(&ours.result, answer, "the host's answer is what the provider sends for approve_edited");
    assert_eq!(played.tools_completed(), [(ToolStatus::Completed, Some("allowed-and-modified".into()))]);
    assert_eq!(played.end(0).0, TurnStatus::Completed);
}

#[test]
fn a_denied_command_is_declined_and_the_turn_completes() {
    let played = play("c_permission_deny");
    let (pending, answer) = &played.answered[0];
    let ours = requests::encode(pending, &Response::deny("Denied by test host: no shell today")).unwrap();
    assert_eq!(&ours.result, answer);
    assert_eq!(played.tools_completed()[0].0, ToolStatus::Declined);
    let (status, result) = played.end(0);
    assert_eq!(status, TurnStatus::Completed);
    let denials = &result.details.unwrap()["permission_denials"];
    assert_eq!(denials[0]["tool_name"], "Bash");
}

#[test]
fn without_a_prompt_the_cli_denies_by_itself() {
    let played = play("c_permission_none");
    assert!(played.requests().is_empty());
    assert_eq!(played.tools_completed()[0].0, ToolStatus::Failed);
}

#[test]
fn an_interrupt_ends_the_turn_interrupted() {
    let played = play("d_interrupt");
    let (status, result) = played.end(0);
    assert_eq!(status, TurnStatus::Interrupted);
    assert_eq!(result.details.unwrap()["terminal_reason"], "aborted_streaming");
    assert!(played.deltas().starts_with("chunk00 "));
    assert_eq!(played.end(1).0, TurnStatus::Completed, "the session goes on");
}

#[test]
fn an_interrupt_during_a_permission_prompt_resolves_the_request() {
    let played = play("d_interrupt_pending_permission");
    let request = &played.requests()[0];
    let resolved: Vec<_> = played
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Resolved { provider_ref, .. } => Some(provider_ref.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, std::slice::from_ref(&request.provider_ref));
    assert!(played.answered.is_empty(), "the late answer finds no pending request");
    assert_eq!(played.end(0).0, TurnStatus::Interrupted);
}

#[test]
fn a_question_is_answered_by_allowing_with_answers() {
    let played = play("g_ask_user_question");
    let request = &played.requests()[0];
    assert_eq!(request.kind, RequestKind::Question);
    assert_eq!(request.questions[0].prompt, "Which color do you prefer?");
    let labels: Vec<&str> = request.questions[0].choices.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["Red", "Blue"]);
    let (pending, answer) = &played.answered[0];
    let ours = requests::encode(pending, &Response::answer("Blue")).unwrap();
    assert_eq!(&ours.result, answer);
    assert_eq!(played.end(0).0, TurnStatus::Completed);
}

#[test]
fn control_requests_the_provider_does_not_serve_get_an_error_answer() {
    for name in ["g_mcp_sdk", "h_hook_callback"] {
        let played = play(name);
        let writes = played.writes();
        assert!(!writes.is_empty(), "{name}");
        assert!(writes.iter().all(|w| w["response"]["subtype"] == "error"), "{name}: {writes:?}");
    }
}

#[test]
fn an_mcp_tool_is_a_permission_request() {
    let played = play("g_mcp_stdio");
    let request = &played.requests()[0];
    assert_eq!(request.kind, RequestKind::Permission);
    assert_eq!(request.metadata["tool_name"], "mcp__echo__echo");
    let started = played.events().find_map(|(_, k)| match k {
        EventKind::ToolStarted { tool, .. } => Some(*tool),
        _ => None,
    });
    assert_eq!(started, Some(agent_core::event::ToolKind::Mcp));
}

#[test]
fn model_errors_fail_the_turn_with_the_cli_reason() {
    let played = play("i_api_error_400");
    // Claude's made-up message reporting the failure is an error, not the agent's reply.
    assert!(!played.events().any(|(_, k)| matches!(k, EventKind::AssistantMessage { .. })));
    let error = played.events().find_map(|(_, k)| match k {
        EventKind::ProviderError { message, code, will_retry } => Some((message.clone(), code.clone(), *will_retry)),
        _ => None,
    });
    assert_eq!(error, Some(("API Error: 400 fake server forced error".into(), Some("unknown".into()), Some(false))));
    let (status, result) = played.end(0);
    assert_eq!(status, TurnStatus::Failed);
    assert!(result.reason.unwrap().contains("400"));
    assert_eq!(result.error.unwrap()["api_error_status"], 400);

    let played = play("i_api_error_529");
    let retry = played.events().find_map(|(_, k)| match k {
        EventKind::ProviderError { will_retry, code, .. } => Some((*will_retry, code.clone())),
        _ => None,
    });
    assert_eq!(retry, Some((Some(true), Some("529".into()))));
    let given_up = played.events().filter(|(_, k)| matches!(k, EventKind::ProviderError { .. })).nth(1);
    assert!(
        matches!(given_up, Some((_, EventKind::ProviderError { code, will_retry: Some(false), .. })) if code.as_deref() == Some("server_error")),
        "{given_up:?}"
    );
    assert!(!played.events().any(|(_, k)| matches!(k, EventKind::AssistantMessage { .. })));
    assert_eq!(played.end(0).0, TurnStatus::Failed);

    let (status, result) = play("i_no_api_key").end(0);
    assert_eq!(status, TurnStatus::Failed);
    assert!(result.reason.unwrap().contains("Not logged in"));
    assert_eq!(play("i_server_down").end(0).0, TurnStatus::Failed);
}

#[test]
fn another_session_id_than_the_one_claude_was_started_with_fails_the_turn_and_ends_claude() {
    // The ID claude was started with: nothing to report.
    let played = play_expecting("f_resume", Some("55c31236-6680-414c-8f78-31951bf0b319"));
    assert!(!played.actions.iter().any(|a| matches!(a, Action::SessionUpdated { .. } | Action::Retire { .. })));
    assert_eq!(json!(played.end(0).0), json!("completed"));

    // Another one: claude is not in the session's conversation (a resume that started fresh).
    let played = play_expecting("f_resume", Some("0b1e5e55-0000-4000-8000-000000000000"));
    let errors: Vec<&str> = played
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit { kind: EventKind::ProviderError { message, .. }, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "said once: {errors:?}");
    assert!(errors[0].contains("not `0b1e5e55") && errors[0].contains("resume it"), "{}", errors[0]);
    assert!(!played.actions.iter().any(|a| matches!(a, Action::SessionUpdated { .. })), "the session keeps its ID");
    assert_eq!(played.normalizer.session_id(), Some("0b1e5e55-0000-4000-8000-000000000000"));
    let (status, result) = played.end(0);
    assert_eq!(json!(status), json!("failed"));
    assert!(result.reason.as_deref().is_some_and(|r| r.contains("not in the session's conversation")), "{result:?}");
    assert!(result.text.is_none(), "what claude answered elsewhere is not the turn's result");
    let last = played.actions.last().expect("actions");
    assert!(matches!(last, Action::Retire { reason } if reason.contains("not `0b1e5e55")), "claude is ended");
}

#[test]
fn a_resumed_conversation_keeps_its_session_id() {
    let played = play("f_resume");
    let ids: Vec<_> = played
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SessionUpdated { session_id, .. } => Some(session_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["55c31236-6680-414c-8f78-31951bf0b319"]);
    assert_eq!(played.normalizer.session_id(), Some("55c31236-6680-414c-8f78-31951bf0b319"));
    assert_eq!(json!(played.end(0).0), json!("completed"));
}

/// A `result` that lacks `is_error` or has fields of unexpected types still ends the turn, with
/// a warning saying it was read leniently.
#[test]
fn a_result_missing_or_mistyping_fields_ends_the_turn_with_a_warning() {
    for (line, status) in [
        (r#"{"type":"result"}"#, TurnStatus::Completed),
        (r#"{"type":"result","subtype":"success","is_error":"yes","num_turns":"two"}"#, TurnStatus::Failed),
    ] {
        let mut normalizer = Normalizer::new(None);
        normalizer.begin_turn(TurnId::from_string("t1")).unwrap();
        let mut actions = Vec::new();
        normalizer.on_line(line, None, &Envelope::parse(line).unwrap(), &mut actions);
        let kinds: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Emit { kind, .. } => Some(kind),
                _ => None,
            })
            .collect();
        assert!(
            matches!(kinds.first(), Some(EventKind::Warning { message }) if message.contains("`result` has fields missing")),
            "{line}: {kinds:?}"
        );
        let ended = match kinds.last() {
            Some(EventKind::TurnCompleted(end) | EventKind::TurnFailed(end) | EventKind::TurnInterrupted(end)) => {
                Some(end.status)
            }
            _ => None,
        };
        assert_eq!(ended, Some(status), "{line}: {kinds:?}");
    }
}

/// A run claude opens with no turn running is its own: its lines are the session's, and a turn
/// begun meanwhile is the next run's, even when the own run's `result` never reads (over the
/// line cap without its type in view).
#[test]
fn a_run_claude_starts_by_itself_is_not_the_waiting_turns() {
    let mut n = Normalizer::new(Some("s1".into()));
    let feed = |n: &mut Normalizer, line: Value| {
        let text = line.to_string();
        let envelope = Envelope::parse(&text).unwrap();
        let mut actions = Vec::new();
        n.on_line(&text, None, &envelope, &mut actions);
        actions
    };
    let init = json!({"type": "system", "subtype": "init", "session_id": "s1"});
    let text = |t: &str| json!({"type": "assistant", "session_id": "s1", "message": {"id": "m", "role": "assistant", "content": [{"type": "text", "text": t}]}});
    let result = |t: &str| json!({"type": "result", "subtype": "success", "is_error": false, "session_id": "s1", "result": t, "total_cost_usd": 0.5});
    let turns = |actions: &[Action]| -> Vec<Option<String>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Emit { turn, .. } => Some(turn.as_ref().map(|t| t.as_str().to_owned())),
                _ => None,
            })
            .collect()
    };
    feed(&mut n, json!({"type": "system", "subtype": "task_notification", "session_id": "s1"}));
    feed(&mut n, init.clone());
    let turn = TurnId::from_string("t2");
    n.begin_turn(turn.clone()).unwrap();
    assert!(n.is_waiting(&turn));
    assert_eq!(turns(&feed(&mut n, text("own reply"))), [None], "the session's");
    // The own run's result never reads (a line the reader could not take): the next run is
    // the turn's all the same.
    feed(&mut n, init.clone());
    assert!(!n.is_waiting(&turn));
    assert_eq!(turns(&feed(&mut n, text("turn reply"))), [Some("t2".to_owned())]);
    let ended = feed(&mut n, result("turn reply"));
    assert!(ended.iter().any(Action::ends_turn), "{ended:?}");

    // An own run's result over the line cap ends no turn; the waiting one goes on.
    let mut n = Normalizer::new(Some("s1".into()));
    feed(&mut n, init);
    n.begin_turn(turn.clone()).unwrap();
    assert!(n.on_unread_result("over the cap").is_empty(), "an own run's end ends no turn");
    assert!(n.is_running(&turn) && !n.is_waiting(&turn));
}
