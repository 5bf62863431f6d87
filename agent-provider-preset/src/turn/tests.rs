//! The turn reader's cases: exit statuses and matchers, events, approvals, pi's run ends.

use serde_json::json;

use super::*;
use crate::AllowList;

fn preset(json: Value) -> Preset {
    Preset::from_json(&json.to_string(), "test", &AllowList::new().allow("cli")).unwrap()
}

fn lines_preset() -> Preset {
    preset(json!({
        "schema_version": 1, "id": "lines", "program": "cli", "args": ["{prompt}"], "framing": "lines",
        "matchers": {
            "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}],
            "failure": [{"when": "^FAILED (?P<why>.*)$", "value": "why"}, {"when": "^FAILED$"}],
            "retry": [{"when": "^RETRYING"}]
        },
        "events": [{"when": "^SAY (?P<t>.*)$", "emit": "assistant_message", "text": "t"}],
        "other_lines": "drop"
    }))
}

fn feed(reader: &mut TurnReader<'_>, lines: &[&str]) -> Vec<Action> {
    let mut actions = Vec::new();
    for line in lines {
        reader.on_line(line, &|_| false, &mut actions);
    }
    actions
}

fn exit(code: i32) -> ExitReport {
    ExitReport::new(Some(ExitStatus::code(code)), Some("cli: bye".into()))
}

#[track_caller]
fn check(lines: &[&str], code: i32, status: TurnStatus, reason: Option<&str>, text: Option<&str>) {
    let preset = lines_preset();
    let mut reader = TurnReader::new(&preset, None, None);
    feed(&mut reader, lines);
    let outcome = reader.outcome(&exit(code), None);
    assert_eq!(outcome.status, status, "{lines:?} exit {code}: {outcome:?}");
    match reason {
        Some(reason) => assert!(outcome.reason.as_deref().is_some_and(|r| r.contains(reason)), "{outcome:?}"),
        None => assert_eq!(outcome.reason, None),
    }
    assert_eq!(outcome.text.as_deref(), text);
}

/// A line over the cap may have been the reply (or a later one a rule would have kept): a
/// turn that dropped one is not reported completed, and one without a result line says what
/// was dropped.
#[test]
fn a_dropped_over_long_line_keeps_a_turn_from_completing_and_is_named() {
    let preset = lines_preset();
    let max = preset.max_line_bytes;
    let outcome = |lines: &[&str], code: i32| {
        let mut reader = TurnReader::new(&preset, None, None);
        let mut actions = Vec::new();
        reader.too_long(max + 10, (b"", b""), &mut actions);
        reader.too_long(max + 5, (b"", b""), &mut actions);
        assert_eq!(actions.len(), 2, "each dropped line is warned of");
        feed(&mut reader, lines);
        reader.outcome(&exit(code), None)
    };
    let named =
        format!("2 stdout line(s) over the {max}-byte limit (`max_line_bytes`), the longest {} bytes", max + 10);
    let after_result = outcome(&["RESULT done"], 0);
    assert_eq!(after_result.status, TurnStatus::Failed, "{after_result:?}");
    assert!(after_result.reason.as_deref().is_some_and(|r| r.contains(&named)), "{after_result:?}");
    let without = outcome(&["SAY hi"], 0);
    assert_eq!(without.status, TurnStatus::Failed);
    let reason = without.reason.unwrap_or_default();
    assert!(reason.contains("without a result line") && reason.contains(&named), "{reason}");
    let failed = outcome(&["FAILED out of credits"], 0);
    assert_eq!(failed.reason.as_deref(), Some("out of credits"), "a failure line says why itself");
}

