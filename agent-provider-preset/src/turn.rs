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
use agent_provider_kit::permission_prompt::{PendingTool, ToolUseRequest, control_response};
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
    pub(crate) fn too_long(&mut self, len: usize, actions: &mut Vec<Action>) {
        let (count, longest) = self.too_long.unwrap_or_default();
        self.too_long = Some((count + 1, longest.max(len)));
        let (cli, max) = (&self.preset.id, self.preset.max_line_bytes);
        self.garbage(format!("{cli} wrote a stdout line of {len} bytes, over the {max}-byte limit; dropped"), actions);
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
            preset.matchers.keep.iter().filter_map(|(name, rules)| Some((name.clone(), first(rules, line)?))).collect()
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
            if self.continuing.as_ref().is_some_and(|asked| *asked != id) {
                self.foreign.get_or_insert(id);
            } else if let Some(problem) = agent_core::options::provider_conversation_problem(&id) {
                // Passed with the next turn's `resume` arguments, it would be read as an option.
                let message = format!(
                    "{} reported a session ID that {problem}; it is not taken (the next turn starts a new \
                     conversation)",
                    preset.id
                );
                actions.push(Action::Emit { kind: EventKind::Warning { message }, raw: None });
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

/// The value of the first rule that takes `line`: `Some(None)` for a rule that takes the line
/// but finds no value.
fn first(rules: &[Matcher], line: OutputLine<'_>) -> Option<Option<String>> {
    rules.iter().find_map(|rule| {
        let hit = rule.when.hit(line)?;
        Some(match (&rule.value, &rule.kept) {
            (Some(source), _) => source.text(&hit),
            (None, Some(name)) => line.kept.get(name).cloned(),
            (None, None) => None,
        })
    })
}

/// The exit code of a status, for the result payload.
pub(crate) fn exit_code(status: Option<ExitStatus>) -> Option<i32> {
    status.and_then(|s| s.code)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::AllowList;

    fn preset(json: Value) -> Preset {
        Preset::from_json(&json.to_string(), "test", &AllowList::new().allow("cli")).unwrap()
    }

    fn lines_preset() -> Preset {
        preset(json!({
            "schema_version": 1, "id": "lines", "program": "cli", "args": ["{prompt}"], "framing": "lines",
            "matchers": {
                "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
                "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}],
                "failure": [{"when": "^FAILED (?P<why>.*)$", "value": "why"}, {"when": "^FAILED$"}],
                "retry": [{"when": "^RETRYING"}]
            },
            "events": [{"when": "^SAY (?P<t>.*)$", "emit": "assistant_message", "text": "t"}],
            "other_lines": "drop"
        }))
    }

    fn feed(reader: &mut TurnReader<'_>, lines: &[&str]) -> Vec<Action> {
        let mut actions = Vec::new();
        for line in lines {
            reader.on_line(line, &|_| false, &mut actions);
        }
        actions
    }

    fn exit(code: i32) -> ExitReport {
        ExitReport::new(Some(ExitStatus::code(code)), Some("cli: bye".into()))
    }

    #[track_caller]
    fn check(lines: &[&str], code: i32, status: TurnStatus, reason: Option<&str>, text: Option<&str>) {
        let preset = lines_preset();
        let mut reader = TurnReader::new(&preset, None, None);
        feed(&mut reader, lines);
        let outcome = reader.outcome(&exit(code), None);
        assert_eq!(outcome.status, status, "{lines:?} exit {code}: {outcome:?}");
        match reason {
            Some(reason) => assert!(outcome.reason.as_deref().is_some_and(|r| r.contains(reason)), "{outcome:?}"),
            None => assert_eq!(outcome.reason, None),
        }
        assert_eq!(outcome.text.as_deref(), text);
    }

    /// A line over the cap may have been the reply (or a later one a rule would have kept): a
    /// turn that dropped one is not reported completed, and one without a result line says what
    /// was dropped.
    #[test]
    fn a_dropped_over_long_line_keeps_a_turn_from_completing_and_is_named() {
        let preset = lines_preset();
        let max = preset.max_line_bytes;
        let outcome = |lines: &[&str], code: i32| {
            let mut reader = TurnReader::new(&preset, None, None);
            let mut actions = Vec::new();
            reader.too_long(max + 10, &mut actions);
            reader.too_long(max + 5, &mut actions);
            assert_eq!(actions.len(), 2, "each dropped line is warned of");
            feed(&mut reader, lines);
            reader.outcome(&exit(code), None)
        };
        let named =
            format!("2 stdout line(s) over the {max}-byte limit (`max_line_bytes`), the longest {} bytes", max + 10);
        let after_result = outcome(&["RESULT done"], 0);
        assert_eq!(after_result.status, TurnStatus::Failed, "{after_result:?}");
        assert!(after_result.reason.as_deref().is_some_and(|r| r.contains(&named)), "{after_result:?}");
        let without = outcome(&["SAY hi"], 0);
        assert_eq!(without.status, TurnStatus::Failed);
        let reason = without.reason.unwrap_or_default();
        assert!(reason.contains("without a result line") && reason.contains(&named), "{reason}");
        let failed = outcome(&["FAILED out of credits"], 0);
        assert_eq!(failed.reason.as_deref(), Some("out of credits"), "a failure line says why itself");
    }

    /// A CLI that writes garbage without end makes a few dozen warnings, not one per line, and
    /// its result still counts.
    #[test]
    fn a_flood_of_unreadable_lines_is_warned_of_a_few_times() {
        let preset = preset(json!({
            "schema_version": 1, "id": "json", "program": "cli", "args": ["{prompt}"], "framing": "jsonl",
            "matchers": {"result": [{"when": {"/type": "result"}, "value": "/text"}]}
        }));
        let mut reader = TurnReader::new(&preset, None, None);
        let mut lines = vec!["not json {"; 1000];
        lines.push(r#"{"type": "result", "text": "done"}"#);
        let warnings: Vec<String> = feed(&mut reader, &lines)
            .into_iter()
            .filter_map(|action| match action {
                Action::Emit { kind: EventKind::Warning { message }, .. } => Some(message),
                _ => None,
            })
            .collect();
        assert_eq!(warnings.len(), 32 + 4, "the first 32, then at 64, 128, 256 and 512 lines");
        assert!(warnings[0].ends_with("is not JSON (10 bytes)"), "{}", warnings[0]);
        assert!(warnings[35].contains("(512 unreadable stdout lines so far;"), "{}", warnings[35]);
        let outcome = reader.outcome(&exit(0), None);
        assert_eq!((outcome.status, outcome.text.as_deref()), (TurnStatus::Completed, Some("done")));
    }

    #[test]
    fn the_exit_status_and_the_matchers_decide_together() {
        check(&["SAY hi", "RESULT done"], 0, TurnStatus::Completed, None, Some("done"));
        // Exit 0 with a failure line: the failure wins.
        check(&["RESULT done", "FAILED out of credits"], 0, TurnStatus::Failed, Some("out of credits"), Some("done"));
        // Exit 1 with a result line: not a clean finish; the text is kept.
        check(
            &["RESULT done"],
            1,
            TurnStatus::Failed,
            Some("lines exited (exit code 1) after its result line"),
            Some("done"),
        );
        check(&["SAY hi"], 0, TurnStatus::Failed, Some("without a result line; stderr:\ncli: bye"), None);
        check(&[], 3, TurnStatus::Failed, Some("exit code 3"), None);
        // A failure line without a reason: the CLI's stderr has it.
        check(
            &["FAILED"],
            1,
            TurnStatus::Failed,
            Some("lines reported a failure (exit code 1); stderr:\ncli: bye"),
            None,
        );
        // A retry takes back what was reported before it: the outcome is what follows.
        check(&["FAILED overloaded", "RETRYING", "RESULT done"], 0, TurnStatus::Completed, None, Some("done"));
        check(&["FAILED overloaded", "RETRYING", "FAILED again"], 0, TurnStatus::Failed, Some("again"), None);
        check(&["RESULT early", "RETRYING"], 0, TurnStatus::Failed, Some("without a result line"), None);
        let preset = lines_preset();
        let mut reader = TurnReader::new(&preset, None, None);
        feed(&mut reader, &["FAILED overloaded"]);
        assert!(reader.finished());
        feed(&mut reader, &["RETRYING in 2 s"]);
        assert!(!reader.finished(), "the wait for the exit starts again at the next outcome");
        assert_eq!(reader.outcome(&exit(0), Some("stopped")).status, TurnStatus::Interrupted);
    }

    #[test]
    fn lines_become_events_and_the_session_id_is_found_once() {
        let preset = lines_preset();
        let mut reader = TurnReader::new(&preset, Some("old".into()), None);
        let actions = feed(&mut reader, &["SESSION s-1", "SAY hello there", "noise", "SESSION s-1", "RESULT ok"]);
        let summary: Vec<String> = actions
            .iter()
            .map(|a| match a {
                Action::Emit { kind: EventKind::AssistantMessage { text, .. }, raw } => {
                    format!("say {text} {}", raw.as_ref().map(|r| r.get()).unwrap_or_default())
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(summary, ["say hello there \"SAY hello there\""]);
        assert_eq!(reader.session_id(), Some("s-1"));
        assert!(reader.finished());
        let mut cut = TurnReader::new(&preset, None, None);
        feed(&mut cut, &["SESSION s-2", "SAY working"]);
        assert_eq!((cut.session_id(), cut.finished()), (Some("s-2"), false));
    }

    #[test]
    fn a_continued_conversation_reported_as_another_fails_the_turn_without_taking_it() {
        let resuming = preset(json!({
            "schema_version": 1, "id": "lines", "program": "cli", "framing": "lines",
            "args": [{"if": "resume", "then": ["--resume", "{session_id}"]}, "{prompt}"],
            "matchers": {
                "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
                "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]
            },
            "other_lines": "drop"
        }));
        let mut reader = TurnReader::new(&resuming, Some("s-1".into()), None);
        feed(&mut reader, &["SESSION s-1"]);
        assert_eq!(reader.foreign(), None, "the conversation asked for");
        feed(&mut reader, &["SESSION s-2", "RESULT done"]);
        assert_eq!((reader.foreign(), reader.session_id()), (Some("s-2"), Some("s-1")));
        let outcome = reader.outcome(&exit(0), None);
        assert_eq!(outcome.status, TurnStatus::Failed);
        let reason = outcome.reason.unwrap_or_default();
        assert!(reason.contains("asked to continue conversation `s-1` but reported `s-2`"), "{reason}");

        // An ID that would pass as an option of the CLI's is not taken, whatever the CLI says.
        let mut fresh = TurnReader::new(&resuming, None, None);
        let actions = feed(&mut fresh, &["SESSION --version", "RESULT done"]);
        assert_eq!(fresh.session_id(), None);
        assert!(
            matches!(&actions[..], [Action::Emit { kind: EventKind::Warning { message }, .. }]
                if message.contains("must not start with `-`")),
            "{actions:?}"
        );
        // Nor one too long to pass back as one argument: every later turn's spawn would fail.
        let mut fresh = TurnReader::new(&resuming, None, None);
        let long = format!("SESSION {}", "s".repeat(200_000));
        let actions = feed(&mut fresh, &[&long, "RESULT done"]);
        assert_eq!(fresh.session_id(), None);
        assert!(
            matches!(&actions[..], [Action::Emit { kind: EventKind::Warning { message }, .. }]
                if message.contains("longer than 4096 bytes") && message.len() < 200),
            "{actions:?}"
        );
        let mut total = None;
        let mut huge = Usage::default();
        huge.input_tokens = Some(u64::MAX);
        add_usage(&mut total, &huge);
        add_usage(&mut total, &huge);
        assert_eq!(total.and_then(|u| u.input_tokens), Some(u64::MAX), "saturates");

        // A preset that never continues a conversation starts a fresh one each turn, by design.
        let lines = lines_preset();
        let mut fresh = TurnReader::new(&lines, Some("s-1".into()), None);
        feed(&mut fresh, &["SESSION s-2"]);
        assert_eq!((fresh.foreign(), fresh.session_id()), (None, Some("s-2")));
    }

    fn shipped(name: &str) -> Preset {
        let text = crate::SHIPPED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("shipped");
        Preset::from_json(text, name, &AllowList::shipped()).unwrap()
    }

    /// Claude's approval conversation, from lines claude 2.1.197 wrote: the tool use becomes a
    /// request with its metadata, other control requests are refused, a withdrawn request is
    /// resolved, and stdin closes after the result.
    #[test]
    fn claudes_permission_prompt_becomes_requests() {
        let preset = shipped("claude-print.json");
        let meta =
            ApprovalMeta { risk: Some("high".into()), audience: Some("ops".into()), timeout: Duration::from_secs(9) };
        let mut reader = TurnReader::new(&preset, None, Some(meta));
        let lines = [
            r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"61cf009a","tools":["Bash"]}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"touch x"}}]},"session_id":"61cf009a"}"#,
            r#"{"type":"control_request","request_id":"req-a","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"touch x"},"tool_use_id":"toolu_1"}}"#,
            r#"{"type":"control_request","request_id":"req-b","request":{"subtype":"hook_callback","callback_id":"hook_0"}}"#,
            r#"{"type":"control_cancel_request","request_id":"req-a"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"denied","is_error":true,"tool_use_id":"toolu_1"}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"61cf009a","total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5}}"#,
        ];
        let mut actions = Vec::new();
        for line in lines {
            reader.on_line(line, &|id| id == "toolu_1", &mut actions);
        }
        let mut seen = Vec::new();
        for action in &actions {
            seen.push(match action {
                Action::Emit { kind, .. } => kind.type_name().to_owned(),
                Action::Request { spec, pending, .. } => {
                    assert_eq!(spec.metadata["risk"], "high");
                    assert_eq!(spec.metadata["audience"], "ops");
                    assert_eq!(spec.metadata["timeout_ms"], 9000);
                    assert_eq!(spec.timeout, Some(Duration::from_secs(9)));
                    assert_eq!(spec.scopes, [agent_core::Scope::Once]);
                    format!("request {} {}", spec.kind, pending.request_id)
                }
                Action::Write(line) => format!("write {}", line["response"]["subtype"].as_str().unwrap_or_default()),
                Action::Resolved(r) => format!("resolved {}", r.0),
                Action::CloseStdin => "close stdin".to_owned(),
            });
        }
        assert_eq!(
            seen,
            [
                "provider_event",
                "tool_started",
                "request command_approval req-a",
                "write error",
                "resolved req-a",
                "tool_completed",
                "usage_updated",
                "close stdin",
            ]
        );
        let declined = actions.iter().any(|a| {
            matches!(
                a,
                Action::Emit {
                    kind: EventKind::ToolCompleted { status: agent_core::event::ToolStatus::Declined, .. },
                    ..
                }
            )
        });
        assert!(declined, "a denied tool use completes as declined");
        assert_eq!(reader.session_id(), Some("61cf009a"));
        let outcome = reader.outcome(&exit(0), None);
        assert_eq!((outcome.status, outcome.text.as_deref()), (TurnStatus::Completed, Some("Done.")));
        assert_eq!(outcome.usage.and_then(|u| u.cost_usd), Some(0.01));
    }

    /// A CLI that numbers its control requests is answered under the numbers; one without an ID
    /// it could match an answer with gets a warning instead of an answer under `""`.
    #[test]
    fn numbered_control_requests_are_answered_under_their_numbers() {
        let preset = shipped("claude-print.json");
        let meta = ApprovalMeta { risk: None, audience: None, timeout: Duration::from_secs(9) };
        let mut reader = TurnReader::new(&preset, None, Some(meta));
        let lines = [
            r#"{"type":"control_request","request_id":7,"request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}"#,
            r#"{"type":"control_request","request_id":8,"request":{"subtype":"hook_callback","callback_id":"hook_0"}}"#,
            r#"{"type":"control_cancel_request","request_id":7}"#,
            r#"{"type":"control_request","request_id":null,"request":{"subtype":"hook_callback","callback_id":"hook_1"}}"#,
        ];
        let mut actions = Vec::new();
        for line in lines {
            reader.on_line(line, &|_| false, &mut actions);
        }
        let seen: Vec<String> = actions
            .iter()
            .map(|action| match action {
                Action::Request { pending, .. } => format!("request {}", pending.request_id.to_json()),
                Action::Write(line) => {
                    format!("write {} {}", line["response"]["subtype"], line["response"]["request_id"])
                }
                Action::Resolved(r) => format!("resolved {}", r.0),
                Action::Emit { kind, .. } => kind.type_name().to_owned(),
                Action::CloseStdin => "close stdin".to_owned(),
            })
            .collect();
        assert_eq!(seen, ["request 7", "write \"error\" 8", "resolved 7", "warning"]);
    }

    /// Pi's run ends at its last `agent_end`: one that says no retry follows (0.75.4 and later;
    /// from 0.80.4 `agent_settled` confirms it), or 0.73.1's, which says nothing, unless an
    /// `auto_retry_start` or a run pi continues with (`agent_start`) takes it back. From 0.75.4 a
    /// compaction after it takes it back too (pi may continue the run), and its end decides when
    /// no run follows; 0.73.1 does not wait for a compaction before it exits. The last assistant
    /// message decides.
    #[test]
    fn pis_run_end_decides() {
        let preset = shipped("pi-print.json");
        let error = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"500: overloaded","usage":{"input":1,"output":0}}}"#;
        let retried = r#"{"type":"agent_end","messages":[],"willRetry":true}"#;
        let good = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Hi"}],"stopReason":"stop","usage":{"input":3,"output":2,"cost":{"total":0.5}}}}"#;
        let end = r#"{"type":"agent_end","messages":[],"willRetry":false}"#;
        let settled = r#"{"type":"agent_settled","aborted":false}"#;
        let old_end = r#"{"type":"agent_end","messages":[]}"#;
        let retry = r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000}"#;
        let compacting = r#"{"type":"compaction_start","reason":"threshold"}"#;
        let compacted = r#"{"type":"compaction_end","reason":"threshold","aborted":false,"willRetry":false}"#;
        let continues = r#"{"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":true}"#;
        let outcome = |lines: &[&str]| {
            let mut reader = TurnReader::new(&preset, None, None);
            feed(&mut reader, lines);
            (reader.finished(), reader.outcome(&exit(0), None))
        };

        let (finished, _) = outcome(&[error, retried]);
        assert!(!finished, "a retry follows");
        let (finished, done) = outcome(&[r#"{"type":"session","version":3,"id":"01a2"}"#, error, retried, good, end]);
        assert!(finished, "0.75.4 to 0.80.3 send nothing after it");
        assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");
        let (finished, _) = outcome(&[good, end, compacting]);
        assert!(!finished, "a compaction may continue the run");
        let (finished, _) = outcome(&[good, end, r#"{"type":"agent_start"}"#]);
        assert!(!finished, "a run pi continues with (for queued messages, say) takes it back");
        let (finished, done) = outcome(&[good, end, compacting, compacted]);
        assert!(finished);
        assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");
        let (finished, _) = outcome(&[error, end, compacting, continues]);
        assert!(!finished, "the run continues after the compaction");
        let (_, done) = outcome(&[error, end, compacting, continues, r#"{"type":"agent_start"}"#, good, end]);
        assert_eq!((done.status, done.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{done:?}");

        let (finished, recovered) = outcome(&[error, retried, good, end, settled]);
        assert!(finished);
        assert_eq!((recovered.status, recovered.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{recovered:?}");
        let usage = recovered.usage.expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens, usage.cost_usd), (Some(4), Some(2), Some(0.5)), "summed");
        let (_, failed) = outcome(&[error, end, settled]);
        assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));

        // 0.73.1: its `agent_end` ends the run, unless a retry follows.
        let (finished, failed) = outcome(&[error, old_end]);
        assert!(finished);
        assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));
        let (finished, _) = outcome(&[error, old_end, retry]);
        assert!(!finished, "the retry takes the failure back");
        let (finished, failed) = outcome(&[error, old_end, compacting]);
        assert!(finished, "0.73.1 exits without finishing a compaction");
        assert_eq!((failed.status, failed.reason.as_deref()), (TurnStatus::Failed, Some("500: overloaded")));
        let (_, recovered) = outcome(&[error, old_end, retry, good, old_end]);
        assert_eq!((recovered.status, recovered.text.as_deref()), (TurnStatus::Completed, Some("Hi")), "{recovered:?}");
    }
}
