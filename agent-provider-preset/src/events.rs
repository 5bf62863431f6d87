//! The `events` rules of a preset: which output lines become live events, and how.
//!
//! ```json
//! {"when": {"/type": "item.completed", "/item/type": "agent_message"}, "emit": "assistant_message", "text": "/item/text"}
//! ```
//!
//! The first rule that takes a line decides, unless it says `"continue": true`: then the rules
//! after it see the line too (one line, several events: a message and its usage). A line no rule
//! takes follows `other_lines` (`provider_event`, the default, or `drop`). Every event keeps the line as its raw JSON (a
//! `lines` line as a JSON string).

use agent_core::event::{ToolKind, ToolStatus, Usage};
use agent_core::{EventKind, ItemId};
use serde_json::{Map, Value};

use crate::error::Problem;
use crate::matcher::{Framing, Hit, OutputLine, Source, When};

/// What a rule makes of a line.
#[derive(Clone, Debug)]
pub(crate) enum Emit {
    MessageDelta {
        text: Source,
        item_id: Option<Source>,
    },
    AssistantMessage {
        text: Source,
        item_id: Option<Source>,
    },
    ReasoningDelta {
        text: Source,
        item_id: Option<Source>,
    },
    ToolStarted {
        item_id: Source,
        name: Source,
        input: Option<Source>,
        tool: ToolKind,
    },
    ToolCompleted {
        item_id: Source,
        output: Option<Source>,
        exit_code: Option<Source>,
        failed_when: Option<When>,
    },
    Warning {
        message: Source,
    },
    ProviderError {
        message: Source,
        code: Option<Source>,
    },
    Usage {
        input: Option<Source>,
        output: Option<Source>,
        cached: Option<Source>,
        total: Option<Source>,
        cost: Option<Source>,
    },
    ProviderEvent {
        method: Option<Source>,
    },
    Drop,
}

/// The `emit` names and the fields each takes (required ones first, marked `!`).
const EMITS: &[(&str, &[&str])] = &[
    ("message_delta", &["!text", "item_id"]),
    ("assistant_message", &["!text", "item_id"]),
    ("reasoning_delta", &["!text", "item_id"]),
    ("tool_started", &["!item_id", "!name", "input", "tool"]),
    ("tool_completed", &["!item_id", "output", "exit_code", "failed_when"]),
    ("warning", &["!message"]),
    ("provider_error", &["!message", "code"]),
    ("usage", &["input_tokens", "output_tokens", "cached_input_tokens", "total_tokens", "cost_usd"]),
    ("provider_event", &["method"]),
    ("drop", &[]),
];

/// One `events` rule.
#[derive(Clone, Debug)]
pub(crate) struct EventRule {
    pub(crate) when: When,
    pub(crate) emit: Emit,
    /// Later rules see the line too.
    pub(crate) continues: bool,
}

