//! Parser and normalizer tests fed from every captured pi transcript in
//! `testdata/transcripts/` (copies of `shared/protocols/pi-files/transcripts/`, pi 0.73.1 on
//! Node 20 and 1.6.0 on Node 22: `{"dir":"in"|"out"|"stderr"|"note","t":..,"msg":..}` per line).
//!
//! The driver plays the client's side: `in` lines drive the turn control of the
//! [`Normalizer`] (a `prompt` begins a turn, its response admits or refuses it, `abort` marks
//! it aborting, `extension_ui_response` takes the dialog), `out` lines are normalized exactly as
//! the connection does it (responses to the driver's commands go to their callers).

use std::collections::HashSet;
use std::path::PathBuf;

use agent_core::event::ToolStatus;
use agent_core::{EventKind, RequestKind, TurnId, TurnStatus};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::normalize::{Action, Normalizer};

#[derive(Deserialize)]
struct Line<'a> {
    dir: &'a str,
    #[serde(borrow, default)]
    msg: Option<&'a RawValue>,
}

/// What one transcript produced.
#[derive(Default)]
struct Played {
    /// Terminal statuses, in order.
    ends: Vec<TurnStatus>,
    /// Final texts of the terminal events.
    texts: Vec<Option<String>>,
    deltas: String,
    requests: Vec<RequestKind>,
    tools: Vec<(String, ToolStatus)>,
    /// Lines written back by the normalizer (dismissals, barriers).
    writes: Vec<Value>,
    /// Lines every stdout line was normalized from: all parsed.
    unparsed: usize,
    unknown: u64,
    usage: bool,
}

fn names() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/transcripts");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".jsonl").map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn play(name: &str) -> Played {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("testdata/transcripts/{name}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut normalizer = Normalizer::new();
    let mut played = Played::default();
    let mut ours: HashSet<String> = HashSet::new();
    let mut prompts: HashSet<String> = HashSet::new();
    let mut turns = 0;
    for line in text.lines() {
        let line: Line<'_> = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some(msg) = line.msg else { continue };
        let mut actions = Vec::new();
        match line.dir {
            "in" => {
                let Ok(value) = serde_json::from_str::<Value>(msg.get()) else { continue };
                let id = value["id"].as_str().map(str::to_owned);
                if let Some(id) = &id {
                    ours.insert(id.clone());
                }
                match value["type"].as_str().unwrap_or_default() {
                    "prompt" if value.get("streamingBehavior").is_none() && normalizer.running().is_none() => {
                        turns += 1;
                        normalizer.begin_turn(TurnId::from_string(format!("turn-{turns}"))).unwrap();
                        prompts.extend(id);
                    }
                    "abort" => {
                        if let Some(turn) = normalizer.running().cloned() {
                            normalizer.aborting(&turn);
                        }
                    }
                    "extension_ui_response" => {
                        let dialog = normalizer.take_dialog(value["id"].as_str().unwrap_or_default());
                        if let (Some(dialog), Some(false)) = (dialog, value["confirmed"].as_bool())
                            && let Some(call) = dialog.tool_call
                        {
                            normalizer.denied(&call, None);
                        }
                    }
                    _ => {}
                }
            }
            "out" => {
                let text = msg.get();
                let value: Value = serde_json::from_str(text).unwrap();
                let id = value["id"].as_str();
                if value["type"] == "response" && id.is_some_and(|id| ours.contains(id)) {
                    // The caller's answer, as `Connection::call` returns it.
                    if id.is_some_and(|id| prompts.contains(id))
                        && let Some(turn) = normalizer.running().cloned()
                    {
                        if value["success"] == true {
                            let disposition = value["data"]["disposition"].as_str();
                            actions = normalizer.admitted(&turn, disposition);
                        } else {
                            normalizer.abort_turn(&turn);
                        }
                    }
                } else if !normalizer.on_line(text, &mut actions) {
                    played.unparsed += 1;
                }
            }
            _ => continue,
        }
        for action in actions {
            match action {
                Action::Emit { kind, .. } => match kind {
                    EventKind::MessageDelta { text, .. } => played.deltas.push_str(&text),
                    EventKind::ToolCompleted { item_id, status, .. } => {
                        played.tools.push((item_id.to_string(), status))
                    }
                    EventKind::UsageUpdated(_) => played.usage = true,
                    kind if kind.is_terminal() => {
                        let end = kind.terminal_end().unwrap();
                        played.ends.push(end.status);
                        played.texts.push(end.result.text.clone());
                    }
                    _ => {}
                },
                Action::Request { spec, .. } => played.requests.push(spec.kind),
                Action::Write(line) => played.writes.push(line),
            }
        }
    }
    played.unknown = normalizer.unknown_frames();
    played
}