/// A CLI that writes garbage without end makes a few dozen warnings, not one per line, and
/// its result still counts.
#[test]
fn a_flood_of_unreadable_lines_is_warned_of_a_few_times() {
    let preset = preset(json!({
        "schema_version": 1, "id": "json", "program": "cli", "args": ["{prompt}"], "framing": "jsonl",
        "matchers": {"result": [{"when": {"/type": "result"}, "value": "/text"}]}
    }));
    let mut reader = TurnReader::new(&preset, None, None);
    let mut lines = vec!["not json {"; 1000];
    lines.push(r#"{"type": "result", "text": "done"}"#);
    let warnings: Vec<String> = feed(&mut reader, &lines)
        .into_iter()
        .filter_map(|action| match action {
            Action::Emit { kind: EventKind::Warning { message }, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 32 + 4, "the first 32, then at 64, 128, 256 and 512 lines");
    assert!(warnings[0].ends_with("is not JSON (10 bytes)"), "{}", warnings[0]);
    assert!(warnings[35].contains("(512 unreadable stdout lines so far;"), "{}", warnings[35]);
    let outcome = reader.outcome(&exit(0), None);
    assert_eq!((outcome.status, outcome.text.as_deref()), (TurnStatus::Completed, Some("done")));
}

#[test]
fn the_exit_status_and_the_matchers_decide_together() {
    check(&["SAY hi", "RESULT done"], 0, TurnStatus::Completed, None, Some("done"));
    // Exit 0 with a failure line: the failure wins.
    check(&["RESULT done", "FAILED out of credits"], 0, TurnStatus::Failed, Some("out of credits"), Some("done"));
    // Exit 1 with a result line: not a clean finish; the text is kept.
    check(
        &["RESULT done"],
        1,
        TurnStatus::Failed,
        Some("lines exited (exit code 1) after its result line"),
        Some("done"),
    );
    check(&["SAY hi"], 0, TurnStatus::Failed, Some("without a result line; stderr:\ncli: bye"), None);
    check(&[], 3, TurnStatus::Failed, Some("exit code 3"), None);
    // A failure line without a reason: the CLI's stderr has it.
    check(&["FAILED"], 1, TurnStatus::Failed, Some("lines reported a failure (exit code 1); stderr:\ncli: bye"), None);
    // A retry takes back what was reported before it: the outcome is what follows.
    check(&["FAILED overloaded", "RETRYING", "RESULT done"], 0, TurnStatus::Completed, None, Some("done"));
    check(&["FAILED overloaded", "RETRYING", "FAILED again"], 0, TurnStatus::Failed, Some("again"), None);
    check(&["RESULT early", "RETRYING"], 0, TurnStatus::Failed, Some("without a result line"), None);
    let preset = lines_preset();
    let mut reader = TurnReader::new(&preset, None, None);
    feed(&mut reader, &["FAILED overloaded"]);
    assert!(reader.finished());
    feed(&mut reader, &["RETRYING in 2 s"]);
    assert!(!reader.finished(), "the wait for the exit starts again at the next outcome");
    assert_eq!(reader.outcome(&exit(0), Some("stopped")).status, TurnStatus::Interrupted);
}

#[test]
fn lines_become_events_and_the_session_id_is_found_once() {
    let preset = lines_preset();
    let mut reader = TurnReader::new(&preset, Some("old".into()), None);
    let actions = feed(&mut reader, &["SESSION s-1", "SAY hello there", "noise", "SESSION s-1", "RESULT ok"]);
    let summary: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::Emit { kind: EventKind::AssistantMessage { text, .. }, raw } => {
                format!("say {text} {}", raw.as_ref().map(|r| r.get()).unwrap_or_default())
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(summary, ["say hello there \"SAY hello there\""]);
    assert_eq!(reader.session_id(), Some("s-1"));
    assert!(reader.finished());
    let mut cut = TurnReader::new(&preset, None, None);
    feed(&mut cut, &["SESSION s-2", "SAY working"]);
    assert_eq!((cut.session_id(), cut.finished()), (Some("s-2"), false));
}

#[test]
fn a_continued_conversation_reported_as_another_fails_the_turn_without_taking_it() {
    let resuming = preset(json!({
        "schema_version": 1, "id": "lines", "program": "cli", "framing": "lines",
        "args": [{"if": "resume", "then": ["--resume", "{session_id}"]}, "{prompt}"],
        "matchers": {
            "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]
        },
        "other_lines": "drop"
    }));
    let mut reader = TurnReader::new(&resuming, Some("s-1".into()), None);
    feed(&mut reader, &["SESSION s-1"]);
    assert_eq!(reader.foreign(), None, "the conversation asked for");
    feed(&mut reader, &["SESSION s-2", "RESULT done"]);
    assert_eq!((reader.foreign(), reader.session_id()), (Some("s-2"), Some("s-1")));
    let outcome = reader.outcome(&exit(0), None);
    assert_eq!(outcome.status, TurnStatus::Failed);
    let reason = outcome.reason.unwrap_or_default();
    assert!(reason.contains("asked to continue conversation `s-1` but reported `s-2`"), "{reason}");

    // An ID that would pass as an option of the CLI's is not taken, whatever the CLI says.
    let mut fresh = TurnReader::new(&resuming, None, None);
    let actions = feed(&mut fresh, &["SESSION --version", "RESULT done"]);
    assert_eq!(fresh.session_id(), None);
    assert!(
        matches!(&actions[..], [Action::Emit { kind: EventKind::Warning { message }, .. }]
            if message.contains("must not start with `-`")),
        "{actions:?}"
    );
    // Nor one too long to pass back as one argument: every later turn's spawn would fail.
    let mut fresh = TurnReader::new(&resuming, None, None);
    let long = format!("SESSION {}", "s".repeat(200_000));
    let actions = feed(&mut fresh, &[&long, "RESULT done"]);
    assert_eq!(fresh.session_id(), None);
    assert!(
        matches!(&actions[..], [Action::Emit { kind: EventKind::Warning { message }, .. }]
            if message.contains("longer than 4096 bytes") && message.len() < 200),
        "{actions:?}"
    );
    let mut total = None;
    let mut huge = Usage::default();
    huge.input_tokens = Some(u64::MAX);
    add_usage(&mut total, &huge);
    add_usage(&mut total, &huge);
    assert_eq!(total.and_then(|u| u.input_tokens), Some(u64::MAX), "saturates");

    // A preset that never continues a conversation starts a fresh one each turn, by design.
    let lines = lines_preset();
    let mut fresh = TurnReader::new(&lines, Some("s-1".into()), None);
    feed(&mut fresh, &["SESSION s-2"]);
    assert_eq!((fresh.foreign(), fresh.session_id()), (None, Some("s-2")));
}

fn shipped(name: &str) -> Preset {
    let text = crate::SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("shipped");
    Preset::from_json(text, name, &AllowList::shipped()).unwrap()
}

/// Claude's approval conversation, from lines claude 2.1.197 wrote: the tool use becomes a
/// request with its metadata, other control requests are refused, a withdrawn request is
/// resolved, and stdin closes after the result.
#[test]
fn claudes_permission_prompt_becomes_requests() {
    let preset = shipped("claude-print.json");
    let meta =
        ApprovalMeta { risk: Some("high".into()), audience: Some("ops".into()), timeout: Duration::from_secs(9) };
    let mut reader = TurnReader::new(&preset, None, Some(meta));
    let lines = [
        r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"61cf009a","tools":["Bash"]}"#,
        r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"touch x"}}]},"session_id":"61cf009a"}"#,
        r#"{"type":"control_request","request_id":"req-a","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"touch x"},"tool_use_id":"toolu_1"}}"#,
        r#"{"type":"control_request","request_id":"req-b","request":{"subtype":"hook_callback","callback_id":"hook_0"}}"#,
        r#"{"type":"control_cancel_request","request_id":"req-a"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"denied","is_error":true,"tool_use_id":"toolu_1"}]}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"61cf009a","total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5}}"#,
    ];
    let mut actions = Vec::new();
    for line in lines {
        reader.on_line(line, &|id| id == "toolu_1", &mut actions);
    }
    let mut seen = Vec::new();
    for action in &actions {
        seen.push(match action {
            Action::Emit { kind, .. } => kind.type_name().to_owned(),
            Action::Request { spec, pending, .. } => {
                assert_eq!(spec.metadata["risk"], "high");
                assert_eq!(spec.metadata["audience"], "ops");
                assert_eq!(spec.metadata["timeout_ms"], 9000);
                assert_eq!(spec.timeout, Some(Duration::from_secs(9)));
                assert_eq!(spec.scopes, [agent_core::Scope::Once]);
                format!("request {} {}", spec.kind, pending.request_id)
            }
            Action::Write(line) => format!("write {}", line["response"]["subtype"].as_str().unwrap_or_default()),
            Action::Resolved(r) => format!("resolved {}", r.0),
            Action::CloseStdin => "close stdin".to_owned(),
        });
    }
    assert_eq!(
        seen,
        [
            "provider_event",
            "tool_started",
            "request command_approval req-a",
            "write error",
            "resolved req-a",
            "tool_completed",
            "usage_updated",
            "close stdin",
        ]
    );
    let declined = actions.iter().any(|a| {
        matches!(
            a,
            Action::Emit { kind: EventKind::ToolCompleted { status: agent_core::event::ToolStatus::Declined, .. }, .. }
        )
    });
    assert!(declined, "a denied tool use completes as declined");
    assert_eq!(reader.session_id(), Some("61cf009a"));
    let outcome = reader.outcome(&exit(0), None);
    assert_eq!((outcome.status, outcome.text.as_deref()), (TurnStatus::Completed, Some("Done.")));
    assert_eq!(outcome.usage.and_then(|u| u.cost_usd), Some(0.01));
}