impl EventRule {
    /// Parses the rule at `path`.
    pub(crate) fn parse(value: &Value, framing: Framing, path: &str) -> Result<EventRule, Problem> {
        let Value::Object(map) = value else {
            return Err(Problem::new(path, "expected an object with `when` and `emit`"));
        };
        let when = match map.get("when") {
            Some(when) => When::parse(when, framing, &format!("{path}.when"))?,
            None => return Err(Problem::new(format!("{path}.when"), "missing field (which lines)")),
        };
        let names: Vec<&str> = EMITS.iter().map(|(n, _)| *n).collect();
        let emit = match map.get("emit") {
            Some(Value::String(emit)) => emit.as_str(),
            Some(_) => {
                return Err(Problem::new(format!("{path}.emit"), format!("expected one of {}", names.join(", "))));
            }
            None => return Err(Problem::new(format!("{path}.emit"), "missing field (which event)")),
        };
        let Some((_, fields)) = EMITS.iter().find(|(n, _)| *n == emit) else {
            return Err(Problem::new(
                format!("{path}.emit"),
                format!("unknown event (expected one of {})", names.join(", ")),
            ));
        };
        let continues = match map.get("continue") {
            None => false,
            Some(Value::Bool(yes)) if emit != "drop" => *yes,
            Some(Value::Bool(_)) => {
                return Err(Problem::new(format!("{path}.continue"), "a `drop` rule always decides"));
            }
            Some(_) => return Err(Problem::new(format!("{path}.continue"), "expected true or false")),
        };
        for key in map.keys().filter(|k| !matches!(k.as_str(), "when" | "emit" | "continue")) {
            if !fields.iter().any(|f| f.trim_start_matches('!') == key) {
                let allowed: Vec<&str> = fields.iter().map(|f| f.trim_start_matches('!')).collect();
                return Err(Problem::new(
                    format!("{path}.{key}"),
                    format!(
                        "unknown field for `{emit}` (it takes {})",
                        if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") }
                    ),
                ));
            }
        }
        for required in fields.iter().filter_map(|f| f.strip_prefix('!')) {
            if !map.contains_key(required) {
                return Err(Problem::new(format!("{path}.{required}"), format!("missing field (`{emit}` needs it)")));
            }
        }
        let fields = Fields { map, framing, when: &when, path };
        let emit = match emit {
            "message_delta" => Emit::MessageDelta {
                text: fields.source("text")?.expect("required"),
                item_id: fields.source("item_id")?,
            },
            "assistant_message" => Emit::AssistantMessage {
                text: fields.source("text")?.expect("required"),
                item_id: fields.source("item_id")?,
            },
            "reasoning_delta" => Emit::ReasoningDelta {
                text: fields.source("text")?.expect("required"),
                item_id: fields.source("item_id")?,
            },
            "tool_started" => Emit::ToolStarted {
                item_id: fields.source("item_id")?.expect("required"),
                name: fields.source("name")?.expect("required"),
                input: fields.source("input")?,
                tool: fields.tool_kind()?,
            },
            "tool_completed" => Emit::ToolCompleted {
                item_id: fields.source("item_id")?.expect("required"),
                output: fields.source("output")?,
                exit_code: fields.source("exit_code")?,
                failed_when: map
                    .get("failed_when")
                    .map(|w| When::parse(w, framing, &format!("{path}.failed_when")))
                    .transpose()?,
            },
            "warning" => Emit::Warning { message: fields.source("message")?.expect("required") },
            "provider_error" => Emit::ProviderError {
                message: fields.source("message")?.expect("required"),
                code: fields.source("code")?,
            },
            "usage" => {
                let usage = Emit::Usage {
                    input: fields.source("input_tokens")?,
                    output: fields.source("output_tokens")?,
                    cached: fields.source("cached_input_tokens")?,
                    total: fields.source("total_tokens")?,
                    cost: fields.source("cost_usd")?,
                };
                // Counted by name: `continue` is no field of the usage.
                let (_, fields) = EMITS.iter().find(|(name, _)| *name == "usage").expect("usage is an emit");
                if !fields.iter().any(|field| map.contains_key(*field)) {
                    return Err(Problem::new(path, "`usage` takes at least one of its fields"));
                }
                usage
            }
            "provider_event" => Emit::ProviderEvent { method: fields.source("method")? },
            _ => Emit::Drop,
        };
        Ok(EventRule { when, emit, continues })
    }
}

/// The fields of one rule, read with their paths.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    framing: Framing,
    when: &'a When,
    path: &'a str,
}

impl Fields<'_> {
    fn source(&self, key: &str) -> Result<Option<Source>, Problem> {
        self.map
            .get(key)
            .map(|value| Source::parse(value, self.framing, self.when, &format!("{}.{key}", self.path)))
            .transpose()
    }

    fn tool_kind(&self) -> Result<ToolKind, Problem> {
        let kinds = [
            ("command", ToolKind::Command),
            ("file_change", ToolKind::FileChange),
            ("mcp", ToolKind::Mcp),
            ("web", ToolKind::Web),
            ("other", ToolKind::Other),
        ];
        match self.map.get("tool") {
            None => Ok(ToolKind::Other),
            Some(Value::String(name)) => kinds.iter().find(|(n, _)| n == name).map(|(_, k)| *k).ok_or_else(|| {
                Problem::new(format!("{}.tool", self.path), "expected command, file_change, mcp, web or other")
            }),
            Some(_) => {
                Err(Problem::new(format!("{}.tool", self.path), "expected command, file_change, mcp, web or other"))
            }
        }
    }
}

