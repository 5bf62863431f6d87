//! A user's preset on Claude's permission prompt (`"approvals": {"conversation":
//! "claude_control"}`), driven by shell scripts: what reaches the CLI when a request ID is reused,
//! and an answer that comes after the CLI wrote its result.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_core::{Error, EventKind, Harness, Replay, Response, SessionOptions, SessionRef, TurnOptions, TurnStatus};
use agent_provider_preset::{Approvals, PresetOptions};
use agent_testkit::events::{names, terminal};
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;
use serde_json::{Value, json};

/// A session, asking approvals, of a preset `id` whose CLI is the shell script `body` on Claude's
/// permission prompt (answering `--version` with `<id> 1.0.0`); the script runs in `workspace`.
struct Asker {
    /// Holds the script, the preset and the workspace (removed on drop).
    programs: ProgramDir,
    workspace: PathBuf,
    exec: Arc<RecordingExec>,
    harness: Harness,
    session: SessionRef,
}

impl Asker {
    async fn start(id: &str, body: &str) -> Asker {
        let programs = ProgramDir::new(&format!("preset-{id}"));
        let script = programs.script(id, body);
        let preset = json!({
            "schema_version": 1, "id": id, "program": script, "framing": "jsonl",
            "args": [{"if": "!approvals", "then": ["--", "{prompt}"]}],
            "version": {"args": ["--version"], "contains": id, "min": "1.0.0"},
            "matchers": {"result": [{"when": {"/type": "result"}, "value": "/result"}]},
            "approvals": {"conversation": "claude_control"}
        });
        let catalog = support::catalog_of(&programs, &script, &preset);
        let workspace = programs.dir("work");
        let (exec, harness) = support::harness_of(&catalog);
        let options = SessionOptions::new(&workspace).provider_option(PresetOptions::new().approvals(Approvals::Ask));
        let session = harness.start_session(format!("preset:{id}").as_str(), options).await.expect("session starts");
        Asker { programs, workspace, exec, harness, session }
    }
}

/// A CLI on Claude's permission prompt that asks twice under one request ID, then writes what it
/// was answered to `answers` in its working directory.
const TWICE_ASKED: &str = r#"
if [ "$1" = "--version" ]; then echo "asker 1.0.0"; exit 0; fi
read -r prompt
ask() {
  echo "{\"type\":\"control_request\",\"request_id\":\"r1\",\"request\":{\"subtype\":\"can_use_tool\",\"tool_name\":\"Bash\",\"input\":{\"command\":\"$2\"},\"tool_use_id\":\"$1\"}}"
}
ask t1 ls
ask t2 "rm -rf /"
read -r answer
echo "$answer" > answers
echo '{"type":"result","is_error":false,"result":"done"}'
"#;

/// A request ID reused while a request under it waits: an answer given for one tool use could
/// reach the other, so neither is approved — one deny for the ID, the waiting request ended, a
/// warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_request_id_denies_both_requests_and_approves_nothing() {
    let Asker { programs: _programs, workspace, exec, harness, session } = Asker::start("asker", TWICE_ASKED).await;

    let (_, events) = support::run(&harness, &session, "go", |_| None).await;
    assert_eq!(terminal(&events).status, TurnStatus::Completed, "{}", names(&events));
    let created = events.iter().filter(|e| matches!(e.kind, EventKind::RequestCreated(_))).count();
    let expired = events.iter().filter(|e| e.type_name() == "request_expired").count();
    assert_eq!((created, expired), (1, 1), "the first shown and ended, the second never: {}", names(&events));
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("reused"))));
    let answer: Value = serde_json::from_str(&std::fs::read_to_string(workspace.join("answers")).expect("answered"))
        .expect("a JSON answer");
    assert_eq!(answer["response"]["request_id"], "r1", "{answer}");
    assert_eq!(answer["response"]["response"]["behavior"], "deny", "{answer}");
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// A CLI on Claude's permission prompt that asks, then writes its result without waiting for
/// the answer, and lingers once its stdin is closed (marking that in its working directory).
const ASKS_THEN_ENDS: &str = r#"
if [ "$1" = "--version" ]; then echo "late 1.0.0"; exit 0; fi
read -r prompt
echo '{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"t1"}}'
echo '{"type":"result","is_error":false,"result":"done"}'
cat > /dev/null
touch stdin-closed
sleep 1
"#;

/// An answer given after the CLI wrote its result (its stdin closed, the process not yet gone)
/// can no longer reach it: it is `RequestExpired`, as with a native provider once its turn
/// ended, and the request expires with the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_after_the_result_line_is_expired() {
    let Asker { programs: _programs, workspace, exec, harness, session } = Asker::start("late", ASKS_THEN_ENDS).await;
    let turn = harness.start_turn(&session, "go", TurnOptions::new()).await.expect("turn");
    let mut stream = harness.stream(&turn, Replay::Start, Some(support::IDLE)).await.expect("stream");
    let request = loop {
        match stream.next().await.expect("the request comes").expect("no error") {
            event if matches!(event.kind, EventKind::RequestCreated(_)) => {
                let EventKind::RequestCreated(request) = &event.kind else { unreachable!() };
                break (**request).clone();
            }
            _ => {}
        }
    };
    let closed = workspace.join("stdin-closed");
    tokio::time::timeout(support::IDLE, async {
        while !closed.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the result line closes the CLI's stdin");
    let late = harness.respond(&request, Response::approve()).await;
    assert!(matches!(late, Err(Error::RequestExpired { .. })), "{late:?}");
    let outcome = harness.await_turn(&turn, Some(support::IDLE)).await.expect("the turn ends");
    assert_eq!(outcome.status, TurnStatus::Completed);
    let events = stream.collect().await.expect("the rest of the turn");
    assert_eq!(events.iter().filter(|e| e.type_name() == "request_expired").count(), 1, "{}", names(&events));
    assert!(!events.iter().any(|e| e.type_name() == "request_resolved"), "{}", names(&events));
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}
