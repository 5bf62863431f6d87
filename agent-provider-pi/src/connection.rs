//! The connection to one `pi --mode rpc` process.
//!
//! A reader task parses stdout line by line: `response` lines go to the caller waiting for
//! their `id` (kit `rpc`), everything else through the [`Normalizer`] to the session's
//! [`Sink`]. A second task keeps the tail of stderr. When stdout ends, the reader fails the
//! running turn with the exit status and the stderr tail, then reports the transport down.
//! Dropping the [`Connection`] stops both tasks and kills the process.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_core::event::RawJson;
use agent_core::exec::{Child, ChildOutput};
use agent_core::provider::SinkClosed;
use agent_core::time::deadline_after;
use agent_core::{Sink, SinkBuffer, TurnId};
use agent_provider_kit::framing::ends::{id_member, string_member};
use agent_provider_kit::framing::{
    Bytes, Line, LineReader, TextFrame, flush_before_wait, keep_line, unparsed_line_warning,
};
use agent_provider_kit::process::{CliProcess, encode_line as encode, spawn_reader, truncate_message, wait_until};
use agent_provider_kit::rpc::{ExitReport, Pending, ReplyError, ResponseId};
use agent_provider_kit::secrets::Secrets;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::normalize::{Action, Normalizer, attach};

/// The CLI's name in error texts.
const CLI: &str = "pi";
/// How long the reader waits for the process to exit after stdout closed, before killing it.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long the reader waits for the stderr task to drain after the process exited.
const STDERR_DRAIN: Duration = Duration::from_millis(500);
/// How long `close` waits for pi to exit after stdin closed, before killing it.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Longest error message from pi kept in an error.
const MAX_ERROR_MESSAGE: usize = 500;

/// Why a command to pi did not produce a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// Pi answered `success: false`: it did not act.
    #[error("pi refused `{command}`: {message}")]
    Refused { command: String, message: String },
    /// No answer in time: the outcome is unknown.
    #[error("no answer in time")]
    Timeout,
    /// The process or its pipes went away.
    #[error("the pi connection is closed")]
    Closed,
    /// Writing the command failed.
    #[error("writing to pi failed: {0}")]
    Write(#[source] std::io::Error),
}

impl From<ReplyError> for CallError {
    fn from(e: ReplyError) -> Self {
        match e {
            ReplyError::Timeout => CallError::Timeout,
            ReplyError::Write(error) => CallError::Write(error),
            _ => CallError::Closed,
        }
    }
}

/// A `response` line.
#[derive(Deserialize)]
pub(crate) struct Reply {
    #[serde(default)]
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) success: bool,
    #[serde(default)]
    pub(crate) data: Option<Value>,
    /// A string; any other value is read as text ([`error_text`](agent_provider_kit::rpc::error_text)).
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(crate) error: Option<String>,
}

/// What a waiter is tagged with: the command it sent, so an id-less failure (pi drops the id
/// of an unknown command) still finds its caller.
#[derive(Clone, Debug)]
struct Sent {
    command: String,
}

/// State shared by the connection's tasks and callers.
struct Shared {
    sink: Sink,
    process: CliProcess,
    state: Mutex<Normalizer>,
    pending: Pending<ResponseId, Sent>,
    /// Commands waiting for a reply, in the order sent: (command, id).
    order: Mutex<Vec<(String, String)>>,
    next_id: AtomicU64,
    /// Woken when the running turn ends or stdout closes.
    turn_ended: Notify,
    /// Woken when pi starts compacting (a `prompt` waiting for its reply is then admitted).
    compacting: Notify,
    /// What admitting a turn produced (a turn pi handled without a run ends at once).
    admitted: Mutex<Vec<Action>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command in [`Shared::order`] while its caller waits; taken out when the wait ends or is
/// dropped.
struct Ordered<'a> {
    order: &'a Mutex<Vec<(String, String)>>,
    id: String,
}

impl<'a> Ordered<'a> {
    fn push(order: &'a Mutex<Vec<(String, String)>>, command: &str, id: &str) -> Self {
        lock(order).push((command.to_owned(), id.to_owned()));
        Ordered { order, id: id.to_owned() }
    }
}

impl Drop for Ordered<'_> {
    fn drop(&mut self) {
        lock(self.order).retain(|(_, id)| *id != self.id);
    }
}

/// One running `pi --mode rpc`.
pub(crate) struct Connection {
    shared: Arc<Shared>,
    reader: AbortHandle,
}

