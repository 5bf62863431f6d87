//! The requests' building and answering, case by case.

use std::collections::BTreeMap;

use agent_core::{Answer, Error, Response};

use super::answer::Encoded;
use super::*;

fn pending(kind: PendingKind) -> PendingRequest {
    PendingRequest { id: RpcId::Num(1), turn: TurnId::from_string("t"), foreign: false, kind }
}

fn command(params: Value) -> wire::CommandApproval {
    serde_json::from_value(params).unwrap()
}

#[track_caller]
fn check_scopes(params: Value, expected: &[Scope]) {
    assert_eq!(command_scopes(&command(params)), expected);
}

#[test]
fn command_scopes_follow_what_codex_honours() {
    check_scopes(json!({}), &[Scope::Once, Scope::Session]);
    check_scopes(json!({"availableDecisions": ["accept", "cancel"]}), &[Scope::Once, Scope::Session]);
    check_scopes(json!({"kind": "writeStdin", "availableDecisions": ["accept", "decline"]}), &[Scope::Once]);
    check_scopes(
        json!({"kind": "writeStdin", "availableDecisions": ["accept", "acceptForSession"]}),
        &[Scope::Once, Scope::Session],
    );
    check_scopes(
        json!({"networkApprovalContext": {"host": "x", "protocol": "https"}, "availableDecisions": ["accept"]}),
        &[Scope::Once],
    );
    check_scopes(json!({"availableDecisions": ["decline", "cancel"]}), &[]);
}

#[track_caller]
fn check_choices(params: Value, expected: &[(&str, Value)]) {
    let (offered, choices, _) = command_choices(&command(params));
    let got: Vec<(&str, &Value)> = offered.iter().map(|o| (o.value.as_str(), &o.decision)).collect();
    let expected: Vec<(&str, &Value)> = expected.iter().map(|(v, d)| (*v, d)).collect();
    assert_eq!(got, expected);
    let values: Vec<&str> = choices.iter().map(|c| c.value.as_str()).collect();
    assert_eq!(values, expected.iter().map(|(v, _)| *v).collect::<Vec<_>>());
}

#[test]
fn offered_amendments_become_choices() {
    let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["cargo", "test"]}});
    let allow = json!({"host": "crates.io", "action": "allow"});
    let network = json!({"applyNetworkPolicyAmendment": {"network_policy_amendment": allow}});
    check_choices(
        json!({"availableDecisions": ["accept", execpolicy, "cancel"]}),
        &[(EXECPOLICY_AMENDMENT, execpolicy.clone())],
    );
    check_choices(
        json!({"availableDecisions": ["accept", "acceptForSession", network, "cancel"]}),
        &[(NETWORK_POLICY_AMENDMENT, network.clone())],
    );
    // Only what codex lists is offered; a repeat or an unknown shape is not.
    check_choices(json!({"availableDecisions": ["accept", "cancel"], "proposedExecpolicyAmendment": ["ls"]}), &[]);
    check_choices(
        json!({"availableDecisions": [execpolicy, {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["x"]}},
                                      {"somethingNew": {}}, {"acceptWithExecpolicyAmendment": {}}]}),
        &[(EXECPOLICY_AMENDMENT, execpolicy.clone())],
    );
    // Without a list, what codex offers by default.
    check_choices(json!({"proposedExecpolicyAmendment": ["cargo", "test"]}), &[(EXECPOLICY_AMENDMENT, execpolicy)]);
    check_choices(
        json!({"networkApprovalContext": {"host": "crates.io", "protocol": "https"}, "proposedExecpolicyAmendment": ["curl"],
               "proposedNetworkPolicyAmendments": [{"host": "crates.io", "action": "deny"}, allow]}),
        &[(NETWORK_POLICY_AMENDMENT, network)],
    );
    check_choices(json!({"proposedExecpolicyAmendment": []}), &[]);
}

#[test]
fn amendment_choices_say_what_they_allow() {
    let deny =
        json!({"applyNetworkPolicyAmendment": {"network_policy_amendment": {"host": "evil.test", "action": "deny"}}});
    let (choice, (key, amendment)) = amendment_choice(&deny).expect("a choice");
    assert_eq!(choice.value, NETWORK_POLICY_AMENDMENT);
    assert!(choice.description.as_deref().unwrap().contains("blocks connections to `evil.test`"), "{choice:?}");
    assert_eq!((key, amendment), ("network_policy_amendment", json!({"host": "evil.test", "action": "deny"})));
    let execpolicy = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["npm", "run", "lint"]}});
    let (choice, (key, _)) = amendment_choice(&execpolicy).expect("a choice");
    assert!(choice.description.as_deref().unwrap().contains("starting with `npm run lint`"), "{choice:?}");
    assert_eq!(key, "execpolicy_amendment");
    assert!(amendment_choice(&json!("accept")).is_none());
}

