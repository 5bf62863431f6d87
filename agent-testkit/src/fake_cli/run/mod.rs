//! The fake CLI runtime: plays a [`FakeScript`] against the client on stdin/stdout.
//!
//! Three parts run at once: a reader thread turns stdin into lines, a dispatcher task answers
//! what needs no script step (interrupts, `on` rules, the protocol's housekeeping requests) and
//! queues the rest, and the engine plays the steps, taking queued messages when a step waits
//! for one. A writer thread writes whole frames in order.

mod claude;
mod codex;
mod io;
mod pi;
mod proto;
mod state;
mod template;

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use self::io::{Input, Output, Recorder, StdinControl};
use self::proto::Proto;
use self::state::{Rule, State, Turn};
use super::script::{ApprovalKind, EofAction, ExpectKind, FakeScript, FakeStep, InterruptMode};
use super::{FakeCli, RECORD_ENV, SCRIPT_ARG, SCRIPT_ENV};

/// Interrupts the dispatcher hands the engine while a turn runs. When full, the dispatcher
/// waits (and stops reading stdin); a client sends at most a few.
const INTERRUPT_CAPACITY: usize = 16;

/// Bytes per write of a stderr flood.
const FLOOD_CHUNK: usize = 64 * 1024;

/// Exit code for a bad command line or script.
const USAGE_EXIT: u8 = 2;

/// Runs a fake CLI binary: prints the version for `--version`, otherwise plays the script.
pub(crate) fn main(cli: FakeCli) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--version") {
        println!("{}", cli.version_line());
        return ExitCode::SUCCESS;
    }
    let name = cli.binary_name();
    let path = match script_path(&args) {
        Ok(path) => path,
        Err(message) => {
            eprintln!("{name}: {message}");
            return ExitCode::from(USAGE_EXIT);
        }
    };
    let script = match FakeScript::from_file(&path) {
        Ok(script) => script,
        Err(error) => {
            eprintln!("{name}: {error}");
            return ExitCode::from(USAGE_EXIT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_time().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name}: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli, script, args))
}

/// The script path: `--fake-script <path>`, else `$FAKE_CLI_SCRIPT`.
fn script_path(args: &[String]) -> Result<String, String> {
    match args.iter().position(|arg| arg == SCRIPT_ARG) {
        Some(index) => args.get(index + 1).cloned().ok_or_else(|| format!("{SCRIPT_ARG} needs a path")),
        None => {
            std::env::var(SCRIPT_ENV).map_err(|_| format!("no script: set {SCRIPT_ENV} or pass {SCRIPT_ARG} <path>"))
        }
    }
}

async fn run(cli: FakeCli, script: FakeScript, args: Vec<String>) -> ExitCode {
    let recorder = match std::env::var_os(RECORD_ENV) {
        Some(path) => match Recorder::create(path.as_ref()) {
            Ok(recorder) => Some(Arc::new(recorder)),
            Err(error) => {
                eprintln!("{}: cannot create the transcript {}: {error}", cli.binary_name(), path.to_string_lossy());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    if let Some(recorder) = &recorder {
        recorder.note(json!({"argv": args}));
    }
    let out = Output::start(recorder.clone());
    let (stdin, input) = StdinControl::start(recorder.clone());
    let (interrupts_tx, interrupts) = mpsc::channel(INTERRUPT_CAPACITY);
    let proto = Proto::new(cli, &args);
    let session = proto.first_session(&args);
    let engine = Arc::new(Engine {
        proto,
        version: cli.version(),
        out,
        stdin,
        recorder,
        state: Mutex::new(State::new(cli, session)),
        inbox: Mutex::new(VecDeque::new()),
        arrived: Notify::new(),
    });
    tokio::spawn(Arc::clone(&engine).dispatch(input, interrupts_tx));
    engine.play(script.steps(), interrupts).await
}

/// How a step left the turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on with the next step.
    Continue,
    /// The step ended the turn early (cancelled approval): skip to the next `turn_start`.
    TurnEnded,
}

/// A tool the script asks approval for.
#[derive(Debug)]
pub(super) struct Tool<'a> {
    pub(super) kind: ApprovalKind,
    pub(super) command: &'a str,
    pub(super) path: &'a str,
    pub(super) content: &'a str,
    pub(super) output: String,
}

/// The client's answer to an approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Approved,
    Denied(String),
    /// Denied, and the turn ends interrupted.
    Cancelled,
}

