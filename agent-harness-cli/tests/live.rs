//! Live tests (testing tier 5): `agent-harness run` against the user's own logged-in codex,
//! claude and pi and the real model services, under the default `--auth subscription`. They
//! spend quota, so each returns early — printing why — unless `AGENT_LIVE` names its provider,
//! and never runs in CI (`agent_testkit::live`). `cargo xtask live [codex|claude|pi]` runs them
//! after checking the logins. `AGENT_LIVE_ARGS` adds `run` arguments (a cheaper `--model`).
//!
//! Each test walks one provider through the product card's scenarios: a text turn, an approval
//! allowed and one denied, a question the agent asks, a cancelled turn (SIGINT), and a resumed
//! session that remembers the first run.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use agent_testkit::{Provider, live};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Longest any one live command may take.
const LIMIT: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_codex() {
    if live::selected(Provider::Codex) {
        scenarios(Provider::Codex).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_claude() {
    if live::selected(Provider::Claude) {
        scenarios(Provider::Claude).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_pi() {
    if live::selected(Provider::Pi) {
        scenarios(Provider::Pi).await;
    }
}

/// A private working directory for the agent, removed at the end.
struct Workspace(PathBuf);

impl Workspace {
    fn new(provider: Provider) -> Workspace {
        let dir = std::env::temp_dir().join(format!("agent-harness-live-{provider}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("workspace");
        Workspace(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Live {
    provider: Provider,
    workspace: Workspace,
}

#[derive(Debug)]
struct Output {
    status: ExitStatus,
    events: Vec<Value>,
    stderr: String,
}

impl Output {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    fn terminals(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| e["type"].as_str())
            .filter(|t| matches!(*t, "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted"))
            .collect()
    }

    /// The text of the last completed turn.
    fn text(&self) -> String {
        let end = self.of_type("turn_completed").pop().unwrap_or_else(|| panic!("no completed turn: {self:?}"));
        end["data"]["result"]["text"].as_str().unwrap_or_default().to_owned()
    }
}

impl Live {
    /// `agent-harness run --json` for this provider with `extra` and `prompt`, in the workspace,
    /// with the user's environment.
    fn command(&self, extra: &[&str], prompt: &str) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-harness"));
        command.args(["run", "--json", "--provider", self.provider.id(), "--timeout", "300"]);
        if self.provider == Provider::Codex {
            // Codex asks before commands only under these.
            command.args(["--approval-policy", "untrusted", "--sandbox", "workspace-write"]);
        }
        command.args(live::extra_args()).args(extra).arg(prompt);
        command.current_dir(self.workspace.path()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command.kill_on_drop(true);
        command
    }

    async fn run(&self, extra: &[&str], prompt: &str) -> Output {
        let output = tokio::time::timeout(LIMIT, self.command(extra, prompt).output())
            .await
            .unwrap_or_else(|_| panic!("{} did not finish: {prompt}", self.provider))
            .expect("agent-harness runs");
        let events = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON event ({e}): {line}")))
            .collect();
        let output = Output { status: output.status, events, stderr: String::from_utf8_lossy(&output.stderr).into() };
        println!("{}: {prompt:?} -> {:?} {:?}", self.provider, output.status.code(), output.terminals());
        if !output.stderr.is_empty() {
            println!("  stderr: {}", output.stderr.trim_end());
        }
        output
    }
}

async fn scenarios(provider: Provider) {
    let live = Live { provider, workspace: Workspace::new(provider) };
    text_turn(&live).await;
    approvals(&live).await;
    question(&live).await;
    cancel(&live).await;
    resume(&live).await;
}

async fn text_turn(live: &Live) {
    let output = live.run(&[], "Reply with the single word PONG and nothing else.").await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(output.terminals(), ["turn_completed"], "{output:?}");
    assert!(output.text().to_lowercase().contains("pong"), "{output:?}");
}

async fn approvals(live: &Live) {
    let ask = |file: &str| {
        format!("Use your shell tool to run exactly `touch {file}` in the current directory, then reply done.")
    };
    let approved = live.run(&["--approvals", "approve"], &ask("live-approved.txt")).await;
    assert!(!approved.of_type("request_created").is_empty(), "the command was not asked about: {approved:?}");
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    assert!(live.workspace.path().join("live-approved.txt").exists(), "the approved command did not run: {approved:?}");

    let denied = live.run(&["--approvals", "deny"], &ask("live-denied.txt")).await;
    assert!(!denied.of_type("request_created").is_empty(), "the command was not asked about: {denied:?}");
    assert!(!live.workspace.path().join("live-denied.txt").exists(), "the denied command ran: {denied:?}");
    assert_eq!(denied.terminals().len(), 1, "{denied:?}");
}

async fn question(live: &Live) {
    let tool = match live.provider {
        Provider::Codex => "request_user_input",
        Provider::Claude => "AskUserQuestion",
        _ => "ask_user",
    };
    let prompt = format!(
        "Use your {tool} tool to ask me which color I prefer, offering red and blue. Then reply with the color I \
         chose and nothing else."
    );
    let output = live.run(&["--answer", "blue"], &prompt).await;
    let resolved = output.of_type("request_resolved");
    assert!(
        resolved.iter().any(|e| e["data"]["response"]["action"] == "answer"),
        "no question was asked and answered: {output:?}"
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(output.text().to_lowercase().contains("blue"), "{output:?}");
}

async fn cancel(live: &Live) {
    let prompt = "Count slowly from 1 to 500, one number per line, and explain each number in one sentence.";
    let mut child = live.command(&["--approvals", "deny"], prompt).spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("JSON event");
            let started = event["type"] == "turn_started";
            seen.push(event);
            if started {
                return;
            }
        }
        panic!("the turn did not start: {seen:?}");
    })
    .await
    .expect("the turn starts");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: sending a signal to the child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    while let Some(line) = lines.next_line().await.expect("read") {
        seen.push(serde_json::from_str(&line).expect("JSON event"));
    }
    let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("exits").expect("status");
    let ends: Vec<&str> = seen.iter().filter_map(|e| e["type"].as_str()).filter(|t| t.starts_with("turn_")).collect();
    // A turn quicker than the signal completes; otherwise the interrupt ends it.
    match status.code() {
        Some(2) => assert!(ends.iter().any(|t| matches!(*t, "turn_cancelled" | "turn_interrupted")), "{ends:?}"),
        other => panic!("expected exit 2 after SIGINT, got {other:?}: {ends:?}"),
    }
}

async fn resume(live: &Live) {
    let db = live.workspace.path().join("live.db");
    let store = format!("sqlite:{}", db.display());
    let id = format!("live-{}", live.provider);
    let first =
        live.run(&["--store", &store, "--session-id", &id], "Remember the word tangerine. Reply with just OK.").await;
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let second = live.run(&["--store", &store, "--resume", &id], "Which word did I ask you to remember?").await;
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert!(second.text().to_lowercase().contains("tangerine"), "the resumed session forgot: {second:?}");
    let last = first.events.last().and_then(|e| e["seq"].as_u64()).expect("seq");
    assert!(second.events.first().and_then(|e| e["seq"].as_u64()) > Some(last), "one history: {second:?}");
}
