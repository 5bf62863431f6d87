//! The normalizer's own cases: denials, dropped lines, delta buffers.

use agent_core::{EndCause, TurnEnd, TurnStatus};

use super::*;

/// The reason of a denial is given when the gate asks why, in the turn that denied; a turn
/// after it whose gate asks (without a denial of its own) gets a dismissal, not that reason.
#[test]
fn a_denial_reason_does_not_outlive_its_turn() {
    let ask =
        r#"{"type":"extension_ui_request","id":"d1","method":"input","title":"agent-harness: why was this denied?"}"#;
    let answers = |normalizer: &mut Normalizer| {
        let mut actions = Vec::new();
        normalizer.on_line(ask, &mut actions);
        actions
            .into_iter()
            .filter_map(|action| match action {
                Action::Write(line) => Some(line),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut normalizer = Normalizer::new();
    let first = TurnId::new("t1").unwrap();
    normalizer.begin_turn(first.clone()).unwrap();
    normalizer.denied("call-1", Some("too risky".into()));
    assert_eq!(answers(&mut normalizer), [json!({"type": "extension_ui_response", "id": "d1", "value": "too risky"})]);
    normalizer.denied("call-2", Some("never asked for".into()));
    normalizer.abort_turn(&first);
    normalizer.begin_turn(TurnId::new("t2").unwrap()).unwrap();
    assert_eq!(answers(&mut normalizer), [json!({"type": "extension_ui_response", "id": "d1", "cancelled": true})]);
}

/// Lines over the cap, as their heads show them (pi 0.73.1: no `agent_settled`): an
/// `agent_end` that cannot be read ends the turn at a barrier, completed with the reply its
/// `message_end` gave; an assistant `message_end` that cannot be read fails it. A user's or a
/// tool result's does not.
#[test]
fn over_long_lines_end_the_turn_by_what_they_carried() {
    let end = |dropped: &[&str]| {
        let mut normalizer = Normalizer::new();
        normalizer.begin_turn(TurnId::new("t1").unwrap()).unwrap();
        normalizer.on_line(r#"{"type":"agent_start"}"#, &mut Vec::new());
        normalizer.admitted(&TurnId::new("t1").unwrap(), None);
        let mut actions = Vec::new();
        let reply = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"short reply"}],"stopReason":"stop"}}"#;
        normalizer.on_line(reply, &mut actions);
        for head in dropped {
            actions.extend(normalizer.over_long((head.as_bytes(), b""), 70_000, 65_536));
        }
        let barrier = actions.iter().any(|a| matches!(a, Action::Write(line) if line["id"] == "barrier-1"));
        assert!(barrier, "an unread agent_end asks for a barrier: {actions:?}");
        normalizer
            .on_line(r#"{"type":"response","id":"barrier-1","command":"get_state","success":true}"#, &mut actions);
        actions.into_iter().find_map(|action| match action {
            Action::Emit { kind, .. } if kind.is_terminal() => kind.terminal_end().cloned(),
            _ => None,
        })
    };
    let agent_end = r#"{"type":"agent_end","messages":[{"role":"user","content":[{"type":"text","text":"xxxx"#;
    let read = end(&[agent_end]).expect("the turn ends at the barrier");
    assert_eq!((read.status, read.result.text.as_deref()), (TurnStatus::Completed, Some("short reply")));
    let tool = r#"{"type":"message_end","message":{"role":"toolResult","content":[{"type":"text","text":"xxxx"#;
    assert_eq!(end(&[tool, agent_end]).expect("ends").status, TurnStatus::Completed);
    let reply = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"xxxx"#;
    let unread = end(&[reply, agent_end]).expect("ends");
    assert_eq!(unread.status, TurnStatus::Failed);
    assert!(unread.result.reason.as_deref().unwrap_or_default().contains("65536-byte limit"), "{unread:?}");
}

#[test]
fn a_deltas_raw_json_is_the_delta_alone_in_a_buffer_of_its_size() {
    for text in ["plain", "", "naïve 😀", "quote \" back\\slash \n tab\t bell\u{7} é 😀"] {
        let raw = delta_raw(DeltaKind::Thinking, text);
        let value: Value = serde_json::from_str(raw.get()).expect("JSON");
        assert_eq!(
            value,
            json!({"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta", "delta": text}})
        );
        // The buffer is sized exactly: the length agrees with serde_json's escaping.
        assert_eq!(quoted_len(text), serde_json::to_string(text).expect("string").len(), "{text:?}");
    }
}

fn terminal_of(actions: &[Action]) -> Option<&TurnEnd> {
    actions.iter().find_map(|action| match action {
        Action::Emit { kind, .. } => kind.terminal_end(),
        _ => None,
    })
}

