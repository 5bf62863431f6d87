//! No planted secret reaches the SQLite files (database, `-wal`, `-shm`): environment values,
//! MCP arguments, environment and headers, the system prompt, provider option contents, and the
//! answer to a secret question all stay out of every byte the store writes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_core::request::RequestSpec;
use agent_core::testing::ScriptedProvider;
use agent_core::{
    EventKind, Harness, McpServer, Question, Replay, RequestKind, Response, SessionOptions, StoreChoice, TurnOptions,
};
use agent_store_sqlite::SqliteStore;
use common::TempDir;

const SECRETS: [&str; 7] = [
    "sekrit-env-value-1",
    "sekrit-mcp-arg-2",
    "sekrit-mcp-env-3",
    "sekrit-mcp-header-4",
    "sekrit-system-prompt-5",
    "sekrit-provider-option-6",
    "sekrit-answer-7",
];

/// A provider's option holding a secret.
struct DeployKey(#[allow(dead_code)] &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_secrets_never_reach_the_database_files() {
    let dir = TempDir::new("secrets");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).expect("open");
    let (provider, control) = ScriptedProvider::new("scripted");
    let harness =
        Harness::builder().provider(provider).store(StoreChoice::Custom(Arc::new(store.clone()))).build().unwrap();

    let mut stdio = McpServer::stdio("tool-server", ["--token", SECRETS[1]]);
    if let McpServer::Stdio { env, .. } = &mut stdio {
        env.insert("TOOL_TOKEN".into(), SECRETS[2].into());
    }
    let mut http = McpServer::http("https://mcp.example/v1");
    if let McpServer::Http { headers, .. } = &mut http {
        headers.insert("Authorization".into(), SECRETS[3].into());
    }
    let options = SessionOptions::new(dir.path())
        .env("OPENAI_API_KEY", SECRETS[0])
        .mcp_server("tools", stdio)
        .mcp_server("web", http)
        .system_prompt(SECRETS[4])
        .provider_option(DeployKey(SECRETS[5]));
    let session = harness.start_session("scripted", options).await.unwrap();
    let remote = control.session(&session.id).await;
    let turn = harness.start_turn(&session, "Deploy it", TurnOptions::new()).await.unwrap();
    let mut events = harness.subscribe(&turn, Replay::Start).await.unwrap();
    while events.next().await.unwrap().unwrap().type_name() != "turn_started" {}
    let spec = RequestSpec::new(RequestKind::Question, "Password?", "q")
        .questions([Question { secret: true, ..Question::new("password", "Password?") }]);
    remote.request(&turn.id, spec).await;
    let request = loop {
        let event = events.next().await.unwrap().unwrap();
        if let EventKind::RequestCreated(request) = &event.kind {
            break (**request).clone();
        }
    };
    harness.respond(&request, Response::answer(SECRETS[6])).await.unwrap();
    remote.complete(&turn.id, "done").await;
    harness.await_turn(&turn, Some(Duration::from_secs(10))).await.unwrap();
    harness.stop_session(&session, false).await.unwrap();

    let mut scanned = 0;
    let mut prompt_seen = false;
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        let Ok(bytes) = std::fs::read(&file) else { continue };
        scanned += bytes.len();
        prompt_seen |= bytes.windows(9).any(|w| w == b"Deploy it");
        for secret in SECRETS {
            let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
            assert!(!found, "{secret} is in {file}");
        }
    }
    assert!(scanned > 0, "the database files were read");
    assert!(prompt_seen, "the scan finds what is stored (the turn's prompt), so it would find a secret");
    drop(store);
}
