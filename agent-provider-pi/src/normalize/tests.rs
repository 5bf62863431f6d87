//! The normalizer's own cases: denials, dropped lines, delta buffers.

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
            actions.extend(normalizer.over_long(head.as_bytes(), 70_000, 65_536));
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