#[test]
fn every_transcript_parses_and_every_admitted_turn_ends_once() {
    let names = names();
    assert!(names.len() >= 20, "the transcripts are there: {names:?}");
    for name in names {
        let played = play(&name);
        assert_eq!(played.unparsed, 0, "{name}: every stdout line is a pi frame");
        assert_eq!(played.unknown, 0, "{name}: every frame type is known");
        // `errors` ends on a failed run whose barrier response is not in the transcript.
        assert!(name == "errors" || !played.ends.is_empty(), "{name}: at least one turn ended");
    }
}

#[track_caller]
fn check(name: &str, ends: &[TurnStatus]) -> Played {
    let played = play(name);
    assert_eq!(played.ends, ends, "{name}: the turns' ends");
    played
}

use TurnStatus::{Completed, Failed, Interrupted};

#[test]
fn text_turns_stream_deltas_on_both_versions() {
    for name in ["text", "text-earendil16-node22", "text_responses", "text-netns", "text-netns-no-offline"] {
        let played = play(name);
        assert!(played.ends.iter().all(|s| *s == Completed), "{name}: {:?}", played.ends);
        assert!(
            played.deltas.starts_with("Hello from the fake model. You said: Say hello"),
            "{name}: {}",
            played.deltas
        );
        assert_eq!(played.texts[0].as_deref(), Some("Hello from the fake model. You said: Say hello"), "{name}");
        assert!(played.usage, "{name}: usage is reported");
    }
}

#[test]
fn tool_calls_complete_and_the_final_answer_ends_the_turn() {
    for name in ["tools", "tools-earendil16-node22", "tools_responses", "tools_responses-netns"] {
        let played = play(name);
        assert!(played.ends.iter().all(|s| *s == Completed), "{name}: {:?}", played.ends);
        assert!(played.tools.iter().any(|(_, s)| *s == ToolStatus::Completed), "{name}");
        assert!(played.requests.is_empty(), "{name}: no extension, no requests");
    }
}

#[test]
fn abort_interrupts_while_streaming_and_while_a_tool_runs() {
    for name in ["abort", "abort-earendil16-node22"] {
        let played = play(name);
        let interrupted = played.ends.iter().filter(|s| **s == Interrupted).count();
        assert_eq!(interrupted, 2, "{name}: {:?}", played.ends);
        assert!(played.ends.last() == Some(&Completed), "{name}: the session goes on: {:?}", played.ends);
        assert!(played.tools.iter().any(|(_, s)| *s == ToolStatus::Interrupted), "{name}: {:?}", played.tools);
    }
}

#[test]
fn extension_dialogs_become_requests_and_denials_declines() {
    for name in ["extension_ui", "extension_ui-earendil16-node22"] {
        let played = play(name);
        assert!(played.requests.contains(&RequestKind::CommandApproval), "{name}: {:?}", played.requests);
        assert!(played.requests.contains(&RequestKind::Question), "{name}: {:?}", played.requests);
        assert!(played.tools.iter().any(|(_, s)| *s == ToolStatus::Declined), "{name}: {:?}", played.tools);
        assert!(played.ends.iter().all(|s| *s == Completed), "{name}: {:?}", played.ends);
    }
}

#[test]
fn a_failed_run_on_0_73_asks_for_a_barrier_and_a_retry_keeps_the_turn_open() {
    // retry.jsonl: FAIL500 with auto-retry on; the driver aborts the retry (`auto_retry_end`
    // with `success: false`), which fails the turn; the second prompt fails without a retry.
    let played = play("retry");
    assert_eq!(played.ends.first(), Some(&Failed), "{:?}", played.ends);
    assert!(played.writes.iter().any(|w| w["type"] == "get_state"), "a barrier was asked for: {:?}", played.writes);
    // errors.jsonl: the server is down and auto-retry is off: the barrier decides, and its
    // response is not in the transcript, so the turn is still open at the end.
    let played = play("errors");
    assert!(played.writes.iter().any(|w| w["type"] == "get_state"));
}

