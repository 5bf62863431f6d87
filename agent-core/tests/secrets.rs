//! Secrets never reach tracing output, `Debug` output, events or the store.
//!
//! A test binary of its own: tracing caches per-callsite interest process-wide, so a capturing
//! subscriber only sees every span reliably when no other test hits the same callsites
//! concurrently.

#[path = "runtime/common.rs"]
#[allow(dead_code)]
mod common;

use agent_core::request::RequestSpec;
use agent_core::*;

use common::*;

const ENV_SECRET: &str = "sk-env-secret-0123456789";
const PROMPT_SECRET: &str = "prompt-secret-4242";
const ANSWER_SECRET: &str = "answer-secret-hunter2";
const MCP_SECRET: &str = "mcp-secret-token-77";

#[tokio::test]
async fn secrets_stay_out_of_traces_debug_output_and_the_store() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let f = Fixture::new();
    let mut tools = McpServer::stdio("tool-server", ["--token", MCP_SECRET]);
    if let McpServer::Stdio { env, .. } = &mut tools {
        env.insert("TOOL_TOKEN".into(), MCP_SECRET.into());
    }
    let mut web = McpServer::http("https://mcp.example/v1");
    if let McpServer::Http { headers, .. } = &mut web {
        headers.insert("Authorization".into(), MCP_SECRET.into());
    }
    let options = opts()
        .env("OPENAI_API_KEY", ENV_SECRET)
        .system_prompt(PROMPT_SECRET)
        .mcp_server("tools", tools)
        .mcp_server("web", web);
    let options_debug = format!("{options:?}");
    let (session, remote) = f.session(options).await;
    let turn = f.admitted_turn(&session, PROMPT_SECRET).await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    let spec = RequestSpec::new(RequestKind::Question, "Password?", "q")
        .questions([Question { secret: true, ..Question::new("password", "Password?") }]);
    remote.request(&turn.id, spec).await;
    let request = request_of(&next(&mut events).await);
    let response = Response::answer(ANSWER_SECRET);
    let response_debug = format!("{response:?}");
    f.harness.respond(&request, response).await.unwrap();
    // The agent quotes the answer: whole in a message and in the turn's result, and in pieces
    // as deltas.
    let quoted = EventKind::AssistantMessage { item_id: None, text: format!("You typed {ANSWER_SECRET}.") };
    remote.emit(&turn.id, quoted).await;
    // And asks approval for a command that holds it.
    let approval = RequestSpec::new(RequestKind::CommandApproval, format!("curl -u me:{ANSWER_SECRET} x"), "c");
    remote.request(&turn.id, approval).await;
    let (start, end) = ANSWER_SECRET.split_at(7);
    remote.delta(&turn.id, &format!("Again: {start}")).await;
    remote.delta(&turn.id, &format!("{end}!")).await;
    remote.complete(&turn.id, &format!("done with {ANSWER_SECRET}")).await;
    f.harness.await_turn(&turn, None).await.unwrap();
    let turn_debug = format!("{turn:?}");
    let status_debug = format!("{:?}", f.harness.status(&session).await.unwrap());
    f.harness.stop_session(&session, false).await.unwrap();

    let traces = captured.text();
    for span in ["session{", "turn{", "provider_command{", "request{", "store_write{"] {
        assert!(traces.contains(span), "the {span}..}} span was recorded: {traces}");
    }
    for secret in [ENV_SECRET, PROMPT_SECRET, ANSWER_SECRET, MCP_SECRET] {
        assert!(!traces.contains(secret), "tracing output leaks {secret}");
        assert!(!options_debug.contains(secret), "Debug of the options leaks {secret}: {options_debug}");
    }
    assert!(!response_debug.contains(ANSWER_SECRET), "{response_debug}");
    assert!(!turn_debug.contains(PROMPT_SECRET), "{turn_debug}");
    assert!(!status_debug.contains(ENV_SECRET), "{status_debug}");

    let store = f.dyn_store();
    let snapshot = serde_json::to_string(&store.fetch_session(&session.id).await.unwrap()).unwrap();
    assert!(!snapshot.contains(ENV_SECRET), "the snapshot holds no env values");
    let events = serde_json::to_string(&store.read_events(&session.id, &Default::default()).await.unwrap()).unwrap();
    assert!(!events.contains(ENV_SECRET), "events hold no env values");
    assert!(!events.contains(MCP_SECRET) && !snapshot.contains(MCP_SECRET), "no MCP argument, env or header");
    assert!(!events.contains(ANSWER_SECRET), "answers to secret questions are not recorded in events: {events}");
    assert!(events.contains("You typed [redacted].") && events.contains("done with [redacted]"), "{events}");
    let turns = serde_json::to_string(&store.list_turns(&session.id).await.unwrap()).unwrap();
    assert!(!turns.contains(ANSWER_SECRET), "nor in the turn's result: {turns}");
    let requests = serde_json::to_string(&store.list_requests(&session.id).await.unwrap()).unwrap();
    assert!(!requests.contains(ANSWER_SECRET), "answers to secret questions are not stored");
    assert!(requests.contains("[redacted]"), "{requests}");
    assert!(requests.contains("curl -u me:[redacted] x"), "the later request's prompt is redacted: {requests}");
    assert_eq!(remote.responses(), [Response::answer(ANSWER_SECRET)], "the provider got the real answer");
}
