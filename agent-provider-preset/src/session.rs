//! One preset session: the [`ProviderSession`] the runtime drives. Each turn starts the preset's
//! CLI once, reads its stdout through the [`TurnReader`] and ends when the process exits.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_core::exec::{ChildOutput, Command, EnvSpec, KillCause};
use agent_core::provider::{Admission, ProviderSession, TurnStart};
use agent_core::{
    DynExec, Error, EventKind, InputItem, ProviderId, Request, Response, Result, SessionId, Sink, TurnId, TurnInput,
    TurnOptions, TurnResult, TurnStatus,
};
use agent_provider_kit::conversations::Claim;
use agent_provider_kit::framing::{Line, LineReader, unparsed_line_warning};
use agent_provider_kit::permission_prompt::{self, PendingTool, control_response};
use agent_provider_kit::process::{CliProcess, encode_line, wait_until};
use agent_provider_kit::rpc::ExitReport;
use agent_provider_kit::secrets::Secrets;
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::AbortHandle;

use crate::conversation::Conversation;
use crate::conversation_files;
use crate::options::OnBusy;
use crate::preset::{Preset, PromptDelivery};
use crate::prompt_file::PromptFile;
use crate::result::PresetResult;
use crate::template::Values;
use crate::turn::{Action, ApprovalMeta, Outcome, TurnReader, exit_code};

/// How long the reader waits for the process to exit after its stdout closed, before killing it.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// How long the reader waits for stdout to close once a result or failure line was read, before
/// killing the process: the turn's outcome is known, and a CLI that lingers (a child holding
/// stdout, a wait on something) must not keep it open.
const AFTER_RESULT: Duration = Duration::from_secs(5);
/// How long the reader waits for the rest of stderr once the process exited.
const STDERR_DRAIN: Duration = Duration::from_millis(500);
/// How long closing stdin may take.
const STDIN_CLOSE: Duration = Duration::from_secs(2);
/// The reason of a turn `cancel` stopped.
const STOPPED: &str = "cancelled: the turn's process was stopped";

/// Aborts a task when dropped.
struct AbortsOnDrop(AbortHandle);

impl Drop for AbortsOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What every turn of the session runs with.
#[derive(Clone)]
pub(crate) struct RunConfig {
    pub(crate) program: OsString,
    /// Before the preset's arguments (`binary_args`).
    pub(crate) leading: Vec<String>,
    /// At the preset's `extra_args` insertion.
    pub(crate) extra: Vec<String>,
    pub(crate) env: EnvSpec,
    pub(crate) cwd: PathBuf,
    pub(crate) model: Option<String>,
    pub(crate) system_prompt: Option<String>,
    /// `system_prompt` in a file, when the preset takes one (`{system_prompt_file}`).
    pub(crate) system_prompt_file: Option<Arc<PromptFile>>,
    pub(crate) max_turns: Option<String>,
    /// `Some` when approvals are asked through the preset's conversation.
    pub(crate) approvals: Option<ApprovalMeta>,
    pub(crate) on_busy: OnBusy,
    /// Redacted from each turn's stderr tail.
    pub(crate) secrets: Secrets,
}

impl fmt::Debug for RunConfig {
    /// The program and the number of arguments; no argument, prompt or environment value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunConfig")
            .field("program", &self.program)
            .field("leading", &self.leading.len())
            .field("extra", &self.extra.len())
            .field("env", &self.env)
            .field("cwd", &self.cwd)
            .field("model", &self.model)
            .field("on_busy", &self.on_busy)
            .finish_non_exhaustive()
    }
}

/// An open preset session.
pub(crate) struct PresetSession {
    shared: Arc<Shared>,
}

