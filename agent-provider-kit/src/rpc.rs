//! Correlating requests written to a CLI with the replies it writes back.
//!
//! A provider writes a request carrying a key, and the reader task that parses the CLI's output
//! hands every reply to [`Pending`], which wakes the caller waiting for that key. The caller
//! waits up to a deadline that covers the write too (a CLI that does not read its stdin gives no
//! answer either). When the process goes away, [`Pending::close`] fails every waiter at once,
//! optionally with an [`ExitReport`] (exit status and stderr tail), and refuses new requests.
//!
//! The key is the protocol's: [`ReplyKey`] finds it in a reply line. [`JsonRpcId`] is JSON-RPC's
//! numeric `id` (Codex), [`ControlRequestId`] a control response's `request_id` (Claude Code),
//! [`ResponseId`] the `id` of a `"type": "response"` line (Pi).
//!
//! ```
//! use agent_provider_kit::rpc::{JsonRpcId, Offer, Pending};
//! use agent_core::event::RawJson;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let pending: Pending<JsonRpcId> = Pending::new();
//! let ticket = pending.register(JsonRpcId(7), ()).unwrap();
//! // The reader task, on a line of output:
//! let line = RawJson::from_string(r#"{"id":7,"result":{}}"#.to_owned()).unwrap();
//! assert!(matches!(pending.offer(line), Offer::Delivered));
//! let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
//! let reply = ticket.wait_until(deadline).await.unwrap();
//! assert_eq!(reply.get(), r#"{"id":7,"result":{}}"#);
//! # });
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_core::event::RawJson;
use agent_core::exec::{ChildHandle, ExitStatus};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::framing::{StderrCollector, stderr_note};

/// Reads an error member of any shape as its text, for `#[serde(deserialize_with)]` on an
/// `Option<String>` field (with `#[serde(default)]`): a string as it is, an object's `message`
/// string, any other value as its JSON text, `null` as none. A CLI that starts sending its
/// errors as objects (or numbers) must not make the reply or message that carries them
/// unreadable, which would lose the failure and leave its caller waiting.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Reply {
///     #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
///     error: Option<String>,
/// }
/// let text = |json| serde_json::from_str::<Reply>(json).unwrap().error;
/// assert_eq!(text(r#"{"error":"busy"}"#).as_deref(), Some("busy"));
/// assert_eq!(text(r#"{"error":{"message":"busy","code":3}}"#).as_deref(), Some("busy"));
/// assert_eq!(text(r#"{"error":{"code":3}}"#).as_deref(), Some(r#"{"code":3}"#));
/// assert_eq!(text(r#"{"error":null}"#), None);
/// assert_eq!(text("{}"), None);
/// ```
pub fn error_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    use serde_json::Value;
    Ok(match Value::deserialize(deserializer)? {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.get("message").and_then(Value::as_str).map_or_else(|| other.to_string(), str::to_owned)),
    })
}

/// The key a reply is matched to its request by.
pub trait ReplyKey: Clone + Eq + Hash + fmt::Debug + Send + 'static {
    /// The key of `message` (one JSON value) when it is a reply; `None` for anything else.
    fn of_reply(message: &str) -> Option<Self>;
}

/// A JSON-RPC 2.0 request `id` we chose, a number: a reply is a message with this `id` and no
/// `method` (a message with both is a request from the other side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JsonRpcId(pub i64);

impl ReplyKey for JsonRpcId {
    fn of_reply(message: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Reply<'a> {
            id: Option<i64>,
            #[serde(borrow)]
            method: Option<&'a serde_json::value::RawValue>,
        }
        match serde_json::from_str::<Reply<'_>>(message).ok()? {
            Reply { id: Some(id), method: None } => Some(JsonRpcId(id)),
            _ => None,
        }
    }
}

/// A control request's `request_id`, as in Claude Code's stream-JSON protocol: the reply is
/// `{"type":"control_response","response":{"request_id":…}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ControlRequestId(pub String);