/// A prompt admitted while pi compacts ahead of it, then refused: the turn fails, named as
/// rejected, with pi's reason (interrupted when it was cancelled meanwhile). Without a
/// compaction nothing is admitted before the reply, and a refusal its caller takes is left to
/// it; one nobody took (the caller stopped waiting) ends the turn too.
#[test]
fn a_prompt_admitted_while_pi_compacts_and_then_refused_fails_the_turn() {
    let turn = TurnId::new("t1").unwrap();
    let compacting = |normalizer: &mut Normalizer| {
        normalizer.on_line(r#"{"type":"compaction_start","reason":"threshold"}"#, &mut Vec::new());
    };
    let mut normalizer = Normalizer::new();
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.prompting(&turn, "h1");
    assert!(!normalizer.admitted_early(&turn), "nothing compacts yet");
    compacting(&mut normalizer);
    assert!(normalizer.admitted_early(&turn));
    let actions = normalizer.prompt_reply("h1", Err("an extension said no".into()), false).expect("its prompt");
    let end = terminal_of(&actions).expect("the turn ends");
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.reason.as_deref(), Some("pi refused the prompt: an extension said no"));
    assert_eq!(end.result.ended_by, Some(EndCause::Rejected));
    assert!(normalizer.running().is_none());

    // Cancelled while pi compacted, then refused: interrupted.
    let mut normalizer = Normalizer::new();
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.prompting(&turn, "h1");
    compacting(&mut normalizer);
    assert!(normalizer.admitted_early(&turn) && normalizer.aborting(&turn));
    let actions = normalizer.prompt_reply("h1", Err("no".into()), false).expect("its prompt");
    assert_eq!(terminal_of(&actions).map(|end| end.status), Some(TurnStatus::Interrupted));

    // Cancelled while pi compacted: the run that starts after the reply is aborted, unless the
    // reply ended the turn (an extension command took the prompt).
    for (disposition, aborts) in [(None, true), (Some("handled"), false)] {
        let mut normalizer = Normalizer::new();
        normalizer.begin_turn(turn.clone()).unwrap();
        normalizer.prompting(&turn, "h1");
        compacting(&mut normalizer);
        assert!(normalizer.admitted_early(&turn) && normalizer.aborting(&turn));
        let actions = normalizer.prompt_reply("h1", Ok(disposition), false).expect("its prompt");
        let aborted = actions.iter().any(|a| matches!(a, Action::Write(line) if line["type"] == "abort"));
        assert_eq!(aborted, aborts, "{disposition:?}: {actions:?}");
    }

    // A compaction that started before the prompt was sent admits nothing.
    let mut normalizer = Normalizer::new();
    compacting(&mut normalizer);
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.prompting(&turn, "h2");
    assert!(!normalizer.admitted_early(&turn));
    assert!(normalizer.prompt_reply("h1", Ok(None), true).is_none(), "not this turn's prompt");
    let actions = normalizer.prompt_reply("h2", Err("busy".into()), true).expect("its prompt");
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(normalizer.running(), Some(&turn), "the caller forgets the turn");
    normalizer.prompting(&turn, "h3");
    let actions = normalizer.prompt_reply("h3", Err("busy".into()), false).expect("its prompt");
    assert_eq!(terminal_of(&actions).map(|end| end.status), Some(TurnStatus::Failed), "nobody took it");
}

/// 0.73.1, a run that overflowed the context: the barrier's response while pi compacts does not
/// end the turn; `compaction_end` without a retry fails it with pi's reason, and with one the
/// continued run's end ends it.
#[test]
fn an_overflow_compaction_decides_the_turns_end() {
    let failed_run = [
        r#"{"type":"agent_start"}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"400 maximum context length is 10 tokens"}}"#,
        r#"{"type":"agent_end","messages":[]}"#,
        r#"{"type":"compaction_start","reason":"overflow"}"#,
        r#"{"type":"response","id":"barrier-1","command":"get_state","success":true,"data":{"isStreaming":false,"isCompacting":true}}"#,
    ];
    let run = |after: &[&str]| {
        let turn = TurnId::new("t1").unwrap();
        let mut normalizer = Normalizer::new();
        normalizer.begin_turn(turn.clone()).unwrap();
        normalizer.admitted(&turn, None);
        let mut actions = Vec::new();
        for line in failed_run.iter().chain(after) {
            assert!(normalizer.on_line(line, &mut actions), "{line}");
        }
        terminal_of(&actions).cloned()
    };
    assert!(run(&[]).is_none(), "the turn waits for the compaction");
    let gave_up = r#"{"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":false,"errorMessage":"Context overflow recovery failed: no"}"#;
    let end = run(&[gave_up]).expect("ends");
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.reason.as_deref(), Some("Context overflow recovery failed: no"));
    let retries = r#"{"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":true}"#;
    assert!(run(&[retries]).is_none(), "a run follows");
    let recovered = [
        retries,
        r#"{"type":"agent_start"}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"stopReason":"stop"}}"#,
        r#"{"type":"agent_end","messages":[]}"#,
    ];
    let end = run(&recovered).expect("ends");
    assert_eq!((end.status, end.result.text.as_deref()), (TurnStatus::Completed, Some("done")));
}

