//! One turn's output, line by line, and how the turn ended: pure (no I/O), fed by the session's
//! reader task and by the transcript tests.
//!
//! # Exit status and matchers
//!
//! A turn's status comes from what the matchers saw and how the process exited, by this rule
//! (first that applies):
//!
//! 1. the turn was cancelled → `interrupted`;
//! 2. a `failure` line was seen → `failed`, whatever the exit status (exit 0 with a failure
//!    line fails);
//! 3. a `result` line was seen and the exit code is one of `success_exit_codes` (default `[0]`)
//!    → `completed`;
//! 4. a `result` line was seen but the process exited otherwise (another code, a signal) →
//!    `failed`: the CLI said it had an answer and then did not finish cleanly (exit 1 with a
//!    result line fails; its text is kept in the result);
//! 5. no `result` line → `failed`, with the exit status and the stderr tail.
//!
//! A completed turn needs both: the CLI's own word (the result line) and a clean exit. A CLI
//! the reader ended for not exiting after its result or failure line ([`TurnReader::lingered`])
//! counts as one that exited cleanly: the outcome its lines gave stands.

use std::collections::HashMap;
use std::time::Duration;

use agent_core::event::{RawJson, Usage};
use agent_core::exec::ExitStatus;
use agent_core::request::{ProviderRef, RequestSpec};
use agent_core::{EventKind, TurnStatus};
use agent_provider_kit::framing::Unreadable;
use agent_provider_kit::permission_prompt::{
    PendingTool, ToolUseRequest, control_response, unread_request, unread_request_answer,
};
use agent_provider_kit::rpc::CliRequestId;
use agent_provider_kit::rpc::ExitReport;
use serde_json::Value;

use crate::events::{Emit, OtherLines, other_method};
use crate::matcher::{Framing, OutputLine};
use crate::preset::{Matcher, Preset};
use crate::template::Condition;

/// What the reader task does with a line.
#[derive(Debug)]
pub(crate) enum Action {
    /// Report an event of the turn.
    Emit { kind: EventKind, raw: Option<RawJson> },
    /// A tool use waits for an answer.
    Request { spec: Box<RequestSpec>, pending: PendingTool, raw: Option<RawJson> },
    /// The CLI withdrew its request.
    Resolved(ProviderRef),
    /// Write this line to the CLI's stdin.
    Write(Value),
    /// Close the CLI's stdin (the approval conversation is over).
    CloseStdin,
}

/// The metadata approval requests carry.
#[derive(Clone, Debug, Default)]
pub(crate) struct ApprovalMeta {
    pub(crate) risk: Option<String>,
    pub(crate) audience: Option<String>,
    pub(crate) timeout: Duration,
}

/// What a turn saw so far.
#[derive(Debug)]
pub(crate) struct TurnReader<'p> {
    preset: &'p Preset,
    /// Approvals are asked through the preset's conversation.
    approvals: Option<ApprovalMeta>,
    kept: HashMap<String, String>,
    session_id: Option<String>,
    /// The conversation this turn asked the CLI to continue (passed with the preset's `resume`
    /// arguments), if it did.
    continuing: Option<String>,
    /// A session ID the CLI reported other than the one it was asked to continue.
    foreign: Option<String>,
    /// `Some` once a result line was seen, with its text.
    result: Option<Option<String>>,
    /// `Some` once a failure line was seen, with its text.
    failure: Option<Option<String>>,
    usage: Option<Usage>,
    stdin_closed: bool,
    /// Set when the CLI was ended for not closing stdout this long after its result or
    /// failure line.
    lingered: Option<Duration>,
    /// Stdout lines over the preset's `max_line_bytes`, dropped: how many, and the longest.
    too_long: Option<(usize, usize)>,
    /// Which unreadable stdout lines get a warning.
    unreadable: Unreadable,
}

