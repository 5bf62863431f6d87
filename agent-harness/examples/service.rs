//! Driving the harness from a long-running service: one orchestrator task owns the work and
//! never waits on an agent. Session starts, event consumers and monitors run in tasks of their
//! own and report back as messages, so a slow CLI handshake or a chatty turn never blocks the
//! orchestrator (the Rust counterpart of a GenServer that delegates to supervised tasks). An
//! HTTP handler (axum, hyper) would hold the `Orchestrator` handle and `send` jobs to it.
//!
//! `cargo run -p agent-harness --example service --features codex,local-exec -- /path/to/project`

use std::collections::HashMap;
use std::path::PathBuf;

use agent_harness::execs::local::LocalExec;
use agent_harness::providers::codex::CodexProvider;
use agent_harness::stores::memory::MemoryStore;
use agent_harness::{EventKind, ExitReason, Harness, Replay, SessionOptions, SessionRef, TurnOptions, TurnStatus};
use tokio::sync::{mpsc, oneshot};

/// Messages the orchestrator handles: jobs from callers, and reports from its tasks.
enum Message {
    /// A caller's job: run `prompt` in `cwd`; the reply says how the turn ended.
    Run { job: String, cwd: PathBuf, prompt: String, reply: oneshot::Sender<String> },
    /// A session started (or did not) for `job`.
    Started { job: String, session: agent_harness::Result<SessionRef> },
    /// The turn of `job` ended.
    Ended { job: String, status: TurnStatus, text: String },
    /// The session of `job` went away (the monitor resolved).
    Down { job: String, reason: ExitReason },
}

/// A cheap handle to the orchestrator, for callers (an HTTP handler would hold one).
#[derive(Clone)]
struct Orchestrator {
    messages: mpsc::Sender<Message>,
}

impl Orchestrator {
    /// Starts the orchestrator task.
    fn spawn(harness: Harness) -> Orchestrator {
        // Bounded: a caller waits for room rather than growing the queue without end.
        let (messages, inbox) = mpsc::channel(64);
        tokio::spawn(run(harness, messages.clone(), inbox));
        Orchestrator { messages }
    }

    /// Runs a job and waits for its outcome (the orchestrator itself never waits).
    async fn run(&self, job: &str, cwd: PathBuf, prompt: &str) -> String {
        let (reply, outcome) = oneshot::channel();
        let message = Message::Run { job: job.into(), cwd, prompt: prompt.into(), reply };
        if self.messages.send(message).await.is_err() {
            return "the orchestrator stopped".into();
        }
        outcome.await.unwrap_or_else(|_| "the orchestrator dropped the job".into())
    }
}

/// The orchestrator's loop: all its state is local to this task.
async fn run(harness: Harness, me: mpsc::Sender<Message>, mut inbox: mpsc::Receiver<Message>) {
    let mut waiting: HashMap<String, (String, oneshot::Sender<String>)> = HashMap::new();
    while let Some(message) = inbox.recv().await {
        match message {
            Message::Run { job, cwd, prompt, reply } => {
                waiting.insert(job.clone(), (prompt, reply));
                // The start (binary discovery, handshake) runs in its own task.
                let (harness, me) = (harness.clone(), me.clone());
                tokio::spawn(async move {
                    let session = harness.start_session("codex", SessionOptions::new(cwd).id(job.as_str())).await;
                    let _ = me.send(Message::Started { job, session }).await;
                });
            }
            Message::Started { job, session } => {
                let Some((prompt, reply)) = waiting.remove(&job) else { continue };
                let session = match session {
                    Ok(session) => session,
                    Err(error) => {
                        let _ = reply.send(format!("did not start: {error}"));
                        continue;
                    }
                };
                waiting.insert(job.clone(), (String::new(), reply));
                tokio::spawn(watch(harness.clone(), me.clone(), job, session, prompt));
            }
            Message::Ended { job, status, text } => {
                if let Some((_, reply)) = waiting.remove(&job) {
                    let _ = reply.send(format!("{status:?}: {text}"));
                }
            }
            Message::Down { job, reason } => {
                if let Some((_, reply)) = waiting.remove(&job) {
                    let _ = reply.send(format!("the session went down: {reason:?}"));
                }
            }
        }
    }
}

/// One session's consumer: starts the turn, streams its events (printing the text as it comes),
/// reports the end, and stops the session. A monitor reports a session that dies meanwhile.
async fn watch(harness: Harness, me: mpsc::Sender<Message>, job: String, session: SessionRef, prompt: String) {
    if let Ok(monitor) = harness.monitor(&session).await {
        let (me, job) = (me.clone(), job.clone());
        tokio::spawn(async move {
            let reason = monitor.await;
            let _ = me.send(Message::Down { job, reason }).await;
        });
    }
    let turn = match harness.start_turn(&session, prompt.as_str(), TurnOptions::new()).await {
        Ok(turn) => turn,
        Err(error) => {
            let _ = me.send(Message::Ended { job, status: TurnStatus::Failed, text: error.to_string() }).await;
            return;
        }
    };
    let Ok(mut events) = harness.stream(&turn, Replay::Start, None).await else { return };
    while let Some(Ok(event)) = events.next().await {
        if let EventKind::MessageDelta { text, .. } = &event.kind {
            print!("{text}");
        }
        if let Some(end) = event.kind.terminal_end() {
            let text = end.result.text.clone().unwrap_or_default();
            let _ = me.send(Message::Ended { job: job.clone(), status: end.status, text }).await;
        }
    }
    let _ = harness.stop_session(&session, false).await;
}

#[tokio::main]
async fn main() -> agent_harness::Result<()> {
    let cwd = std::fs::canonicalize(std::env::args().nth(1).unwrap_or_else(|| ".".into())).expect("a directory");
    let harness =
        Harness::builder().provider(CodexProvider::new()).exec(LocalExec::new()).store(MemoryStore::new()).build()?;
    let orchestrator = Orchestrator::spawn(harness.clone());
    // Two jobs at once: each has its own session; neither waits for the other.
    let (first, second) = tokio::join!(
        orchestrator.run("summary", cwd.clone(), "Summarize this project in two sentences."),
        orchestrator.run("tests", cwd, "List the test files of this project."),
    );
    println!("\nsummary -> {first}\ntests -> {second}");
    harness.shutdown().await;
    Ok(())
}
