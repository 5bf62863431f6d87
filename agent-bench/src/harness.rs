//! The harness rows: a real `Harness`, the Codex provider, `fake-codex` streaming the file; and
//! the Claude row: the Claude provider, `fake-claude` streaming a Claude stream-json turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use agent_harness::execs::local::LocalExec;
use agent_harness::providers::claude::{ClaudeOptions, ClaudeProvider};
use agent_harness::providers::codex::{CodexOptions, CodexProvider};
use agent_harness::stores::memory::MemoryStore;
use agent_harness::stores::sqlite::SqliteStore;
use agent_harness::{
    Durability, EventKind, Harness, Replay, SessionOptions, StoreChoice, SubscriptionError, TurnOptions,
};
use agent_testkit::fake_cli::{FakeScript, SCRIPT_ENV};
use serde_json::{Value, json};

/// A harness with the Codex provider and the local exec, storing in `store`.
pub(crate) fn codex_harness(store: StoreChoice) -> Result<Harness, String> {
    Harness::builder()
        .provider(CodexProvider::new())
        .exec(Arc::new(LocalExec::new()))
        .store(store)
        .build()
        .map_err(|e| format!("harness: {e}"))
}

/// Session options that run `fake` with the script at `script`, in `work`.
pub(crate) fn fake_options(fake: &Path, script: &Path, work: &Path) -> SessionOptions {
    SessionOptions::new(work)
        .env(SCRIPT_ENV, script.display().to_string())
        .provider_option(CodexOptions::new().binary(fake))
}

/// Writes `script` into `work` under a name unique to this process; returns the path.
pub(crate) fn write_script(work: &Path, name: &str, script: &FakeScript) -> Result<PathBuf, String> {
    let path = work.join(format!("{name}-{}.jsonl", std::process::id()));
    std::fs::write(&path, script.to_script()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The `session_id` of the first line of a Claude stream (its `system/init`).
fn stream_session_id(stream: &Path) -> Result<String, String> {
    use std::io::BufRead;
    let file = std::fs::File::open(stream).map_err(|e| format!("{}: {e}", stream.display()))?;
    let mut first = String::new();
    std::io::BufReader::new(file).read_line(&mut first).map_err(|e| format!("{}: {e}", stream.display()))?;
    let line: Value = serde_json::from_str(&first).map_err(|e| format!("{}: first line: {e}", stream.display()))?;
    line["session_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{}: the first line names no session_id", stream.display()))
}

/// The provider a harness row runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    /// The Codex provider and `fake-codex`.
    Codex,
    /// The Claude provider and `fake-claude`.
    Claude,
}

/// Streams `stream` through a harness whose store is `store` (`disabled`, `memory`, `sqlite`).
pub(crate) async fn run(store: &str, stream: &Path, fake: &Path, work: &Path) -> Result<Value, String> {
    run_row(Row::Codex, store, stream, fake, work).await
}

/// Streams `stream` through a harness with `row`'s provider whose store is `store`.
pub(crate) async fn run_row(row: Row, store: &str, stream: &Path, fake: &Path, work: &Path) -> Result<Value, String> {
    let stream = std::fs::canonicalize(stream).map_err(|e| format!("{}: {e}", stream.display()))?;
    let script = write_script(work, "stream", &FakeScript::new().handshake().turn_start().stream_file(&stream))?;
    let database = work.join(format!("bench-{}.db", std::process::id()));
    let choice = match store {
        "disabled" => StoreChoice::Disabled,
        "memory" => StoreChoice::Custom(Arc::new(MemoryStore::new())),
        "sqlite" => {
            // The default options: synchronous = FULL with group commit (durable).
            let sqlite = SqliteStore::open(&database).map_err(|e| format!("{}: {e}", database.display()))?;
            StoreChoice::Custom(Arc::new(sqlite))
        }
        other => return Err(format!("unknown store {other:?}")),
    };
    let (harness, provider, options) = match row {
        Row::Codex => (codex_harness(choice)?, "codex", fake_options(fake, &script, work)),
        Row::Claude => {
            let harness = Harness::builder()
                .provider(ClaudeProvider::new())
                .exec(Arc::new(LocalExec::new()))
                .store(choice)
                .build()
                .map_err(|e| format!("harness: {e}"))?;
            // The stream names its conversation: the session resumes that one, since a claude
            // that reports another conversation than it was started on fails the turn.
            let options = SessionOptions::new(work)
                .env(SCRIPT_ENV, script.display().to_string())
                .provider_option(ClaudeOptions::new().binary(fake))
                .resume_provider_session(stream_session_id(&stream)?);
            (harness, "claude", options)
        }
    };
    let started = Instant::now();
    let session = harness.start_session(provider, options).await.map_err(|e| format!("start_session: {e}"))?;
    let session_started = started.elapsed().as_secs_f64();
    let mut events = harness.subscribe(&session, Replay::Latest).await.map_err(|e| format!("subscribe: {e}"))?;
    let turn = harness
        .start_turn(&session, "stream the prepared file", TurnOptions::new())
        .await
        .map_err(|e| format!("start_turn: {e}"))?;
    let (mut seen, mut deltas, mut terminal, mut lags, mut last_seq) = (0u64, 0u64, None, 0u64, 0u64);
    let mut ended_early = None;
    loop {
        match events.next().await {
            Some(Ok(event)) => {
                if event.seq <= last_seq {
                    continue; // Replayed again after a lag.
                }
                last_seq = event.seq;
                seen += 1;
                if matches!(event.kind, EventKind::MessageDelta { .. }) {
                    deltas += 1;
                }
                if event.is_terminal() && event.turn_id.as_ref() == Some(&turn.id) {
                    terminal = Some(event.type_name());
                    break;
                }
            }
            // Without a store a subscriber that falls behind loses events: count the lag and
            // go on from what the session's buffer still holds, so the run still ends at the
            // terminal event.
            Some(Err(SubscriptionError::Lagged(lagged))) => {
                lags += 1;
                last_seq = last_seq.max(lagged.resume_after);
                events = harness.subscribe(&session, Replay::Start).await.map_err(|e| format!("resubscribe: {e}"))?;
            }
            Some(Err(error)) => {
                ended_early = Some(error.to_string());
                break;
            }
            None => {
                ended_early = Some("the subscription ended before the terminal event".to_owned());
                break;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let durability = match harness.status(&session).await.map(|s| s.durability) {
        Ok(Durability::Durable) => "durable".to_owned(),
        Ok(Durability::Disabled) => "disabled".to_owned(),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("status failed: {e}"),
    };
    let rss_at_end = crate::self_status_kib("VmRSS");
    let stopping = Instant::now();
    harness.stop_session(&session, true).await.map_err(|e| format!("stop_session: {e}"))?;
    let stop_secs = stopping.elapsed().as_secs_f64();
    harness.shutdown().await;
    drop(harness);
    let teardown_secs = stopping.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&script);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    Ok(json!({
        "consumer": match row { Row::Codex => format!("harness-{store}"), Row::Claude => format!("harness-claude-{store}") },
        "events": seen, "deltas": deltas,
        "terminal": terminal, "ended_early": ended_early, "lags": lags, "durability": durability,
        "stop_secs": stop_secs, "teardown_secs": teardown_secs,
        "session_start_secs": session_started, "secs": secs, "rss_at_end_kib": rss_at_end,
    }))
}