/// How a turn ended, before it becomes a terminal event.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) status: TurnStatus,
    pub(crate) reason: Option<String>,
    pub(crate) text: Option<String>,
    pub(crate) usage: Option<Usage>,
}

impl<'p> TurnReader<'p> {
    /// A turn of `preset` continuing `session_id` (if known), asking approvals with `approvals`.
    pub(crate) fn new(preset: &'p Preset, session_id: Option<String>, approvals: Option<ApprovalMeta>) -> Self {
        let continuing = session_id.clone().filter(|_| preset.template.tests(Condition::Resume));
        TurnReader {
            preset,
            approvals,
            kept: HashMap::new(),
            session_id,
            continuing,
            foreign: None,
            result: None,
            failure: None,
            usage: None,
            stdin_closed: false,
            lingered: None,
            too_long: None,
            unreadable: Unreadable::default(),
        }
    }

    /// The CLI was ended for not closing stdout within `wait` of its result or failure line:
    /// the outcome those lines gave stands, whatever the kill's exit status.
    pub(crate) fn lingered(&mut self, wait: Duration) {
        self.lingered = Some(wait);
    }

    /// The warning for [`TurnReader::lingered`], once it happened.
    pub(crate) fn lingered_warning(&self) -> Option<String> {
        let wait = self.lingered?;
        Some(format!(
            "{} did not exit within {} s of its result line; it was ended",
            self.preset.id,
            wait.as_secs_f64()
        ))
    }

    /// The CLI's session ID as far as this turn knows.
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The session ID the CLI reported when it was asked to continue another one: it did not
    /// resume that conversation (it started a fresh one, or opened another), and the turn must
    /// end rather than go on in it.
    pub(crate) fn foreign(&self) -> Option<&str> {
        self.foreign.as_deref()
    }

    /// True once the CLI said how the turn ended (a result or a failure line).
    pub(crate) fn finished(&self) -> bool {
        self.result.is_some() || self.failure.is_some()
    }

    /// True when the CLI kept this turn's conversation, so a session ID it printed may be
    /// continued: it said how the turn ended (a result or a failure line), or it exited by
    /// itself with one of the preset's success codes (its result line may have been one
    /// dropped as over-long). A CLI stopped in its first turn may not have saved the
    /// conversation it named, so the ID of a turn whose CLI was killed is not taken.
    pub(crate) fn kept_conversation(&self, exit: &ExitReport) -> bool {
        let killed = exit.status.is_some_and(|status| status.killed_by.is_some());
        self.finished() || !killed && self.exited_cleanly(exit)
    }

    /// The CLI exited with one of the preset's success codes and its output was read to the end.
    fn exited_cleanly(&self, exit: &ExitReport) -> bool {
        exit.read_error.is_none()
            && exit.status.and_then(|s| s.code).is_some_and(|code| self.preset.success_exit_codes.contains(&code))
    }

    /// A line that could not be read (not UTF-8, not JSON, too long): a warning, when the line
    /// gets one (see [`Unreadable`]).
    pub(crate) fn garbage(&mut self, message: String, actions: &mut Vec<Action>) {
        if let Some(message) = self.unreadable.warning(None, || message) {
            actions.push(Action::Emit { kind: EventKind::Warning { message }, raw: None });
        }
    }

    /// A stdout line of `len` bytes, over the preset's `max_line_bytes`: dropped with a warning.
    /// The turn cannot be reported completed after it — the line may have been its reply, or
    /// a later one a rule would have kept — and the reason of a turn that ends without a result
    /// names the limit (see [`TurnReader::outcome`]).
    ///
    /// In an approval conversation, a control request among such lines (its first or last
    /// bytes, `ends`, name it) is answered: the CLI would wait for its answer for good. A tool's
    /// permission is denied, another request refused, and a warning says so.
    pub(crate) fn too_long(&mut self, len: usize, ends: (&[u8], &[u8]), actions: &mut Vec<Action>) {
        let (count, longest) = self.too_long.unwrap_or_default();
        self.too_long = Some((count + 1, longest.max(len)));
        let (cli, max) = (&self.preset.id, self.preset.max_line_bytes);
        self.garbage(format!("{cli} wrote a stdout line of {len} bytes, over the {max}-byte limit; dropped"), actions);
        if self.approvals.is_some()
            && let Some((id, subtype)) = unread_request(ends)
        {
            let why = format!("its line was {len} bytes, over the {max}-byte limit (`max_line_bytes`)");
            let (answer, message) = unread_request_answer(cli, &id, subtype, &why);
            actions.push(Action::Write(answer));
            actions.push(Action::Emit { kind: EventKind::Warning { message }, raw: None });
        }
    }

