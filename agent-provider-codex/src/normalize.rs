//! The protocol state machine: codex messages in, harness events and requests out.
//!
//! [`Normalizer`] is pure: it owns no I/O. The connection feeds it every parsed stdout line
//! (except responses to our own requests) and executes the [`Action`]s it returns, in order.
//! It tracks the running turn (harness ID ↔ codex turn ID), its open items, usage and final
//! text, and the server requests waiting for the host.

use std::collections::{HashMap, HashSet, VecDeque};

use agent_core::event::{FileChangeEntry, PlanStep, RawJson, TextArena, ToolKind};
use agent_core::exec::ExitStatus;
use agent_core::request::{ProviderRef, RequestSpec};
use agent_core::{EndCause, EventKind, ItemId, TurnId, TurnStatus};
use agent_provider_kit::framing::{Bytes, Unreadable};
use agent_provider_kit::secrets::Secrets;
use serde_json::{Value, json};

mod convert;
mod turn;

use self::convert::{change_entry, error_code, reasoning_text, step_status, tool_of, tool_status, usage};
use self::turn::{Open, OpenItem, TurnState, push_bounded, push_within};
use crate::requests::{self, Built, PendingRequest};
use crate::wire::{self, IdRef, Item, Message, Notification, RpcId, ServerRequest, Tokens};

/// Finished turns remembered to route their late frames (session events, see [`Route::Past`]).
const RECENT_TURNS: usize = 8;
/// Distinct unknown method names remembered for logging each once.
const MAX_UNKNOWN_NAMES: usize = 64;

/// Something the connection must do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Report an event.
    Emit { turn: Option<TurnId>, kind: EventKind, raw: Option<RawJson> },
    /// Ask the host.
    Request { turn: TurnId, spec: Box<RequestSpec>, raw: Option<RawJson> },
    /// Codex settled a request by itself.
    Resolved { provider_ref: ProviderRef, raw: Option<RawJson> },
    /// Answer a server request at once.
    Answer { id: RpcId, result: Result<Value, wire::AnswerError> },
}

impl Action {
    /// True for the terminal event of a turn.
    pub(crate) fn ends_turn(&self) -> bool {
        matches!(self, Action::Emit { kind, .. } if kind.is_terminal())
    }

    fn raw_slot(&mut self) -> Option<&mut Option<RawJson>> {
        match self {
            Action::Emit { raw, .. } | Action::Request { raw, .. } | Action::Resolved { raw, .. } => Some(raw),
            Action::Answer { .. } => None,
        }
    }
}

/// Gives every reporting action of one line the line's raw JSON (moved into the last one).
pub(crate) fn attach(actions: &mut [Action], raw: RawJson) {
    let Some(last) = actions
        .iter()
        .rposition(|a| matches!(a, Action::Emit { .. } | Action::Request { .. } | Action::Resolved { .. }))
    else {
        return;
    };
    for action in &mut actions[..last] {
        if let Some(slot) = action.raw_slot() {
            *slot = Some(raw.clone());
        }
    }
    if let Some(slot) = actions[last].raw_slot() {
        *slot = Some(raw);
    }
}

/// Where a frame belongs.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    /// The running turn.
    Current,
    /// A finished turn: its frames become session events, as the runtime takes no more events
    /// of a turn after its end (a command codex left running in the background when the turn
    /// ended completes later, and that is how its end is seen).
    Past(TurnId),
    /// No turn.
    Session,
}

/// The session's protocol state.
#[derive(Debug, Default)]
pub(crate) struct Normalizer {
    thread_id: Option<String>,
    turn: Option<TurnState>,
    recent: VecDeque<(String, TurnId)>,
    thread_tokens: Tokens,
    requests: HashMap<String, PendingRequest>,
    unknown_frames: u64,
    unknown_names: HashSet<String>,
    /// Where the texts of deltas the CLI wrote with escapes are kept.
    decoded: TextArena,
    /// The most bytes of an open message's text kept for the turn's result (see
    /// [`Normalizer::with_text_limit`]).
    text_limit: usize,
    /// The session's credentials, kept out of the texts gathered from deltas (see
    /// [`Normalizer::redacting`]).
    secrets: Secrets,
    /// Which unreadable stdout lines get a warning.
    unreadable: Unreadable,
}

