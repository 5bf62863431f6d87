//! Parser and normalizer tests fed from the captured codex 0.171.0 transcripts in
//! `testdata/transcripts/` (one `{"dir":"in"|"out"|"note","t":..,"msg":..}` per line; the
//! `exec_json_*` files hold raw `codex exec --json` lines instead).
//!
//! The driver plays the client's side of each transcript: `in` lines that start turns or
//! threads drive the turn control of the [`Normalizer`], `out` lines are parsed and normalized
//! exactly as the connection does it.

use agent_core::event::RawJson;
use std::collections::HashMap;
use std::path::PathBuf;

use agent_core::event::{ToolStatus, Usage};
use agent_core::{EventKind, RequestKind, Response, Scope, TurnId, TurnResult, TurnStatus};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::normalize::{Action, Normalizer};
use crate::requests::{self, PendingRequest};
use crate::session::parse_result;
use crate::wire::{self, Message, RpcId};

#[derive(Deserialize)]
struct Line<'a> {
    dir: &'a str,
    #[serde(borrow)]
    msg: &'a RawValue,
}

#[derive(Deserialize)]
struct ClientMessage {
    #[serde(default)]
    id: Option<RpcId>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    result: Option<Value>,
}

/// Everything one transcript produced.
#[derive(Default)]
struct Played {
    actions: Vec<Action>,
    /// Server requests answered in the transcript: the pending request and codex's `in` answer.
    answered: Vec<(PendingRequest, RequestKind, Value)>,
    unknown_frames: u64,
}

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/transcripts").join(format!("{name}.jsonl"))
}

fn play(name: &str) -> Played {
    let text = std::fs::read_to_string(path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut normalizer = Normalizer::new();
    let mut played = Played::default();
    // Our request ids → what they were.
    let mut sent: HashMap<RpcId, String> = HashMap::new();
    let mut turns = 0;
    let mut kinds: HashMap<String, RequestKind> = HashMap::new();
    for line in text.lines() {
        let (dir, msg) = match serde_json::from_str::<Line<'_>>(line) {
            Ok(line) => (line.dir, line.msg.get().to_owned()),
            // `codex exec --json` transcripts: raw stdout lines.
            Err(_) => ("out", line.to_owned()),
        };
        match dir {
            "in" => {
                let message: ClientMessage = serde_json::from_str(&msg).unwrap();
                match (message.id, message.method) {
                    (Some(id), Some(method)) => {
                        if method == "turn/start" {
                            turns += 1;
                            normalizer.begin_turn(TurnId::from_string(format!("turn-{turns}"))).unwrap();
                        }
                        sent.insert(id, method);
                    }
                    (Some(id), None) => {
                        let pending = normalizer.take_request(&id.to_ref()).expect("answered request is pending");
                        let kind = kinds[&id.to_ref()];
                        played.answered.push((pending, kind, message.result.unwrap()));
                    }
                    _ => {}
                }
            }
            "out" => {
                let raw = RawJson::from_string(msg).unwrap();
                let message = wire::parse(raw.get()).unwrap();
                if let Message::Response { id } = &message
                    && let Some(method) = sent.remove(id)
                {
                    let harness = TurnId::from_string(format!("turn-{turns}"));
                    match method.as_str() {
                        "turn/start" => match parse_result::<Value>(raw.get()) {
                            Some(result) => normalizer.admitted(&harness, result["turn"]["id"].as_str().unwrap()),
                            None => normalizer.abort_turn(&harness),
                        },
                        "thread/start" | "thread/resume" => {
                            if let Some(result) = parse_result::<Value>(raw.get()) {
                                normalizer.set_thread(result["thread"]["id"].as_str().unwrap());
                            }
                        }
                        _ => {}
                    }
                    continue;
                }
                let actions = normalizer.on_line(raw);
                for action in &actions {
                    if let Action::Request { spec, .. } = action {
                        kinds.insert(spec.provider_ref.0.clone(), spec.kind);
                    }
                }
                played.actions.extend(actions);
            }
            _ => {}
        }
    }
    // The transcript ends where codex's stdout ended: a turn still running fails as the
    // connection reports it.
    played.actions.extend(normalizer.on_exit(
        "codex app-server exited (exit code 0) without completing the turn",
        None,
        None,
    ));
    played.unknown_frames = normalizer.unknown_frames();
    played
}