impl ReplyKey for ControlRequestId {
    fn of_reply(message: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Reply {
            r#type: String,
            response: Response,
        }
        #[derive(Deserialize)]
        struct Response {
            request_id: String,
        }
        let reply = serde_json::from_str::<Reply>(message).ok()?;
        (reply.r#type == "control_response").then_some(ControlRequestId(reply.response.request_id))
    }
}

/// The ID of a request the CLI made — a control request's `request_id` (Claude Code), a
/// dialog's `id` (Pi) — as the CLI wrote it. The CLIs write strings; one that numbers its
/// requests writes numbers, and waits for an answer under the same JSON value, so an answer
/// carries it back in the type it came in ([`CliRequestId::to_json`]). Its text — a string's
/// value, a number's digits — is the key a request is kept under and its provider reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CliRequestId {
    text: String,
    number: bool,
}

impl CliRequestId {
    /// The ID in `value`: a string or a number; `None` for anything else.
    pub fn of(value: &Value) -> Option<CliRequestId> {
        match value {
            Value::String(text) => Some(CliRequestId { text: text.clone(), number: false }),
            Value::Number(number) => Some(CliRequestId { text: number.to_string(), number: true }),
            _ => None,
        }
    }

    /// The key and provider reference: a string's value, a number's digits.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The ID as the CLI wrote it.
    pub fn to_json(&self) -> Value {
        match self.number.then(|| self.text.parse::<serde_json::Number>().ok()).flatten() {
            Some(number) => Value::Number(number),
            None => Value::String(self.text.clone()),
        }
    }
}

impl From<&str> for CliRequestId {
    fn from(text: &str) -> Self {
        CliRequestId { text: text.to_owned(), number: false }
    }
}

impl fmt::Display for CliRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A command `id`, as in Pi's RPC mode: the reply is `{"type":"response","id":…}`. A response
/// without an `id` (Pi's answer to a line it could not parse) matches no request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResponseId(pub String);

impl ReplyKey for ResponseId {
    fn of_reply(message: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Reply {
            r#type: String,
            id: Option<String>,
        }
        let reply = serde_json::from_str::<Reply>(message).ok()?;
        if reply.r#type != "response" {
            return None;
        }
        reply.id.map(ResponseId)
    }
}

/// How a CLI process ended, for the errors of the requests it left unanswered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExitReport {
    /// Its exit status; `None` when it could not be observed.
    pub status: Option<ExitStatus>,
    /// The last lines of its stderr.
    pub stderr_tail: Option<String>,
    /// Why reading its output failed, when it did not simply end.
    pub read_error: Option<String>,
}

impl ExitReport {
    /// A report of this exit status and stderr tail.
    pub fn new(status: Option<ExitStatus>, stderr_tail: Option<String>) -> Self {
        ExitReport { status, stderr_tail, read_error: None }
    }

    /// Collects the report of a process whose stdout ended: waits up to `grace` for it to
    /// exit (killing it then, and waiting `grace` again for the status), then up to `drain`
    /// for the rest of its stderr.
    pub async fn collect(
        child: &dyn ChildHandle,
        stderr: &StderrCollector,
        grace: Duration,
        drain: Duration,
    ) -> ExitReport {
        let status = wait_exit(child, grace).await;
        stderr.drain(drain).await;
        ExitReport::new(status, stderr.text())
    }

    /// Adds why reading the output failed.
    pub fn read_error(mut self, error: impl fmt::Display) -> Self {
        self.read_error = Some(error.to_string());
        self
    }

    /// How the process ended, in words: `stdout read failed: …`, the exit status, or `exit
    /// status unknown` (for "`<cli>` exited (`<how>`)").
    pub fn how(&self) -> String {
        match (&self.read_error, &self.status) {
            (Some(error), _) => format!("stdout read failed: {error}"),
            (None, Some(status)) => status.to_string(),
            (None, None) => "exit status unknown".to_owned(),
        }
    }
}

impl fmt::Display for ExitReport {
    /// `exited (<status>)` or `stdout read failed: …`, then the stderr tail on its own lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.read_error, &self.status) {
            (Some(error), _) => write!(f, "stdout read failed: {error}")?,
            (None, Some(status)) => write!(f, "exited ({status})")?,
            (None, None) => f.write_str("exited (exit status unknown)")?,
        }
        f.write_str(&stderr_note(self.stderr_tail.as_deref()))
    }
}