#[test]
fn choose_sends_the_offered_decision_as_codex_listed_it() {
    let decision = json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["cargo", "test"]}});
    let offered = vec![Offered { value: EXECPOLICY_AMENDMENT.into(), decision: decision.clone() }];
    let approval = pending(PendingKind::Command { scopes: vec![Scope::Once], offered });
    let kind = RequestKind::CommandApproval;
    let encoded = encode(&approval, kind, &Response::choose(EXECPOLICY_AMENDMENT)).unwrap();
    assert_eq!(encoded, Encoded { result: json!({"decision": decision}), interrupt: false });
    match encode(&approval, kind, &Response::choose(NETWORK_POLICY_AMENDMENT)) {
        Err(Error::InvalidResponse(message)) => assert!(message.contains("`accept_with_execpolicy_amendment`")),
        other => panic!("expected InvalidResponse, got {other:?}"),
    }
    let file = pending(PendingKind::FileChange);
    let refused = encode(&file, RequestKind::FileChangeApproval, &Response::choose(EXECPOLICY_AMENDMENT));
    assert!(matches!(refused, Err(Error::InvalidResponse(_))), "{refused:?}");
    // Approve keeps its meaning next to the choices.
    assert_eq!(encode(&approval, kind, &Response::approve()).unwrap().result, json!({"decision": "accept"}));
}

#[test]
fn a_shell_wrapped_command_gives_its_script() {
    let cases = [
        ("/bin/bash -lc 'touch approved.txt && echo created-file'", Some("touch approved.txt && echo created-file")),
        ("bash -lc ls", Some("ls")),
        ("/bin/zsh -lc 'echo '\\''hi'\\'''", Some("echo 'hi'")),
        ("/bin/sh -c 'a b'\\ c", Some("a b c")),
        ("/bin/bash -lc 'cargo test' extra", None),
        ("/bin/bash -lc \"cargo test\"", None),
        ("/bin/bash -lc $(curl x)", None),
        ("/bin/bash -lc 'unterminated", None),
        ("/bin/bash -lc ''", None),
        ("/bin/bash -lc", None),
        ("/usr/bin/fish -c 'cargo test'", None),
        ("/bin/bash -x 'cargo test'", None),
        ("cargo test -p x", None),
    ];
    for (line, script) in cases {
        assert_eq!(shell_script(line).as_deref(), script, "{line}");
    }
}

/// A policy allowing `cargo test` allows it as codex asks for it, through its shell, and
/// still not what runs more than that.
#[test]
fn a_policy_matches_the_script_codex_runs_through_a_shell() {
    let policy = agent_core::handler::RequestPolicy::new().approve_commands(["cargo test"]);
    let decide = |request: ServerRequest| {
        let Built::Ask { spec, .. } = build(&RpcId::Num(1), request, |_| None) else { panic!("asked") };
        let request: agent_core::Request = serde_json::from_value(json!({
            "id": "req_1", "session_id": "s", "turn_id": "t", "kind": spec.kind, "prompt": spec.prompt,
            "scopes": spec.scopes, "metadata": spec.metadata, "status": "pending", "provider_ref": "1",
            "created_at": "2026-01-01T00:00:00Z",
        }))
        .expect("a request");
        (spec.metadata["command"].clone(), policy.decide(&request))
    };
    let modern = |line: &str| {
        let params = json!({"threadId": "th", "turnId": "tu", "itemId": "i", "command": line});
        ServerRequest::CommandApproval(serde_json::from_value(params).unwrap())
    };
    let legacy = |argv: &[&str]| {
        ServerRequest::LegacyExec(serde_json::from_value(json!({"callId": "c", "command": argv})).unwrap())
    };
    let approve = Some(Response::approve());
    assert_eq!(decide(modern("/bin/bash -lc 'cargo test -p x'")), (json!("cargo test -p x"), approve.clone()));
    assert_eq!(decide(legacy(&["/bin/zsh", "-lc", "cargo test"])), (json!("cargo test"), approve));
    assert_eq!(decide(modern("/bin/bash -lc 'cargo test && rm -rf ~'")).1, None);
    assert_eq!(decide(legacy(&["cargo", "test;", "rm"])), (json!("cargo test; rm"), None));
}

#[test]
fn legacy_approvals_use_review_decisions() {
    let legacy = pending(PendingKind::Legacy);
    let kind = RequestKind::CommandApproval;
    let encode = |r: Response| encode(&legacy, kind, &r).unwrap().result;
    assert_eq!(encode(Response::approve()), json!({"decision": "approved"}));
    assert_eq!(encode(Response::approve_with(Scope::Session)), json!({"decision": "approved_for_session"}));
    assert_eq!(encode(Response::deny("too risky")), json!({"decision": {"denied": {"rejection": "too risky"}}}));
    assert_eq!(encode(Response::cancel("stop")), json!({"decision": "abort"}));
}