impl Normalizer {
    /// A normalizer before the thread is known, with the default text limit.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_text_limit(crate::options::DEFAULT_MAX_LINE_BYTES)
    }

    /// A normalizer before the thread is known that keeps at most `max` bytes of an open
    /// message's text. The text is kept only for a turn that ends before the message completes
    /// (`item/completed` carries the whole text, in one line of at most the same
    /// `max_line_bytes`); the bound keeps a message that never ends from growing the session's
    /// memory without limit.
    pub(crate) fn with_text_limit(max: usize) -> Self {
        Normalizer { text_limit: max, ..Self::default() }
    }

    /// Keeps `secrets`' credentials out of what it gathers from deltas: an unfinished
    /// message's text (a turn's result when codex ends without completing it) and an
    /// interrupted tool's output. Each delta's line was redacted, but a key in pieces across
    /// deltas is whole once they are joined.
    pub(crate) fn redacting(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Sets the session's codex thread; frames of other threads are kept unnormalized.
    pub(crate) fn set_thread(&mut self, thread_id: &str) {
        self.thread_id = Some(thread_id.to_owned());
    }

    /// Frames whose method this codex version does not declare (protocol drift).
    pub(crate) fn unknown_frames(&self) -> u64 {
        self.unknown_frames
    }

    // ----- turn control ---------------------------------------------------------------------

    /// Registers a turn about to be sent; frames without a turn ID route to it from now on.
    /// Fails with the running turn when one is active.
    pub(crate) fn begin_turn(&mut self, harness: TurnId) -> Result<(), TurnId> {
        if let Some(turn) = &self.turn {
            return Err(turn.id().clone());
        }
        self.turn = Some(TurnState::new(harness, self.thread_tokens));
        Ok(())
    }

    /// Records codex's ID for the running turn.
    pub(crate) fn admitted(&mut self, harness: &TurnId, codex: &str) {
        if let Some(turn) = self.turn.as_mut().filter(|t| t.id() == harness) {
            turn.codex = Some(codex.to_owned());
        }
    }

    /// Forgets a turn codex refused.
    pub(crate) fn abort_turn(&mut self, harness: &TurnId) {
        if self.turn.as_ref().is_some_and(|t| t.id() == harness) {
            self.turn = None;
        }
    }

    /// Codex's ID of the running turn, if `harness` is running.
    pub(crate) fn codex_turn(&self, harness: &TurnId) -> Option<String> {
        self.turn.as_ref().filter(|t| t.id() == harness).and_then(|t| t.codex.clone())
    }

    /// Claims the one `turn/interrupt` of the running turn: codex's turn ID the first time this
    /// is asked for `harness` once codex admitted it; `None` after that, or when `harness` is not
    /// running or not admitted yet.
    pub(crate) fn claim_interrupt(&mut self, harness: &TurnId) -> Option<String> {
        let turn = self.turn.as_mut().filter(|t| t.id() == harness && !t.interrupt_sent)?;
        let codex = turn.codex.clone()?;
        turn.interrupt_sent = true;
        Some(codex)
    }

    /// True while `harness` is the running turn and codex has not announced it yet
    /// (`turn/started`): it answers `turn/start` first, and refuses an interrupt in between.
    pub(crate) fn is_unannounced(&self, harness: &TurnId) -> bool {
        self.turn.as_ref().is_some_and(|t| t.id() == harness && !t.announced)
    }

    /// True while `harness` is the running turn.
    pub(crate) fn is_running(&self, harness: &TurnId) -> bool {
        self.turn.as_ref().is_some_and(|t| t.id() == harness)
    }

    /// Claims a pending request for answering. Claimed requests can be put back with
    /// [`Normalizer::restore_request`].
    pub(crate) fn take_request(&mut self, provider_ref: &str) -> Option<PendingRequest> {
        self.requests.remove(provider_ref)
    }

    /// Puts back a request whose answer was refused before anything was sent.
    pub(crate) fn restore_request(&mut self, pending: PendingRequest) {
        if self.is_running(&pending.turn) {
            self.requests.insert(pending.id.to_ref(), pending);
        }
    }

    /// Ends the running turn because the process went away.
    pub(crate) fn on_exit(
        &mut self,
        reason: &str,
        exit_status: Option<ExitStatus>,
        stderr_tail: Option<String>,
    ) -> Vec<Action> {
        self.fail_running(reason, exit_status, stderr_tail, EndCause::TransportLost)
    }

    /// A `turn/completed` the connection could not read (over the line cap), of thread `thread`
    /// and codex turn `turn` as its first bytes name them: when it is the running turn's — the
    /// notification itself would have ended it — the turn ends failed with `reason`, ended by
    /// codex (which is idle again).
    pub(crate) fn on_unread_end(&mut self, thread: Option<&str>, turn: &str, reason: &str) -> Vec<Action> {
        match self.route(IdRef { thread, turn: Some(turn) }) {
            (Route::Current, false) => self.fail_running(reason, None, None, EndCause::Provider),
            _ => Vec::new(),
        }
    }

    fn fail_running(
        &mut self,
        reason: &str,
        exit_status: Option<ExitStatus>,
        stderr_tail: Option<String>,
        cause: EndCause,
    ) -> Vec<Action> {
        let Some(mut turn) = self.turn.take() else { return Vec::new() };
        // A codex that exited reads no answer.
        let mut actions =
            if cause == EndCause::TransportLost { Vec::new() } else { self.settle_foreign_requests(turn.id()) };
        self.requests.clear();
        actions.extend(turn.close_items(&self.secrets));
        let mut result = turn.result(None);
        result.reason = Some(reason.to_owned());
        result.exit_status = exit_status;
        result.stderr_tail = stderr_tail;
        result.ended_by = Some(cause);
        result.error = turn.error.take();
        actions.push(Action::Emit {
            turn: Some(turn.id().clone()),
            kind: EventKind::terminal(TurnStatus::Failed, result),
            raw: None,
        });
        actions
    }

    /// Declines a request of codex's whose line was over `max_line_bytes` ([`requests::decline_unread`]):
    /// its first bytes named it, and codex would wait for its answer for good. A warning says so.
    pub(crate) fn unread_request(&mut self, id: RpcId, method: &str, len: usize, max_line: usize) -> Vec<Action> {
        let turn = self.turn.as_ref().map(|t| t.id().clone());
        let message = format!(
            "codex sent `{method}` in a line of {len} bytes, over the {max_line}-byte limit (`max_line_bytes`): it \
             could not be read, and was declined"
        );
        vec![
            Action::Answer { id, result: requests::decline_unread(method) },
            Action::Emit { turn, kind: EventKind::Warning { message }, raw: None },
        ]
    }

    /// A stdout line that is not JSON (or not UTF-8, or too long): a warning for the running
    /// turn (or the session), when the line gets one (see [`Unreadable`]).
    pub(crate) fn garbage(&mut self, message: String) -> Option<Action> {
        let turn = self.turn.as_ref().map(TurnState::id);
        let message = self.unreadable.warning(turn, || message)?;
        Some(Action::Emit { turn: turn.cloned(), kind: EventKind::Warning { message }, raw: None })
    }

    // ----- messages ---------------------------------------------------------------------------

    /// Normalizes one parsed line. Responses to our own requests are handled by the connection.
    /// Normalizes one line: the actions it calls for (without the line's raw JSON, which the
    /// caller attaches with [`attach`] once `message` no longer borrows it) are appended to
    /// `out`, which the reader reuses from line to line. `chunk` is the read buffer the line
    /// lies in, if it does: streamed text is kept as a slice of it.
    pub(crate) fn on_message(&mut self, message: Message<'_>, chunk: Option<&Bytes>, out: &mut Vec<Action>) {
        match message {
            Message::Notification(note) => self.on_notification(note, chunk, out),
            Message::Request { id, request } => out.extend(self.on_request(id, *request)),
            Message::Response { .. } => out.push(self.unnormalized("response", Route::Session)),
            Message::Unrecognized => {
                self.count_unknown("(not json-rpc)");
                let route = if self.turn.is_some() { Route::Current } else { Route::Session };
                out.push(self.unnormalized("(not json-rpc)", route));
            }
        }
    }

    /// Parses and normalizes one line, with its raw JSON attached.
    #[cfg(test)]
    pub(crate) fn on_line(&mut self, raw: RawJson) -> Vec<Action> {
        let mut actions = Vec::new();
        self.on_message(wire::parse(raw.get()).unwrap_or(Message::Unrecognized), None, &mut actions);
        attach(&mut actions, raw);
        actions
    }

    fn route(&self, ids: IdRef<'_>) -> (Route, bool) {
        let foreign = matches!((ids.thread, &self.thread_id), (Some(t), Some(ours)) if t != ours);
        let route = match (ids.turn, &self.turn) {
            _ if foreign => self.current_or_session(),
            (Some(id), Some(turn)) if turn.codex.as_deref() == Some(id) => Route::Current,
            (Some(id), _) if self.recent.iter().any(|(codex, _)| codex == id) => {
                let harness = self.recent.iter().find(|(codex, _)| codex == id).map(|(_, h)| h.clone());
                harness.map_or(Route::Session, Route::Past)
            }
            (Some(_), Some(turn)) if turn.codex.is_none() => Route::Current,
            (Some(_), _) => Route::Session,
            (None, _) => self.current_or_session(),
        };
        (route, foreign)
    }

    fn current_or_session(&self) -> Route {
        if self.turn.is_some() { Route::Current } else { Route::Session }
    }

    fn turn_of(&self, route: &Route) -> Option<TurnId> {
        match route {
            Route::Current => self.turn.as_ref().map(|t| t.id().clone()),
            Route::Past(_) => None,
            Route::Session => None,
        }
    }

    fn emit(&self, route: &Route, kind: EventKind) -> Action {
        Action::Emit { turn: self.turn_of(route), kind, raw: None }
    }

    fn unnormalized(&self, method: &str, route: Route) -> Action {
        self.emit(&route, EventKind::ProviderEvent { method: method.to_owned() })
    }

    fn count_unknown(&mut self, method: &str) {
        self.unknown_frames += 1;
        if self.unknown_names.len() < MAX_UNKNOWN_NAMES && self.unknown_names.insert(method.to_owned()) {
            tracing::warn!(method, "codex sent a frame this provider does not know; kept as provider_event");
        }
    }

    fn on_notification(&mut self, note: Notification<'_>, chunk: Option<&Bytes>, out: &mut Vec<Action>) {
        let ids = match &note {
            Notification::AgentMessageDelta(d)
            | Notification::ReasoningDelta(d, _)
            | Notification::CommandOutputDelta(d)
            | Notification::FileChangeOutputDelta(d) => d.ids(),
            Notification::ItemStarted(n) | Notification::ItemCompleted(n) => n.ids.as_ref(),
            Notification::PatchUpdated(n) => n.ids.as_ref(),
            Notification::McpProgress(n) => n.ids.as_ref(),
            Notification::PlanUpdated(n) => n.ids.as_ref(),
            Notification::TurnDiff(n) => n.ids.as_ref(),
            Notification::TokenUsage(n) => n.ids.as_ref(),
            Notification::Warning(n) => n.ids.as_ref(),
            Notification::Error(n) => n.ids.as_ref(),
            Notification::TurnStarted(n) | Notification::TurnCompleted(n) => {
                IdRef { thread: n.thread_id.as_deref(), turn: Some(n.turn.id.as_str()) }
            }
            Notification::Resolved(n) => IdRef { thread: n.thread_id.as_deref(), turn: None },
            Notification::RateLimits(_) => IdRef::default(),
            Notification::Other { ids, .. } => ids.as_ref(),
        };
        let (route, foreign) = self.route(ids);
        // Stateless kinds normalize wherever they belong.
        let actions = match note {
            Notification::RateLimits(n) => vec![self.emit(&route, EventKind::RateLimit { info: n.rate_limits })],
            Notification::Warning(n) => vec![self.emit(&route, EventKind::Warning { message: n.text() })],
            Notification::Resolved(n) => {
                let provider_ref = n.request_id.to_ref();
                self.requests.remove(&provider_ref);
                vec![Action::Resolved { provider_ref: ProviderRef(provider_ref), raw: None }]
            }
            Notification::Other { method, known, .. } => {
                if !known {
                    self.count_unknown(&method);
                }
                vec![self.unnormalized(&method, route)]
            }
            Notification::Error(n) => self.on_error(&route, foreign, n),
            Notification::TurnCompleted(n) if route == Route::Current && !foreign => {
                let warning = n.lenient.then(|| {
                    let message = format!(
                        "codex's `turn/completed` has fields of types this provider does not expect; the turn \
                         ends with what could be read (status `{}`)",
                        n.turn.status
                    );
                    self.emit(&route, EventKind::Warning { message })
                });
                warning.into_iter().chain(self.finish(n.turn)).collect()
            }
            note if route != Route::Current || foreign => {
                // Streamed pieces of a finished (or unknown) turn, or of another thread (a
                // subagent's), are not published: the guard against a credential split across
                // pieces sees only this thread's running turn's deltas. Their item's end, whole
                // in one line, is.
                let streamed = matches!(
                    note,
                    Notification::AgentMessageDelta(_)
                        | Notification::ReasoningDelta(..)
                        | Notification::CommandOutputDelta(_)
                        | Notification::FileChangeOutputDelta(_)
                );
                if streamed {
                    return;
                }
                // Another thread's totals (a subagent's) are not this thread's.
                if let Notification::TokenUsage(n) = &note
                    && !foreign
                {
                    self.thread_tokens = n.token_usage.total;
                }
                vec![self.unnormalized(note.method(), route)]
            }
            // The streamed kinds: straight into `out`, no vector per line.
            note => return self.on_turn_notification(note, chunk, out),
        };
        out.extend(actions);
    }

    fn on_error(&mut self, route: &Route, foreign: bool, n: wire::ErrorNote) -> Vec<Action> {
        let message = n.error.get("message").and_then(Value::as_str).unwrap_or("codex reported an error").to_owned();
        let code = n.error.get("codexErrorInfo").and_then(error_code);
        if *route == Route::Current
            && !foreign
            && n.will_retry != Some(true)
            && let Some(turn) = self.turn.as_mut()
        {
            turn.error = Some(n.error.clone());
        }
        vec![self.emit(route, EventKind::ProviderError { message, code, will_retry: n.will_retry })]
    }

    /// Stateful notifications of the running turn.
    fn on_turn_notification(&mut self, note: Notification<'_>, chunk: Option<&Bytes>, out: &mut Vec<Action>) {
        let Some(turn) = self.turn.as_mut() else { return };
        let kind = match note {
            Notification::AgentMessageDelta(d) => {
                let item_id = match turn.open(&d.item_id) {
                    Some(Open { id, item: OpenItem::Message { text, cut }, .. }) => {
                        if !*cut {
                            *cut = !push_within(text, &d.delta, self.text_limit);
                        }
                        id.take()
                    }
                    _ => {
                        let id = ItemId::from(&*d.item_id);
                        let mut text = String::new();
                        let cut = !push_within(&mut text, &d.delta, self.text_limit);
                        turn.items.push(Open::new(id.clone(), OpenItem::Message { text, cut }));
                        id
                    }
                };
                EventKind::MessageDelta { item_id: Some(item_id), text: self.decoded.keep(&d.delta, chunk) }
            }
            Notification::ReasoningDelta(d, _) => {
                let item_id = match turn.open(&d.item_id) {
                    Some(Open { id, item: OpenItem::Reasoning { streamed }, .. }) => {
                        *streamed = true;
                        id.take()
                    }
                    _ => {
                        let id = ItemId::from(&*d.item_id);
                        turn.items.push(Open::new(id.clone(), OpenItem::Reasoning { streamed: true }));
                        id
                    }
                };
                EventKind::ReasoningDelta { item_id: Some(item_id), text: self.decoded.keep(&d.delta, chunk) }
            }
            Notification::CommandOutputDelta(d) => {
                if let Some(OpenItem::Tool { output } | OpenItem::FileChange { output, .. }) = turn.item(&d.item_id) {
                    push_bounded(output, &d.delta);
                }
                let text = self.decoded.keep(&d.delta, chunk);
                EventKind::CommandOutputDelta { item_id: turn.item_id(&d.item_id), text }
            }
            Notification::FileChangeOutputDelta(d) => {
                if let Some(OpenItem::FileChange { output, .. }) = turn.item(&d.item_id) {
                    push_bounded(output, &d.delta);
                }
                EventKind::ToolProgress { item_id: turn.item_id(&d.item_id), message: d.delta.into_owned() }
            }
            Notification::McpProgress(p) => EventKind::ToolProgress { item_id: p.item_id, message: p.message },
            Notification::PatchUpdated(p) => {
                let changes: Vec<FileChangeEntry> = p.changes.into_iter().map(change_entry).collect();
                if let Some(OpenItem::FileChange { changes: known, .. }) = turn.item(&p.item_id) {
                    known.clone_from(&changes);
                }
                EventKind::FileChange { item_id: p.item_id, changes }
            }
            Notification::PlanUpdated(p) => EventKind::PlanUpdated {
                explanation: p.explanation,
                steps: p.plan.into_iter().map(|s| PlanStep { step: s.step, status: step_status(&s.status) }).collect(),
            },
            Notification::TurnDiff(d) => {
                turn.diff = Some(d.diff);
                EventKind::ProviderEvent { method: "turn/diff/updated".into() }
            }
            Notification::TokenUsage(n) => {
                self.thread_tokens = n.token_usage.total;
                if turn.codex.is_none() {
                    // Usage reported before codex admitted the turn belongs to earlier turns
                    // (a resumed thread restores its totals): it is the turn's baseline.
                    turn.baseline = n.token_usage.total;
                    EventKind::ProviderEvent { method: "thread/tokenUsage/updated".into() }
                } else {
                    if turn.usage.is_none()
                        && turn.baseline == Tokens::default()
                        && let Some(last) = n.token_usage.last
                    {
                        // No total came before the turn (a forked thread starts from its
                        // parent's without saying so): what came before this model call is.
                        turn.baseline = n.token_usage.total.since(last);
                    }
                    let usage = usage(n.token_usage.total.since(turn.baseline));
                    turn.usage = Some(usage);
                    EventKind::UsageUpdated(Box::new(usage))
                }
            }
            Notification::TurnStarted(n) => {
                turn.codex.get_or_insert(n.turn.id);
                turn.announced = true;
                EventKind::ProviderEvent { method: "turn/started".into() }
            }
            Notification::ItemStarted(n) => return out.extend(self.item_started(n.item)),
            Notification::ItemCompleted(n) => return out.extend(self.item_completed(n.item)),
            other => EventKind::ProviderEvent { method: other.method().to_owned() },
        };
        // As `emit` for the running turn would, without a clone per delta.
        out.push(Action::Emit { turn: Some(turn.harness.take()), kind, raw: None });
    }

    fn item_started(&mut self, item: Item) -> Vec<Action> {
        let route = Route::Current;
        let Some(turn) = self.turn.as_mut() else { return Vec::new() };
        let tool = |kind: ToolKind, name: &str, input: Value| EventKind::ToolStarted {
            item_id: item.id.clone(),
            tool: kind,
            name: name.to_owned(),
            input: Some(input),
        };
        let (open, kinds) = match item.kind.as_str() {
            "agentMessage" => (
                Some(OpenItem::Message { text: item.text.clone().unwrap_or_default(), cut: false }),
                vec![EventKind::ProviderEvent { method: "item/started".into() }],
            ),
            "reasoning" => (
                Some(OpenItem::Reasoning { streamed: false }),
                vec![EventKind::ProviderEvent { method: "item/started".into() }],
            ),
            "commandExecution" => (
                Some(OpenItem::Tool { output: String::new() }),
                vec![tool(ToolKind::Command, "shell", json!({ "command": item.command, "cwd": item.cwd }))],
            ),
            "fileChange" => {
                let changes: Vec<FileChangeEntry> =
                    item.changes.clone().unwrap_or_default().into_iter().map(change_entry).collect();
                let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
                let started = tool(ToolKind::FileChange, "apply_patch", json!({ "paths": paths }));
                let proposed = EventKind::FileChange { item_id: item.id.clone(), changes: changes.clone() };
                (Some(OpenItem::FileChange { changes, output: String::new() }), vec![started, proposed])
            }
            _ => match tool_of(&item) {
                Some((tool_kind, name, input)) => {
                    (Some(OpenItem::Tool { output: String::new() }), vec![tool(tool_kind, &name, input)])
                }
                None => (None, vec![EventKind::ProviderEvent { method: "item/started".into() }]),
            },
        };
        if let Some(open) = open {
            match turn.item(&item.id) {
                Some(existing) => *existing = open,
                None => turn.items.push(Open::new(item.id.clone(), open)),
            }
        }
        kinds.into_iter().map(|kind| self.emit(&route, kind)).collect()
    }

    fn item_completed(&mut self, item: Item) -> Vec<Action> {
        let route = Route::Current;
        let Some(turn) = self.turn.as_mut() else { return Vec::new() };
        let open = turn.take_item(&item.id);
        let (status, known) = tool_status(item.status.as_deref());
        let mut kinds = match item.kind.as_str() {
            "agentMessage" => {
                let text = item.text.unwrap_or_default();
                turn.last_message = Some(text.clone());
                vec![EventKind::AssistantMessage { item_id: Some(item.id), text }]
            }
            "reasoning" => {
                let streamed = matches!(open, Some(OpenItem::Reasoning { streamed: true }));
                let text = reasoning_text(&item);
                if streamed || text.is_empty() {
                    vec![EventKind::ProviderEvent { method: "item/completed".into() }]
                } else {
                    vec![EventKind::ReasoningDelta { item_id: Some(item.id), text: text.into() }]
                }
            }
            "commandExecution" => vec![EventKind::ToolCompleted {
                item_id: item.id,
                status,
                output: item.aggregated_output,
                exit_code: item.exit_code.and_then(|c| i32::try_from(c).ok()),
            }],
            "fileChange" => {
                let changes = item.changes.unwrap_or_default().into_iter().map(change_entry).collect();
                vec![
                    EventKind::FileChange { item_id: item.id.clone(), changes },
                    EventKind::ToolCompleted { item_id: item.id, status, output: None, exit_code: None },
                ]
            }
            _ if open.as_ref().is_some_and(|o| matches!(o, OpenItem::Tool { .. })) || tool_of(&item).is_some() => {
                let output = item
                    .error
                    .as_ref()
                    .and_then(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
                    .or_else(|| item.result.as_ref().map(Value::to_string));
                vec![EventKind::ToolCompleted { item_id: item.id, status, output, exit_code: None }]
            }
            _ => vec![EventKind::ProviderEvent { method: "item/completed".into() }],
        };
        if !known && kinds.iter().any(|kind| matches!(kind, EventKind::ToolCompleted { .. })) {
            let status = item.status.as_deref().unwrap_or_default();
            let message = format!(
                "codex ended a tool call with status `{status}`, which this provider does not know: reported as completed"
            );
            kinds.push(EventKind::Warning { message });
        }
        kinds.into_iter().map(|kind| self.emit(&route, kind)).collect()
    }

    /// Declines `turn`'s pending requests that came from another thread (a subagent's):
    /// codex settles its own thread's at the turn's end, but not those, and the subagent would
    /// wait for an answer for good once the turn no longer asks the host.
    fn settle_foreign_requests(&self, turn: &TurnId) -> Vec<Action> {
        let mut declined: Vec<&PendingRequest> =
            self.requests.values().filter(|p| p.foreign && p.turn == *turn).collect();
        declined.sort_by_key(|p| p.id.to_ref());
        let mut actions: Vec<Action> = declined
            .iter()
            .map(|p| Action::Answer { id: p.id.clone(), result: Ok(requests::auto_decline(&p.kind)) })
            .collect();
        if !actions.is_empty() {
            let message = format!(
                "{} request(s) of another codex thread (a subagent's) were still pending when the turn ended: \
                 declined, as codex does not settle them",
                actions.len()
            );
            actions.push(Action::Emit { turn: Some(turn.clone()), kind: EventKind::Warning { message }, raw: None });
        }
        actions
    }

    /// `turn/completed` for the running turn: closes open items, emits the terminal event.
    fn finish(&mut self, info: wire::TurnInfo) -> Vec<Action> {
        let Some(mut turn) = self.turn.take() else { return Vec::new() };
        let harness = turn.id().clone();
        let mut actions = self.settle_foreign_requests(&harness);
        self.requests.retain(|_, p| p.turn != harness);
        actions.extend(turn.close_items(&self.secrets));
        let summary_text = info.items.iter().rev().find(|i| i.kind == "agentMessage").and_then(|i| i.text.clone());
        let mut result = turn.result(summary_text);
        result.provider_turn_id = Some(info.id.clone());
        let status = match info.status.as_str() {
            "completed" => TurnStatus::Completed,
            "interrupted" => {
                result.reason = Some("codex interrupted the turn".into());
                TurnStatus::Interrupted
            }
            other => {
                let error = info.error.clone().or(turn.error.take());
                result.reason = Some(match error.as_ref().and_then(|e| e.get("message")).and_then(Value::as_str) {
                    Some(message) => message.to_owned(),
                    None if other == "failed" => "codex reported the turn failed".to_owned(),
                    None => format!("codex ended the turn with status `{other}`"),
                });
                result.error = error;
                TurnStatus::Failed
            }
        };
        if result.error.is_none() {
            result.error = info.error;
        }
        let mut details = serde_json::Map::new();
        if let Some(ms) = info.duration_ms {
            details.insert("duration_ms".into(), ms.into());
        }
        if let Some(diff) = turn.diff.take() {
            details.insert("diff".into(), diff.into());
        }
        if !details.is_empty() {
            result.details = Some(Value::Object(details));
        }
        self.recent.push_back((info.id, harness.clone()));
        if self.recent.len() > RECENT_TURNS {
            self.recent.pop_front();
        }
        actions.push(Action::Emit { turn: Some(harness), kind: EventKind::terminal(status, result), raw: None });
        actions
    }

    fn on_request(&mut self, id: RpcId, request: ServerRequest) -> Vec<Action> {
        let ids = request.ids();
        let (route, foreign) = self.route(ids.as_ref());
        let method = request_method(&request).to_owned();
        let turn = self.turn.as_ref();
        let changes = |item_id: &str| {
            turn.and_then(|t| t.find(item_id)).and_then(|open| match &open.item {
                OpenItem::FileChange { changes, .. } => Some(changes.clone()),
                _ => None,
            })
        };
        let built = requests::build(&id, request, changes);
        // Requests of a subagent's thread still need the host: they go to the running turn.
        let target = match (&route, foreign) {
            (Route::Current, _) | (_, true) => self.turn.as_ref().map(|t| t.id().clone()),
            _ => None,
        };
        match (built, target) {
            (Built::Ask { spec, kind }, Some(turn)) => {
                self.requests.insert(id.to_ref(), PendingRequest { id, turn: turn.clone(), foreign, kind });
                vec![Action::Request { turn, spec: Box::new(spec), raw: None }]
            }
            (Built::Ask { kind, .. }, None) => vec![
                Action::Answer { id, result: Ok(requests::auto_decline(&kind)) },
                self.emit(
                    &route,
                    EventKind::Warning { message: format!("codex sent `{method}` while no turn is running; declined") },
                ),
            ],
            (Built::Answer { result, note }, _) => {
                if result.as_ref().is_err_and(|e| e.code == -32601) && !is_declared_request(&method) {
                    self.count_unknown(&method);
                }
                vec![Action::Answer { id, result }, self.emit(&route, EventKind::Warning { message: note })]
            }
        }
    }
}

fn request_method(request: &ServerRequest) -> &str {
    match request {
        ServerRequest::CommandApproval(_) => "item/commandExecution/requestApproval",
        ServerRequest::FileApproval(_) => "item/fileChange/requestApproval",
        ServerRequest::Permissions(_) => "item/permissions/requestApproval",
        ServerRequest::UserInput(_) => "item/tool/requestUserInput",
        ServerRequest::Elicitation(_) => "mcpServer/elicitation/request",
        ServerRequest::LegacyExec(_) => "execCommandApproval",
        ServerRequest::LegacyPatch(_) => "applyPatchApproval",
        ServerRequest::DynamicToolCall { .. } => "item/tool/call",
        ServerRequest::Unsupported { method, .. } => method,
    }
}

fn is_declared_request(method: &str) -> bool {
    matches!(method, "account/chatgptAuthTokens/refresh" | "attestation/generate")
}

#[cfg(test)]
mod tests;
