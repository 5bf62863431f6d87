//! The JSON-RPC connection to one `codex app-server` process.
//!
//! A reader task parses stdout line by line: responses go to the caller waiting for them,
//! everything else through the [`Normalizer`] to the session's [`Sink`]. A second task keeps the
//! tail of stderr. When stdout ends, the reader fails the running turn with the exit status and
//! the stderr tail, then reports the transport down. Dropping the [`Connection`] stops both
//! tasks and kills the process.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_core::event::RawJson;
use agent_core::exec::{Child, ChildOutput};
use agent_core::provider::SinkClosed;
use agent_core::time::deadline_after;
use agent_core::{Sink, SinkBuffer, TurnId};
use agent_provider_kit::framing::head::{find_key, integer_at, object_at, string_at};
use agent_provider_kit::framing::{
    AfterLines, Bytes, Line, LineReader, TextFrame, flush_before_wait, keep_line, unparsed_line_warning,
};
use agent_provider_kit::process::{CliProcess, encode_line as encode, spawn_reader, truncate_message, wait_until};
use agent_provider_kit::rpc::{ExitReport, JsonRpcId, Pending, ReplyError};
use agent_provider_kit::secrets::Secrets;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::normalize::{Action, Normalizer, attach};
use crate::wire::{self, Message, Outgoing, RpcError, RpcId};

/// The CLI's name in error texts.
const CLI: &str = "codex";
/// The request that starts a turn.
const TURN_START: &str = "turn/start";

/// How long the reader waits for the process to exit after stdout closed, before killing it.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long the reader waits for the stderr task to drain after the process exited.
const STDERR_DRAIN: Duration = Duration::from_millis(500);
/// How long `close` waits for codex to exit after stdin closed, before killing it.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Longest error message from codex kept in an error (some list every method, several KB).
const MAX_ERROR_MESSAGE: usize = 500;
/// How often an interrupt refused before codex announced its turn looks for the announcement.
const ANNOUNCE_POLL: Duration = Duration::from_millis(5);

/// Why a request to codex did not produce a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// Codex answered with a JSON-RPC error: it did not act.
    #[error("codex answered {code}: {message}")]
    Rpc { code: i64, message: String },
    /// No answer in time: the outcome is unknown.
    #[error("no answer in time")]
    Timeout,
    /// The process or its pipes went away.
    #[error("the codex app-server connection is closed")]
    Closed,
    /// Writing the request failed.
    #[error("writing to codex failed: {0}")]
    Write(#[source] std::io::Error),
    /// The answer did not have the expected shape.
    #[error("unexpected answer to `{method}`")]
    Unexpected { method: String },
}

impl From<RpcError> for CallError {
    fn from(e: RpcError) -> Self {
        CallError::Rpc { code: e.code, message: truncate_message(e.message, MAX_ERROR_MESSAGE) }
    }
}

impl From<ReplyError> for CallError {
    fn from(e: ReplyError) -> Self {
        match e {
            ReplyError::Timeout => CallError::Timeout,
            ReplyError::Write(error) => CallError::Write(error),
            // The caller asks the connection for the exit report when it needs one.
            _ => CallError::Closed,
        }
    }
}

/// State shared by the connection's tasks and callers.
struct Shared {
    sink: Sink,
    process: CliProcess,
    state: Mutex<Normalizer>,
    /// Callers waiting for a response, closed once stdout closed. The tag marks `turn/start`:
    /// its caller reports an exit before codex admitted the turn.
    pending: Pending<JsonRpcId, bool>,
    next_id: AtomicI64,
    /// Woken when the running turn ends or stdout closes.
    turn_ended: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One running `codex app-server`.
pub(crate) struct Connection {
    shared: Arc<Shared>,
    reader: AbortHandle,
}

impl Connection {
    /// Takes over a spawned process and starts reading its output.
    pub(crate) fn start(child: Child, sink: Sink, max_line: usize, secrets: Secrets) -> Result<Connection, CallError> {
        let normalizer = Normalizer::with_text_limit(max_line).redacting(secrets.clone());
        let (process, stdout) = CliProcess::start(CLI, child, secrets).ok_or(CallError::Closed)?;
        let shared = Arc::new(Shared {
            sink,
            process,
            state: Mutex::new(normalizer),
            pending: Pending::new(),
            next_id: AtomicI64::new(1),
            turn_ended: Notify::new(),
        });
        let reader = spawn_reader(CLI, shared.sink.clone(), read_stdout(Arc::clone(&shared), stdout, max_line));
        Ok(Connection { shared, reader: reader.abort_handle() })
    }