impl Connection {
    /// Takes over a spawned process and starts reading its output.
    pub(crate) fn start(child: Child, sink: Sink, max_line: usize, secrets: Secrets) -> Result<Connection, CallError> {
        let (process, stdout) = CliProcess::start(CLI, child, secrets).ok_or(CallError::Closed)?;
        let shared = Arc::new(Shared {
            sink,
            process,
            state: Mutex::new(Normalizer::new()),
            pending: Pending::new(),
            order: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            turn_ended: Notify::new(),
            compacting: Notify::new(),
            admitted: Mutex::new(Vec::new()),
        });
        let reader = spawn_reader(CLI, shared.sink.clone(), read_stdout(Arc::clone(&shared), stdout, max_line));
        Ok(Connection { shared, reader: reader.abort_handle() })
    }

    /// The protocol state.
    pub(crate) fn state(&self) -> MutexGuard<'_, Normalizer> {
        lock(&self.shared.state)
    }

    /// Sends `command` (an object with `type`; the `id` is added) and waits up to `timeout` for
    /// its successful reply's `data`. The deadline covers the write too.
    pub(crate) async fn call(&self, command: Value, timeout: Duration) -> Result<Option<Value>, CallError> {
        let reply = self.exchange(command, timeout, None).await?;
        // Without a turn to admit early, the exchange ends with a reply.
        let Some((kind, raw)) = reply else { return Ok(None) };
        self.read_reply(&kind, &raw)
    }

    /// Sends the running `turn`'s `prompt` with `message` and waits up to `timeout` for pi to
    /// take it: its successful reply, or a compaction pi runs before the prompt (the reply then
    /// comes after a model request of its own; see `Normalizer::admitted_early`).
    pub(crate) async fn prompt(&self, turn: &TurnId, message: &str, timeout: Duration) -> Result<(), CallError> {
        let command = serde_json::json!({"type": "prompt", "message": message});
        match self.exchange(command, timeout, Some(turn)).await? {
            Some((kind, raw)) => self.read_reply(&kind, &raw).map(drop),
            None => Ok(()),
        }
    }

    /// Writes `command` with an `id` of its own and waits for its reply (the command's type and
    /// the reply); `None` when `turn`'s prompt was admitted early.
    async fn exchange(
        &self,
        mut command: Value,
        timeout: Duration,
        turn: Option<&TurnId>,
    ) -> Result<Option<(String, RawJson)>, CallError> {
        let deadline = deadline_after(tokio::time::Instant::now(), timeout);
        let kind = command["type"].as_str().unwrap_or_default().to_owned();
        let id = format!("h{}", self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        command["id"] = Value::String(id.clone());
        let ticket = self.shared.pending.register(ResponseId(id.clone()), Sent { command: kind.clone() })?;
        let _sent = Ordered::push(&self.shared.order, &kind, &id);
        let line = encode(&command);
        let write = self.shared.process.write_line(&line);
        let Some(turn) = turn else { return Ok(Some((kind, ticket.send_and_wait(write, deadline).await?))) };
        self.state().prompting(turn, &id);
        // Written in whole before the turn can be admitted without its reply.
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(CallError::Write(error)),
            Err(_) => return Err(CallError::Timeout),
        }
        let early = wait_until(&self.shared.compacting, || self.state().admitted_early(turn));
        tokio::select! {
            biased;
            reply = ticket.wait_until(deadline) => Ok(Some((kind, reply?))),
            () = early => Ok(None),
        }
    }

    /// A reply's `data`, or why pi refused `kind`.
    fn read_reply(&self, kind: &str, raw: &RawJson) -> Result<Option<Value>, CallError> {
        match serde_json::from_str::<Reply>(raw.get()) {
            Ok(Reply { success: true, data, .. }) => Ok(data),
            Ok(Reply { error, command, .. }) => {
                // Its text reaches error messages, and pi may quote what it refused.
                let error = error.map(|error| self.shared.process.secrets().redact(&error).into_owned());
                Err(CallError::Refused {
                    command: command.unwrap_or_else(|| kind.to_owned()),
                    message: truncate_message(error.unwrap_or_else(|| "no reason given".into()), MAX_ERROR_MESSAGE),
                })
            }
            Err(_) => Err(CallError::Refused { command: kind.to_owned(), message: "an unreadable response".into() }),
        }
    }

    /// Writes `command` as it is (no reply awaited).
    pub(crate) async fn send(&self, command: &Value) -> Result<(), CallError> {
        self.shared.process.write_line(&encode(command)).await.map_err(CallError::Write)
    }

    /// Returns once `turn` no longer runs, or stdout closed.
    pub(crate) async fn turn_ended(&self, turn: &TurnId) {
        wait_until(&self.shared.turn_ended, || !self.state().is_running(turn) || self.shared.pending.is_closed()).await;
    }

    /// Closes stdin, waits up to [`CLOSE_GRACE`] for pi to exit, then kills it.
    pub(crate) async fn close(&self) {
        self.shared.process.close(CLOSE_GRACE).await;
        let unknown = self.state().unknown_frames();
        if unknown > 0 {
            tracing::info!(unknown_frames = unknown, "pi session closed; some frames were of unknown types");
        }
    }

    /// How the process ended and the tail of its stderr. Waits briefly for the exit; kills the
    /// process if it is still running.
    pub(crate) async fn exit_report(&self) -> ExitReport {
        self.shared.exit_report().await
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.process.kill();
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").field("process", &self.shared.process).finish_non_exhaustive()
    }
}