/// A control request over the line cap (the permission to write a large file carries the
/// file) cannot be read whole, but its first bytes name it: in an approval conversation it is
/// denied at once with a warning, where the CLI waited for its answer for good.
#[test]
fn an_over_long_control_request_is_denied() {
    let preset = shipped("claude-print.json");
    let meta = ApprovalMeta { risk: None, audience: None, timeout: Duration::from_secs(9) };
    let mut reader = TurnReader::new(&preset, None, Some(meta));
    let head = br#"{"type":"control_request","request_id":"req-long","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"content":"xxxx"#;
    let mut actions = Vec::new();
    reader.too_long(preset.max_line_bytes + 1, (head, b"xxxx\"}}}"), &mut actions);
    let answer = actions.iter().find_map(|a| match a {
        Action::Write(line) => Some(line.clone()),
        _ => None,
    });
    let answer = answer.expect("the request is answered");
    assert_eq!(answer["response"]["request_id"], "req-long");
    assert_eq!(answer["response"]["response"]["behavior"], "deny");
    let warned = actions.iter().any(
        |a| matches!(a, Action::Emit { kind: EventKind::Warning { message }, .. } if message.contains("can_use_tool")),
    );
    assert!(warned, "{actions:?}");

    // Without an approval conversation nothing is answered: the line is only warned of.
    let mut reader = TurnReader::new(&preset, None, None);
    let mut actions = Vec::new();
    reader.too_long(preset.max_line_bytes + 1, (head, b""), &mut actions);
    assert!(!actions.iter().any(|a| matches!(a, Action::Write(_))), "{actions:?}");
}