/// Waits up to `grace` for `child` to exit; kills it when it does not, and waits `grace` again.
/// `None` when no exit status could be observed.
pub async fn wait_exit(child: &dyn ChildHandle, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Ok(status)) = tokio::time::timeout(grace, child.wait()).await {
        return Some(status);
    }
    if let Err(error) = child.kill() {
        tracing::debug!(%error, pid = ?child.id(), "could not kill a process that did not exit");
    }
    tokio::time::timeout(grace, child.wait()).await.ok().and_then(Result::ok)
}

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The process or its pipes went away before the reply (or the request was refused because
    /// they already had). Carries the exit report when the connection gave one.
    #[error("the connection closed{}", report.as_ref().map(|r| format!(": the process {r}")).unwrap_or_default())]
    Closed {
        /// How the process ended.
        report: Option<Arc<ExitReport>>,
    },
    /// No reply by the deadline: the request's outcome is unknown.
    #[error("no reply in time")]
    Timeout,
    /// Writing the request failed.
    #[error("writing the request failed: {0}")]
    Write(#[source] std::io::Error),
}

/// What [`Pending::offer`] did with a message.
#[derive(Debug)]
#[non_exhaustive]
pub enum Offer<K> {
    /// It was the reply a caller waited for, and went to that caller.
    Delivered,
    /// A reply for a key nobody waits for (a caller gave up, or the CLI answered twice); the
    /// provider may log or ignore it.
    Unknown {
        /// Its key.
        key: K,
        /// The message.
        message: RawJson,
    },
    /// Not a reply; the provider handles it (an event, a request from the CLI).
    NotAReply(RawJson),
}

type Outcome = Result<RawJson, Arc<ExitReport>>;

struct Waiter<T> {
    reply: oneshot::Sender<Outcome>,
    tag: T,
}

/// `None` once closed.
type Waiters<K, T> = Option<HashMap<K, Waiter<T>>>;

/// Requests waiting for their replies, by key. Cheap to clone: clones share the map.
///
/// `T` is a tag stored with each waiter that the provider reads back when the connection
/// closes (Codex marks the request that starts a turn); `()` when unused.
pub struct Pending<K, T = ()> {
    waiters: Arc<Mutex<Waiters<K, T>>>,
}

impl<K, T> Clone for Pending<K, T> {
    fn clone(&self) -> Self {
        Pending { waiters: Arc::clone(&self.waiters) }
    }
}

impl<K: ReplyKey, T> Default for Pending<K, T> {
    fn default() -> Self {
        Pending { waiters: Arc::new(Mutex::new(Some(HashMap::new()))) }
    }
}

impl<K: ReplyKey, T> fmt::Debug for Pending<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lock().as_ref() {
            Some(waiters) => f.debug_struct("Pending").field("waiting", &waiters.keys().collect::<Vec<_>>()).finish(),
            None => f.write_str("Pending(closed)"),
        }
    }
}

impl<K: ReplyKey, T> Pending<K, T> {
    /// An empty, open map.
    pub fn new() -> Self {
        Pending::default()
    }

    fn lock(&self) -> MutexGuard<'_, Waiters<K, T>> {
        self.waiters.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts waiting for the reply to `key`; register before writing the request, so a quick
    /// reply is not missed. A key still waited for is replaced (its caller sees the connection
    /// closed): keys must be unique. Fails once the connection [closed](Self::close).
    pub fn register(&self, key: K, tag: T) -> Result<Ticket<K, T>, ReplyError> {
        let (reply, rx) = oneshot::channel();
        match self.lock().as_mut() {
            Some(waiters) => {
                if waiters.insert(key.clone(), Waiter { reply, tag }).is_some() {
                    tracing::warn!(?key, "a request key was reused while its reply was awaited");
                }
            }
            None => return Err(ReplyError::Closed { report: None }),
        }
        Ok(Ticket { pending: self.clone(), key, rx: Some(rx) })
    }

    /// Hands `message` to the caller waiting for `key`; gives it back when nobody waits.
    pub fn resolve(&self, key: &K, message: RawJson) -> Result<(), RawJson> {
        let waiter = self.lock().as_mut().and_then(|waiters| waiters.remove(key));
        match waiter {
            // A caller that gave up in the meantime is normal.
            Some(waiter) => {
                let _ = waiter.reply.send(Ok(message));
                Ok(())
            }
            None => Err(message),
        }
    }

    /// Finds the reply key in `message` with [`ReplyKey::of_reply`] and [resolves](Self::resolve)
    /// it.
    pub fn offer(&self, message: RawJson) -> Offer<K> {
        let Some(key) = K::of_reply(message.get()) else {
            return Offer::NotAReply(message);
        };
        match self.resolve(&key, message) {
            Ok(()) => Offer::Delivered,
            Err(message) => Offer::Unknown { key, message },
        }
    }

