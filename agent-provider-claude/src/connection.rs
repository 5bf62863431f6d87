//! The stream-JSON connection to one `claude -p` process.
//!
//! A reader task parses stdout line by line: control responses go to the caller waiting for
//! them (matched by `request_id`), everything else through the [`Normalizer`] to the session's
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
use agent_provider_kit::framing::ends::{head_object, string_member};
use agent_provider_kit::framing::head::{find_key, string_at};
use agent_provider_kit::framing::{
    AfterLines, Bytes, Line, LineReader, TextFrame, flush_before_wait, keep_line, stderr_note, unparsed_line_warning,
};
use agent_provider_kit::permission_prompt::unread_request;
use agent_provider_kit::process::{CliProcess, encode_line as encode, spawn_reader, truncate_message, wait_until};
use agent_provider_kit::rpc::{CliRequestId, ControlRequestId, ExitReport, Pending, ReplyError, ReplyKey};
use agent_provider_kit::secrets::Secrets;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::normalize::{Action, Normalizer, attach};
use crate::wire::{self, ControlRequestLine, Envelope};

/// The CLI's name in error texts.
const CLI: &str = "claude";
/// How long the reader waits for the process to exit after stdout closed, before killing it.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long the reader waits for the stderr task to drain after the process exited.
const STDERR_DRAIN: Duration = Duration::from_millis(500);
/// How long `close` waits for claude to exit after stdin closed, before killing it.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Longest error text from claude kept in an error.
const MAX_ERROR_MESSAGE: usize = 500;