struct Shared {
    provider: ProviderId,
    preset: Arc<Preset>,
    run: RunConfig,
    exec: DynExec,
    sink: Sink,
    session_id: SessionId,
    conversation: Arc<Conversation>,
    /// The CLI session ID this session last reported as its provider session ID.
    reported: Mutex<Option<String>>,
    /// The turn in flight.
    running: Mutex<Option<Arc<TurnHandle>>>,
    /// Deadline of `cancel` (the turn's end after its process was stopped).
    command_timeout: Duration,
    /// The task of the latest turn, which `close` lets end: it holds this state (the session's
    /// system prompt file among it) until it has told its end.
    last_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// One turn in flight, shared by the session and the turn's task.
struct TurnHandle {
    turn: TurnId,
    cancelled: AtomicBool,
    /// Why, once `cancelled`.
    cancel_reason: Mutex<Option<&'static str>>,
    /// Woken by `cancel` (a turn waiting for its key) and when the turn has ended.
    changed: Notify,
    ended: AtomicBool,
    /// The turn's number in its key's conversation, once its process started (0 before).
    number: AtomicU64,
    process: Mutex<Option<Arc<CliProcess>>>,
    /// Tool uses waiting for an answer, by the CLI's request ID.
    pending: Mutex<HashMap<String, PendingTool>>,
    /// Tool uses the host refused (their `tool_completed` is `declined`).
    declined: Mutex<HashSet<String>>,
    task: Mutex<Option<AbortHandle>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a running turn holds: its key's gate and, for a CLI whose conversation files the preset
/// names, its conversation's claim. The claim goes first (fields drop in order), so the next
/// turn of the key, let in by the gate, finds the conversation free.
struct Held {
    _claim: Option<Claim>,
    _gate: OwnedMutexGuard<()>,
}

/// How a turn's task starts.
enum Start {
    /// The key was free and the process runs.
    Running { held: Held, process: Arc<CliProcess>, stdout: ChildOutput },
    /// Another turn of the key runs; wait for it.
    Waiting,
}

/// The prompt of `input`: its text (structured input of text items only).
fn prompt_text(input: &TurnInput) -> Result<String> {
    if let TurnInput::Items(items) = input
        && items.iter().any(|i| !matches!(i, InputItem::Text { .. }))
    {
        return Err(Error::InvalidOption {
            option: "input",
            reason: "a preset passes its CLI a text prompt; give text only".into(),
        });
    }
    let text = input.text();
    if text.contains('\0') {
        // On the command line it cannot be passed, and no CLI reads one on stdin as text.
        return Err(Error::InvalidOption { option: "input", reason: "the prompt holds a NUL character".into() });
    }
    Ok(text)
}

impl PresetSession {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        provider: ProviderId,
        preset: Arc<Preset>,
        run: RunConfig,
        exec: DynExec,
        sink: Sink,
        session_id: SessionId,
        conversation: Arc<Conversation>,
        command_timeout: Duration,
    ) -> Self {
        let reported = Mutex::new(conversation.state().session_id.clone());
        let shared = Shared {
            provider,
            preset,
            run,
            exec,
            sink,
            session_id,
            conversation,
            reported,
            running: Mutex::new(None),
            command_timeout,
            last_task: Mutex::new(None),
        };
        PresetSession { shared: Arc::new(shared) }
    }

    fn rejected(&self, reason: impl Into<String>) -> Error {
        Error::ProviderRejected { provider: self.shared.provider.clone(), reason: reason.into() }
    }