    /// Stops waiting for `key`.
    pub fn forget(&self, key: &K) {
        if let Some(waiters) = self.lock().as_mut() {
            waiters.remove(key);
        }
    }

    /// How many requests wait.
    pub fn len(&self) -> usize {
        self.lock().as_ref().map_or(0, HashMap::len)
    }

    /// True when no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once [closed](Self::close).
    pub fn is_closed(&self) -> bool {
        self.lock().is_none()
    }

    /// The connection is gone: refuses new requests from now on and takes out every waiter.
    /// The waiters fail when the returned [`Closing`] is [failed](Closing::fail) with an exit
    /// report, or dropped (without one). Closing twice returns nothing the second time.
    pub fn close(&self) -> Closing<K, T> {
        let waiters = self.lock().take().map(|waiters| waiters.into_iter().collect()).unwrap_or_default();
        Closing { waiters }
    }
}

/// The waiters of a closed [`Pending`], still to be failed.
pub struct Closing<K, T> {
    waiters: Vec<(K, Waiter<T>)>,
}

impl<K: fmt::Debug, T> fmt::Debug for Closing<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Closing").field("waiting", &self.waiters.iter().map(|(k, _)| k).collect::<Vec<_>>()).finish()
    }
}

impl<K, T> Closing<K, T> {
    /// The keys and tags of the requests left without a reply.
    pub fn waiting(&self) -> impl Iterator<Item = (&K, &T)> {
        self.waiters.iter().map(|(key, waiter)| (key, &waiter.tag))
    }

    /// Fails every waiter with `report`.
    pub fn fail(mut self, report: ExitReport) {
        let report = Arc::new(report);
        for (_, waiter) in self.waiters.drain(..) {
            let _ = waiter.reply.send(Err(Arc::clone(&report)));
        }
    }
}

/// One request waiting for its reply. Dropping it stops the wait (the key is forgotten).
pub struct Ticket<K: ReplyKey, T> {
    pending: Pending<K, T>,
    key: K,
    /// `None` once the wait ended or was detached.
    rx: Option<oneshot::Receiver<Outcome>>,
}

impl<K: ReplyKey, T> fmt::Debug for Ticket<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket").field("key", &self.key).finish_non_exhaustive()
    }
}

impl<K: ReplyKey, T> Ticket<K, T> {
    /// The key waited for.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Waits for the reply until `deadline`.
    pub async fn wait_until(mut self, deadline: Instant) -> Result<RawJson, ReplyError> {
        let Some(rx) = self.rx.as_mut() else {
            return Err(ReplyError::Closed { report: None });
        };
        let outcome = tokio::time::timeout_at(deadline, rx).await;
        self.rx = None;
        match outcome {
            Ok(Ok(Ok(message))) => Ok(message),
            Ok(Ok(Err(report))) => Err(ReplyError::Closed { report: Some(report) }),
            Ok(Err(_)) => Err(ReplyError::Closed { report: None }),
            Err(_) => {
                self.pending.forget(&self.key);
                Err(ReplyError::Timeout)
            }
        }
    }

    /// Runs `write` (the request going out), then waits for the reply, all before `deadline`.
    pub async fn send_and_wait(
        self,
        write: impl Future<Output = std::io::Result<()>>,
        deadline: Instant,
    ) -> Result<RawJson, ReplyError> {
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => self.wait_until(deadline).await,
            // Dropping the ticket forgets the key.
            Ok(Err(error)) => Err(ReplyError::Write(error)),
            Err(_) => Err(ReplyError::Timeout),
        }
    }

    /// Stops listening but leaves the key registered, so that the reply, when it comes, is
    /// consumed and dropped instead of being offered to the provider as an unknown reply.
    pub fn detach(mut self) {
        self.rx = None;
    }
}

