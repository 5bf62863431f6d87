//! The demo behind `cargo xtask demo`: one session per provider (codex, claude, pi) run through
//! the `agent-harness` binary against the real pinned CLIs, offline, each with a [`FakeModel`] on
//! 127.0.0.1 — a text turn, then a turn whose shell command needs an approval that the demo
//! grants (`--approvals approve`) — streamed to the terminal and stored in one SQLite file; then
//! what `agent-harness sessions` and `agent-harness events` print for it.
//!
//! Each CLI runs in an [`OfflineEnv`] (a private HOME, no outside hosts, bounded retries) with
//! `--auth inherit`, exactly as the offline tests run them. The `agent-harness-cli` test
//! `demo.rs` runs [`run`] in CI, so the demo cannot rot.
//!
//! ```no_run
//! # async fn demo() -> Result<(), agent_testkit::demo::DemoError> {
//! use std::path::Path;
//!
//! let report = agent_testkit::demo::run(
//!     Path::new("target/debug/agent-harness"),
//!     Path::new("target/demo"),
//!     &mut std::io::stdout(),
//! )
//! .await?;
//! assert!(report.runs.iter().all(|run| run.code == Some(0)));
//! # Ok(())
//! # }
//! ```

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::clis::{Cli, ClisError, Provider};
use crate::fake_model::FakeModel;
use crate::offline::OfflineEnv;
use crate::scenario::Scenario;

/// The providers the demo runs, in order.
pub const PROVIDERS: [Provider; 3] = [Provider::Codex, Provider::Claude, Provider::Pi];

/// The demo's first prompt (a text turn).
pub const TEXT_PROMPT: &str = "Say hello.";
/// The demo's second prompt (a shell command that needs an approval).
pub const TOOL_PROMPT: &str = "Write hello into demo.txt and show it.";
/// The command the fake model asks to run in the second turn.
pub const COMMAND: &str = "echo hello-from-the-demo > demo.txt && cat demo.txt";
/// What the fake model says after the command ran, before the command's output.
pub const AFTER_TOOL: &str = "The command printed: ";

/// The fake model's text answer to the first prompt.
pub fn greeting(provider: Provider) -> String {
    format!("Hello from the fake model, through {}.", provider.id())
}

/// The session ID the demo gives `provider`'s session.
pub fn session_id(provider: Provider) -> String {
    format!("demo-{}", provider.id())
}

/// Why the demo could not run (a provider's run that exits non-zero is not an error: see
/// [`DemoRun::code`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// A pinned CLI is not installed.
    #[error("{0} (run `cargo xtask clis`)")]
    Cli(#[from] ClisError),
    /// The fake model server could not listen on 127.0.0.1, or an offline environment could not
    /// be prepared.
    #[error("{0}")]
    Setup(String),
    /// `agent-harness` could not be run.
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("cannot write the demo's output: {0}")]
    Output(#[source] std::io::Error),
}

/// One provider's session.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DemoRun {
    /// The provider.
    pub provider: Provider,
    /// The CLI's version.
    pub version: String,
    /// The session's ID.
    pub session_id: String,
    /// `agent-harness run`'s exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// What it printed (stdout and stderr, as streamed).
    pub output: String,
    /// Whether the approved command wrote its file in the session's workspace.
    pub command_ran: bool,
    /// How long the run took.
    pub took: Duration,
}

/// What the demo did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DemoReport {
    /// One run per provider, in [`PROVIDERS`] order.
    pub runs: Vec<DemoRun>,
    /// The SQLite file holding the sessions.
    pub db: PathBuf,
    /// What `agent-harness sessions` printed, and its exit code.
    pub sessions: (Option<i32>, String),
    /// What `agent-harness events` printed for each session, and its exit code.
    pub events: Vec<(String, Option<i32>, String)>,
}

/// Runs the demo with the `agent-harness` binary at `agent_harness`, keeping the SQLite file
/// and the offline environments under `dir` (the file is replaced; the environments are removed
/// at the end), writing everything to `out` as it happens.
pub async fn run(agent_harness: &Path, dir: &Path, out: &mut (dyn Write + Send)) -> Result<DemoReport, DemoError> {
    // Each session runs in its own workspace: paths given relative to here must not move.
    let absolute =
        |path: &Path| std::path::absolute(path).map_err(|e| DemoError::Setup(format!("{}: {e}", path.display())));
    let (agent_harness, dir) = (&absolute(agent_harness)?, &absolute(dir)?);
    std::fs::create_dir_all(dir).map_err(|e| DemoError::Setup(format!("cannot create {}: {e}", dir.display())))?;
    let db = dir.join("demo.db");
    for stale in [db.clone(), db.with_extension("db-wal"), db.with_extension("db-shm")] {
        let _ = std::fs::remove_file(stale);
    }
    let store = format!("sqlite:{}", db.display());
    let mut runs = Vec::new();
    for provider in PROVIDERS {
        runs.push(run_provider(agent_harness, dir, provider, &store, out).await?);
    }
    let say = |out: &mut (dyn Write + Send), text: String| writeln!(out, "{text}").map_err(DemoError::Output);
    say(out, format!("\n=== agent-harness sessions --store {store}"))?;
    let sessions = capture(agent_harness, &["sessions", "--store", &store]).await?;
    out.write_all(sessions.1.as_bytes()).map_err(DemoError::Output)?;
    let mut events = Vec::new();
    for run in &runs {
        say(out, format!("\n=== agent-harness events --store {store} {}", run.session_id))?;
        let (code, text) = capture(agent_harness, &["events", "--store", &store, &run.session_id]).await?;
        out.write_all(text.as_bytes()).map_err(DemoError::Output)?;
        events.push((run.session_id.clone(), code, text));
    }
    out.flush().map_err(DemoError::Output)?;
    Ok(DemoReport { runs, db, sessions, events })
}