    fn running(&self) -> Option<Arc<TurnHandle>> {
        lock(&self.shared.running).clone()
    }
}

impl Shared {
    /// What the template is rendered with for a turn of `prompt` on `model`, continuing the
    /// key's conversation, handed to `with`.
    fn with_values<R>(&self, prompt: &str, model: Option<&str>, with: impl FnOnce(&Values<'_>) -> R) -> R {
        let continued = self.continued();
        self.with_values_continuing(continued.as_deref(), prompt, model, with)
    }

    /// The CLI session ID a turn starting now continues: the key's conversation, for a preset
    /// that continues one.
    fn continued(&self) -> Option<String> {
        self.conversation.state().session_id.clone().filter(|_| self.preset.resumes())
    }

    /// [`Shared::with_values`] continuing `session_id`.
    fn with_values_continuing<R>(
        &self,
        session_id: Option<&str>,
        prompt: &str,
        model: Option<&str>,
        with: impl FnOnce(&Values<'_>) -> R,
    ) -> R {
        let cwd = self.run.cwd.to_string_lossy();
        let system_prompt_file = self.run.system_prompt_file.as_ref().map(|file| file.path().to_string_lossy());
        with(&Values {
            prompt,
            model,
            max_turns: self.run.max_turns.as_deref(),
            system_prompt: self.run.system_prompt.as_deref(),
            system_prompt_file: system_prompt_file.as_deref(),
            session_id,
            cwd: &cwd,
            approvals: self.run.approvals.is_some(),
            extra_args: &self.run.extra,
        })
    }

    /// Renders the argv for the turn, checks the conversation it continues (see
    /// [`Shared::continue_conversation`]) and starts the process. Called with the key's gate
    /// held: the conversation checked is the one the argv names.
    async fn spawn(
        &self,
        gate: OwnedMutexGuard<()>,
        prompt: &str,
        model: Option<&str>,
    ) -> Result<(Held, Arc<CliProcess>, ChildOutput)> {
        let continued = self.continued();
        let rendered = self
            .with_values_continuing(continued.as_deref(), prompt, model, |values| self.preset.template.render(values));
        let argv: Vec<String> = self.run.leading.iter().cloned().chain(rendered).collect();
        let claim = match continued {
            Some(id) => self.continue_conversation(&id, &argv).await?,
            None => None,
        };
        let held = Held { _claim: claim, _gate: gate };
        let (process, stdout) = self.start_process(argv).await?;
        Ok((held, process, stdout))
    }

    /// For a preset naming its CLI's conversation files (`conversation_files`) and a turn that
    /// continues a conversation on this host: the checks and the claim of
    /// [`conversation_files::check_and_claim`].
    async fn continue_conversation(&self, id: &str, argv: &[String]) -> Result<Option<Claim>> {
        let Some(files) = self.preset.conversation_files else { return Ok(None) };
        if !self.exec.is_local() {
            return Ok(None);
        }
        conversation_files::check_and_claim(files, id, &self.session_id, &self.run.env, &self.run.cwd, argv)
            .await
            .map(Some)
    }

    /// Starts the process of a turn with its arguments `argv`.
    async fn start_process(&self, argv: Vec<String>) -> Result<(Arc<CliProcess>, ChildOutput)> {
        let mut command = Command::new(self.run.program.clone()).args(argv).session(self.session_id.clone());
        command.env = self.run.env.clone();
        command.cwd = Some(self.run.cwd.clone());
        let child = self
            .exec
            .spawn(command)
            .await
            .map_err(|e| crate::provider::spawn_error(&self.provider, &self.preset.id, &e, &self.run.program))?;
        let (process, stdout) =
            CliProcess::start(self.preset.id.clone(), child, self.run.secrets.clone()).ok_or_else(|| {
                Error::ProviderUnavailable {
                    provider: self.provider.clone(),
                    reason: "the exec backend did not provide the child's stdin, stdout and stderr".into(),
                }
            })?;
        Ok((Arc::new(process), stdout))
    }

    /// Runs one turn from its start to its terminal event.
    async fn run_turn(self: Arc<Self>, handle: Arc<TurnHandle>, start: Start, prompt: String, model: Option<String>) {
        let (held, process, stdout) = match start {
            Start::Running { held, process, stdout } => (held, process, stdout),
            Start::Waiting => {
                let raw = agent_core::event::RawJson::parsed(
                    json!({"key": self.conversation.key, "on_busy": "wait"}).to_string(),
                );
                let waiting = EventKind::ProviderEvent { method: "preset/waiting_for_key".into() };
                if self.sink.emit(Some(&handle.turn), waiting, Some(raw)).await.is_err() {
                    return;
                }
                let gate = tokio::select! {
                    gate = Arc::clone(&self.conversation.gate).lock_owned() => gate,
                    () = wait_until(&handle.changed, || handle.cancelled.load(Ordering::SeqCst)) => {
                        let outcome = Outcome {
                            status: TurnStatus::Interrupted,
                            reason: Some("cancelled while waiting for its conversation key".into()),
                            text: None,
                            usage: None,
                        };
                        return self.finish(&handle, None, outcome, ExitReport::default(), None).await;
                    }
                };
                match self.spawn(gate, &prompt, model.as_deref()).await {
                    Ok(started) => started,
                    Err(error) => {
                        let outcome = Outcome {
                            status: TurnStatus::Failed,
                            reason: Some(error.to_string()),
                            text: None,
                            usage: None,
                        };
                        return self.finish(&handle, None, outcome, ExitReport::default(), None).await;
                    }
                }
            }
        };
        *lock(&handle.process) = Some(Arc::clone(&process));
        let number = {
            let mut state = self.conversation.state();
            state.turns += 1;
            state.turns
        };
        handle.number.store(number, Ordering::SeqCst);
        if handle.cancelled.load(Ordering::SeqCst) {
            process.kill();
        }
        let session_id = self.conversation.state().session_id.clone();
        if session_id.is_none() && number > 1 && self.preset.resumes() {
            // Never silently: the caller may expect the earlier turns' context.
            let message = format!(
                "{} starts a new conversation in turn {number} of key `{}`: no earlier turn left one to continue \
                 (the earlier turns' reasons and warnings say why)",
                self.preset.id, self.conversation.key
            );
            if self.sink.emit(Some(&handle.turn), EventKind::Warning { message }, None).await.is_err() {
                process.kill();
                return;
            }
        }
        let mut reader = TurnReader::new(&self.preset, session_id, self.run.approvals.clone());
        // Written beside the reading of stdout: a CLI may write more than a pipe holds before it
        // reads a prompt larger than one, and each side would wait on the other.
        let _delivery = self.deliver_prompt(&process, prompt).await;
        let mut lines = LineReader::new(stdout, self.preset.max_line_bytes).redacting(process.secrets());
        let mut actions = Vec::new();
        // Set when the result or failure line was read.
        let mut after_result = None;
        let read_error = loop {
            let next = match after_result {
                None => lines.next_line().await,
                Some(deadline) => match tokio::time::timeout_at(deadline, lines.next_line()).await {
                    Ok(next) => next,
                    Err(_) => {
                        process.kill();
                        reader.lingered(AFTER_RESULT);
                        break None;
                    }
                },
            };
            let line = match next {
                Ok(Some(line)) => line,
                Ok(None) => break None,
                Err(error) => break Some(error),
            };
            let declined = |id: &str| lock(&handle.declined).contains(id);
            match line {
                Line::Text(bytes) => match std::str::from_utf8(bytes) {
                    Ok(text) if text.trim().is_empty() => {}
                    Ok(text) => reader.on_line(text, &declined, &mut actions),
                    Err(_) => {
                        reader.garbage(unparsed_line_warning(&self.preset.id, "UTF-8", bytes.len()), &mut actions)
                    }
                },
                Line::TooLong(len) => {
                    reader.too_long(len, (lines.too_long_head(), lines.too_long_tail()), &mut actions)
                }
            }
            if self.perform(&handle, &process, &mut actions).await.is_err() {
                // The session runtime is gone: nothing to report to.
                process.kill();
                return;
            }
            if reader.foreign().is_some() {
                // Not the conversation asked for: nothing more of this turn may run.
                process.kill();
                break None;
            }
            if !reader.finished() {
                // No outcome yet, or a retry took it back.
                after_result = None;
            } else if after_result.is_none() {
                after_result = Some(tokio::time::Instant::now() + AFTER_RESULT);
            }
        };
        let waiting = read_error.is_none() && reader.foreign().is_none() && reader.lingered_warning().is_none();
        let mut report = process.exit_report(EXIT_WAIT, STDERR_DRAIN).await;
        if let Some(error) = read_error {
            report = report.read_error(error);
        }
        // A CLI that closed stdout after its result line but did not exit was ended as one that
        // kept it open is: the outcome its lines gave stands.
        // Ended by the exit wait: not by a cancel, a foreign conversation, after a read error or
        // by one of the exec's limits.
        let ended = report.status.as_ref().is_some_and(|status| status.killed_by == Some(KillCause::Requested));
        if reader.finished() && ended && waiting && !handle.cancelled.load(Ordering::SeqCst) {
            reader.lingered(EXIT_WAIT);
        }
        if let Some(message) = reader.lingered_warning()
            && self.sink.emit(Some(&handle.turn), EventKind::Warning { message }, None).await.is_err()
        {
            return;
        }
        let cancelled = handle.cancelled.load(Ordering::SeqCst).then(|| lock(&handle.cancel_reason).unwrap_or(STOPPED));
        let outcome = reader.outcome(&report, cancelled);
        let session_id = reader.session_id().filter(|_| reader.kept_conversation(&report)).map(str::to_owned);
        self.finish(&handle, session_id, outcome, report, Some(held)).await;
    }

    /// Sends the prompt the way the preset takes it: on the command line (stdin closes at once),
    /// or on stdin from a task of its own, ended when the returned guard drops.
    async fn deliver_prompt(&self, process: &Arc<CliProcess>, prompt: String) -> Option<AbortsOnDrop> {
        let (input, close) = if self.run.approvals.is_some() {
            let line = json!({
                "type": "user",
                "message": {"role": "user", "content": prompt},
                "parent_tool_use_id": null,
                "session_id": "",
            });
            (encode_line(&line), false)
        } else if self.preset.prompt == PromptDelivery::Stdin {
            (prompt.into_bytes(), true)
        } else {
            process.close_stdin(STDIN_CLOSE).await;
            return None;
        };
        let process = Arc::clone(process);
        let preset = self.preset.id.clone();
        let task = tokio::spawn(async move {
            if let Err(error) = process.write_line(&input).await {
                // The process is gone already; its exit ends the turn.
                tracing::debug!(%error, %preset, "could not write the prompt");
            }
            if close {
                process.close_stdin(STDIN_CLOSE).await;
            }
        });
        Some(AbortsOnDrop(task.abort_handle()))
    }

    /// Carries out what the reader asked for, leaving `actions` empty. Errs when the session
    /// runtime is gone.
    async fn perform(
        &self,
        handle: &TurnHandle,
        process: &CliProcess,
        actions: &mut Vec<Action>,
    ) -> Result<(), agent_core::provider::SinkClosed> {
        let turn = Some(&handle.turn);
        for action in actions.drain(..) {
            match action {
                Action::Emit { kind, raw } => self.sink.emit(turn, kind, raw).await?,
                Action::Request { spec, pending, raw } => {
                    let id = pending.request_id.clone();
                    let reused = {
                        let mut waiting = lock(&handle.pending);
                        let earlier = waiting.remove(id.as_str());
                        if earlier.is_none() {
                            waiting.insert(id.as_str().to_owned(), pending);
                        }
                        earlier.is_some()
                    };
                    if !reused {
                        self.sink.request(&handle.turn, *spec, raw).await?;
                        continue;
                    }
                    let (deny, message) = permission_prompt::reused_request_id(&self.preset.id, &id);
                    if let Err(error) = process.write_line(&encode_line(&deny)).await {
                        tracing::debug!(%error, preset = %self.preset.id, "could not deny a reused request ID");
                    }
                    self.sink.request_resolved(agent_core::request::ProviderRef(id.as_str().to_owned()), None).await?;
                    self.sink.emit(turn, EventKind::Warning { message }, None).await?;
                }
                Action::Resolved(provider_ref) => {
                    if lock(&handle.pending).remove(&provider_ref.0).is_some() {
                        self.sink.request_resolved(provider_ref, None).await?;
                    }
                }
                Action::Write(line) => {
                    if let Err(error) = process.write_line(&encode_line(&line)).await {
                        tracing::debug!(%error, preset = %self.preset.id, "could not answer a control request");
                    }
                }
                Action::CloseStdin => process.close_stdin(STDIN_CLOSE).await,
            }
        }
        Ok(())
    }

    /// Records the turn in its conversation, lets the next turn in (`held`: the turn's claim,
    /// then its key's gate), and reports the end.
    ///
    /// `found` is the CLI session ID the turn printed, when the CLI kept its conversation (see
    /// [`TurnReader::kept_conversation`]): it becomes the key's, reported as the session's provider session ID
    /// (and so kept in the store). A turn whose process never started (cancelled or failed while
    /// waiting for its key) reports the number it would have had without taking it.
    async fn finish(
        &self,
        handle: &TurnHandle,
        found: Option<String>,
        outcome: Outcome,
        report: ExitReport,
        held: Option<Held>,
    ) {
        let (turn_number, session_id) = {
            let mut state = self.conversation.state();
            if let Some(id) = found {
                state.session_id = Some(id);
            }
            let number = match handle.number.load(Ordering::SeqCst) {
                0 => state.turns + 1,
                number => number,
            };
            (number, state.session_id.clone())
        };
        // The next turn of the key, let in here, continues the conversation just recorded.
        drop(held);
        // The key's conversation is this session's, whichever session of the key set it: a
        // session that only continued it must record it too, to be resumed after a restart.
        let changed = {
            let mut reported = lock(&self.reported);
            let changed = session_id.is_some() && *reported != session_id;
            if changed {
                reported.clone_from(&session_id);
            }
            changed
        };
        if changed {
            let _ = self.sink.session_updated(session_id.clone(), None).await;
        }
        let payload = PresetResult {
            status: outcome.status,
            reason: outcome.reason.clone(),
            text: outcome.text.clone(),
            session_id,
            turn: turn_number,
            exit_code: exit_code(report.status),
        };
        let mut result = TurnResult::default();
        result.text = outcome.text;
        result.reason = outcome.reason;
        result.usage = outcome.usage;
        if outcome.status != TurnStatus::Completed {
            result.exit_status = report.status;
            result.stderr_tail = report.stderr_tail;
        }
        result.details = serde_json::to_value(&payload).ok();
        {
            let mut running = lock(&self.running);
            if running.as_ref().is_some_and(|h| h.turn == handle.turn) {
                *running = None;
            }
        }
        lock(&handle.pending).clear();
        let _ = self.sink.emit(Some(&handle.turn), EventKind::terminal(outcome.status, result), None).await;
        handle.ended.store(true, Ordering::SeqCst);
        handle.changed.notify_waiters();
    }
}

#[async_trait]
impl ProviderSession for PresetSession {
    fn validate_turn(&self, options: &TurnOptions, input: &TurnInput) -> Result<()> {
        agent_core::provider::refuse_session_options::<crate::PresetOptions>(options, None)?;
        if options.model.as_deref().is_some_and(|model| model.contains('\0')) {
            let reason = "holds a NUL character, which no command-line argument can carry".into();
            return Err(Error::InvalidOption { option: "model", reason });
        }
        let prompt = prompt_text(input)?;
        let shared = &self.shared;
        // A CLI continues a conversation on the model it ran last (claude and pi do): the turns
        // after this one, given no model, would silently keep this turn's.
        if options.model.is_some() && shared.run.model.is_none() && shared.preset.resumes() {
            let reason = format!(
                "preset `{}` continues its conversation on the model it ran last, so a turn's model would stay for \
                 the turns after it: set the session's model (SessionOptions::model), which a turn without one then \
                 runs on",
                shared.preset.id
            );
            return Err(Error::InvalidOption { option: "model", reason });
        }
        let repeated = || {
            crate::provider::repeated_flag(&shared.preset, &shared.run.extra, |v| {
                v == crate::template::Placeholder::Model
            })
        };
        if let Some(reason) = options.model.as_ref().and_then(|_| repeated()) {
            return Err(Error::InvalidOption { option: "model", reason });
        }
        // What would fail the spawn, or reach the CLI as an option, is refused before the turn
        // is recorded.
        let model = options.model.as_deref().or(shared.run.model.as_deref());
        match shared.with_values(&prompt, model, |values| shared.preset.template.argument_problem(values)) {
            Some((option, reason)) => Err(Error::InvalidOption { option, reason }),
            None => Ok(()),
        }
    }

    async fn start_turn(&self, turn: TurnStart) -> Result<Admission> {
        let prompt = prompt_text(turn.input())?;
        if let Some(running) = self.running() {
            return Err(self.rejected(format!("turn `{}` is still running", running.turn)));
        }
        if turn.options.model.as_deref().is_some_and(|model| model.contains('\0')) {
            let reason = "holds a NUL character, which no command-line argument can carry".into();
            return Err(Error::InvalidOption { option: "model", reason });
        }
        let model = turn.options.model.clone().or_else(|| self.shared.run.model.clone());
        let start = match Arc::clone(&self.shared.conversation.gate).try_lock_owned() {
            Ok(gate) => {
                let (held, process, stdout) = self.shared.spawn(gate, &prompt, model.as_deref()).await?;
                Start::Running { held, process, stdout }
            }
            Err(_) if self.shared.run.on_busy == OnBusy::Fail => {
                return Err(self.rejected(format!(
                    "conversation `{}` is busy: another turn of it is running (on_busy: fail)",
                    self.shared.conversation.key
                )));
            }
            Err(_) => Start::Waiting,
        };
        let handle = Arc::new(TurnHandle {
            turn: turn.id().clone(),
            cancelled: AtomicBool::new(false),
            cancel_reason: Mutex::new(None),
            changed: Notify::new(),
            ended: AtomicBool::new(false),
            number: AtomicU64::new(0),
            process: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            declined: Mutex::new(HashSet::new()),
            task: Mutex::new(None),
        });
        *lock(&self.shared.running) = Some(Arc::clone(&handle));
        let shared = Arc::clone(&self.shared);
        let turn = Arc::clone(&shared).run_turn(Arc::clone(&handle), start, prompt, model);
        let task = agent_provider_kit::process::spawn_reader(&shared.preset.id, shared.sink.clone(), turn);
        *lock(&handle.task) = Some(task.abort_handle());
        *lock(&self.shared.last_task) = Some(task);
        Ok(Admission::default())
    }

    async fn respond(&self, request: &Request, response: &Response) -> Result<()> {
        let expired = || Error::RequestExpired { request_id: request.id.clone() };
        let handle = self.running().filter(|h| h.turn == request.turn_id).ok_or_else(expired)?;
        let pending = lock(&handle.pending).remove(&request.provider_ref.0).ok_or_else(expired)?;
        let encoded = match permission_prompt::encode(&pending, response) {
            Ok(encoded) => encoded,
            Err(error) => {
                lock(&handle.pending).insert(pending.request_id.as_str().to_owned(), pending);
                return Err(error);
            }
        };
        let Some(process) = lock(&handle.process).clone() else { return Err(expired()) };
        let line = control_response(&pending.request_id, Ok(Some(encoded.result)));
        if let Err(error) = process.write_line(&encode_line(&line)).await {
            // The CLI wrote its result (its stdin is closed) or is gone: the request can no
            // longer be answered and expires with the turn, as a native provider's does once
            // its turn ended.
            tracing::debug!(%error, request_id = %request.id, "the turn's process no longer reads its stdin");
            return Err(expired());
        }
        if encoded.denied
            && let Some(id) = pending.tool_use_id
        {
            lock(&handle.declined).insert(id);
        }
        if matches!(response, Response::Cancel { .. }) {
            // The CLI stops the turn (`interrupt`); it ends interrupted, not failed.
            lock(&handle.cancel_reason).get_or_insert("cancelled: a request was answered with cancel");
            handle.cancelled.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Stops the turn's process (or its wait for the conversation key) and returns once the
    /// turn reported its end, within the command deadline.
    async fn cancel(&self, turn: &TurnId) -> Result<()> {
        let Some(handle) = self.running().filter(|h| h.turn == *turn) else { return Ok(()) };
        lock(&handle.cancel_reason).get_or_insert(STOPPED);
        handle.cancelled.store(true, Ordering::SeqCst);
        handle.changed.notify_waiters();
        if let Some(process) = lock(&handle.process).clone() {
            process.kill();
        }
        let ended = wait_until(&handle.changed, || handle.ended.load(Ordering::SeqCst));
        match tokio::time::timeout(self.shared.command_timeout, ended).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::Timeout {
                operation: "the turn's end after its process was stopped",
                timeout: self.shared.command_timeout,
            }),
        }
    }

    async fn close(&self) {
        if let Some(handle) = self.running() {
            let _ = self.cancel(&handle.turn).await;
        }
        // What the session leaves (its prompt file) goes with it, not with a turn's task that
        // is still on its way out.
        let task = lock(&self.shared.last_task).take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(self.shared.command_timeout, task).await;
        }
    }
}

impl Drop for PresetSession {
    fn drop(&mut self) {
        if let Some(handle) = self.running() {
            if let Some(task) = lock(&handle.task).take() {
                task.abort();
            }
            if let Some(process) = lock(&handle.process).take() {
                process.kill();
            }
        }
    }
}

impl fmt::Debug for PresetSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresetSession")
            .field("provider", &self.shared.provider)
            .field("key", &self.shared.conversation.key)
            .field("run", &self.shared.run)
            .field("running", &self.running().map(|h| h.turn.clone()))
            .finish_non_exhaustive()
    }
}