impl<K: ReplyKey, T> Drop for Ticket<K, T> {
    fn drop(&mut self) {
        if self.rx.take().is_some() {
            self.pending.forget(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn raw(json: &str) -> RawJson {
        RawJson::from_string(json.to_owned()).expect("valid JSON")
    }

    fn in_secs(secs: u64) -> Instant {
        Instant::now() + Duration::from_secs(secs)
    }

    #[track_caller]
    fn check<K: ReplyKey>(message: &str, expected: Option<K>) {
        assert_eq!(K::of_reply(message), expected, "{message}");
    }

    #[test]
    fn says_how_the_process_ended() {
        assert_eq!(ExitReport::new(Some(ExitStatus::code(3)), None).how(), ExitStatus::code(3).to_string());
        assert_eq!(ExitReport::new(None, None).how(), "exit status unknown");
        let failed = ExitReport::new(Some(ExitStatus::code(0)), Some("tail".into())).read_error("broken pipe");
        assert_eq!(failed.how(), "stdout read failed: broken pipe");
    }

    #[test]
    fn finds_reply_keys() {
        check(r#"{"id":3,"result":{}}"#, Some(JsonRpcId(3)));
        check(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#, Some(JsonRpcId(4)));
        check::<JsonRpcId>(r#"{"id":3,"method":"item/commandExecution/requestApproval","params":{}}"#, None);
        check::<JsonRpcId>(r#"{"method":"turn/started","params":{}}"#, None);
        check::<JsonRpcId>(r#"{"id":"abc","result":{}}"#, None);
        check::<JsonRpcId>("[1]", None);

        let claude =
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{}}}"#;
        check(claude, Some(ControlRequestId("req_1".into())));
        check::<ControlRequestId>(r#"{"type":"control_request","request_id":"req_2","request":{}}"#, None);
        check::<ControlRequestId>(r#"{"type":"assistant","message":{}}"#, None);

        check(r#"{"id":"s0","type":"response","command":"get_state","success":true}"#, Some(ResponseId("s0".into())));
        check::<ResponseId>(r#"{"type":"response","command":"parse","success":false,"error":"x"}"#, None);
        check::<ResponseId>(r#"{"type":"agent_start"}"#, None);
    }

    #[tokio::test(start_paused = true)]
    async fn replies_reach_their_callers_in_any_order() {
        let pending: Pending<JsonRpcId> = Pending::new();
        let first = pending.register(JsonRpcId(1), ()).expect("open");
        let second = pending.register(JsonRpcId(2), ()).expect("open");
        assert!(matches!(pending.offer(raw(r#"{"id":2,"result":"b"}"#)), Offer::Delivered));
        assert!(matches!(pending.offer(raw(r#"{"id":1,"result":"a"}"#)), Offer::Delivered));
        assert_eq!(second.wait_until(in_secs(1)).await.expect("a reply").get(), r#"{"id":2,"result":"b"}"#);
        assert_eq!(first.wait_until(in_secs(1)).await.expect("a reply").get(), r#"{"id":1,"result":"a"}"#);
        assert!(pending.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_replies_and_other_messages_are_given_back() {
        let pending: Pending<JsonRpcId> = Pending::new();
        let _waiting = pending.register(JsonRpcId(1), ()).expect("open");
        match pending.offer(raw(r#"{"id":9,"result":null}"#)) {
            Offer::Unknown { key, message } => {
                assert_eq!(key, JsonRpcId(9));
                assert_eq!(message.get(), r#"{"id":9,"result":null}"#);
            }
            other => panic!("expected an unknown reply, got {other:?}"),
        }
        assert!(matches!(pending.offer(raw(r#"{"method":"x"}"#)), Offer::NotAReply(_)));
        assert_eq!(pending.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_ends_the_wait_and_forgets_the_key() {
        let pending: Pending<JsonRpcId> = Pending::new();
        let ticket = pending.register(JsonRpcId(1), ()).expect("open");
        let started = Instant::now();
        let waited = ticket.wait_until(in_secs(30)).await;
        assert!(matches!(waited, Err(ReplyError::Timeout)), "{waited:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(pending.is_empty());
        assert!(matches!(pending.offer(raw(r#"{"id":1,"result":1}"#)), Offer::Unknown { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_covers_the_write() {
        let pending: Pending<ResponseId> = Pending::new();
        let ticket = pending.register(ResponseId("a".into()), ()).expect("open");
        let stuck = std::future::pending::<std::io::Result<()>>();
        assert!(matches!(ticket.send_and_wait(stuck, in_secs(5)).await, Err(ReplyError::Timeout)));
        let ticket = pending.register(ResponseId("b".into()), ()).expect("open");
        let broken = async { Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)) };
        assert!(matches!(ticket.send_and_wait(broken, in_secs(5)).await, Err(ReplyError::Write(_))));
        assert!(pending.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn closing_fails_every_waiter_with_the_exit_report() {
        let pending: Pending<ControlRequestId, bool> = Pending::new();
        let waits: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|id| {
                let ticket = pending.register(ControlRequestId(id.into()), id == "b").expect("open");
                tokio::spawn(ticket.wait_until(in_secs(60)))
            })
            .collect();
        tokio::task::yield_now().await;
        let closing = pending.close();
        assert!(pending.is_closed());
        let mut tagged: Vec<_> = closing.waiting().filter(|(_, tag)| **tag).map(|(key, _)| key.0.clone()).collect();
        tagged.sort();
        assert_eq!(tagged, ["b"]);
        assert!(matches!(
            pending.register(ControlRequestId("d".into()), false),
            Err(ReplyError::Closed { report: None })
        ));
        closing.fail(ExitReport::new(Some(ExitStatus::code(2)), Some("fatal: no login".into())));
        for wait in waits {
            match wait.await.expect("joins") {
                Err(ReplyError::Closed { report: Some(report) }) => {
                    assert_eq!(report.status, Some(ExitStatus::code(2)));
                    assert_eq!(report.stderr_tail.as_deref(), Some("fatal: no login"));
                }
                other => panic!("expected the exit report, got {other:?}"),
            }
        }
        assert_eq!(Instant::now().elapsed(), Duration::ZERO);
        assert_eq!(pending.close().waiting().count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_closing_fails_waiters_without_a_report() {
        let pending: Pending<JsonRpcId> = Pending::new();
        let ticket = pending.register(JsonRpcId(1), ()).expect("open");
        drop(pending.close());
        assert!(matches!(ticket.wait_until(in_secs(1)).await, Err(ReplyError::Closed { report: None })));
    }

    #[tokio::test(start_paused = true)]
    async fn detached_and_dropped_tickets() {
        let pending: Pending<JsonRpcId> = Pending::new();
        pending.register(JsonRpcId(1), ()).expect("open").detach();
        drop(pending.register(JsonRpcId(2), ()).expect("open"));
        assert_eq!(pending.len(), 1);
        assert!(matches!(pending.offer(raw(r#"{"id":1,"result":1}"#)), Offer::Delivered));
        assert!(matches!(pending.offer(raw(r#"{"id":2,"result":1}"#)), Offer::Unknown { .. }));
    }

    #[tokio::test]
    async fn exit_reports_name_the_status_and_the_stderr_tail() {
        use agent_core::exec::{Command, Exec};

        let programs = agent_testkit::programs::ProgramDir::new("kit-rpc-exit");
        let exec = agent_exec::LocalExec::new();
        let cli = programs.script("exits", "echo 'fatal: bad flag' >&2\nexit 4");
        let mut child = exec.spawn(Command::new(cli)).await.expect("spawns");
        let stderr = StderrCollector::spawn(child.stderr.take().expect("piped"), 5);
        let grace = Duration::from_secs(5);
        let report = ExitReport::collect(child.handle.as_ref(), &stderr, grace, grace).await;
        assert_eq!(report, ExitReport::new(Some(ExitStatus::code(4)), Some("fatal: bad flag".into())));

        let cli = programs.script("hangs", "echo 'waiting' >&2\nexec sleep 60");
        let mut child = exec.spawn(Command::new(cli)).await.expect("spawns");
        let stderr = StderrCollector::spawn(child.stderr.take().expect("piped"), 5);
        let grace = Duration::from_millis(300);
        let report = ExitReport::collect(child.handle.as_ref(), &stderr, grace, grace).await;
        assert_eq!(report.status.and_then(|status| status.signal), Some(9));
        assert_eq!(report.stderr_tail.as_deref(), Some("waiting"));
    }

    #[test]
    fn exit_reports_read_well() {
        let report = ExitReport::new(Some(ExitStatus::code(1)), Some("boom".into()));
        assert_eq!(
            ReplyError::Closed { report: Some(Arc::new(report.clone())) }.to_string(),
            format!("the connection closed: the process exited ({}); stderr:\nboom", ExitStatus::code(1))
        );
        assert!(report.read_error("EIO").to_string().starts_with("stdout read failed: EIO"));
        assert_eq!(ExitReport::default().to_string(), "exited (exit status unknown)");
    }
}