#[test]
fn steering_and_follow_ups_stay_inside_one_turn() {
    let played = check("steer_followup", &[Completed]);
    assert!(played.deltas.contains("STEER") && played.deltas.ends_with("FOLLOWUP via prompt"), "{}", played.deltas);
    check("steer_followup-earendil16-node22", &[Completed]);
}

#[test]
fn resumed_sessions_complete_their_turns() {
    for name in [
        "session_resume",
        "session_resume-earendil16-node22",
        "session_resume-netns-no-offline",
        "lazy_session_file",
        "bash_command",
    ] {
        let played = play(name);
        assert!(played.ends.iter().all(|s| *s == Completed), "{name}: {:?}", played.ends);
    }
}

#[test]
fn a_dialog_while_no_turn_runs_is_dismissed() {
    let mut normalizer = Normalizer::new();
    let mut actions = Vec::new();
    let line = r#"{"type":"extension_ui_request","id":"d-1","method":"confirm","title":"Sure?","message":"x"}"#;
    assert!(normalizer.on_line(line, &mut actions));
    let written: Vec<&Value> =
        actions.iter().filter_map(|a| if let Action::Write(v) = a { Some(v) } else { None }).collect();
    assert_eq!(written, [&serde_json::json!({"type": "extension_ui_response", "id": "d-1", "cancelled": true})]);
    assert!(!actions.iter().any(|a| matches!(a, Action::Request { .. })));
}