impl Emit {
    /// True for rules that emit `kind`-named events (`message_delta`, `usage`, …).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Emit::MessageDelta { .. } => "message_delta",
            Emit::AssistantMessage { .. } => "assistant_message",
            Emit::ReasoningDelta { .. } => "reasoning_delta",
            Emit::ToolStarted { .. } => "tool_started",
            Emit::ToolCompleted { .. } => "tool_completed",
            Emit::Warning { .. } => "warning",
            Emit::ProviderError { .. } => "provider_error",
            Emit::Usage { .. } => "usage",
            Emit::ProviderEvent { .. } => "provider_event",
            Emit::Drop => "drop",
        }
    }

    /// The event for a line this rule took; `None` for `drop`, or when a value the event needs
    /// is not on the line, or for `usage` none of its values is (the line then goes on to the
    /// next rule, and at the end to `other_lines`). A number (a count, a cost, an exit code)
    /// may be written as a string that holds one, as a regex group always is. `declined` says
    /// whether a tool's use was refused through the approval conversation.
    pub(crate) fn event(
        &self,
        hit: &Hit<'_>,
        line: OutputLine<'_>,
        declined: &dyn Fn(&str) -> bool,
    ) -> Option<EventKind> {
        let text = |s: &Source| s.text(hit);
        let opt = |s: &Option<Source>| s.as_ref().and_then(text);
        let item = |s: &Option<Source>| opt(s).map(ItemId::from);
        Some(match self {
            Emit::MessageDelta { text: t, item_id } => {
                EventKind::MessageDelta { item_id: item(item_id), text: text(t)?.into() }
            }
            Emit::AssistantMessage { text: t, item_id } => {
                EventKind::AssistantMessage { item_id: item(item_id), text: text(t)? }
            }
            Emit::ReasoningDelta { text: t, item_id } => {
                EventKind::ReasoningDelta { item_id: item(item_id), text: text(t)?.into() }
            }
            Emit::ToolStarted { item_id, name, input, tool } => EventKind::ToolStarted {
                item_id: ItemId::from(text(item_id)?),
                tool: *tool,
                name: text(name)?,
                input: input.as_ref().and_then(|s| s.json(hit)),
            },
            Emit::ToolCompleted { item_id, output, exit_code, failed_when } => {
                let item_id = text(item_id)?;
                let status = if declined(&item_id) {
                    ToolStatus::Declined
                } else if failed_when.as_ref().is_some_and(|w| w.hit(line).is_some()) {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                };
                let exit_code = exit_code.as_ref().and_then(|s| s.json(hit)).as_ref().and_then(integer);
                EventKind::ToolCompleted { item_id: ItemId::from(item_id), status, output: opt(output), exit_code }
            }
            Emit::Warning { message } => EventKind::Warning { message: text(message)? },
            Emit::ProviderError { message, code } => {
                EventKind::ProviderError { message: text(message)?, code: opt(code), will_retry: None }
            }
            Emit::Usage { input, output, cached, total, cost } => {
                EventKind::UsageUpdated(Box::new(usage(hit, [input, output, cached, total], cost)?))
            }
            Emit::ProviderEvent { method } => {
                EventKind::ProviderEvent { method: opt(method).unwrap_or_else(|| "line".to_owned()) }
            }
            Emit::Drop => return None,
        })
    }
}

/// The usage a `usage` rule reads; `None` when none of its values is on the line (the rule then
/// does not take it).
fn usage(hit: &Hit<'_>, counts: [&Option<Source>; 4], cost: &Option<Source>) -> Option<Usage> {
    let read = |s: &Option<Source>| s.as_ref().and_then(|s| s.json(hit));
    let tokens = |s: &Option<Source>| read(s).as_ref().and_then(count);
    let mut usage = Usage::default();
    usage.input_tokens = tokens(counts[0]);
    usage.output_tokens = tokens(counts[1]);
    usage.cached_input_tokens = tokens(counts[2]);
    usage.total_tokens = tokens(counts[3]).or_else(|| Some(usage.input_tokens?.saturating_add(usage.output_tokens?)));
    usage.cost_usd = read(cost).as_ref().and_then(float);
    (usage != Usage::default()).then_some(usage)
}

/// A count: a JSON number that is a whole number of at least 0, or a string of decimal digits
/// (a regex group, or a CLI that writes its numbers as strings). Anything else is missing.
fn count(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text.parse().ok(),
        value => value.as_u64(),
    }
}

/// An amount such as a cost: a JSON number, or a string holding a finite number (`0.25`).
fn float(value: &Value) -> Option<f64> {
    match value {
        Value::String(text) => text.parse::<f64>().ok().filter(|amount| amount.is_finite()),
        value => value.as_f64(),
    }
}

/// An exit code: a JSON number, or a string of decimal digits with an optional leading minus,
/// that fits an `i32`.
fn integer(value: &Value) -> Option<i32> {
    let code = match value {
        Value::String(text) => {
            let digits = text.strip_prefix('-').unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text.parse::<i64>().ok()?
        }
        value => value.as_i64()?,
    };
    i32::try_from(code).ok()
}

/// What happens to a line no `events` rule takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtherLines {
    /// A `provider_event` named by the line's `/type` (`jsonl`) or `line`.
    #[default]
    ProviderEvent,
    /// Not shown (still read by the matchers).
    Drop,
}