/// The scenario the fake model plays for `provider`: a greeting, then the command, then its
/// output quoted.
fn scenario(provider: Provider) -> Scenario {
    Scenario::new().text(greeting(provider)).shell(COMMAND).quote_tool_result(AFTER_TOOL)
}

async fn run_provider(
    agent_harness: &Path,
    dir: &Path,
    provider: Provider,
    store: &str,
    out: &mut (dyn Write + Send),
) -> Result<DemoRun, DemoError> {
    let cli = Cli::latest(provider)?;
    let server = FakeModel::start(scenario(provider))
        .await
        .map_err(|e| DemoError::Setup(format!("cannot start the fake model server on 127.0.0.1: {e}")))?;
    let env = OfflineEnv::builder(&cli, &server).root(dir).build().map_err(|e| DemoError::Setup(e.to_string()))?;
    let session_id = session_id(provider);
    let mut args: Vec<String> = ["run", "--auth", "inherit", "--approvals", "approve", "--store", store]
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(["--session-id".into(), session_id.clone()]);
    match provider {
        // Pi runs under Node: the config names its entry script and the offline flags.
        Provider::Pi => {
            let config = serde_json::json!({
                "provider": "pi",
                "provider_options": {
                    "binary": cli.program(),
                    "binary_args": cli.leading_args(),
                    "args": env.args(),
                }
            });
            let path = env.dir().join("pi-config.json");
            std::fs::write(&path, config.to_string())
                .map_err(|e| DemoError::Setup(format!("cannot write {}: {e}", path.display())))?;
            args.extend(["--config".into(), path.display().to_string()]);
        }
        other => {
            args.extend(["--provider".into(), other.id().into()]);
            args.extend(["--cli-path".into(), cli.program().display().to_string()]);
        }
    }
    if provider == Provider::Codex {
        // Codex asks before running a command only under these.
        args.extend(["--approval-policy", "untrusted", "--sandbox", "workspace-write"].map(String::from));
    }
    args.extend([TEXT_PROMPT.to_owned(), TOOL_PROMPT.to_owned()]);
    writeln!(
        out,
        "\n=== {} {} (fake model on {}): agent-harness {} \"{TEXT_PROMPT}\" \"{TOOL_PROMPT}\"",
        provider.id(),
        cli.version(),
        server.addr(),
        shown_args(&args[..args.len() - 2])
    )
    .map_err(DemoError::Output)?;
    let mut command = Command::new(agent_harness);
    command.env_clear().envs(env.vars()).current_dir(env.workspace()).args(&args);
    let started = Instant::now();
    let (code, output) = stream(command, agent_harness, out).await?;
    let command_ran = env.workspace().join("demo.txt").is_file();
    Ok(DemoRun {
        provider,
        version: cli.version().to_owned(),
        session_id,
        code,
        output,
        command_ran,
        took: started.elapsed(),
    })
}

/// The arguments as a person would type them.
fn shown_args(args: &[String]) -> String {
    args.iter()
        .map(|arg| if arg.contains(' ') { format!("\"{arg}\"") } else { arg.clone() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A chunk of output, or the exit code once the output ended.
enum Streamed {
    Output(Vec<u8>),
    Exited(std::io::Result<Option<i32>>),
}

/// Runs `command` with stdout and stderr merged into `out` as they come; returns its exit code
/// and what it wrote. The process is read and waited for on a thread of its own, so the fake
/// model server keeps serving on this task's runtime meanwhile.
async fn stream(
    mut command: Command,
    program: &Path,
    out: &mut (dyn Write + Send),
) -> Result<(Option<i32>, String), DemoError> {
    let spawn_error = |source| DemoError::Spawn { program: program.into(), source };
    let (mut reader, writer) = std::io::pipe().map_err(spawn_error)?;
    let stderr = writer.try_clone().map_err(spawn_error)?;
    command.stdin(Stdio::null()).stdout(writer).stderr(stderr);
    let mut child = command.spawn().map_err(spawn_error)?;
    // The pipe's write ends now live only in the child: its exit is end-of-file here.
    drop(command);
    let (sender, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if sender.send(Streamed::Output(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = sender.send(Streamed::Exited(child.wait().map(|status| status.code())));
    });
    let mut seen = Vec::new();
    while let Some(chunk) = chunks.recv().await {
        match chunk {
            Streamed::Output(bytes) => {
                seen.extend_from_slice(&bytes);
                out.write_all(&bytes).and_then(|()| out.flush()).map_err(DemoError::Output)?;
            }
            Streamed::Exited(code) => {
                return Ok((code.map_err(spawn_error)?, String::from_utf8_lossy(&seen).into_owned()));
            }
        }
    }
    Err(DemoError::Output(std::io::Error::other("the reader of the demo's output stopped")))
}

/// Runs `agent-harness args` and returns its exit code and stdout and stderr.
async fn capture(program: &Path, args: &[&str]) -> Result<(Option<i32>, String), DemoError> {
    let mut command = plain_command(program, args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|e| DemoError::Output(std::io::Error::other(e)))?
        .map_err(|source| DemoError::Spawn { program: program.into(), source })?;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Ok((output.status.code(), text))
}

fn plain_command(program: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    command
}