    /// The protocol state.
    pub(crate) fn state(&self) -> MutexGuard<'_, Normalizer> {
        lock(&self.shared.state)
    }

    /// Sends a request and waits up to `timeout` for its result (the whole response line). The
    /// deadline covers the write too: codex not reading its stdin is no answer either.
    pub(crate) async fn call<P: Serialize>(
        &self,
        method: &str,
        params: P,
        timeout: Duration,
    ) -> Result<RawJson, CallError> {
        let deadline = deadline_after(tokio::time::Instant::now(), timeout);
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let ticket = self.shared.pending.register(JsonRpcId(id), method == TURN_START)?;
        let line = encode(&Outgoing { id: Some(id), method, params: Some(params) });
        let raw = ticket.send_and_wait(self.shared.process.write_line(&line), deadline).await?;
        match serde_json::from_str::<wire::Outcome<'_>>(raw.get()) {
            Ok(wire::Outcome { error: Some(error), .. }) => {
                // Its text reaches error messages: codex quotes what it refused, which may be a
                // secret that is not a credential (a config value, say).
                let mut error = RpcError::lenient(error);
                error.message = self.shared.process.secrets().redact(&error.message).into_owned();
                Err(error.into())
            }
            Ok(wire::Outcome { result: Some(_), .. }) => Ok(raw),
            _ => Err(CallError::Unexpected { method: method.to_owned() }),
        }
    }

    /// Sends a request without waiting for its answer (which is then discarded).
    pub(crate) async fn send<P: Serialize>(&self, method: &str, params: P) -> Result<(), CallError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared.pending.register(JsonRpcId(id), false)?.detach();
        let line = encode(&Outgoing { id: Some(id), method, params: Some(params) });
        self.shared.process.write_line(&line).await.map_err(CallError::Write)
    }

    /// Sends a notification.
    pub(crate) async fn notify(&self, method: &str) -> Result<(), CallError> {
        let line = encode(&Outgoing::<()> { id: None, method, params: None });
        self.shared.process.write_line(&line).await.map_err(CallError::Write)
    }

    /// Answers a server request.
    pub(crate) async fn answer(&self, id: &RpcId, result: serde_json::Value) -> std::io::Result<()> {
        self.shared.process.write_line(&encode(&wire::Answer { id, result: Some(result), error: None })).await
    }

    /// Returns once codex announced `turn` (`turn/started`), `turn` ended, stdout closed, or
    /// `deadline` passed. A rare wait (an interrupt refused in the moment before the
    /// announcement), so it looks every few milliseconds rather than making every line wake it.
    pub(crate) async fn turn_announced(&self, turn: &TurnId, deadline: tokio::time::Instant) {
        while self.state().is_unannounced(turn) && !self.shared.pending.is_closed() {
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(ANNOUNCE_POLL.min(deadline.saturating_duration_since(tokio::time::Instant::now())))
                .await;
        }
    }

    /// Returns once `turn` is no longer running in codex, or stdout closed (the turn's end is
    /// then reported with the exit).
    pub(crate) async fn turn_ended(&self, turn: &TurnId) {
        wait_until(&self.shared.turn_ended, || !self.state().is_running(turn) || self.shared.pending.is_closed()).await;
    }

    /// Closes stdin, waits up to [`CLOSE_GRACE`] for codex to exit, then kills it.
    pub(crate) async fn close(&self) {
        self.shared.process.close(CLOSE_GRACE).await;
        let unknown = self.state().unknown_frames();
        if unknown > 0 {
            tracing::info!(unknown_frames = unknown, "codex session closed; some frames were of unknown methods");
        }
    }

    /// How the process ended and the tail of its stderr, for a failure during startup. Waits
    /// briefly for the exit; kills the process if it is still running.
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

/// What a line left to do once the messages gathered are sent: a reply carries the request's
/// ID and its raw JSON.
type Then = AfterLines<(i64, RawJson)>;