/// The `provider_event` method of a line no rule took.
pub(crate) fn other_method(line: OutputLine<'_>) -> String {
    line.json.and_then(|j| j.get("type")).and_then(Value::as_str).map_or_else(|| "line".to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(value: Value) -> EventRule {
        EventRule::parse(&value, Framing::Jsonl, "events[0]").unwrap()
    }

    fn apply(rule: &EventRule, line: &Value) -> Option<EventKind> {
        let text = line.to_string();
        let kept = std::collections::HashMap::new();
        let out = OutputLine { text: &text, json: Some(line), kept: &kept };
        let hit = rule.when.hit(out)?;
        rule.emit.event(&hit, out, &|id| id == "denied")
    }

    #[test]
    fn rules_build_events_from_the_line() {
        let message = rule(
            json!({"when": {"/type": "assistant"}, "emit": "assistant_message", "text": "/message/content", "item_id": "/message/id"}),
        );
        let line = json!({"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "Hi"}]}});
        assert_eq!(
            apply(&message, &line),
            Some(EventKind::AssistantMessage { item_id: Some("m1".into()), text: "Hi".into() })
        );
        assert_eq!(apply(&message, &json!({"type": "user"})), None);

        let done = rule(
            json!({"when": {"/type": "done"}, "emit": "tool_completed", "item_id": "/id", "output": "/out", "exit_code": "/code", "failed_when": {"/code": {"not": 0}}}),
        );
        assert_eq!(
            apply(&done, &json!({"type": "done", "id": "t1", "out": "ok", "code": 0})),
            Some(EventKind::ToolCompleted {
                item_id: "t1".into(),
                status: ToolStatus::Completed,
                output: Some("ok".into()),
                exit_code: Some(0)
            })
        );
        let failed = apply(&done, &json!({"type": "done", "id": "t1", "code": 2}));
        assert!(matches!(
            failed,
            Some(EventKind::ToolCompleted { status: ToolStatus::Failed, exit_code: Some(2), .. })
        ));
        let declined = apply(&done, &json!({"type": "done", "id": "denied", "code": 1}));
        assert!(matches!(declined, Some(EventKind::ToolCompleted { status: ToolStatus::Declined, .. })));

        let usage = rule(
            json!({"when": {"/type": "turn.completed"}, "emit": "usage", "input_tokens": "/usage/input_tokens", "output_tokens": "/usage/output_tokens"}),
        );
        match apply(&usage, &json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}})) {
            Some(EventKind::UsageUpdated(usage)) => assert_eq!(*usage, Usage::tokens(10, 5)),
            other => panic!("{other:?}"),
        }
        let hidden = rule(json!({"when": {"/type": "noise"}, "emit": "drop"}));
        assert_eq!(apply(&hidden, &json!({"type": "noise"})), None);
        let started = rule(
            json!({"when": {"/type": "s"}, "emit": "tool_started", "item_id": "/id", "name": "/n", "input": "/i", "tool": "command"}),
        );
        assert_eq!(
            apply(&started, &json!({"type": "s", "id": "t", "n": "Bash", "i": {"command": "ls"}})),
            Some(EventKind::ToolStarted {
                item_id: "t".into(),
                tool: ToolKind::Command,
                name: "Bash".into(),
                input: Some(json!({"command": "ls"}))
            })
        );
    }

    /// Regex groups are strings, and some CLIs write their numbers as strings: a string that
    /// holds a number is read as that number; one that does not is missing.
    #[test]
    fn numbers_are_read_from_strings_that_hold_them() {
        let usage = EventRule::parse(
            &json!({"when": r"^USAGE (?P<in>\S+) (?P<out>\S+) \$(?P<cost>\S+)$", "emit": "usage",
                "input_tokens": "in", "output_tokens": "out", "cost_usd": "cost"}),
            Framing::Lines,
            "events[0]",
        )
        .unwrap();
        let read = |text: &str| {
            let kept = std::collections::HashMap::new();
            let out = OutputLine { text, json: None, kept: &kept };
            let hit = usage.when.hit(out).expect("the line matches");
            match usage.emit.event(&hit, out, &|_| false) {
                Some(EventKind::UsageUpdated(usage)) => Some(*usage),
                None => None,
                other => panic!("{other:?}"),
            }
        };
        let mut expected = Usage::tokens(10, 5);
        expected.cost_usd = Some(0.25);
        assert_eq!(read("USAGE 10 5 $0.25"), Some(expected));
        let partial = read("USAGE 10 five $free").expect("one value is there");
        assert_eq!((partial.input_tokens, partial.output_tokens, partial.total_tokens), (Some(10), None, None));
        assert_eq!(partial.cost_usd, None);
        for not_numbers in ["USAGE -3 +4 $NaN", "USAGE 1e3 0x10 $inf", "USAGE ten five $free"] {
            assert_eq!(read(not_numbers), None, "{not_numbers}: no value, so the rule does not take the line");
        }

        let counted = rule(
            json!({"when": {"/type": "turn.completed"}, "emit": "usage", "input_tokens": "/usage/input_tokens", "output_tokens": "/usage/output_tokens", "cost_usd": "/cost"}),
        );
        let line =
            json!({"type": "turn.completed", "usage": {"input_tokens": "123", "output_tokens": 7}, "cost": "0.5"});
        let mut expected = Usage::tokens(123, 7);
        expected.cost_usd = Some(0.5);
        assert_eq!(apply(&counted, &line), Some(EventKind::UsageUpdated(Box::new(expected))));

        let done =
            rule(json!({"when": {"/type": "done"}, "emit": "tool_completed", "item_id": "/id", "exit_code": "/code"}));
        let exit_code = |code: Value| match apply(&done, &json!({"type": "done", "id": "t1", "code": code})) {
            Some(EventKind::ToolCompleted { exit_code, .. }) => exit_code,
            other => panic!("{other:?}"),
        };
        assert_eq!(exit_code(json!("2")), Some(2));
        assert_eq!(exit_code(json!("-1")), Some(-1));
        assert_eq!(exit_code(json!(-1)), Some(-1));
        for bad in [json!("two"), json!(""), json!("-"), json!("+2"), json!(" 2"), json!("99999999999")] {
            assert_eq!(exit_code(bad.clone()), None, "{bad}");
        }
    }

    /// A `usage` rule none of whose values is on the line does not take it: the line goes on
    /// to the next rule, as with any rule whose value is missing.
    #[test]
    fn a_usage_rule_without_any_of_its_values_passes_the_line_on() {
        let usage = rule(
            json!({"when": {"/type": "turn.completed"}, "emit": "usage", "input_tokens": "/usage/input_tokens", "cost_usd": "/cost"}),
        );
        assert_eq!(apply(&usage, &json!({"type": "turn.completed"})), None);
        assert_eq!(apply(&usage, &json!({"type": "turn.completed", "usage": {"input_tokens": null}})), None);
        assert!(matches!(
            apply(&usage, &json!({"type": "turn.completed", "cost": 0.1})),
            Some(EventKind::UsageUpdated(_))
        ));
    }

    #[track_caller]
    fn refused(value: Value, path: &str, says: &str) {
        let problem = EventRule::parse(&value, Framing::Jsonl, "events[0]").expect_err("refused");
        assert_eq!(problem.path, path, "{problem:?}");
        assert!(problem.message.contains(says), "{problem:?}");
    }

    #[test]
    fn bad_rules_name_the_field() {
        refused(json!({"emit": "warning", "message": "/m"}), "events[0].when", "missing field");
        refused(json!({"when": {"/t": 1}}), "events[0].emit", "missing field");
        refused(json!({"when": {"/t": 1}, "emit": "shout"}), "events[0].emit", "unknown event (expected one of");
        refused(json!({"when": {"/t": 1}, "emit": "warning"}), "events[0].message", "missing field");
        // `continue` is not one of the usage's fields.
        for usage in
            [json!({"when": {"/t": 1}, "emit": "usage"}), json!({"when": {"/t": 1}, "emit": "usage", "continue": true})]
        {
            refused(usage, "events[0]", "`usage` takes at least one of its fields");
        }
        refused(
            json!({"when": {"/t": 1}, "emit": "warning", "message": "/m", "text": "/t"}),
            "events[0].text",
            "unknown field for `warning`",
        );
        refused(
            json!({"when": {"/t": 1}, "emit": "warning", "message": "m"}),
            "events[0].message",
            "not a JSON pointer",
        );
        refused(json!({"when": {"/t": 1}, "emit": "usage"}), "events[0]", "at least one");
        refused(
            json!({"when": {"/t": 1}, "emit": "tool_started", "item_id": "/i", "name": "/n", "tool": "hammer"}),
            "events[0].tool",
            "expected command",
        );
        refused(
            json!({"when": {"/t": 1}, "emit": "tool_completed", "item_id": "/i", "failed_when": {"/x": {"matches": "("}}}),
            "events[0].failed_when./x.matches",
            "invalid regex",
        );
        refused(json!(["when"]), "events[0]", "expected an object");
    }
}