/// The `id` of a `response` line, and its `command` when it has no id.
#[derive(Deserialize)]
struct ResponseHead {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    success: Option<bool>,
}

impl Shared {
    /// Hands a response line to its waiter; gives it back when nobody waits.
    fn deliver(&self, text: &str, chunk: Option<&Bytes>) -> Option<RawJson> {
        let raw = keep_line(text, chunk);
        let Ok(head) = serde_json::from_str::<ResponseHead>(text) else { return Some(raw) };
        if head.kind != "response" {
            return Some(raw);
        }
        let id = match head.id {
            Some(id) => id,
            // Pi drops the id of a command it could not parse or does not know: the oldest
            // waiter for that command gets the failure.
            None if head.success == Some(false) => {
                let command = head.command.unwrap_or_default();
                let order = lock(&self.order);
                match order.iter().find(|(c, _)| *c == command) {
                    Some((_, id)) => id.clone(),
                    None => return Some(raw),
                }
            }
            None => return Some(raw),
        };
        // A turn is admitted in reader order, before the frames after its `prompt` reply (a
        // fast `agent_settled` must find it admitted).
        let mut state = lock(&self.state);
        if state.is_prompt(&id) {
            let reply = serde_json::from_str::<Reply>(text).ok();
            let data = reply.as_ref().and_then(|reply| reply.data.as_ref());
            let outcome = match head.success {
                Some(true) => Ok(data.and_then(|d| d["disposition"].as_str())),
                _ => Err(truncate_message(
                    reply.and_then(|reply| reply.error).unwrap_or_else(|| "no reason given".into()),
                    MAX_ERROR_MESSAGE,
                )),
            };
            // Its caller, if it still waits, takes it; the turn hears of it either way (the state
            // stays locked, so a caller told of a refusal forgets the turn after this).
            let taken = self.pending.resolve(&ResponseId(id.clone()), raw).is_ok();
            let actions = state.prompt_reply(&id, outcome, taken).unwrap_or_default();
            lock(&self.admitted).extend(actions);
            return None;
        }
        drop(state);
        self.pending.resolve(&ResponseId(id), raw).err()
    }

    /// A stdout line over `max_line`, dropped with a warning; one that carried the running turn's
    /// reply or its end also tells the turn (see `Normalizer::over_long`). Errs when the session
    /// runtime is gone.
    async fn on_over_long(
        &self,
        len: usize,
        ends: (&[u8], &[u8]),
        max_line: usize,
        actions: &mut Vec<Action>,
        out: &mut SinkBuffer,
    ) -> Result<(), SinkClosed> {
        let warning = TextFrame::TooLong { len }.into_text(CLI, max_line).err().unwrap_or_default();
        self.garbage(warning, out).await?;
        // A dialog pi waits to have answered, or a reply to a command of ours, named by the
        // line's first bytes (or its last: a member written after a long one).
        let member = |key: &str| string_member(ends, key);
        match (member("type"), id_member(ends, "id")) {
            (Some("extension_ui_request"), Some(id)) => {
                actions.extend(lock(&self.state).unread_dialog(&id, member("method"), len, max_line));
                return self.run(actions, out).await;
            }
            (Some("response"), Some(id)) => {
                let reply = serde_json::json!({
                    "type": "response", "id": id.to_json(), "command": member("command").unwrap_or_default(),
                    "success": false,
                    "error": format!("pi's reply was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`)"),
                });
                return self.on_frame(TextFrame::Text(&reply.to_string()), None, max_line, actions, out).await;
            }
            _ => {}
        }
        actions.extend(lock(&self.state).over_long(ends, len, max_line));
        self.run(actions, out).await
    }