/// The fake CLI.
pub(super) struct Engine {
    proto: Proto,
    pub(super) version: String,
    out: Output,
    stdin: Arc<StdinControl>,
    recorder: Option<Arc<Recorder>>,
    state: Mutex<State>,
    /// Client messages no one answered yet, oldest first.
    inbox: Mutex<VecDeque<Value>>,
    arrived: Notify,
}

impl Engine {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note(&self, msg: Value) {
        if let Some(recorder) = &self.recorder {
            recorder.note(msg);
        }
    }

    /// Writes one frame.
    pub(super) async fn send(&self, frame: Value) {
        self.out.line(frame.to_string()).await;
    }

    /// Writes frames in order.
    pub(super) async fn send_all(&self, frames: Vec<Value>) {
        for frame in frames {
            self.send(frame).await;
        }
    }

    /// Waits for the oldest queued client message `accept` takes and removes it.
    pub(super) async fn expect(&self, accept: impl Fn(&Value) -> bool) -> Value {
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let taken = {
                let mut inbox = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
                inbox.iter().position(&accept).and_then(|index| inbox.remove(index))
            };
            if let Some(msg) = taken {
                self.state().last_in = Some(msg.clone());
                return msg;
            }
            arrived.await;
        }
    }

    /// A fresh number for the fake's own IDs.
    pub(super) fn next_id(&self) -> u64 {
        let mut state = self.state();
        state.counter += 1;
        state.counter
    }

    /// Starts the n-th turn, with the ID `id(n)`, for `prompt`; returns the ID.
    pub(super) fn begin_turn(&self, id: impl FnOnce(u64) -> String, prompt: String) -> String {
        let mut state = self.state();
        state.turns += 1;
        let id = id(state.turns);
        state.turn = Some(Turn { id: id.clone(), text: String::new(), pending: None });
        state.vars.insert("prompt", prompt);
        state.messages += 1;
        id
    }

    /// Ends the active turn. Called before the turn's last frames are written, so that a
    /// client reacting to them never finds the turn still running.
    pub(super) fn end_turn(&self) {
        let mut state = self.state();
        if let Some(turn) = state.turn.take() {
            state.last_turn = Some(turn.id);
        }
    }

    /// Records the text of the turn's latest assistant message.
    pub(super) fn set_turn_text(&self, text: &str) {
        let mut state = self.state();
        state.messages += 1;
        if let Some(turn) = &mut state.turn {
            turn.text = text.to_owned();
        }
    }

    /// The text of the turn's latest assistant message.
    pub(super) fn turn_text(&self) -> String {
        self.state().turn.as_ref().map(|t| t.text.clone()).unwrap_or_default()
    }

    /// Sets (or clears) the request the turn waits on.
    pub(super) fn set_pending(&self, pending: Option<Value>) {
        if let Some(turn) = &mut self.state().turn {
            turn.pending = pending;
        }
    }

    /// Takes the request the turn waits on.
    pub(super) fn take_pending(&self) -> Option<Value> {
        self.state().turn.as_mut().and_then(|turn| turn.pending.take())
    }

    /// Sets a script variable.
    pub(super) fn set_var(&self, name: &'static str, value: impl Into<String>) {
        self.state().vars.insert(name, value.into());
    }

    /// Records an approval decision and what the model is told.
    pub(super) fn decided(&self, decision: &Decision, tool_output: &str) {
        let name = match decision {
            Decision::Approved => "approved",
            Decision::Denied(_) => "denied",
            Decision::Cancelled => "cancelled",
        };
        self.set_var("decision", name);
        self.set_var("tool_output", tool_output);
    }

    fn lookup(&self, name: &str, incoming: Option<&Value>) -> Option<Value> {
        if name == "in" {
            return incoming.cloned();
        }
        if let Some(path) = name.strip_prefix("in.") {
            return incoming.and_then(|msg| template::path(msg, path)).cloned();
        }
        let state = self.state();
        match name {
            "turn_id" => Some(Value::String(state.turn_id())),
            "session_id" => Some(Value::String(state.session.clone())),
            _ => state.vars.get(name).map(|v| Value::String(v.clone())),
        }
    }

    fn render_text(&self, text: &str) -> String {
        template::render_text(text, &|name: &str| self.lookup(name, None))
    }

    fn render(&self, value: &Value, incoming: Option<&Value>) -> Value {
        template::render(value, &|name: &str| self.lookup(name, incoming))
    }

    /// Writes what is queued and exits.
    async fn exit(&self, code: i32) -> ! {
        self.note(json!({"exit": code}));
        self.out.flush().await;
        std::process::exit(code)
    }

    /// Serves stdin: interrupts, rules and housekeeping here, everything else to the inbox.
    async fn dispatch(self: Arc<Self>, mut input: mpsc::Receiver<Input>, interrupts: mpsc::Sender<Value>) {
        while let Some(item) = input.recv().await {
            match item {
                Input::Line(line) => self.receive(&line, &interrupts).await,
                Input::Eof => self.stdin_eof().await,
            }
        }
    }

    async fn receive(&self, line: &[u8], interrupts: &mpsc::Sender<Value>) {
        if self.state().hung {
            return;
        }
        let Ok(msg) = serde_json::from_slice::<Value>(line) else {
            if let Some(reply) = self.proto.non_json(line) {
                self.send(reply).await;
            }
            return;
        };
        if self.proto.is_interrupt(&msg) {
            let (mode, active) = {
                let state = self.state();
                (state.interrupts, state.turn.is_some() && !state.unannounced)
            };
            match mode {
                InterruptMode::Honor if active => {
                    let _ = interrupts.send(msg).await;
                    return;
                }
                InterruptMode::Honor | InterruptMode::AckOnly => {
                    self.send_all(self.proto.interrupt_ack(&msg, active)).await;
                    return;
                }
                InterruptMode::Ignore => {}
            }
        }
        if let Some(frames) = self.apply_rules(&msg) {
            self.send_all(frames).await;
            return;
        }
        let answered = {
            let state = self.state();
            let handshake_pending = !state.handshake_done && self.proto.is_handshake(&msg);
            if handshake_pending { None } else { self.proto.housekeeping(&msg, &state) }
        };
        match answered {
            Some(frames) => self.send_all(frames).await,
            None => {
                self.inbox.lock().unwrap_or_else(|p| p.into_inner()).push_back(msg);
                self.arrived.notify_waiters();
            }
        }
    }

    /// The frames of the first `on` rule that matches `msg`, if any.
    fn apply_rules(&self, msg: &Value) -> Option<Vec<Value>> {
        let (reply, error, frames) = {
            let mut state = self.state();
            let rule = state
                .rules
                .iter_mut()
                .find(|rule| rule.remaining != Some(0) && template::matches(&rule.pattern, msg))?;
            if let Some(remaining) = &mut rule.remaining {
                *remaining -= 1;
            }
            (rule.reply.clone(), rule.error.clone(), rule.frames.clone())
        };
        let answer = (reply.is_some() || error.is_some())
            .then(|| self.proto.reply(msg, reply.map(|r| self.render(&r, Some(msg))), error.as_deref()))
            .flatten();
        Some(answer.into_iter().chain(frames.iter().map(|frame| self.render(frame, Some(msg)))).collect())
    }

    async fn stdin_eof(&self) {
        if self.stdin.closed_by_script() {
            return;
        }
        let (hung, eof) = {
            let state = self.state();
            (state.hung, state.eof)
        };
        match (hung, eof) {
            (false, (EofAction::Exit, code)) => self.exit(code).await,
            (false, (EofAction::FinishTurn, code)) => {
                self.state().exit_when_idle = Some(code);
                self.exit_if_idle().await;
            }
            _ => {}
        }
    }

    /// Exits when stdin closed under [`EofAction::FinishTurn`] and no turn runs or waits.
    async fn exit_if_idle(&self) {
        let code = {
            let state = self.state();
            match state.exit_when_idle {
                Some(code) if state.turn.is_none() => code,
                _ => return,
            }
        };
        let proto = self.proto;
        let waiting = self.inbox.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|m| proto.is_turn_start(m));
        if !waiting {
            self.exit(code).await;
        }
    }

    /// Handles an interrupt the dispatcher forwarded; true when it ended the turn.
    async fn interrupted(&self, msg: &Value) -> bool {
        let (hung, active) = {
            let state = self.state();
            (state.hung, state.turn.is_some())
        };
        if hung {
            return false;
        }
        if !active {
            // The turn ended while the interrupt was on its way.
            self.send_all(self.proto.interrupt_ack(msg, false)).await;
            return false;
        }
        // The turn ends before its last frames go out, so the client's next request never
        // finds it still running.
        let pending = self.take_pending();
        self.end_turn();
        match self.proto {
            Proto::Codex => codex::interrupt(self, msg, pending).await,
            Proto::Claude { .. } => claude::interrupt(self, msg, pending).await,
            Proto::Pi => pi::interrupt(self, msg).await,
        }
        true
    }

    /// Plays the steps, then keeps answering until stdin closes or the process is killed.
    async fn play(&self, steps: &[FakeStep], mut interrupts: mpsc::Receiver<Value>) -> ExitCode {
        let mut skipping = false;
        for step in steps {
            if skipping && !matches!(step, FakeStep::TurnStart { .. }) {
                continue;
            }
            let run = self.step(step);
            tokio::pin!(run);
            let flow = loop {
                tokio::select! {
                    flow = &mut run => break flow,
                    Some(msg) = interrupts.recv() => {
                        if self.interrupted(&msg).await {
                            break Flow::TurnEnded;
                        }
                    }
                }
            };
            skipping = flow == Flow::TurnEnded;
            self.exit_if_idle().await;
        }
        while let Some(msg) = interrupts.recv().await {
            self.interrupted(&msg).await;
            self.exit_if_idle().await;
        }
        std::future::pending().await
    }

    async fn step(&self, step: &FakeStep) -> Flow {
        match step {
            FakeStep::Handshake {} => {
                match self.proto {
                    Proto::Codex => codex::handshake(self).await,
                    Proto::Claude { .. } => claude::handshake(self).await,
                    Proto::Pi => pi::handshake(self).await,
                }
                self.state().handshake_done = true;
            }
            FakeStep::TurnStart { announce_after_ms } => match self.proto {
                Proto::Codex => codex::turn_start(self, Duration::from_millis(*announce_after_ms)).await,
                Proto::Claude { .. } => claude::turn_start(self).await,
                Proto::Pi => pi::turn_start(self).await,
            },
            FakeStep::Deltas { deltas, delay_ms } => {
                let deltas: Vec<String> = deltas.iter().map(|d| self.render_text(d)).collect();
                let delay = Duration::from_millis(*delay_ms);
                match self.proto {
                    Proto::Codex => codex::deltas(self, &deltas, delay).await,
                    Proto::Claude { partial } => claude::deltas(self, &deltas, delay, partial).await,
                    Proto::Pi => pi::deltas(self, &deltas, delay).await,
                }
            }
            FakeStep::Complete { status, text, message } => {
                let text = text.as_deref().map_or_else(|| self.turn_text(), |t| self.render_text(t));
                let message =
                    message.as_deref().map_or_else(|| "fake CLI: scripted failure".to_owned(), |m| self.render_text(m));
                self.end_turn();
                match self.proto {
                    Proto::Codex => codex::complete(self, *status, &text, &message).await,
                    Proto::Claude { .. } => claude::complete(self, *status, &text, &message).await,
                    Proto::Pi => pi::complete(self, *status, &text, &message).await,
                }
            }
            FakeStep::Approval { kind, command, path, content, output } => {
                let tool = Tool {
                    kind: *kind,
                    command: command.as_deref().unwrap_or_default(),
                    path: path.as_deref().unwrap_or_default(),
                    content,
                    output: self.render_text(output),
                };
                return match self.proto {
                    Proto::Codex => codex::approval(self, &tool).await,
                    Proto::Claude { .. } => claude::approval(self, &tool).await,
                    Proto::Pi => pi::approval(self, &tool).await,
                };
            }
            FakeStep::Question { question, options, header } => {
                let header = header.as_deref().unwrap_or("Question");
                let answer = match self.proto {
                    Proto::Codex => codex::question(self, question, options, header).await,
                    Proto::Claude { .. } => claude::question(self, question, options, header).await,
                    Proto::Pi => pi::question(self, question, options).await,
                };
                self.set_var("answer", answer.clone());
                self.set_var("tool_output", answer);
            }
            FakeStep::Stall {} => std::future::pending::<()>().await,
            FakeStep::Expect { kind, pattern } => {
                let proto = self.proto;
                match (kind, pattern) {
                    (Some(ExpectKind::Handshake), _) => self.expect(|m| proto.is_handshake(m)).await,
                    (Some(ExpectKind::TurnStart), _) => self.expect(|m| proto.is_turn_start(m)).await,
                    (Some(ExpectKind::Interrupt), _) => self.expect(|m| proto.is_interrupt(m)).await,
                    (_, Some(pattern)) => self.expect(|m| template::matches(pattern, m)).await,
                    _ => self.expect(|_| true).await,
                };
            }
            FakeStep::Reply { result, error } => {
                let last = self.state().last_in.clone();
                let result = result.as_ref().map(|r| self.render(r, last.as_ref()));
                if let Some(frame) = last.and_then(|msg| self.proto.reply(&msg, result, error.as_deref())) {
                    self.send(frame).await;
                }
            }
            FakeStep::Send { frame } => {
                let last = self.state().last_in.clone();
                self.send(self.render(frame, last.as_ref())).await;
            }
            FakeStep::On { pattern, reply, error, frames, times } => self.state().rules.push(Rule {
                pattern: pattern.clone(),
                reply: reply.clone(),
                error: error.clone(),
                frames: frames.clone(),
                remaining: *times,
            }),
            FakeStep::Sleep { ms } => tokio::time::sleep(Duration::from_millis(*ms)).await,
            FakeStep::Exit { code } => self.exit(*code).await,
            FakeStep::Hang {} => {
                self.state().hung = true;
                self.note(json!({"hang": true}));
                std::future::pending::<()>().await;
            }
            FakeStep::Garbage { text } => self.out.line(text.clone()).await,
            FakeStep::HugeLine { bytes } => self.out.line(self.huge_line(*bytes)).await,
            FakeStep::Stderr { text } => write_stderr(format!("{text}\n").into_bytes()).await,
            FakeStep::StderrFlood { bytes } => flood_stderr(*bytes).await,
            FakeStep::Duplicate { count } => self.out.duplicate(*count).await,
            FakeStep::Hold {} => self.out.hold().await,
            FakeStep::Release { reverse } => self.out.release(*reverse).await,
            FakeStep::CloseStdin {} => {
                self.note(json!({"close_stdin": true}));
                self.stdin.close();
            }
            FakeStep::CloseStdout {} => {
                self.note(json!({"close_stdout": true}));
                self.out.close().await;
            }
            FakeStep::PauseReading { ms } => self.stdin.pause(Duration::from_millis(*ms)),
            FakeStep::OnStdinEof { action, code } => self.state().eof = (*action, *code),
            FakeStep::Interrupts { mode } => self.state().interrupts = *mode,
            FakeStep::StreamFile { path, ends_turn, lines_per_second } => {
                if let Err(error) = self.out.file(path.clone(), *lines_per_second).await {
                    write_stderr(format!("cannot stream {}: {error}\n", path.display()).into_bytes()).await;
                    self.exit(1).await;
                }
                if *ends_turn {
                    self.end_turn();
                }
            }
        }
        Flow::Continue
    }

    /// A protocol frame of exactly `bytes` bytes.
    fn huge_line(&self, bytes: usize) -> String {
        let overhead = self.proto.padding(String::new()).to_string().len();
        self.proto.padding("x".repeat(bytes.saturating_sub(overhead))).to_string()
    }
}

/// Current time in milliseconds since the epoch (Codex `emittedAtMs`, Pi `timestamp`).
pub(super) fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The text of a Claude / Pi style content value: a string, or text blocks.
pub(super) fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => {
            blocks.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

async fn write_stderr(bytes: Vec<u8>) {
    let _ = tokio::task::spawn_blocking(move || {
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(&bytes);
    })
    .await;
}

/// Writes `bytes` bytes of numbered 100-byte log lines to stderr.
async fn flood_stderr(bytes: usize) {
    let mut written = 0;
    let mut number = 0u64;
    while written < bytes {
        let mut chunk = Vec::with_capacity(FLOOD_CHUNK);
        while chunk.len() < FLOOD_CHUNK && written + chunk.len() < bytes {
            number += 1;
            let line = format!("fake-cli stderr flood line {number:08} {}\n", "x".repeat(64));
            chunk.extend_from_slice(line.as_bytes());
        }
        chunk.truncate(bytes - written);
        // End on a line boundary so whatever the script writes next starts its own line.
        if let Some(last) = chunk.last_mut() {
            *last = b'\n';
        }
        written += chunk.len();
        write_stderr(chunk).await;
    }
}