/// Why a control request to claude did not succeed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// Claude answered with an error: it did not act.
    #[error("claude answered with an error: {0}")]
    Refused(String),
    /// No answer in time: the outcome is unknown.
    #[error("no answer in time")]
    Timeout,
    /// The process or its pipes went away.
    #[error("the claude connection is closed")]
    Closed,
    /// Writing the request failed.
    #[error("writing to claude failed: {0}")]
    Write(#[source] std::io::Error),
    /// The answer did not have the expected shape.
    #[error("unexpected answer to `{0}`")]
    Unexpected(String),
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

/// State shared by the connection's tasks and callers.
struct Shared {
    sink: Sink,
    process: CliProcess,
    state: Mutex<Normalizer>,
    /// Our control requests waiting for their responses; closed once stdout closed.
    pending: Pending<ControlRequestId>,
    next_id: AtomicU64,
    /// Woken when the running turn ends or stdout closes.
    turn_ended: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One running `claude -p`.
pub(crate) struct Connection {
    shared: Arc<Shared>,
    reader: AbortHandle,
}

impl Connection {
    /// Takes over a spawned process and starts reading its output.
    pub(crate) fn start(
        child: Child,
        sink: Sink,
        max_line: usize,
        normalizer: Normalizer,
        secrets: Secrets,
    ) -> Result<Connection, CallError> {
        let (process, stdout) = CliProcess::start(CLI, child, secrets).ok_or(CallError::Closed)?;
        let shared = Arc::new(Shared {
            sink,
            process,
            state: Mutex::new(normalizer),
            pending: Pending::new(),
            next_id: AtomicU64::new(1),
            turn_ended: Notify::new(),
        });
        let reader = spawn_reader(CLI, shared.sink.clone(), read_stdout(Arc::clone(&shared), stdout, max_line));
        Ok(Connection { shared, reader: reader.abort_handle() })
    }

    /// The protocol state.
    pub(crate) fn state(&self) -> MutexGuard<'_, Normalizer> {
        lock(&self.shared.state)
    }

    /// Sends a control request and waits up to `timeout` for its response; returns the
    /// response's payload (`None` when it has none). The deadline covers the write too.
    pub(crate) async fn control(&self, request: Value, timeout: Duration) -> Result<Option<Value>, CallError> {
        let deadline = deadline_after(tokio::time::Instant::now(), timeout);
        let subtype = request["subtype"].as_str().unwrap_or_default().to_owned();
        let id = format!("req_{}", self.shared.next_id.fetch_add(1, Ordering::Relaxed));
        let ticket = self.shared.pending.register(ControlRequestId(id.clone()), ())?;
        let line = encode(&ControlRequestLine { kind: "control_request", request_id: &id, request });
        let raw = ticket.send_and_wait(self.shared.process.write_line(&line), deadline).await?;
        let reply: wire::ControlResponseLine =
            serde_json::from_str(raw.get()).map_err(|_| CallError::Unexpected(subtype.clone()))?;
        match reply.response.subtype.as_str() {
            "success" => Ok(reply.response.response),
            "error" => {
                // Its text reaches error messages, and claude may quote what it refused.
                let error = reply.response.error.unwrap_or_default();
                let error = self.shared.process.secrets().redact(&error).into_owned();
                Err(CallError::Refused(truncate_message(error, MAX_ERROR_MESSAGE)))
            }
            _ => Err(CallError::Unexpected(subtype)),
        }
    }

    /// Writes one line (a prompt, an answer).
    pub(crate) async fn write(&self, message: &impl serde::Serialize) -> std::io::Result<()> {
        self.shared.process.write_line(&encode(message)).await
    }

    /// Returns once `turn` is no longer running, or stdout closed.
    pub(crate) async fn turn_ended(&self, turn: &TurnId) {
        wait_until(&self.shared.turn_ended, || !self.state().is_running(turn) || self.shared.pending.is_closed()).await;
    }

    /// Closes stdin, waits up to [`CLOSE_GRACE`] for claude to exit, then kills it.
    pub(crate) async fn close(&self) {
        self.shared.process.close(CLOSE_GRACE).await;
        let unknown = self.state().unknown_frames();
        if unknown > 0 {
            tracing::info!(unknown_frames = unknown, "claude session closed; some lines were of unknown kinds");
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

/// What a line left to do once the messages gathered are sent: a reply carries the control
/// request's ID and its raw JSON.
type Then = AfterLines<(ControlRequestId, RawJson)>;

/// A line over `max_line` bytes, dropped with a warning; one whose head shows claude's `result`
/// also ends the running turn (failed, the reason saying why): claude waits for the next prompt,
/// and nothing else would end it. A control request of claude's is answered (see
/// [`Normalizer::unread_control_request`]), as claude waits for its answer, and a control
/// response to one of ours fails that call, whose caller would wait out its deadline.
fn over_long_line(
    state: &mut Normalizer,
    len: usize,
    (head, tail): (&[u8], &[u8]),
    max_line: usize,
    actions: &mut Vec<Action>,
) -> Then {
    let warning = TextFrame::TooLong { len }.into_text(CLI, max_line).err().unwrap_or_default();
    actions.extend(state.garbage(warning));
    // Found among the head's keys, in whatever order claude writes them, else among the tail's:
    // 2.1.332 writes a result line's `type` after its text.
    match string_member((head, tail), "type") {
        Some("result") => {}
        Some("control_request") => {
            if let Some((id, subtype)) = unread_request((head, tail)) {
                actions.extend(state.unread_control_request(&id, subtype, len, max_line));
            }
            return AfterLines::Next;
        }
        Some("control_response") => {
            let response = head_object(head, "response");
            let id = response.and_then(|response| string_at(response, find_key(response, "request_id")?));
            let Some(id) = id else { return AfterLines::Next };
            let why = format!("claude's reply was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`)");
            let error = wire::control_response(&CliRequestId::from(id), Err(why));
            return AfterLines::Reply((ControlRequestId(id.to_owned()), RawJson::parsed(error.to_string())));
        }
        _ => return AfterLines::Next,
    }
    let reason = format!(
        "claude's result line was {len} bytes, over the {max_line}-byte limit (`max_line_bytes`): the turn's end \
         could not be read"
    );
    let ended = state.on_unread_result(&reason);
    let ends = ended.iter().any(Action::ends_turn);
    actions.extend(ended);
    if ends { AfterLines::TurnEnded } else { AfterLines::Next }
}

/// Normalizes one stdout line into `actions`, its raw JSON attached.
fn normalize_line(
    state: &mut Normalizer,
    frame: TextFrame<'_>,
    chunk: Option<&Bytes>,
    max_line: usize,
    actions: &mut Vec<Action>,
    scratch: &mut String,
) -> Then {
    let Some(text) = frame.text(CLI, max_line, |warning| actions.extend(state.garbage(warning))) else {
        return AfterLines::Next;
    };
    let Ok(line) = Envelope::parse_in(text, scratch) else {
        actions.extend(state.garbage(unparsed_line_warning(CLI, "a JSON message", text.len())));
        return AfterLines::Next;
    };
    if line.kind == "control_response"
        && let Some(key) = ControlRequestId::of_reply(text)
    {
        return AfterLines::Reply((key, keep_line(text, chunk)));
    }
    let start = actions.len();
    state.on_line(text, chunk, &line, actions);
    let line_actions = &mut actions[start..];
    attach(line_actions, keep_line(text, chunk));
    if line_actions.iter().any(Action::ends_turn) { AfterLines::TurnEnded } else { AfterLines::Next }
}

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
            AfterLines::Reply((key, raw)) => {
                // What came before a reply reaches the session before its caller goes on.
                out.flush().await?;
                if self.pending.resolve(&key, raw).is_err() {
                    tracing::debug!(request = %key.0, "a control response nobody waits for");
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
                Action::SessionUpdated { session_id, raw } => out.session_updated(Some(session_id), raw).await?,
                Action::Retire { reason } => {
                    // Nothing claude does in that conversation is the session's: it is ended,
                    // and the session becomes unavailable (stop and resume it).
                    out.transport_down(reason).await?;
                    self.process.kill();
                }
                Action::Write(message) => {
                    // Nothing gathered waits on the write.
                    out.flush().await?;
                    if let Err(error) = self.process.write_line(&encode(&message)).await {
                        tracing::debug!(%error, "could not answer a claude control request");
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
    /// transport.
    async fn on_stdout_closed(&self, read_error: Option<std::io::Error>, mut out: SinkBuffer) {
        // Everything read reaches the session before the exit is reported.
        if out.flush().await.is_err() {
            return;
        }
        drop(self.pending.close());
        self.turn_ended.notify_waiters();
        if self.process.is_closing() {
            return;
        }
        let report = self.exit_report().await;
        let report = match read_error {
            Some(error) => report.read_error(error),
            None => report,
        };
        let how = report.how();
        let reason = format!("claude exited ({how}) without completing the turn");
        let mut actions = lock(&self.state).on_exit(&reason, report.status, report.stderr_tail.clone());
        if self.run(&mut actions, &mut out).await.is_ok() {
            let tail = stderr_note(report.stderr_tail.as_deref());
            let _ = out.transport_down(format!("claude exited ({how}){tail}")).await;
        }
    }
}

async fn read_stdout(shared: Arc<Shared>, stdout: ChildOutput, max_line: usize) {
    let mut lines = LineReader::new(stdout, max_line).redacting(shared.process.secrets());
    let mut actions = Vec::new();
    let mut out = shared.sink.buffer();
    // Where a stream event's escaped text is decoded, line after line.
    let mut scratch = String::new();
    let read_error = loop {
        let Ok(next) = flush_before_wait(&mut out, lines.next_line_in_chunk()).await else { return };
        let then = match next {
            Ok(Some((Line::TooLong(len), _))) => {
                let mut state = lock(&shared.state);
                over_long_line(&mut state, len, (lines.too_long_head(), lines.too_long_tail()), max_line, &mut actions)
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

#[cfg(test)]
mod tests {
    use agent_core::exec::{Command, Exec, ExitStatus};
    use agent_core::{EventKind, TurnStatus};
    use agent_exec::scripted::{LineMatch, Script, ScriptedExec, Step};
    use agent_provider_kit::testing::{Sent, sink};
    use serde_json::json;

    use super::*;

    /// A dropped line over the cap ends the running turn when its head or its tail shows
    /// claude's `result`, whatever the order of its keys (2.1.332 writes `type` after the text);
    /// another line (a nested `type` of `result` included) does not.
    #[test]
    fn an_over_long_result_line_is_known_by_its_type_key_wherever_it_stands() {
        let ends_with = |head: &str, tail: &str| {
            let mut state = Normalizer::new(None);
            state.begin_turn(TurnId::from_string("turn-1".to_owned())).unwrap();
            let mut actions = Vec::new();
            let then = over_long_line(&mut state, 5000, (head.as_bytes(), tail.as_bytes()), 1024, &mut actions);
            let failed = actions.iter().any(|a| matches!(a, Action::Emit { kind: EventKind::TurnFailed(_), .. }));
            assert_eq!(failed, matches!(then, AfterLines::TurnEnded), "{head} … {tail}");
            failed
        };
        let ends = |head: &str| ends_with(head, "xxxx");
        assert!(ends(r#"{"type":"result","subtype":"success","result":"xxxx"#));
        assert!(ends(r#"{"duration_api_ms":12,"modelUsage":{"a":{"type":"x"}},"type":"result","is_er"#));
        assert!(!ends(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"xxxx"#));
        assert!(!ends(r#"{"message":{"type":"result"},"type":"user","content":"xxxx"#));
        assert!(!ends(r#"{"duration_api_ms":12,"result":"a very long text that fills the head whol"#), "no type seen");
        let head = r#"{"duration_api_ms":19,"stop_reason":"end_turn","is_error":false,"result":"xxxx"#;
        assert!(ends_with(head, r#"xxxx","ttft_ms":85,"type":"result","usage":{"type":"u"},"uuid":"c2"}"#));
        assert!(!ends_with(head, r#"xxxx","ttft_ms":85,"usage":{"type":"result"},"uuid":"c2"}"#), "nested");
        let assistant = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"xxxx"#;
        assert!(!ends_with(assistant, r#"xxxx"}],"type":"result"},"uuid":"c2"}"#), "the head tells first");
    }

    /// The reader on the kit's recording sink: a reply goes to its caller, lines become events of
    /// the running turn in order, a bad line a warning, and the exit fails the turn with the exit
    /// status and stderr tail before the transport is reported down.
    #[tokio::test(start_paused = true)]
    async fn lines_reach_the_sink_in_order_and_an_exit_fails_the_running_turn() {
        let exec = ScriptedExec::new();
        let delta = json!({"type": "stream_event", "event": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}}});
        exec.script(
            "claude",
            Script::new()
                .expect_line(LineMatch::contains("\"initialize\""))
                .answer(|line| {
                    let id = serde_json::from_str::<Value>(line).unwrap()["request_id"].clone();
                    let reply = json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {"pid": 1}}});
                    vec![Step::stdout(reply.to_string())]
                })
                .expect_line(LineMatch::contains("\"user\""))
                .stdout("not json")
                .stdout(delta.to_string())
                .stderr("claude: out of memory")
                .exit(3),
        );
        let child = exec.spawn(Command::new("claude")).await.unwrap();
        let (sink, mut sent) = sink();
        let conn = Connection::start(child, sink, 1 << 20, Normalizer::new(None), Secrets::default()).unwrap();
        let reply = conn.control(json!({"subtype": "initialize"}), Duration::from_secs(5)).await.unwrap();
        assert_eq!(reply, Some(json!({"pid": 1})));
        let turn = TurnId::from_string("turn-1".to_owned());
        conn.state().begin_turn(turn.clone()).unwrap();
        conn.write(&json!({"type": "user", "message": {"role": "user", "content": "hi"}})).await.unwrap();

        match sent.next().await {
            Some(Sent::Event { turn: Some(t), kind: EventKind::Warning { message }, raw: None }) => {
                assert_eq!(t, turn);
                assert!(message.contains("not a JSON message"), "{message}");
            }
            other => panic!("expected a warning, got {other:?}"),
        }
        match sent.next().await {
            Some(Sent::Event { turn: Some(t), kind: EventKind::MessageDelta { text, .. }, raw: Some(raw) }) => {
                assert_eq!((t, text.as_str()), (turn.clone(), "Hi"));
                assert_eq!(raw.get(), delta.to_string());
            }
            other => panic!("expected the delta, got {other:?}"),
        }
        match sent.next().await {
            Some(Sent::Event { kind: EventKind::TurnFailed(end), .. }) => {
                assert_eq!(end.status, TurnStatus::Failed);
                assert_eq!(end.result.exit_status, Some(ExitStatus::code(3)));
                assert_eq!(end.result.stderr_tail.as_deref(), Some("claude: out of memory"));
            }
            other => panic!("expected the turn to fail, got {other:?}"),
        }
        assert!(matches!(sent.next().await, Some(Sent::TransportDown { reason }) if reason.contains("out of memory")));
        assert!(!conn.state().has_turn());
        let after = conn.control(json!({"subtype": "interrupt"}), Duration::from_secs(5)).await;
        assert!(matches!(after, Err(CallError::Closed)), "{after:?}");
    }
}