fn label(action: &Action) -> String {
    match action {
        Action::Emit { kind: EventKind::ProviderEvent { method }, .. } => format!("~{method}"),
        Action::Emit { kind, .. } => kind.type_name().to_owned(),
        Action::Request { spec, .. } => format!("request:{}", spec.kind),
        Action::Resolved { .. } => "resolved".to_owned(),
        Action::Answer { .. } => "answer".to_owned(),
    }
}

/// Labels in order, runs of the same label folded as `label*n`.
fn labels(played: &Played) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for action in &played.actions {
        let label = label(action);
        match out.last_mut() {
            Some((last, n)) if *last == label => *n += 1,
            _ => out.push((label, 1)),
        }
    }
    out.into_iter().map(|(l, n)| if n == 1 { l } else { format!("{l}*{n}") }).collect()
}

/// The normalized kinds of a transcript, in order.
#[track_caller]
fn check_kinds(name: &str, expected: &str) {
    let played = play(name);
    let actual = labels(&played).join(" ");
    let expected = expected.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(actual, expected, "normalized kinds of {name}");
    for action in &played.actions {
        match action {
            // Only the failure synthesized when stdout ended has no line of its own.
            Action::Emit { kind: EventKind::TurnFailed(end), raw: None, .. }
                if end.result.reason.as_deref().is_some_and(|r| r.contains("without completing the turn")) => {}
            Action::Emit { raw, .. } | Action::Request { raw, .. } | Action::Resolved { raw, .. } => {
                assert!(raw.is_some(), "{name}: every event from a line keeps the line as raw: {action:?}")
            }
            Action::Answer { .. } => {}
        }
    }
}

/// A check of one turn's result.
type ResultCheck<'a> = &'a dyn Fn(&TurnResult);

