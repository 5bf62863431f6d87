use agent_core::event::ToolStatus;
use agent_core::exec::ExitStatus;

use super::*;

fn turn(id: &str) -> TurnId {
    TurnId::from_string(id)
}

/// A normalizer on thread `th` running harness turn `h1` (codex turn `tu`).
fn running() -> Normalizer {
    let mut n = Normalizer::new();
    n.set_thread("th");
    n.begin_turn(turn("h1")).unwrap();
    n.admitted(&turn("h1"), "tu");
    n
}

fn feed(n: &mut Normalizer, message: Value) -> Vec<Action> {
    n.on_line(RawJson::from_string(message.to_string()).unwrap())
}

fn note(method: &str, params: Value) -> Value {
    json!({ "method": method, "params": params })
}

/// Each action as (turn, kind) for emits.
fn emitted(actions: &[Action]) -> Vec<(Option<&str>, &EventKind)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit { turn, kind, .. } => Some((turn.as_ref().map(TurnId::as_str), kind)),
            _ => None,
        })
        .collect()
}

fn item(kind: &str, id: &str, extra: Value) -> Value {
    let mut item = json!({ "type": kind, "id": id });
    item.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    json!({ "threadId": "th", "turnId": "tu", "item": item })
}

#[test]
fn an_unfinished_message_keeps_its_text_up_to_the_limit_and_says_so() {
    let delta = |text: &str| {
        note("item/agentMessage/delta", json!({"threadId": "th", "turnId": "tu", "itemId": "m1", "delta": text}))
    };
    let end = |actions: &[Action]| {
        let (last, rest) = emitted(actions).split_last().map(|(l, r)| (l.1.clone(), r.len())).unwrap();
        (last.terminal_end().unwrap().result.text.clone(), rest, actions.len())
    };

    // Within the limit: the whole text, no warning.
    let mut n = running();
    n.text_limit = 12;
    feed(&mut n, delta("hello "));
    feed(&mut n, delta("world!"));
    let actions = n.on_exit("gone", None, None);
    assert_eq!(end(&actions), (Some("hello world!".to_owned()), 0, 1));

    // Past it: the text is cut at a character boundary, later deltas are not kept, and the
    // turn's end says what was kept.
    let mut n = running();
    n.text_limit = 8;
    feed(&mut n, delta("héllo "));
    feed(&mut n, delta("örld"));
    feed(&mut n, delta("!"));
    let actions = n.on_exit("gone", None, None);
    assert_eq!(end(&actions), (Some("héllo ".to_owned()), 1, 2), "one byte is left, and 'ö' takes two");
    let [(Some("h1"), EventKind::Warning { message }), _] = emitted(&actions)[..] else { panic!("{actions:?}") };
    assert!(message.contains("`m1`") && message.contains("first 7 bytes"), "{message}");

    // The deltas go out whole either way, and a completed message's text is the item's.
    let mut n = running();
    n.text_limit = 4;
    let actions = feed(&mut n, delta("too long"));
    assert_eq!(
        emitted(&actions),
        [(Some("h1"), &EventKind::MessageDelta { item_id: Some("m1".into()), text: "too long".into() })]
    );
    feed(&mut n, note("item/completed", item("agentMessage", "m1", json!({"text": "too long"}))));
    let actions = n.on_exit("gone", None, None);
    assert_eq!(end(&actions), (Some("too long".to_owned()), 0, 1));
}

#[test]
fn a_turn_is_interrupted_at_most_once() {
    let mut n = Normalizer::new();
    n.begin_turn(turn("h1")).unwrap();
    assert_eq!(n.claim_interrupt(&turn("h1")), None, "not admitted: nothing to interrupt yet");
    n.admitted(&turn("h1"), "tu");
    assert_eq!(n.claim_interrupt(&turn("h2")), None, "not the running turn");
    assert_eq!(n.claim_interrupt(&turn("h1")).as_deref(), Some("tu"));
    assert_eq!(n.claim_interrupt(&turn("h1")), None, "already interrupted");
    feed(&mut n, note("turn/completed", json!({"threadId": "th", "turn": {"id": "tu", "status": "interrupted"}})));
    n.begin_turn(turn("h2")).unwrap();
    n.admitted(&turn("h2"), "tu2");
    assert_eq!(n.claim_interrupt(&turn("h2")).as_deref(), Some("tu2"), "each turn gets its own");
}