/// Dialogs a newer pi might show: one whose method this provider does not know (or that has
/// none) may be one pi waits on, so it is dismissed; a numbered one is asked and answered under
/// its number; one without an ID is reported, since nothing could answer it.
#[test]
fn dialogs_this_provider_cannot_read_are_dismissed_or_reported() {
    let mut normalizer = Normalizer::new();
    let turn = TurnId::from_string("t1");
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.admitted(&turn, Some("started"));
    let lines = [
        r#"{"type":"extension_ui_request","id":"d-1","method":"multiselect","title":"Pick","options":["a","b"]}"#,
        r#"{"type":"extension_ui_request","id":"d-2","title":"No method"}"#,
        r#"{"type":"extension_ui_request","id":"d-3","method":"setStatus","statusKey":"k","statusText":"busy"}"#,
        r#"{"type":"extension_ui_request","id":7,"method":"confirm","title":"Sure?","message":"x"}"#,
        r#"{"type":"extension_ui_request","method":"confirm","title":"Sure?","message":"x"}"#,
    ];
    let mut actions = Vec::new();
    for line in lines {
        normalizer.on_line(line, &mut actions);
    }
    let seen: Vec<String> = actions
        .iter()
        .filter_map(|action| match action {
            Action::Write(line) => Some(format!("write {} {}", line["id"], line["cancelled"])),
            Action::Request { spec, .. } => Some(format!("request {}", spec.provider_ref.0)),
            Action::Emit { kind: EventKind::Warning { .. }, .. } => Some("warning".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(seen, ["write \"d-1\" true", "warning", "write \"d-2\" true", "warning", "request 7", "warning"]);
    let dialog = normalizer.take_dialog("7").expect("the numbered dialog waits");
    let (answer, _) = crate::session::encode(&dialog, &agent_core::Response::approve()).unwrap();
    assert_eq!(answer, serde_json::json!({"type": "extension_ui_response", "id": 7, "confirmed": true}));
}

#[test]
fn a_1_6_turn_ends_at_agent_settled_not_at_agent_end() {
    let mut normalizer = Normalizer::new();
    let turn = TurnId::from_string("t1");
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.admitted(&turn, Some("started"));
    let mut actions = Vec::new();
    let end = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"stopReason":"stop"}}"#;
    normalizer.on_line(end, &mut actions);
    normalizer.on_line(r#"{"type":"agent_end","messages":[],"willRetry":true}"#, &mut actions);
    normalizer.on_line(r#"{"type":"agent_end","messages":[],"willRetry":false}"#, &mut actions);
    assert!(!actions.iter().any(Action::ends_turn), "agent_end is not idle in 1.6.0");
    normalizer.on_line(r#"{"type":"agent_settled","aborted":false}"#, &mut actions);
    assert_eq!(actions.iter().filter(|a| a.ends_turn()).count(), 1);
    assert!(normalizer.running().is_none());
}

#[test]
fn thinking_deltas_are_reasoning() {
    let mut normalizer = Normalizer::new();
    let turn = TurnId::from_string("t1");
    normalizer.begin_turn(turn).unwrap();
    let mut actions = Vec::new();
    let line = r#"{"type":"message_update","assistantMessageEvent":{"type":"thinking_delta","contentIndex":0,"delta":"hmm","partial":{"big":1}}}"#;
    normalizer.on_line(line, &mut actions);
    match actions.as_slice() {
        [Action::Emit { kind: EventKind::ReasoningDelta { text, .. }, raw: Some(raw), .. }] => {
            assert_eq!(text, "hmm");
            assert!(!raw.get().contains("partial"), "the raw JSON of a delta leaves out pi's partial message");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn session_stats_after_a_turn_become_a_session_usage_event() {
    let mut normalizer = Normalizer::new();
    let turn = TurnId::from_string("t1");
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.admitted(&turn, None);
    let mut actions = Vec::new();
    normalizer.on_line(r#"{"type":"agent_end","messages":[]}"#, &mut actions);
    let stats = actions.iter().find_map(|a| match a {
        Action::Write(line) if line["type"] == "get_session_stats" => line["id"].as_str().map(str::to_owned),
        _ => None,
    });
    let id = stats.expect("the stats are asked for after the turn");
    let reply = serde_json::json!({"id": id, "type": "response", "command": "get_session_stats", "success": true,
        "data": {"tokens": {"input": 102, "output": 20, "cacheRead": 3, "cacheWrite": 0, "total": 122}, "cost": 0.5}});
    let mut actions = Vec::new();
    normalizer.on_line(&reply.to_string(), &mut actions);
    match actions.as_slice() {
        [Action::Emit { turn: None, kind: EventKind::UsageUpdated(usage), .. }] => {
            assert_eq!((usage.input_tokens, usage.output_tokens, usage.total_tokens), (Some(102), Some(20), Some(122)));
            assert_eq!((usage.cached_input_tokens, usage.cost_usd), (Some(3), Some(0.5)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_extension_error_is_a_warning() {
    let mut normalizer = Normalizer::new();
    let mut actions = Vec::new();
    let line = r#"{"type":"extension_error","extensionPath":"/x/ext.ts","event":"tool_call","error":"boom"}"#;
    assert!(normalizer.on_line(line, &mut actions));
    match actions.as_slice() {
        [Action::Emit { kind: EventKind::Warning { message }, .. }] => {
            assert_eq!(message, "a pi extension failed: boom")
        }
        other => panic!("{other:?}"),
    }
}

/// Two bash calls running at once: each approval names the call it asks about, whichever
/// started last.
#[test]
fn an_approval_names_the_call_its_gate_asked_about() {
    let mut normalizer = Normalizer::new();
    let turn = TurnId::from_string("t1");
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.admitted(&turn, None);
    let mut actions = Vec::new();
    for (call, command) in [("call_a", "echo a"), ("call_b", "echo b")] {
        let start = serde_json::json!({"type": "tool_execution_start", "toolCallId": call, "toolName": "bash",
            "args": {"command": command}});
        normalizer.on_line(&start.to_string(), &mut actions);
    }
    let dialog = |id: &str, title: &str, message: &str| {
        serde_json::json!({"type": "extension_ui_request", "id": id, "method": "confirm", "title": title,
            "message": message})
        .to_string()
    };
    normalizer.on_line(&dialog("d-1", "Allow bash? [call_a]", "echo a"), &mut actions);
    // A title without the call (a call another tool made): the last started bash.
    normalizer.on_line(&dialog("d-2", "Allow bash?", "echo b"), &mut actions);
    let asked: Vec<(String, String, String)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Request { spec, .. } => Some((
                spec.metadata.get("tool_call_id")?.as_str()?.to_owned(),
                spec.metadata.get("title")?.as_str()?.to_owned(),
                spec.metadata.get("input")?["command"].as_str()?.to_owned(),
            )),
            _ => None,
        })
        .collect();
    let expected = |call: &str, command: &str| (call.to_owned(), "Allow bash?".to_owned(), command.to_owned());
    assert_eq!(asked, [expected("call_a", "echo a"), expected("call_b", "echo b")]);
}