    /// One stdout line (without its line end). `declined` tells a tool use refused through the
    /// approval conversation.
    pub(crate) fn on_line(&mut self, text: &str, declined: &dyn Fn(&str) -> bool, actions: &mut Vec<Action>) {
        let text = text.trim_end_matches(['\r', '\n']);
        let parsed = match self.preset.framing {
            Framing::Jsonl => match serde_json::from_str::<Value>(text) {
                Ok(value) => Some(value),
                Err(_) if text.trim().is_empty() => return,
                Err(_) => {
                    let message =
                        agent_provider_kit::framing::unparsed_line_warning(&self.preset.id, "JSON", text.len());
                    self.garbage(message, actions);
                    None
                }
            },
            Framing::Lines => None,
        };
        if let (Some(meta), Some(json)) = (&self.approvals, &parsed)
            && conversation_line(meta, text, json, actions)
        {
            return;
        }
        let preset = self.preset;
        // Values kept from this line count for the other rules of this line.
        let updates: Vec<(String, Option<String>)> = {
            let line = OutputLine { text, json: parsed.as_ref(), kept: &self.kept };
            preset.matchers.keep.iter().filter_map(|(name, rules)| Some((name.clone(), kept(rules, line)?))).collect()
        };
        for (name, value) in updates {
            match value {
                Some(value) => self.kept.insert(name, value),
                None => self.kept.remove(&name),
            };
        }
        let line = OutputLine { text, json: parsed.as_ref(), kept: &self.kept };
        let matchers = &preset.matchers;
        if let Some(Some(id)) = first(&matchers.session_id, line) {
            // Checked first: a value no conversation could have is no report of another one,
            // whether or not this turn continues one.
            if let Some(problem) = agent_core::options::provider_conversation_problem(&id) {
                // Passed with the next turn's `resume` arguments, it would be read as an option.
                let next = match &self.continuing {
                    Some(_) => "the turn goes on in the conversation it continues",
                    None => "no later turn continues it",
                };
                let message = format!("{} reported a session ID that {problem}; it is not taken ({next})", preset.id);
                actions.push(Action::Emit { kind: EventKind::Warning { message }, raw: None });
            } else if self.continuing.as_ref().is_some_and(|asked| *asked != id) {
                self.foreign.get_or_insert(id);
            } else {
                self.session_id = Some(id);
            }
        }
        if first(&matchers.retry, line).is_some() {
            // The CLI tries again: what it reported so far is not the turn's outcome.
            (self.result, self.failure) = (None, None);
        }
        if let Some(text) = first(&matchers.result, line) {
            self.result = Some(text);
        }
        if let Some(text) = first(&matchers.failure, line) {
            self.failure = Some(text);
        }
        let raw = || match parsed {
            Some(_) => Some(RawJson::parsed(text.to_owned())),
            None if preset.framing == Framing::Lines => serde_json::to_string(text).ok().map(RawJson::parsed),
            None => None,
        };
        let mut decided = false;
        for rule in &preset.events {
            let Some(hit) = rule.when.hit(line) else { continue };
            if matches!(rule.emit, Emit::Drop) {
                decided = true;
                break;
            }
            if let Some(kind) = rule.emit.event(&hit, line, declined) {
                if let EventKind::UsageUpdated(usage) = &kind {
                    add_usage(&mut self.usage, usage);
                }
                actions.push(Action::Emit { kind, raw: raw() });
                decided = true;
                if !rule.continues {
                    break;
                }
            }
        }
        let showable = parsed.is_some() || preset.framing == Framing::Lines;
        if !decided && preset.other_lines == OtherLines::ProviderEvent && showable {
            actions.push(Action::Emit { kind: EventKind::ProviderEvent { method: other_method(line) }, raw: raw() });
        }
        if self.approvals.is_some() && !self.stdin_closed && (self.result.is_some() || self.failure.is_some()) {
            self.stdin_closed = true;
            actions.push(Action::CloseStdin);
        }
    }