/// A CLI that numbers its control requests is answered under the numbers; one without an ID
/// it could match an answer with gets a warning instead of an answer under `""`.
#[test]
fn numbered_control_requests_are_answered_under_their_numbers() {
    let preset = shipped("claude-print.json");
    let meta = ApprovalMeta { risk: None, audience: None, timeout: Duration::from_secs(9) };
    let mut reader = TurnReader::new(&preset, None, Some(meta));
    let lines = [
        r#"{"type":"control_request","request_id":7,"request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}"#,
        r#"{"type":"control_request","request_id":8,"request":{"subtype":"hook_callback","callback_id":"hook_0"}}"#,
        r#"{"type":"control_cancel_request","request_id":7}"#,
        r#"{"type":"control_request","request_id":null,"request":{"subtype":"hook_callback","callback_id":"hook_1"}}"#,
    ];
    let mut actions = Vec::new();
    for line in lines {
        reader.on_line(line, &|_| false, &mut actions);
    }
    let seen: Vec<String> = actions
        .iter()
        .map(|action| match action {
            Action::Request { pending, .. } => format!("request {}", pending.request_id.to_json()),
            Action::Write(line) => {
                format!("write {} {}", line["response"]["subtype"], line["response"]["request_id"])
            }
            Action::Resolved(r) => format!("resolved {}", r.0),
            Action::Emit { kind, .. } => kind.type_name().to_owned(),
            Action::CloseStdin => "close stdin".to_owned(),
        })
        .collect();
    assert_eq!(seen, ["request 7", "write \"error\" 8", "resolved 7", "warning"]);
}