/// The terminal events of a transcript: status and result.
#[track_caller]
fn check_terminals(name: &str, expected: &[(TurnStatus, ResultCheck<'_>)]) {
    let played = play(name);
    let terminals: Vec<_> = played
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit { kind, turn, .. } => kind.terminal_end().map(|end| (turn.clone(), end.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(terminals.len(), expected.len(), "{name}: one terminal event per turn");
    for (i, ((turn, end), (status, check))) in terminals.iter().zip(expected).enumerate() {
        assert_eq!(turn.as_ref().map(TurnId::as_str), Some(format!("turn-{}", i + 1).as_str()), "{name}");
        assert_eq!(end.status, *status, "{name}: turn {}", i + 1);
        check(&end.result);
    }
}

/// The answers our encoder gives equal the answers recorded in the transcript.
#[track_caller]
fn check_answers(name: &str, responses: &[Response]) {
    let played = play(name);
    assert_eq!(played.answered.len(), responses.len(), "{name}: answered requests");
    for ((pending, kind, recorded), response) in played.answered.iter().zip(responses) {
        let encoded = requests::encode(pending, *kind, response).unwrap();
        assert_eq!(&encoded.result, recorded, "{name}: answer to {response:?}");
        assert!(!encoded.interrupt);
    }
}

fn requests_of(name: &str) -> Vec<agent_core::request::RequestSpec> {
    play(name)
        .actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Request { spec, .. } => Some(*spec),
            _ => None,
        })
        .collect()
}

const SETUP: &str = "warning ~remoteControl/status/changed ~thread/started";
const TEXT_TURN: &str = "~thread/status/changed ~turn/started ~item/started ~item/completed ~item/started";
const TURN_END: &str = "assistant_message usage_updated rate_limit ~thread/status/changed turn_completed";

#[test]
fn every_transcript_normalizes_in_order() {
    // The `warning` before a turn is codex's "Model metadata ... not found" (no model catalog).
    check_kinds(
        "basic_turn",
        &format!(
            "{SETUP} warning {TEXT_TURN} message_delta*3 {TURN_END} warning {TEXT_TURN} message_delta*4 {TURN_END}"
        ),
    );
    check_kinds("cflags_no_config_toml", &format!("{SETUP} {TEXT_TURN} message_delta*4 {TURN_END}"));
    check_kinds("probe_catalog", &format!("{SETUP} {TEXT_TURN} message_delta*3 {TURN_END}"));
    for name in ["probe_default", "probe_default_noproxy", "probe_noplugins", "probe_onlyplugins"] {
        check_kinds(name, &format!("{SETUP} warning {TEXT_TURN} message_delta*3 {TURN_END}"));
    }
    check_kinds("resume_part1", &format!("{SETUP} warning {TEXT_TURN} message_delta*5 {TURN_END}"));
    // Resume: deprecation notice, restored token totals (the next turn's baseline), a goal frame.
    check_kinds(
        "resume_part2",
        &format!(
            "warning ~remoteControl/status/changed warning ~thread/status/changed ~thread/tokenUsage/updated \
         ~thread/goal/cleared warning {TEXT_TURN} message_delta*5 {TURN_END}"
        ),
    );
    let approval = "~thread/status/changed ~turn/started ~item/started ~item/completed ~thread/status/changed \
                    tool_started request:command_approval resolved";
    check_kinds(
        "approval_accept",
        &format!(
            "{SETUP} warning {approval} ~thread/status/changed tool_completed usage_updated rate_limit \
         ~item/started message_delta*11 {TURN_END}"
        ),
    );
    check_kinds(
        "approval_decline",
        &format!(
            "{SETUP} warning {approval} tool_completed ~thread/status/changed usage_updated rate_limit \
         ~item/started message_delta*8 {TURN_END}"
        ),
    );
    check_kinds(
        "approval_cancel",
        &format!(
            "{SETUP} warning {approval} tool_completed ~thread/status/changed usage_updated rate_limit \
         ~thread/status/changed turn_interrupted"
        ),
    );
    let patch = "~thread/status/changed ~turn/started ~item/started ~item/completed tool_started file_change \
                 ~thread/status/changed request:file_change_approval resolved ~thread/status/changed \
                 file_change tool_completed";
    check_kinds(
        "filechange_accept",
        &format!(
            "{SETUP} {patch} ~turn/diff/updated usage_updated rate_limit ~item/started message_delta*9 \
         assistant_message usage_updated rate_limit ~turn/diff/updated ~thread/status/changed turn_completed"
        ),
    );
    check_kinds(
        "filechange_decline",
        &format!("{SETUP} {patch} usage_updated rate_limit ~item/started message_delta*3 {TURN_END}"),
    );
    // The interrupted turn's agent message never completes; turn/completed closes it.
    check_kinds(
        "interrupt",
        &format!(
            "{SETUP} warning {TEXT_TURN} message_delta rate_limit ~thread/status/changed turn_interrupted \
         warning {TEXT_TURN} message_delta*4 {TURN_END}"
        ),
    );
    check_kinds(
        "model_server_unreachable_noretry",
        &format!(
            "{SETUP} ~thread/status/changed ~turn/started ~item/started ~item/completed ~thread/status/changed \
         provider_error turn_failed"
        ),
    );
    // Retrying forever: the transcript ends with the process, which fails the turn.
    check_kinds(
        "model_server_unreachable",
        &format!(
            "{SETUP} ~thread/status/changed ~turn/started ~item/started ~item/completed provider_error*4 turn_failed"
        ),
    );
    check_kinds(
        "stdin_eof_during_turn",
        &format!(
            "{SETUP} ~thread/status/changed ~turn/started ~item/started ~item/completed ~item/started message_delta \
         turn_failed"
        ),
    );
    // Errors answer our own requests; the turn codex refused never starts.
    check_kinds("protocol_edge_cases", "warning ~remoteControl/status/changed");
    // `codex exec --json` is not the app-server protocol: kept, counted, never fatal.
    check_kinds("exec_json_basic", "~(not json-rpc)*5");
    check_kinds("exec_json_resume", "~(not json-rpc)*5");
    check_kinds("exec_json_shell", "~(not json-rpc)*7");
}

#[test]
fn unknown_frames_are_counted_and_known_ones_are_not() {
    for (name, unknown) in [("exec_json_basic", 5), ("exec_json_shell", 7), ("basic_turn", 0), ("resume_part2", 0)] {
        assert_eq!(play(name).unknown_frames, unknown, "{name}");
    }
}

fn tokens(total: u64, input: u64, output: u64) -> Usage {
    let mut usage = Usage::default();
    usage.input_tokens = Some(input);
    usage.cached_input_tokens = Some(0);
    usage.output_tokens = Some(output);
    usage.reasoning_tokens = Some(0);
    usage.total_tokens = Some(total);
    usage
}

#[test]
fn terminal_events_carry_text_usage_and_errors() {
    let text = |expected: &'static str| {
        move |r: &TurnResult| {
            assert_eq!(r.text.as_deref(), Some(expected));
            assert!(r.provider_turn_id.is_some());
        }
    };
    // Each turn reports its own usage, not the thread's running total (30 after two turns).
    let one_call = |r: &TurnResult| assert_eq!(r.usage, Some(tokens(15, 10, 5)));
    check_terminals(
        "basic_turn",
        &[
            (TurnStatus::Completed, &|r| {
                text("Hello from fake model: Say hello")(r);
                one_call(r);
            }),
            (TurnStatus::Completed, &|r| {
                text("Hello from fake model: Second turn please")(r);
                one_call(r);
                assert_eq!(r.details.as_ref().unwrap()["duration_ms"], 44);
            }),
        ],
    );
    check_terminals("resume_part2", &[(TurnStatus::Completed, &one_call)]);
    check_terminals("approval_accept", &[(TurnStatus::Completed, &|r| assert_eq!(r.usage, Some(tokens(30, 20, 10))))]);
    check_terminals(
        "interrupt",
        &[
            (TurnStatus::Interrupted, &|r| {
                // The partial text of the message the interrupt cut.
                assert_eq!(r.text.as_deref(), Some("Thinking very slowly..."));
                assert_eq!(r.usage, None);
            }),
            (TurnStatus::Completed, &text("Hello from fake model: After interrupt, say hi")),
        ],
    );
    check_terminals("approval_cancel", &[(TurnStatus::Interrupted, &|r| assert_eq!(r.text, None))]);
    check_terminals(
        "model_server_unreachable_noretry",
        &[(TurnStatus::Failed, &|r| {
            assert_eq!(r.reason.as_deref(), Some("Connection failed: error sending request"));
            let error = r.error.as_ref().unwrap();
            assert_eq!(error["codexErrorInfo"]["httpConnectionFailed"]["httpStatusCode"], Value::Null);
        })],
    );
    check_terminals(
        "filechange_accept",
        &[(TurnStatus::Completed, &|r| {
            let diff = r.details.as_ref().unwrap()["diff"].as_str().unwrap();
            assert!(diff.contains("+hello from apply_patch"), "{diff}");
        })],
    );
    check_terminals(
        "stdin_eof_during_turn",
        &[(TurnStatus::Failed, &|r| {
            assert!(r.reason.as_deref().unwrap().contains("without completing the turn"));
            assert_eq!(r.text.as_deref(), Some("Thinking very slowly..."));
        })],
    );
}

#[test]
fn provider_errors_carry_codex_error_info_and_retry() {
    let errors: Vec<_> = play("model_server_unreachable")
        .actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Emit { kind: EventKind::ProviderError { message, code, will_retry }, .. } => {
                Some((message, code, will_retry))
            }
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 4);
    assert!(errors.iter().all(|(message, code, retry)| message == "Reconnecting... waiting for network"
        && code.as_deref() == Some("responseStreamDisconnected")
        && *retry == Some(true)));
}