#[test]
fn elicitations_take_content_or_answers_by_field() {
    let elicitation = pending(PendingKind::Elicitation);
    let by_field = Response::Answer {
        answer: Answer::ByQuestion(BTreeMap::from([
            ("root".to_owned(), vec!["/srv".to_owned()]),
            ("tags".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
        ])),
    };
    let encoded = encode(&elicitation, RequestKind::McpElicitation, &by_field).unwrap();
    assert_eq!(encoded.result, json!({"action": "accept", "content": {"root": "/srv", "tags": ["a", "b"]}}));
    let text = encode(&elicitation, RequestKind::McpElicitation, &Response::answer("x"));
    assert!(matches!(text, Err(Error::ResponseKindMismatch { .. })));
    let cancel = encode(&elicitation, RequestKind::McpElicitation, &Response::cancel("no")).unwrap();
    assert_eq!(cancel, Encoded { result: json!({"action": "cancel"}), interrupt: false });
}

/// Codex asks to run an MCP tool through the elicitation method; it is an approval.
#[test]
fn an_mcp_tool_call_codex_asks_about_is_an_approval() {
    let params = json!({
        "threadId": "th", "turnId": "tu", "serverName": "echo", "mode": "form",
        "message": "Allow the echo MCP server to run tool \"echo\"?", "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_approval_kind": "mcp_tool_call", "persist": ["session", "always"],
                  "tool_name": "echo", "tool_params": {"text": "ping"}},
    });
    let request = ServerRequest::Elicitation(serde_json::from_value(params).unwrap());
    let Built::Ask { spec, kind } = build(&RpcId::Num(7), request, |_| None) else { panic!("asked") };
    assert_eq!(spec.kind, RequestKind::Permission);
    assert!(spec.kind.is_approval());
    assert_eq!(spec.scopes, [Scope::Once]);
    assert_eq!(spec.metadata["tool"], "echo");
    assert_eq!(spec.metadata["server_name"], "echo");
    assert_eq!(spec.metadata["input"], json!({"text": "ping"}));
    let call = pending(kind);
    let encode = |response: &Response| encode(&call, RequestKind::Permission, response);
    assert_eq!(encode(&Response::approve()).unwrap().result, json!({"action": "accept", "content": {}}));
    assert_eq!(encode(&Response::deny("no")).unwrap().result, json!({"action": "decline"}));
    assert!(matches!(
        encode(&Response::approve_with(Scope::Session)),
        Err(Error::UnsupportedScope { scope: Scope::Session })
    ));
    assert_eq!(auto_decline(&call.kind), json!({"action": "decline"}));
}

#[test]
fn refusals_are_detected_before_sending() {
    let question = pending(PendingKind::Question { ids: vec!["a".into(), "b".into()] });
    let kind = RequestKind::Question;
    assert!(matches!(encode(&question, kind, &Response::answer("x")), Err(Error::InvalidResponse(_))));
    assert!(matches!(
        encode(&question, kind, &Response::answers([("a", "1")])),
        Err(Error::MissingAnswer { question_id }) if question_id == "b"
    ));
    assert!(matches!(encode(&question, kind, &Response::approve()), Err(Error::ResponseKindMismatch { .. })));
    let once_only = pending(PendingKind::Command { scopes: vec![Scope::Once], offered: Vec::new() });
    assert!(matches!(
        encode(&once_only, RequestKind::CommandApproval, &Response::approve_with(Scope::Session)),
        Err(Error::UnsupportedScope { scope: Scope::Session })
    ));
    let permissions = pending(PendingKind::Permissions { requested: json!({"network": {"enabled": true}}) });
    let cancel = encode(&permissions, RequestKind::Permission, &Response::cancel("no")).unwrap();
    assert_eq!(cancel, Encoded { result: json!({"permissions": {}}), interrupt: true });
}

#[test]
fn requests_without_a_turn_are_declined_in_kind() {
    assert_eq!(auto_decline(&PendingKind::FileChange), json!({"decision": "decline"}));
    // A request too long to read is declined by its method alone.
    assert_eq!(decline_unread("item/fileChange/requestApproval").unwrap(), json!({"decision": "decline"}));
    assert_eq!(decline_unread("item/tool/requestUserInput").unwrap(), json!({"answers": {}}));
    assert_eq!(decline_unread("mcpServer/elicitation/request").unwrap(), json!({"action": "decline"}));
    assert_eq!(decline_unread("item/tool/call").unwrap()["success"], false);
    assert!(decline_unread("applyPatchApproval").unwrap()["decision"]["denied"].is_object());
    assert_eq!(decline_unread("account/somethingNew").unwrap_err().code, INVALID_PARAMS);
    assert_eq!(
        auto_decline(&PendingKind::Question { ids: vec!["q".into()] }),
        json!({"answers": {"q": {"answers": []}}})
    );
    assert_eq!(auto_decline(&PendingKind::Permissions { requested: json!({}) }), json!({"permissions": {}}));
}