/// Pi's run ends at its last `agent_end`: one that says no retry follows (0.75.4 and later;
/// from 0.80.4 `agent_settled` confirms it), or 0.73.1's, which says nothing, unless an
/// `auto_retry_start` or a run pi continues with (`agent_start`) takes it back. From 0.75.4 a
/// compaction after it takes it back too (pi may continue the run), and its end decides when
/// no run follows; 0.73.1 does not wait for a compaction before it exits. The last assistant
/// message decides.
#[test]
fn pis_run_end_decides() {
    let preset = shipped("pi-print.json");
    let error = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"500: overloaded","usage":{"input":1,"output":0}}}"#;
    let retried = r#"{"type":"agent_end","messages":[],"willRetry":true}"#;
    let good = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Hi"}],"stopReason":"stop","usage":{"input":3,"output":2,"cost":{"total":0.5}}}}"#;
    let end = r#"{"type":"agent_end","messages":[],"willRetry":false}"#;
    let settled = r#"{"type":"agent_settled","aborted":false}"#;
    let old_end = r#"{"type":"agent_end","messages":[]}"#;
    let retry = r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000}"#;
    let compacting = r#"{"type":"compaction_start","reason":"threshold"}"#;
    let compacted = r#"{"type":"compaction_end","reason":"threshold","aborted":false,"willRetry":false}"#;
    let continues = r#"{"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":true}"#;
    let outcome = |lines: &[&str]| {
        let mut reader = TurnReader::new(&preset, None, None);
        feed(&mut reader, lines);
        (reader.finished(), reader.outcome(&exit(0), None))
    };

    let (finished, _) = outcome(&[error, retried]);
    assert!(!finished, "a retry follows");
    let (finished, done) = outcome(&[r#"{"type":"session","version":3,"id":"01a2"}"#, error, retried, good, end]);
    assert!(finished, "0.75.4 to 0.80.3 send nothing after it");
    assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");
    let (finished, _) = outcome(&[good, end, compacting]);
    assert!(!finished, "a compaction may continue the run");
    let (finished, _) = outcome(&[good, end, r#"{"type":"agent_start"}"#]);
    assert!(!finished, "a run pi continues with (for queued messages, say) takes it back");
    let (finished, done) = outcome(&[good, end, compacting, compacted]);
    assert!(finished);
    assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");
    let (finished, _) = outcome(&[error, end, compacting, continues]);
    assert!(!finished, "the run continues after the compaction");
    let (_, done) = outcome(&[error, end, compacting, continues, r#"{"type":"agent_start"}"#, good, end]);
    assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");

    let (finished, recovered) = outcome(&[error, retried, good, end, settled]);
    assert!(finished);
    assert_eq!((recovered.status, recovered.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{recovered:?}");
    let usage = recovered.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.cost_usd), (Some(4), Some(2), Some(0.5)), "summed");
    let (_, failed) = outcome(&[error, end, settled]);
    assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));

    // 0.73.1: its `agent_end` ends the run, unless a retry follows.
    let (finished, failed) = outcome(&[error, old_end]);
    assert!(finished);
    assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));
    let (finished, _) = outcome(&[error, old_end, retry]);
    assert!(!finished, "the retry takes the failure back");
    let (finished, failed) = outcome(&[error, old_end, compacting]);
    assert!(finished, "0.73.1 exits without finishing a compaction");
    assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));
    let (_, recovered) = outcome(&[error, old_end, retry, good, old_end]);
    assert_eq!((recovered.status, recovered.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{recovered:?}");
}

/// A session ID that would pass as an option of the CLI's is not taken, with a warning, on a
/// turn that continues a conversation as on one that starts one: it is not the report of
/// another conversation, and the turn goes on in the one it continues.
#[test]
fn an_invalid_session_id_is_not_taken_on_a_continued_turn_either() {
    let resuming = preset(json!({
        "schema_version": 1, "id": "lines", "program": "cli", "framing": "lines",
        "args": [{"if": "resume", "then": ["--resume", "{session_id}"]}, "{prompt}"],
        "matchers": {
            "session_id": [{"when": "^SESSION ?(?P<id>.*)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]
        },
        "other_lines": "drop"
    }));
    for reported in ["SESSION --version", "SESSION ", "SESSION s-1\u{7}"] {
        let mut reader = TurnReader::new(&resuming, Some("s-1".into()), None);
        let actions = feed(&mut reader, &[reported, "RESULT done"]);
        assert_eq!((reader.foreign(), reader.session_id()), (None, Some("s-1")), "{reported:?}");
        assert!(
            matches!(&actions[..], [Action::Emit { kind: EventKind::Warning { message }, .. }]
                if message.contains("it is not taken")),
            "{reported:?}: {actions:?}"
        );
        let outcome = reader.outcome(&exit(0), None);
        assert_eq!(outcome.status, TurnStatus::Completed, "{reported:?}: {outcome:?}");
    }
}

/// In `session_id`, `result` and `failure`, a rule with a `value` that is missing from the line
/// does not decide: the next rule is tried. A rule without `value` (or with `kept`) takes every
/// line its `when` matches.
#[test]
fn a_matcher_whose_value_is_missing_passes_the_line_to_the_next_rule() {
    let preset = preset(json!({
        "schema_version": 1, "id": "json", "program": "cli", "args": ["{prompt}"], "framing": "jsonl",
        "matchers": {
            "session_id": [
                {"when": {"/type": "init"}, "value": "/session_id"},
                {"when": {"/type": "init"}, "value": "/id"}
            ],
            "result": [
                {"when": {"/type": "result"}, "value": "/text"},
                {"when": {"/type": "result"}, "value": "/message"},
                {"when": {"/type": "result"}, "value": "/never"}
            ],
            "failure": [
                {"when": {"/type": "error"}, "value": "/reason"},
                {"when": {"/type": "error"}, "value": "/message"},
                {"when": {"/type": "error"}}
            ]
        }
    }));
    let read = |lines: &[&str]| {
        let mut reader = TurnReader::new(&preset, None, None);
        feed(&mut reader, lines);
        (reader.session_id().map(str::to_owned), reader.finished(), reader.outcome(&exit(0), None))
    };
    let (id, _, done) = read(&[r#"{"type": "init", "id": "s-9"}"#, r#"{"type": "result", "message": "hi"}"#]);
    assert_eq!(id.as_deref(), Some("s-9"));
    assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("hi")), "{done:?}");
    // No rule finds a value: no rule takes the line, which is no result.
    let (_, finished, none) = read(&[r#"{"type": "result"}"#]);
    assert!(!finished);
    assert_eq!(none.status, TurnStatus::Failed, "{none:?}");
    assert!(none.reason.as_deref().is_some_and(|r| r.contains("without a result line")), "{none:?}");
    let (_, _, failed) = read(&[r#"{"type": "error", "message": "overloaded"}"#]);
    assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("overloaded")));
    // A rule without `value` takes the line as it is.
    let (_, finished, failed) = read(&[r#"{"type": "error"}"#]);
    assert!(finished);
    assert!(failed.reason.as_deref().is_some_and(|r| r.contains("json reported a failure")), "{failed:?}");
}

/// A `kept` rule decides whether or not the value is kept: codex's turn without a message
/// still ends at `turn.completed`; claude's result line without a `result` text is its result.
#[test]
fn kept_rules_and_claudes_result_without_text_still_decide() {
    let codex = shipped("codex-exec.json");
    let mut reader = TurnReader::new(&codex, None, None);
    feed(
        &mut reader,
        &[
            r#"{"type":"thread.started","thread_id":"t-1"}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#,
        ],
    );
    let done = reader.outcome(&exit(0), None);
    assert_eq!((done.status, done.text), (TurnStatus::Completed, None), "codex");

    let claude = shipped("claude-print.json");
    let mut reader = TurnReader::new(&claude, None, None);
    feed(&mut reader, &[r#"{"type":"result","subtype":"error_max_turns","is_error":false,"session_id":"c-1"}"#]);
    assert!(reader.finished());
    let done = reader.outcome(&exit(0), None);
    assert_eq!((done.status, done.text), (TurnStatus::Completed, None), "claude");
    assert_eq!(reader.session_id(), Some("c-1"));
}

/// Usage from a regex group is a number, and a `usage` rule that finds none of its values on
/// the line passes it on (here to `other_lines`).
#[test]
fn usage_from_groups_counts_and_a_usage_rule_without_values_passes_the_line_on() {
    let preset = preset(json!({
        "schema_version": 1, "id": "lines", "program": "cli", "args": ["{prompt}"], "framing": "lines",
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]},
        "events": [
            {"when": "^USAGE(?: in=(?P<in>\\d+))?(?: out=(?P<out>\\d+))?", "emit": "usage", "input_tokens": "in", "output_tokens": "out"},
            {"when": "^USAGE", "emit": "warning", "message": "0"},
            {"when": "^RESULT ", "emit": "drop"}
        ]
    }));
    let mut reader = TurnReader::new(&preset, None, None);
    let actions = feed(&mut reader, &["USAGE in=10 out=5", "USAGE unknown", "RESULT ok"]);
    let kinds: Vec<&str> = actions
        .iter()
        .map(|a| match a {
            Action::Emit { kind, .. } => kind.type_name(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["usage_updated", "warning"]);
    let usage = reader.outcome(&exit(0), None).usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.total_tokens), (Some(10), Some(5), Some(15)));
}