impl Shared {
    /// Sends what `actions` gathered, then does what the last line normalized needs.
    async fn finish(&self, then: Then, actions: &mut Vec<Action>, out: &mut SinkBuffer) -> Result<(), SinkClosed> {
        self.run(actions, out).await?;
        match then {
            AfterLines::Next => {}
            AfterLines::TurnEnded => {
                // The turn's end reaches the session before a caller waiting for it goes on.
                out.flush().await?;
                self.turn_ended.notify_waiters();
            }
            AfterLines::Reply((id, raw)) => {
                // What came before a reply reaches the session before its caller goes on.
                out.flush().await?;
                if self.pending.resolve(&JsonRpcId(id), raw).is_err() {
                    // A reply nobody waits for (its call timed out) is noted without its body:
                    // `config/read`'s holds codex's whole configuration, keys included.
                    lock(&self.state).on_message(Message::Response { id: RpcId::Num(id) }, None, actions);
                    self.run(actions, out).await?;
                }
            }
        }
        Ok(())
    }

    /// Carries out `actions` (what they report gathered in `out`), leaving the buffer empty.
    async fn run(&self, actions: &mut Vec<Action>, out: &mut SinkBuffer) -> Result<(), SinkClosed> {
        for action in actions.drain(..) {
            match action {
                Action::Emit { turn, kind, raw } => out.emit(turn, kind, raw).await?,
                Action::Request { turn, spec, raw } => out.request(turn, *spec, raw).await?,
                Action::Resolved { provider_ref, raw } => out.request_resolved(provider_ref, raw).await?,
                Action::Answer { id, result } => {
                    // Nothing gathered waits on the write.
                    out.flush().await?;
                    let (result, error) = match result {
                        Ok(value) => (Some(value), None),
                        Err(error) => (None, Some(error)),
                    };
                    if let Err(error) = self.process.write_line(&encode(&wire::Answer { id: &id, result, error })).await
                    {
                        tracing::debug!(%error, request = %id, "could not answer a codex request");
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits up to [`EXIT_WAIT`] for the process to exit (killing it then), and up to
    /// [`STDERR_DRAIN`] for the rest of its stderr.
    async fn exit_report(&self) -> ExitReport {
        self.process.exit_report(EXIT_WAIT, STDERR_DRAIN).await
    }

    /// Stdout ended: fail waiting callers, then (unless closing) the running turn and the
    /// transport.
    ///
    /// A turn codex has not admitted yet is left to its `turn/start` caller, which now fails
    /// with the exit status and stderr: the runtime retires the session for a transport failure
    /// during admission, and a transport report from here would race that outcome.
    async fn on_stdout_closed(&self, read_error: Option<std::io::Error>, mut out: SinkBuffer) {
        // Everything read reaches the session before the exit is reported.
        if out.flush().await.is_err() {
            return;
        }
        // Waiters fail now, without a report: a `turn/start` caller asks for it.
        let waiting = self.pending.close();
        let admitting = waiting.waiting().any(|(_, admission)| *admission);
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
        let reason = format!("codex app-server exited ({how}) without completing the turn");
        let mut actions = lock(&self.state).on_exit(&reason, report.status, report.stderr_tail);
        if self.run(&mut actions, &mut out).await.is_ok() {
            let _ = out.transport_down(format!("codex app-server exited ({how})")).await;
        }
    }
}

/// A line over `max_line`, dropped with a warning. The running turn's `turn/completed` among
/// them (a final message of megabytes makes one: it repeats the turn's items) would leave the
/// turn running for good, codex being idle: it ends the turn failed, naming the limit. Codex is
/// left as it is, so the session goes on. The line's first bytes name its thread and turn
/// (codex 0.171 writes `{"method":"turn/completed","params":{"threadId":…,"turn":{"id":…`, its
/// items after them); one of another turn or thread, or whose turn they do not show, is only
/// warned of.
///
/// A request of codex's among them (`method` and `id` in its first bytes) is declined, as codex
/// would wait for its answer for good, and a reply to a call of ours (an `id` and no `method`)
/// fails that call, whose caller would wait out its deadline.
fn over_long_line(state: &mut Normalizer, len: usize, head: &[u8], max_line: usize, actions: &mut Vec<Action>) -> Then {
    let warning = TextFrame::TooLong { len }.into_text(CLI, max_line).err().unwrap_or_default();
    actions.extend(state.garbage(warning));
    let root = head.strip_prefix(b"{");
    let method = root.and_then(|root| string_at(root, find_key(root, "method")?));
    let id = root.and_then(|root| integer_at(root, find_key(root, "id")?));
    match (method, id) {
        (Some(method), Some(id)) => {
            actions.extend(state.unread_request(RpcId::Num(id), method, len, max_line));
            return AfterLines::Next;
        }
        (None, Some(id)) => {
            let message = format!("codex's reply was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`)");
            let error = serde_json::json!({"id": id, "error": {"code": -32700, "message": message}});
            return AfterLines::Reply((id, RawJson::parsed(error.to_string())));
        }
        _ => {}
    }
    let params = root
        .and_then(|root| (method? == "turn/completed").then(|| object_at(root, find_key(root, "params")?)).flatten());
    let turn = params.and_then(|params| object_at(params, find_key(params, "turn")?));
    let Some(turn) = turn.and_then(|turn| string_at(turn, find_key(turn, "id")?)) else {
        return AfterLines::Next;
    };
    let thread = params.and_then(|params| string_at(params, find_key(params, "threadId")?));
    let reason = format!(
        "codex's turn/completed line was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`): the \
         turn's end could not be read"
    );
    let ended = state.on_unread_end(thread, turn, &reason);
    let ends = ended.iter().any(Action::ends_turn);
    actions.extend(ended);
    if ends { AfterLines::TurnEnded } else { AfterLines::Next }
}

/// Normalizes one stdout line into `actions`, its raw JSON attached.
fn normalize_line(
    state: &mut Normalizer,
    line: TextFrame<'_>,
    chunk: Option<&Bytes>,
    max_line: usize,
    actions: &mut Vec<Action>,
    scratch: &mut String,
) -> Then {
    let Some(text) = line.text(CLI, max_line, |warning| actions.extend(state.garbage(warning))) else {
        return AfterLines::Next;
    };
    // One parse of the line: the message borrows from it (and a delta's escaped text from
    // `scratch`) until it is normalized, then the line (shared with the read it came in)
    // becomes the raw JSON of what it produced.
    let Ok(message) = wire::parse_in(text, scratch) else {
        actions.extend(state.garbage(unparsed_line_warning(CLI, "JSON", text.len())));
        return AfterLines::Next;
    };
    if let Message::Response { id: RpcId::Num(id) } = message {
        return AfterLines::Reply((id, keep_line(text, chunk)));
    }
    let start = actions.len();
    state.on_message(message, chunk, actions);
    let line_actions = &mut actions[start..];
    attach(line_actions, keep_line(text, chunk));
    if line_actions.iter().any(Action::ends_turn) { AfterLines::TurnEnded } else { AfterLines::Next }
}

async fn read_stdout(shared: Arc<Shared>, stdout: ChildOutput, max_line: usize) {
    let mut lines = LineReader::new(stdout, max_line).redacting(shared.process.secrets());
    let mut actions = Vec::new();
    let mut out = shared.sink.buffer();
    // Where a delta's escaped text is decoded, line after line.
    let mut scratch = String::new();
    let read_error = loop {
        let Ok(next) = flush_before_wait(&mut out, lines.next_line_in_chunk()).await else { return };
        let then = match next {
            Ok(Some((Line::TooLong(len), _))) => {
                let mut state = lock(&shared.state);
                over_long_line(&mut state, len, lines.too_long_head(), max_line, &mut actions)
            }
            Ok(Some((line, chunk))) => {
                // The other lines this read brought are normalized under the same lock before
                // anything is sent.
                let mut state = lock(&shared.state);
                let mut normalize = |line: TextFrame<'_>, chunk: Option<&Bytes>| {
                    normalize_line(&mut state, line, chunk, max_line, &mut actions, &mut scratch)
                };
                let first = normalize(TextFrame::from_line(line), chunk);
                lines.normalize_buffered(first, normalize)
            }
            Ok(None) => break None,
            Err(error) => break Some(error),
        };
        let handled = shared.finish(then, &mut actions, &mut out).await;
        if handled.is_err() {
            // The session runtime is gone; it drops the connection, which kills the process.
            return;
        }
    };
    shared.on_stdout_closed(read_error, out).await;
}