#[test]
fn tools_report_exit_codes_output_and_refusals() {
    let completed = |name: &str| -> Vec<(ToolStatus, Option<String>, Option<i32>)> {
        play(name)
            .actions
            .into_iter()
            .filter_map(|a| match a {
                Action::Emit { kind: EventKind::ToolCompleted { status, output, exit_code, .. }, .. } => {
                    Some((status, output, exit_code))
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(completed("approval_accept"), vec![(ToolStatus::Completed, Some("created-file\n".into()), Some(0))]);
    assert_eq!(completed("approval_decline")[0].0, ToolStatus::Declined);
    assert_eq!(completed("approval_cancel")[0].0, ToolStatus::Declined);
    assert_eq!(completed("filechange_accept"), vec![(ToolStatus::Completed, None, None)]);
    assert_eq!(completed("filechange_decline")[0].0, ToolStatus::Declined);
    let started = play("approval_accept").actions.into_iter().find_map(|a| match a {
        Action::Emit { kind: EventKind::ToolStarted { name, input, .. }, .. } => Some((name, input)),
        _ => None,
    });
    let (name, input) = started.unwrap();
    assert_eq!(name, "shell");
    assert_eq!(input.unwrap()["command"], "/bin/bash -lc 'touch approved.txt && echo created-file'");
}

#[test]
fn approval_requests_keep_what_the_host_needs() {
    let [command] = requests_of("approval_accept").try_into().unwrap();
    assert_eq!(command.kind, RequestKind::CommandApproval);
    assert_eq!(command.provider_ref.0, "0");
    // What the agent asked to run, without the shell codex runs it through (as claude and pi
    // give it, and as a policy matches it); the line codex runs beside it.
    assert_eq!(command.prompt, "Run `touch approved.txt && echo created-file`");
    assert_eq!(command.metadata["command"], "touch approved.txt && echo created-file");
    assert_eq!(command.metadata["command_line"], "/bin/bash -lc 'touch approved.txt && echo created-file'");
    // codex lists only `accept` (and an execpolicy amendment) but honours `acceptForSession`.
    assert_eq!(command.scopes, vec![Scope::Once, Scope::Session]);
    assert_eq!(command.metadata["cwd"], "<workdir>/workspace");
    assert_eq!(command.metadata["available_decisions"].as_array().unwrap().len(), 3);
    // The execpolicy amendment codex offered is a choice; choosing it sends the decision back.
    let values: Vec<&str> = command.choices.iter().map(|c| c.value.as_str()).collect();
    assert_eq!(values, ["accept_with_execpolicy_amendment"]);
    assert!(command.choices[0].description.as_deref().unwrap().contains("`touch approved.txt`"));
    assert_eq!(command.metadata["execpolicy_amendment"], serde_json::json!(["touch", "approved.txt"]));
    let [file] = requests_of("filechange_accept").try_into().unwrap();
    assert_eq!(file.kind, RequestKind::FileChangeApproval);
    assert_eq!(file.scopes, vec![Scope::Once, Scope::Session]);
    assert_eq!(file.prompt, "Apply changes to <workdir>/workspace/patched.txt");
    // The approval carries no diff; it comes from the item announced before it.
    assert_eq!(file.metadata["changes"][0]["diff"], "hello from apply_patch\n");
    assert_eq!(file.metadata["changes"][0]["change"], "add");
    assert!(file.metadata["diff"].as_str().unwrap().contains("hello from apply_patch"));
}

#[test]
fn answers_match_what_codex_accepted() {
    check_answers("approval_accept", &[Response::approve()]);
    check_answers("approval_decline", &[Response::deny("no")]);
    check_answers("approval_cancel", &[Response::cancel("stop")]);
    check_answers("filechange_accept", &[Response::approve()]);
    check_answers("filechange_decline", &[Response::deny("no")]);
}