/// Pi 0.75.4 to 0.80.3 mark `agent_end` with `willRetry` but send no `agent_settled`: a retry
/// is awaited, and the last `agent_end` ends the turn (a failed one at a barrier, which an
/// overflow's compaction may still take back), where 1.6.0 waits for `agent_settled`.
#[test]
fn a_pi_without_agent_settled_ends_the_turn_at_its_last_agent_end() {
    let turn = TurnId::new("t1").unwrap();
    let start = |settles: bool| {
        let mut normalizer = Normalizer::new();
        if !settles {
            normalizer.set_run_ends(RunEnds::MarkedAgentEnd);
        }
        normalizer.begin_turn(turn.clone()).unwrap();
        normalizer.admitted(&turn, None);
        normalizer
    };
    let failed = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"500 flaky"}}"#;
    let replied = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"stopReason":"stop"}}"#;
    let lines = [
        r#"{"type":"agent_start"}"#,
        failed,
        r#"{"type":"agent_end","messages":[],"willRetry":true}"#,
        r#"{"type":"agent_start"}"#,
        replied,
        r#"{"type":"agent_end","messages":[],"willRetry":false}"#,
    ];
    let mut normalizer = start(false);
    let mut actions = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        normalizer.on_line(line, &mut actions);
        let ended = terminal_of(&actions).cloned();
        assert_eq!(ended.is_some(), i == lines.len() - 1, "after line {i}: {actions:?}");
    }
    let end = terminal_of(&actions).expect("ended");
    assert_eq!((end.status, end.result.text.as_deref()), (TurnStatus::Completed, Some("hi")));

    let mut normalizer = start(true);
    let mut actions = Vec::new();
    for line in lines {
        normalizer.on_line(line, &mut actions);
    }
    assert!(terminal_of(&actions).is_none(), "1.6.0 settles after its last agent_end");

    let mut normalizer = start(false);
    let mut actions = Vec::new();
    for line in [failed, r#"{"type":"agent_end","messages":[],"willRetry":false}"#] {
        normalizer.on_line(line, &mut actions);
    }
    assert!(terminal_of(&actions).is_none(), "{actions:?}");
    // Its number follows the one `admitted` asked for (whether a run follows the prompt).
    assert!(actions.iter().any(|a| matches!(a, Action::Write(line) if line["id"] == "barrier-2")), "{actions:?}");
}