    /// Handles one stdout line. Errs when the session runtime is gone.
    async fn on_frame(
        &self,
        frame: TextFrame<'_>,
        chunk: Option<&Bytes>,
        max_line: usize,
        actions: &mut Vec<Action>,
        out: &mut SinkBuffer,
    ) -> Result<(), SinkClosed> {
        let text = match frame.into_text(CLI, max_line) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(()),
            Err(warning) => return self.garbage(warning, out).await,
        };
        let is_response = text.contains("\"response\"");
        let raw = if is_response {
            // What came before a reply reaches the session before its caller goes on.
            out.flush().await?;
            match self.deliver(text, chunk) {
                None => {
                    let mut admitted = std::mem::take(&mut *lock(&self.admitted));
                    let ends = admitted.iter().any(Action::ends_turn);
                    self.run(&mut admitted, out).await?;
                    if ends {
                        out.flush().await?;
                        self.turn_ended.notify_waiters();
                    }
                    return Ok(());
                }
                Some(raw) => raw,
            }
        } else {
            keep_line(text, chunk)
        };
        let known = {
            let mut state = lock(&self.state);
            let starts = state.compaction_starts();
            let known = state.on_line(raw.get(), actions);
            if state.compaction_starts() != starts {
                self.compacting.notify_waiters();
            }
            known
        };
        if !known {
            let len = text.len();
            return self.garbage(unparsed_line_warning(CLI, "a JSON frame", len), out).await;
        }
        attach(actions, raw);
        let ends = actions.iter().any(Action::ends_turn);
        self.run(actions, out).await?;
        if ends {
            // The turn's end reaches the session before a caller waiting for it goes on.
            out.flush().await?;
            self.turn_ended.notify_waiters();
        }
        Ok(())
    }

    async fn garbage(&self, message: String, out: &mut SinkBuffer) -> Result<(), SinkClosed> {
        let Some(action) = lock(&self.state).garbage(message) else { return Ok(()) };
        self.run(&mut vec![action], out).await
    }

    /// Carries out `actions` (what they report gathered in `out`), leaving the buffer empty.
    async fn run(&self, actions: &mut Vec<Action>, out: &mut SinkBuffer) -> Result<(), SinkClosed> {
        for action in actions.drain(..) {
            match action {
                Action::Emit { turn, kind, raw } => out.emit(turn, kind, raw).await?,
                Action::Request { turn, spec, raw } => out.request(turn, *spec, raw).await?,
                Action::Write(command) => {
                    // Nothing gathered waits on the write.
                    out.flush().await?;
                    if let Err(error) = self.process.write_line(&encode(&command)).await {
                        tracing::debug!(%error, "could not write to pi");
                    }
                }
            }
        }
        Ok(())
    }

    async fn exit_report(&self) -> ExitReport {
        self.process.exit_report(EXIT_WAIT, STDERR_DRAIN).await
    }

    /// Stdout ended: fail waiting callers, then (unless closing) the running turn and the
    /// transport. A turn whose `prompt` is still unanswered is left to its caller.
    async fn on_stdout_closed(&self, read_error: Option<std::io::Error>, mut out: SinkBuffer) {
        // Everything read reaches the session before the exit is reported.
        if out.flush().await.is_err() {
            return;
        }
        let waiting = self.pending.close();
        let admitting = waiting.waiting().any(|(_, sent)| sent.command == "prompt");
        drop(waiting);
        self.turn_ended.notify_waiters();
        if admitting || self.process.is_closing() {
            return;
        }
        let report = self.exit_report().await;
        let report = match read_error {
            Some(error) => report.read_error(error),
            None => report,
        };
        let how = report.how();
        let reason = format!("pi exited ({how}) without completing the turn");
        let mut actions = lock(&self.state).on_exit(&reason, report.status, report.stderr_tail);
        if self.run(&mut actions, &mut out).await.is_ok() {
            let _ = out.transport_down(format!("pi exited ({how})")).await;
        }
        self.turn_ended.notify_waiters();
    }
}

async fn read_stdout(shared: Arc<Shared>, stdout: ChildOutput, max_line: usize) {
    let mut lines = LineReader::new(stdout, max_line).redacting(shared.process.secrets());
    let mut actions = Vec::new();
    let mut out = shared.sink.buffer();
    let read_error = loop {
        let Ok(next) = flush_before_wait(&mut out, lines.next_line_in_chunk()).await else { return };
        let handled = match next {
            Ok(Some((Line::TooLong(len), _))) => {
                let ends = (lines.too_long_head(), lines.too_long_tail());
                shared.on_over_long(len, ends, max_line, &mut actions, &mut out).await
            }
            Ok(Some((line, chunk))) => {
                shared.on_frame(TextFrame::from_line(line), chunk, max_line, &mut actions, &mut out).await
            }
            Ok(None) => break None,
            Err(error) => break Some(error),
        };
        if handled.is_err() {
            return;
        }
    };
    shared.on_stdout_closed(read_error, out).await;
}