#[test]
fn reasoning_without_deltas_reports_its_text_once() {
    let mut n = running();
    let actions = feed(
        &mut n,
        note("item/completed", item("reasoning", "r1", json!({"summary": ["plan"], "content": ["detail"]}))),
    );
    assert_eq!(
        emitted(&actions),
        [(Some("h1"), &EventKind::ReasoningDelta { item_id: Some("r1".into()), text: "plan\ndetail".into() })]
    );
    feed(
        &mut n,
        note(
            "item/reasoning/textDelta",
            json!({"threadId": "th", "turnId": "tu", "itemId": "r2", "delta": "x", "contentIndex": 0}),
        ),
    );
    let actions = feed(&mut n, note("item/completed", item("reasoning", "r2", json!({"content": ["x"]}))));
    assert!(matches!(emitted(&actions)[0].1, EventKind::ProviderEvent { .. }));
}

#[test]
fn mcp_and_web_tools_start_and_complete() {
    let mut n = running();
    let started = feed(
        &mut n,
        note(
            "item/started",
            item(
                "mcpToolCall",
                "m1",
                json!({"server": "files", "tool": "read", "arguments": {"p": 1}, "status": "inProgress"}),
            ),
        ),
    );
    let EventKind::ToolStarted { tool, name, input, .. } = emitted(&started)[0].1 else { panic!("tool_started") };
    assert_eq!((*tool, name.as_str()), (ToolKind::Mcp, "read"));
    assert_eq!(input.as_ref().unwrap()["server"], "files");
    let done = feed(
        &mut n,
        note(
            "item/completed",
            item(
                "mcpToolCall",
                "m1",
                json!({"server": "files", "tool": "read", "status": "failed", "error": {"message": "boom"}}),
            ),
        ),
    );
    assert_eq!(
        emitted(&done)[0].1,
        &EventKind::ToolCompleted {
            item_id: "m1".into(),
            status: ToolStatus::Failed,
            output: Some("boom".into()),
            exit_code: None
        }
    );
    let web = feed(&mut n, note("item/started", item("webSearch", "w1", json!({"query": "rust"}))));
    assert!(matches!(emitted(&web)[0].1, EventKind::ToolStarted { tool: ToolKind::Web, .. }));
}

#[test]
fn frames_of_another_thread_stay_unnormalized_in_the_running_turn() {
    let mut n = running();
    let command = json!({"type": "commandExecution", "id": "c1", "status": "completed", "exitCode": 0});
    let actions = feed(&mut n, note("item/completed", json!({"threadId": "sub", "turnId": "x", "item": command})));
    assert_eq!(emitted(&actions), [(Some("h1"), &EventKind::ProviderEvent { method: "item/completed".into() })]);
    // Its streamed pieces are not published: the guard against a credential split across
    // pieces sees only this thread's deltas.
    let delta = json!({"threadId": "sub", "turnId": "x", "itemId": "c1", "delta": "KEY=sk-ab"});
    assert!(emitted(&feed(&mut n, note("item/commandExecution/outputDelta", delta))).is_empty());
}