    /// How the turn ended (the rule in the module docs), once the process exited.
    /// `cancelled` is why the turn was cancelled, if it was.
    pub(crate) fn outcome(&self, exit: &ExitReport, cancelled: Option<&str>) -> Outcome {
        let cli = &self.preset.id;
        let how = exit.how();
        let stderr = agent_provider_kit::framing::stderr_note(exit.stderr_tail.as_deref());
        let clean = self.lingered.is_some() || self.exited_cleanly(exit);
        let text = self.result.clone().flatten();
        let (status, reason) = if let (Some(found), Some(asked)) = (&self.foreign, &self.continuing) {
            let reason = format!(
                "{cli} was asked to continue conversation `{asked}` but reported `{found}`: it did not resume \
                 it, so the turn was stopped (a fresh conversation is never taken in its place)"
            );
            (TurnStatus::Failed, Some(reason))
        } else if let Some(why) = cancelled {
            (TurnStatus::Interrupted, Some(why.to_owned()))
        } else if let Some(failure) = &self.failure {
            let reason = failure.clone().unwrap_or_else(|| format!("{cli} reported a failure ({how}){stderr}"));
            (TurnStatus::Failed, Some(reason))
        } else if let (Some(_), true, Some(dropped)) = (&self.result, clean, self.dropped_lines()) {
            (TurnStatus::Failed, Some(format!("{dropped}: the turn's reply may have been among them")))
        } else if self.result.is_some() && clean {
            (TurnStatus::Completed, None)
        } else if self.result.is_some() {
            (TurnStatus::Failed, Some(format!("{cli} exited ({how}) after its result line{stderr}")))
        } else {
            let dropped = self.dropped_lines().map(|dropped| format!(" ({dropped})")).unwrap_or_default();
            (TurnStatus::Failed, Some(format!("{cli} exited ({how}) without a result line{dropped}{stderr}")))
        };
        Outcome { status, reason, text, usage: self.usage }
    }
}

impl TurnReader<'_> {
    /// What [`TurnReader::too_long`] dropped, said for a turn's reason.
    fn dropped_lines(&self) -> Option<String> {
        let (count, longest) = self.too_long?;
        let (cli, max) = (&self.preset.id, self.preset.max_line_bytes);
        Some(format!(
            "{cli} wrote {count} stdout line(s) over the {max}-byte limit (`max_line_bytes`), the longest {longest} \
             bytes, which could not be read"
        ))
    }
}

