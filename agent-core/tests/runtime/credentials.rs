//! Credentials a model quotes, streamed in pieces, and secret answers, kept out of events and the store.

use std::sync::Arc;

use agent_core::event::ToolStatus;
use agent_core::request::RequestSpec;
use agent_core::*;

use crate::common::*;

const KEY: &str = "sk-env-secret-0123456789";

/// A model that quotes a key streams it in pieces no line holds whole: the runtime holds back a
/// stream's end that may be a credential's beginning, so no published or stored delta, nor all
/// of them together, carries it; text that was no key is published whole, in order.
#[tokio::test]
async fn a_credential_streamed_in_pieces_reaches_no_event_nor_the_store() {
    let f = Fixture::new();
    f.control.set_credentials([KEY]);
    let (session, remote) = f.session(opts().env("OPENAI_API_KEY", KEY)).await;
    let turn = f.admitted_turn(&session, "print the key").await;
    let mut events = f.harness.subscribe(&turn, Replay::Start).await.unwrap();
    let (item, tool) = (Some(ItemId::new("msg_1")), ItemId::new("cmd_1"));
    let message = |text: &str| EventKind::MessageDelta { item_id: item.clone(), text: text.into() };
    for piece in ["The key is ", "sk-e", "nv-sec", "ret-0123", "456789", ". Also sk-", "envy."] {
        remote.emit_raw(Some(&turn.id), message(piece), &serde_json::json!({ "delta": piece }).to_string()).await;
    }
    // A command's output ending in a key's beginning, held until the command ends.
    for piece in ["$ env\nKEY=sk-env-sec", "ret-01"] {
        remote.emit(&turn.id, EventKind::CommandOutputDelta { item_id: tool.clone(), text: piece.into() }).await;
    }
    let completed =
        EventKind::ToolCompleted { item_id: tool, status: ToolStatus::Failed, output: None, exit_code: None };
    remote.emit(&turn.id, completed).await;
    // The turn ends while the message's last piece may still be a key's beginning.
    remote.emit(&turn.id, message(" Bye sk-env")).await;
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();

    let mut published = Vec::new();
    loop {
        let event = next(&mut events).await;
        let terminal = event.kind.is_terminal();
        published.push(event);
        if terminal {
            break;
        }
    }
    let texts = |events: &[Arc<Event>], kind: &str| -> Vec<(String, bool)> {
        events
            .iter()
            .filter(|e| e.kind.type_name() == kind)
            .map(|e| match &e.kind {
                EventKind::MessageDelta { text, .. } | EventKind::CommandOutputDelta { text, .. } => {
                    (text.to_string(), e.raw.is_some())
                }
                _ => unreachable!(),
            })
            .collect()
    };
    let message = texts(&published, "message_delta");
    let joined: String = message.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(joined, "The key is [redacted]. Also sk-envy. Bye sk-env", "{message:?}");
    // A delta the redactor changed carries no raw line (it holds the piece); the others keep it.
    let expected = [
        ("The key is ", true),
        ("[redacted]", false),
        (". Also sk-", true),
        ("envy.", true),
        (" Bye ", false),
        ("sk-env", false),
    ];
    assert_eq!(message, expected.map(|(t, raw)| (t.to_owned(), raw)));
    let output: String = texts(&published, "command_output_delta").into_iter().map(|(t, _)| t).collect();
    assert_eq!(output, "$ env\nKEY=sk-env-secret-01", "not a key: released when the command ended");
    let order: Vec<&str> = published.iter().map(|e| e.kind.type_name()).collect();
    let at = |kind: &str| order.iter().rposition(|k| *k == kind).unwrap();
    assert!(at("command_output_delta") < at("tool_completed") && at("message_delta") < at("turn_completed"));

    // A session's own delta (no turn) held at its end goes out, under no turn, before it closes.
    let mut live = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let session_level =
        |item: &str, text: &str| EventKind::MessageDelta { item_id: Some(ItemId::new(item)), text: text.into() };
    remote.emit_raw(None, session_level("m2", "sk-env-se"), r#"{"delta":"sk-env-se"}"#).await;
    remote.emit_raw(None, session_level("m3", "ok"), r#"{"delta":"ok"}"#).await;
    assert_eq!(next(&mut live).await.type_name(), "message_delta", "the other item's delta, once both were read");
    f.harness.stop_session(&session, false).await.unwrap();

    let stored = f.dyn_store().read_events(&session.id, &Default::default()).await.unwrap();
    let [.., released, closed] = &stored[..] else { panic!("{stored:?}") };
    assert_eq!((released.type_name(), released.turn_id.as_ref()), ("message_delta", None), "{released:?}");
    assert!(matches!(&released.kind, EventKind::MessageDelta { text, .. } if text.as_str() == "sk-env-se"));
    assert_eq!(closed.type_name(), "session_closed");
    let stored: Vec<Arc<Event>> = stored.into_iter().filter(|e| e.turn_id.is_some()).collect();
    let stored_json = serde_json::to_string(&stored).unwrap();
    assert!(!stored_json.contains("sk-env-secret-0123456789"), "{stored_json}");
    assert!(!stored_json.contains("ret-0123") && !stored_json.contains("456789"), "no piece: {stored_json}");
    let stored_message: String = texts(&stored, "message_delta").into_iter().map(|(t, _)| t).collect();
    assert_eq!(stored_message, joined);
}

/// A session that retires (a rejected cancel) publishes what its streams held, the turn's
/// before its terminal event and the session's own, none of it a key.
#[tokio::test]
async fn held_text_goes_out_when_the_session_retires() {
    let f = Fixture::new();
    f.control.set_credentials([KEY]);
    f.control.set_cancel(agent_core::testing::CancelBehavior::Reject("no such turn".into()));
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut live = f.harness.subscribe(&session, Replay::Latest).await.unwrap();
    let delta =
        |item: &str, text: &str| EventKind::MessageDelta { item_id: Some(ItemId::new(item)), text: text.into() };
    remote.emit(&turn.id, delta("m1", "turn note sk-env-sec")).await;
    remote.emit_raw(None, delta("m2", "session note sk-env"), r#"{"delta":"session note sk-env"}"#).await;
    remote.emit(&turn.id, delta("m3", "read")).await;
    // The three published pieces (the held ones are not): all read by the actor.
    let mut deltas = 0;
    while deltas < 3 {
        deltas += usize::from(next(&mut live).await.type_name() == "message_delta");
    }
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();
    assert!(matches!(monitor.await, ExitReason::Retired { .. }));

    let stored = f.dyn_store().read_events(&session.id, &Default::default()).await.unwrap();
    let text = |turn: Option<&TurnId>| -> String {
        stored
            .iter()
            .filter(|e| e.turn_id.as_ref() == turn)
            .filter_map(|e| match &e.kind {
                EventKind::MessageDelta { text, .. } => Some(text.to_string()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(text(Some(&turn.id)), "turn note readsk-env-sec");
    assert_eq!(text(None), "session note sk-env");
    let at = |found: &dyn Fn(&Event) -> bool| stored.iter().position(|e| found(e)).unwrap();
    let released = at(&|e| matches!(&e.kind, EventKind::MessageDelta { text, .. } if text.as_str() == "sk-env-sec"));
    assert!(released < at(&|e| e.type_name() == "turn_failed"), "the turn's held text before its end");
}

/// An MCP elicitation's fields that ask for masked input (`"format": "password"`,
/// `"writeOnly": true`) reach the provider but are never recorded; its other fields are.
#[tokio::test]
async fn secret_fields_of_an_elicitation_are_not_recorded() {
    let f = Fixture::new();
    let (session, remote) = f.session(opts()).await;
    let turn = f.admitted_turn(&session, "configure").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {
        "apiKey": {"type": "string", "format": "password"},
        "pin": {"type": "string", "writeOnly": true},
        "region": {"type": "string"}
    }});
    remote.request(&turn.id, RequestSpec::new(RequestKind::McpElicitation, "Credentials?", "e").schema(schema)).await;
    let request = request_of(&next(&mut events).await);
    assert_eq!(request.secret_fields(), ["apiKey", "pin"]);
    let content =
        serde_json::json!({"apiKey": "answer-secret-hunter2", "pin": "pin-secret-9876", "region": "eu-west-1"});
    f.harness.respond(&request, Response::content(content.clone())).await.unwrap();
    remote.complete(&turn.id, "done").await;
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();

    let store = f.dyn_store();
    let events = serde_json::to_string(&store.read_events(&session.id, &Default::default()).await.unwrap()).unwrap();
    let requests = serde_json::to_string(&store.list_requests(&session.id).await.unwrap()).unwrap();
    for recorded in [&events, &requests] {
        assert!(!recorded.contains("answer-secret-hunter2") && !recorded.contains("pin-secret-9876"), "{recorded}");
        assert!(recorded.contains("eu-west-1"), "the other fields are recorded: {recorded}");
    }
    assert_eq!(remote.responses(), [Response::content(content)], "the provider got the real answer");
}