/// On a pi that settles, an `agent_end` over the line cap waits for `agent_settled`, not for a
/// barrier (whose answer could come before pi's retry starts); a retry's `agent_start` takes
/// it back.
#[test]
fn an_unread_agent_end_of_a_pi_that_settles_waits_for_agent_settled() {
    let turn = TurnId::new("t1").unwrap();
    let mut normalizer = Normalizer::new();
    normalizer.set_run_ends(RunEnds::AgentSettled);
    normalizer.begin_turn(turn.clone()).unwrap();
    normalizer.admitted(&turn, Some("started"));
    let mut actions = Vec::new();
    let reply = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"short reply"}],"stopReason":"stop"}}"#;
    normalizer.on_line(r#"{"type":"agent_start"}"#, &mut actions);
    normalizer.on_line(reply, &mut actions);
    let head = br#"{"type":"agent_end","messages":[{"role":"user","content":[{"type":"text","text":"xxxx"#;
    actions.extend(normalizer.over_long((head, b""), 70_000, 65_536));
    assert!(!actions.iter().any(|a| matches!(a, Action::Write(_))), "no barrier: {actions:?}");
    normalizer.on_line(r#"{"type":"agent_start"}"#, &mut actions);
    normalizer.on_line(reply, &mut actions);
    assert!(terminal_of(&actions).is_none(), "the retry's run is awaited: {actions:?}");
    normalizer.on_line(r#"{"type":"agent_end","messages":[],"willRetry":false}"#, &mut actions);
    normalizer.on_line(r#"{"type":"agent_settled","aborted":false}"#, &mut actions);
    let end = terminal_of(&actions).expect("ends at agent_settled");
    assert_eq!((end.status, end.result.text.as_deref()), (TurnStatus::Completed, Some("short reply")));
}

/// Pi 0.75.4 to 0.84.3 cannot drop the steers a cancelled turn left, and start a run for them
/// right after the aborted one: the turn aborts that run too, and ends when it does, so the
/// next prompt does not find pi busy. Before 0.80.4 the aborted run's end is held at a
/// barrier; from 0.80.4 `agent_settled` comes after that run.
#[test]
fn the_run_pi_starts_for_a_cancelled_turns_steers_is_aborted_with_it() {
    for run_ends in [RunEnds::MarkedAgentEnd, RunEnds::AgentSettled] {
        let turn = TurnId::new("t1").unwrap();
        let mut normalizer = Normalizer::new();
        normalizer.set_run_ends(run_ends);
        normalizer.begin_turn(turn.clone()).unwrap();
        normalizer.admitted(&turn, Some("started"));
        let aborted = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"par"}],"stopReason":"aborted"}}"#;
        let end = r#"{"type":"agent_end","messages":[],"willRetry":false}"#;
        let settled = r#"{"type":"agent_settled","aborted":true}"#;
        let mut actions = Vec::new();
        normalizer.on_line(r#"{"type":"agent_start"}"#, &mut actions);
        normalizer.on_line(r#"{"type":"queue_update","steering":["stale"],"followUp":[]}"#, &mut actions);
        assert!(normalizer.aborting(&turn));
        normalizer.on_line(aborted, &mut actions);
        normalizer.on_line(end, &mut actions);
        assert!(terminal_of(&actions).is_none(), "{run_ends:?}: {actions:?}");
        let writes = |actions: &[Action]| {
            let written = actions.iter().filter_map(|a| if let Action::Write(line) = a { Some(line) } else { None });
            written.map(|line| line["type"].clone()).collect::<Vec<_>>()
        };
        let barrier = if run_ends == RunEnds::MarkedAgentEnd { vec!["get_state"] } else { Vec::new() };
        assert_eq!(writes(&actions), barrier, "{run_ends:?}");
        actions.clear();
        normalizer.on_line(r#"{"type":"agent_start"}"#, &mut actions);
        assert_eq!(writes(&actions), ["abort"], "{run_ends:?}");
        for line in [r#"{"type":"queue_update","steering":[],"followUp":[]}"#, aborted, end, settled] {
            normalizer.on_line(line, &mut actions);
        }
        let end = terminal_of(&actions).expect("ends with the second run");
        assert_eq!(end.status, TurnStatus::Interrupted, "{run_ends:?}");
        let warned = actions.iter().any(|a| matches!(a, Action::Emit { kind: EventKind::Warning { .. }, .. }));
        assert!(!warned, "{run_ends:?}: {actions:?}");
    }
}

/// 0.73.1, a run that overflowed: a `compaction_end` over the line cap (it carries the summary)
/// says in its tail whether a run follows; without that, the turn ends at a barrier.
#[test]
fn an_unread_compaction_end_is_read_by_its_tail() {
    let outcome = |tail: &str| {
        let turn = TurnId::new("t1").unwrap();
        let mut normalizer = Normalizer::new();
        normalizer.begin_turn(turn.clone()).unwrap();
        normalizer.admitted(&turn, None);
        let mut actions = Vec::new();
        for line in [
            r#"{"type":"agent_start"}"#,
            r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"400 maximum context length is 10 tokens"}}"#,
            r#"{"type":"agent_end","messages":[]}"#,
            r#"{"type":"compaction_start","reason":"overflow"}"#,
        ] {
            normalizer.on_line(line, &mut actions);
        }
        let head = br#"{"type":"compaction_end","reason":"overflow","result":{"summary":"xxxx"#;
        let actions = normalizer.over_long((head, tail.as_bytes()), 70_000, 65_536);
        let barrier = actions.iter().any(|a| matches!(a, Action::Write(line) if line["type"] == "get_state"));
        (terminal_of(&actions).map(|end| end.status), barrier)
    };
    assert_eq!(
        outcome(r#"xxxx","tokensBefore":9000},"aborted":false,"willRetry":true}"#),
        (None, false),
        "a run follows"
    );
    let failed = outcome(r#"xxxx","tokensBefore":9000},"aborted":false,"willRetry":false}"#);
    assert_eq!(failed, (Some(TurnStatus::Failed), false));
    assert_eq!(outcome(r#"xxxx"#), (None, true), "the tail cannot tell: a barrier");
}