#[test]
fn deltas_past_a_burst_of_clones_name_their_turn_and_item() {
    let mut n = running();
    let started = item("agentMessage", "m", json!({"text": ""}));
    feed(&mut n, note("item/started", started));
    let delta = |item: &str, text: &str| {
        note("item/agentMessage/delta", json!({"threadId": "th", "turnId": "tu", "itemId": item, "delta": text}))
    };
    // Two items open at once, their deltas interleaved, past two bursts of clones.
    let mut expected = String::new();
    for i in 0..2 * agent_provider_kit::clones::CLONE_BURST + 1 {
        let text = format!("{i} ");
        expected.push_str(&text);
        let actions = feed(&mut n, delta("m", &text));
        let item_id = Some(ItemId::from("m"));
        assert_eq!(emitted(&actions), [(Some("h1"), &EventKind::MessageDelta { item_id, text: text.into() })]);
        let actions = feed(&mut n, delta("m2", "x"));
        let item_id = Some(ItemId::from("m2"));
        assert_eq!(emitted(&actions), [(Some("h1"), &EventKind::MessageDelta { item_id, text: "x".into() })]);
    }
    let done =
        feed(&mut n, note("turn/completed", json!({"threadId": "th", "turn": {"id": "tu", "status": "completed"}})));
    let end = emitted(&done)[0].1.terminal_end().expect("the turn's terminal event");
    assert_eq!(end.result.text.as_deref(), Some(expected.as_str()), "the first message's deltas, in order");
}

#[test]
fn late_frames_of_a_finished_turn_are_session_events_and_early_ones_go_to_the_new_turn() {
    let mut n = running();
    let done =
        feed(&mut n, note("turn/completed", json!({"threadId": "th", "turn": {"id": "tu", "status": "completed"}})));
    assert!(emitted(&done)[0].1.is_terminal());
    n.begin_turn(turn("h2")).unwrap();
    let late = feed(
        &mut n,
        note("item/agentMessage/delta", json!({"threadId": "th", "turnId": "tu", "itemId": "m", "delta": "old"})),
    );
    assert!(emitted(&late).is_empty(), "a finished turn's streamed pieces are not published");
    let output = json!({"threadId": "th", "turnId": "tu", "itemId": "c1", "delta": "KEY=sk-ab"});
    assert!(emitted(&feed(&mut n, note("item/commandExecution/outputDelta", output))).is_empty());
    // A command codex left running in the background ends after its turn: seen as it comes.
    let command = json!({"type": "commandExecution", "id": "c1", "status": "completed", "exitCode": 0});
    let ended = feed(&mut n, note("item/completed", json!({"threadId": "th", "turnId": "tu", "item": command})));
    assert_eq!(emitted(&ended), [(None, &EventKind::ProviderEvent { method: "item/completed".into() })]);
    // Before codex admits the new turn, frames without a known turn belong to it.
    let early = feed(&mut n, note("warning", json!({"threadId": "th", "message": "careful"})));
    assert_eq!(emitted(&early), [(Some("h2"), &EventKind::Warning { message: "careful".into() })]);
    assert_eq!(n.begin_turn(turn("h3")), Err(turn("h2")));
}

#[test]
fn usage_is_per_turn_even_after_a_restored_total() {
    let mut n = Normalizer::new();
    n.set_thread("th");
    let total = |t: u64| {
        json!({"threadId": "th", "turnId": "old", "tokenUsage": {
        "total": {"totalTokens": t, "inputTokens": t, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0},
        "last": {"totalTokens": 0, "inputTokens": 0, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0}}})
    };
    feed(&mut n, note("thread/tokenUsage/updated", total(100)));
    n.begin_turn(turn("h1")).unwrap();
    n.admitted(&turn("h1"), "tu");
    let mut update = total(130);
    update["turnId"] = "tu".into();
    let actions = feed(&mut n, note("thread/tokenUsage/updated", update));
    let EventKind::UsageUpdated(usage) = emitted(&actions)[0].1 else { panic!("usage") };
    assert_eq!(usage.total_tokens, Some(30));
}