/// The approval conversation's own lines; true when the line was one.
fn conversation_line(meta: &ApprovalMeta, text: &str, json: &Value, actions: &mut Vec<Action>) -> bool {
    match json.get("type").and_then(Value::as_str) {
        Some("control_request") => {
            // A string, or a number a CLI that counts its requests writes (answered as one).
            let id = json.get("request_id").and_then(CliRequestId::of);
            let request = json.get("request").and_then(|r| serde_json::from_value::<ToolUseRequest>(r.clone()).ok());
            let Some(id) = id.filter(|id| !id.as_str().is_empty()) else {
                // Nothing the CLI could match an answer with: it is left to its own timeout.
                let message = "the CLI wrote a control request without a string or number `request_id`: it was not \
                               answered"
                    .to_owned();
                let raw = Some(RawJson::parsed(text.to_owned()));
                actions.push(Action::Emit { kind: EventKind::Warning { message }, raw });
                return true;
            };
            match request {
                Some(request) if request.is_tool_use() => {
                    let (mut spec, pending) = request.into_request(&id, &[agent_core::Scope::Once]);
                    if let Some(risk) = &meta.risk {
                        spec = spec.meta("risk", risk.clone());
                    }
                    if let Some(audience) = &meta.audience {
                        spec = spec.meta("audience", audience.clone());
                    }
                    let timeout_ms = u64::try_from(meta.timeout.as_millis()).unwrap_or(u64::MAX);
                    spec = spec.meta("timeout_ms", timeout_ms).timeout(meta.timeout);
                    let raw = Some(RawJson::parsed(text.to_owned()));
                    actions.push(Action::Request { spec: Box::new(spec), pending, raw });
                }
                Some(request) => {
                    let error = format!("agent-harness presets do not handle `{}` control requests", request.subtype);
                    actions.push(Action::Write(control_response(&id, Err(error))));
                }
                None => actions.push(Action::Write(control_response(&id, Err("malformed control request".into())))),
            }
            true
        }
        Some("control_cancel_request") => {
            if let Some(id) = json.get("request_id").and_then(CliRequestId::of) {
                actions.push(Action::Resolved(ProviderRef(id.as_str().to_owned())));
            }
            true
        }
        Some("control_response") | Some("keep_alive") => true,
        _ => false,
    }
}

/// Adds one `usage` event to the turn's total: counts and costs are summed (a CLI that reports
/// usage per model call adds up to the turn's).
fn add_usage(total: &mut Option<Usage>, usage: &Usage) {
    let Some(sum) = total else {
        *total = Some(*usage);
        return;
    };
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        // A CLI's counts are its own: absurd ones must not panic (or wrap) the turn.
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    sum.input_tokens = add(sum.input_tokens, usage.input_tokens);
    sum.cached_input_tokens = add(sum.cached_input_tokens, usage.cached_input_tokens);
    sum.output_tokens = add(sum.output_tokens, usage.output_tokens);
    sum.reasoning_tokens = add(sum.reasoning_tokens, usage.reasoning_tokens);
    sum.total_tokens = add(sum.total_tokens, usage.total_tokens);
    sum.cost_usd = match (sum.cost_usd, usage.cost_usd) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    };
}

/// The value of the first rule that takes `line` (`session_id`, `result`, `failure`, `retry`):
/// `Some(None)` for a rule that takes the line without a value. A rule with a `value` takes
/// only a line that holds it: on one that does not, the next rule is tried, as in `events`. A
/// rule with `kept` takes every line its `when` matches, whether or not the value is kept.
fn first(rules: &[Matcher], line: OutputLine<'_>) -> Option<Option<String>> {
    rules.iter().find_map(|rule| {
        let hit = rule.when.hit(line)?;
        match (&rule.value, &rule.kept) {
            (Some(source), _) => Some(Some(source.text(&hit)?)),
            (None, Some(name)) => Some(line.kept.get(name).cloned()),
            (None, None) => Some(None),
        }
    })
}

/// What the `keep` rules of one name make of `line`: `Some(Some(value))` to keep a value,
/// `Some(None)` to clear it (the first rule that takes the line has no value, or finds none
/// on it), `None` when no rule takes the line.
fn kept(rules: &[Matcher], line: OutputLine<'_>) -> Option<Option<String>> {
    rules.iter().find_map(|rule| {
        let hit = rule.when.hit(line)?;
        Some(rule.value.as_ref().and_then(|source| source.text(&hit)))
    })
}

/// The exit code of a status, for the result payload.
pub(crate) fn exit_code(status: Option<ExitStatus>) -> Option<i32> {
    status.and_then(|s| s.code)
}

#[cfg(test)]
mod tests;