/// A newer codex may leave a counter `null`, or end a tool call with a status this provider
/// does not know: the usage keeps the other counters, and the tool's end says what it could not
/// read instead of passing it off as a plain success.
#[test]
fn a_null_counter_and_an_unknown_tool_status_lose_nothing_silently() {
    let mut n = running();
    let update = json!({"threadId": "th", "turnId": "tu", "tokenUsage": {
        "total": {"totalTokens": 40, "inputTokens": 30, "cachedInputTokens": null, "outputTokens": 10, "reasoningOutputTokens": null}}});
    let actions = feed(&mut n, note("thread/tokenUsage/updated", update));
    let [(_, EventKind::UsageUpdated(usage))] = emitted(&actions)[..] else { panic!("{actions:?}") };
    assert_eq!((usage.total_tokens, usage.input_tokens, usage.output_tokens), (Some(40), Some(30), Some(10)));

    let command = |status: &str| {
        note(
            "item/completed",
            item("commandExecution", "c1", json!({"command": "ls", "status": status, "exitCode": 0})),
        )
    };
    let names = |actions: &[Action]| emitted(actions).iter().map(|(_, kind)| kind.type_name()).collect::<Vec<_>>();
    assert_eq!(names(&feed(&mut n, command("completed"))), ["tool_completed"]);
    let actions = feed(&mut n, command("superseded"));
    assert_eq!(names(&actions), ["tool_completed", "warning"]);
    let [_, (_, EventKind::Warning { message })] = emitted(&actions)[..] else { panic!("{actions:?}") };
    assert!(message.contains("`superseded`"), "{message}");

    // A subagent call the schema says was interrupted is reported so, without a warning.
    let collab = note("item/completed", item("collabAgentToolCall", "a1", json!({"status": "interrupted"})));
    let actions = feed(&mut n, collab);
    let [(_, EventKind::ToolCompleted { status, .. })] = emitted(&actions)[..] else { panic!("{actions:?}") };
    assert_eq!(*status, ToolStatus::Interrupted);
}

/// Another thread's totals (a subagent's) are not this thread's: they neither count in a turn's
/// usage nor become the next turn's baseline.
#[test]
fn another_threads_usage_is_not_this_threads() {
    let mut n = Normalizer::new();
    n.set_thread("th");
    let total = |thread: &str, turn: &str, t: u64| {
        json!({"threadId": thread, "turnId": turn, "tokenUsage": {
        "total": {"totalTokens": t, "inputTokens": t, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0}}})
    };
    let usage = |actions: &[Action]| match emitted(actions)[..] {
        [(_, EventKind::UsageUpdated(usage))] => usage.total_tokens,
        _ => panic!("one usage_updated: {actions:?}"),
    };
    n.begin_turn(turn("h1")).unwrap();
    n.admitted(&turn("h1"), "tu1");
    assert_eq!(usage(&feed(&mut n, note("thread/tokenUsage/updated", total("th", "tu1", 100)))), Some(100));
    feed(&mut n, note("turn/completed", json!({"threadId": "th", "turn": {"id": "tu1", "status": "completed"}})));
    // Between turns, and during the next one.
    feed(&mut n, note("thread/tokenUsage/updated", total("th-sub", "tu-sub", 5000)));
    n.begin_turn(turn("h2")).unwrap();
    n.admitted(&turn("h2"), "tu2");
    feed(&mut n, note("thread/tokenUsage/updated", total("th-sub", "tu-sub", 6000)));
    assert_eq!(usage(&feed(&mut n, note("thread/tokenUsage/updated", total("th", "tu2", 150)))), Some(50));
}

#[test]
fn file_approvals_carry_the_latest_patch() {
    let mut n = running();
    let change =
        |diff: &str| json!([{"path": "/w/a.txt", "kind": {"type": "update", "move_path": null}, "diff": diff}]);
    feed(
        &mut n,
        note("item/started", item("fileChange", "f1", json!({"changes": change("-a\n+b\n"), "status": "inProgress"}))),
    );
    let updated = feed(
        &mut n,
        note(
            "item/fileChange/patchUpdated",
            json!({"threadId": "th", "turnId": "tu", "itemId": "f1", "changes": change("-a\n+c\n")}),
        ),
    );
    assert!(matches!(emitted(&updated)[0].1, EventKind::FileChange { .. }));
    let actions = feed(
        &mut n,
        json!({"id": 3, "method": "item/fileChange/requestApproval", "params": {"threadId": "th", "turnId": "tu", "itemId": "f1"}}),
    );
    let Action::Request { spec, turn, .. } = &actions[0] else { panic!("request") };
    assert_eq!(turn.as_str(), "h1");
    assert_eq!(spec.metadata["diff"], "*** update /w/a.txt\n-a\n+c\n");
    assert_eq!(spec.provider_ref.0, "3");
    assert!(n.take_request("3").is_some());
}

#[test]
fn requests_codex_serves_itself_are_answered_at_once() {
    let mut n = running();
    let actions = feed(
        &mut n,
        json!({"id": "d1", "method": "item/tool/call", "params": {"threadId": "th", "turnId": "tu", "callId": "c", "tool": "x", "arguments": {}}}),
    );
    let Action::Answer { id, result: Ok(result) } = &actions[0] else { panic!("answer") };
    assert_eq!(id, &RpcId::Str("d1".into()));
    assert_eq!(result["success"], false);
    let unknown = feed(&mut n, json!({"id": 4, "method": "future/request", "params": {}}));
    let Action::Answer { result: Err(error), .. } = &unknown[0] else { panic!("error answer") };
    assert_eq!(error.code, -32601);
    assert_eq!(n.unknown_frames(), 1);
}

#[test]
fn process_exit_closes_open_tools_and_fails_the_turn() {
    let mut n = running();
    feed(
        &mut n,
        note("item/started", item("commandExecution", "c1", json!({"command": "sleep 9", "status": "inProgress"}))),
    );
    feed(
        &mut n,
        json!({"id": 0, "method": "item/tool/requestUserInput", "params": {"threadId": "th", "turnId": "tu", "questions": []}}),
    );
    let actions = n.on_exit("codex app-server exited (signal 9)", Some(ExitStatus::signal(9)), Some("boom".into()));
    let kinds = emitted(&actions);
    assert!(matches!(kinds[0].1, EventKind::ToolCompleted { status: ToolStatus::Interrupted, .. }));
    let end = kinds[1].1.terminal_end().unwrap();
    assert_eq!(end.status, TurnStatus::Failed);
    assert_eq!(end.result.exit_status, Some(ExitStatus::signal(9)));
    assert_eq!(end.result.stderr_tail.as_deref(), Some("boom"));
    assert!(n.take_request("0").is_none(), "pending requests end with the turn");
    assert!(n.on_exit("again", None, None).is_empty());
}

/// A subagent's request still pending when the turn ends is declined (codex settles only its
/// own thread's, and the subagent would wait for good); the thread's own is left to codex.
#[test]
fn a_subagents_request_pending_at_the_turns_end_is_declined() {
    let mut n = running();
    let ask = |id: u64, thread: &str| {
        json!({"id": id, "method": "item/commandExecution/requestApproval",
               "params": {"threadId": thread, "turnId": "sub-turn", "itemId": format!("c{id}"), "command": "ls"}})
    };
    let asked = feed(&mut n, ask(5, "sub-thread"));
    assert!(matches!(&asked[0], Action::Request { turn, .. } if turn.as_str() == "h1"), "{asked:?}");
    let own = json!({"id": 6, "method": "item/commandExecution/requestApproval",
                     "params": {"threadId": "th", "turnId": "tu", "itemId": "c6", "command": "ls"}});
    assert!(matches!(&feed(&mut n, own)[0], Action::Request { .. }));
    let ended =
        feed(&mut n, note("turn/completed", json!({"threadId": "th", "turn": {"id": "tu", "status": "completed"}})));
    let answered: Vec<(String, Value)> = ended
        .iter()
        .filter_map(|a| match a {
            Action::Answer { id, result: Ok(value) } => Some((id.to_ref(), value.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(answered, [("5".to_owned(), json!({"decision": "decline"}))], "{ended:?}");
    let warned = emitted(&ended).iter().any(|(turn, kind)| {
        *turn == Some("h1")
            && matches!(kind, EventKind::Warning { message } if message.contains("another codex thread"))
    });
    assert!(warned, "{ended:?}");
    assert!(n.take_request("5").is_none() && n.take_request("6").is_none(), "both forgotten with the turn");
}
