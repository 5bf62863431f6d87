//! How events reach the terminal: one JSON line each (`--json`), or a readable stream of the
//! assistant's text with tool calls, requests and turn ends on lines of their own.

use std::collections::HashSet;
use std::io::{self, Write};
use std::time::Duration;

use agent_harness::event::{ExpiryReason, ToolStatus};
use agent_harness::{Event, EventKind, ItemId, Response, StoreFailurePolicy};
use serde_json::Value;

/// Writes events to stdout (through [`crate::output`]), each whole as it comes, so a reader sees
/// them as they happen.
#[derive(Debug)]
pub(crate) enum Renderer {
    /// The stable event JSON, one line each.
    Json,
    /// Text for a person.
    Human(Human),
}

impl Renderer {
    /// A renderer for `--json` (`json`) or for a person; `spinner` shows the time a turn takes
    /// (for a terminal).
    pub(crate) fn new(json: bool, spinner: bool) -> Renderer {
        if json { Renderer::Json } else { Renderer::Human(Human { spinner, ..Human::default() }) }
    }

    /// Writes one event. An error means stdout is gone (a closed pipe).
    pub(crate) fn event(&mut self, event: &Event) -> io::Result<()> {
        let mut out = Vec::new();
        match self {
            Renderer::Json => {
                serde_json::to_writer(&mut out, event)?;
                out.write_all(b"\n")?;
            }
            Renderer::Human(human) => {
                human.clear_spinner(&mut out)?;
                human.event(&mut out, event)?;
            }
        }
        crate::output::write(out)
    }

    /// Human mode on a terminal: shows that the agent works and for how long, on a line of its
    /// own that the next output replaces. Elsewhere it does nothing, and while earlier output
    /// waits to be written.
    pub(crate) fn tick(&mut self, elapsed: Duration) -> io::Result<()> {
        let Renderer::Human(human) = self else { return Ok(()) };
        if !human.spinner || !human.line_start || crate::output::pending() > 0 {
            return Ok(());
        }
        let frame = SPINNER[human.frame % SPINNER.len()];
        human.frame += 1;
        human.spinning = true;
        crate::output::write(format!("\r\x1b[2K{frame} working {:.0}s", elapsed.as_secs_f64()).into_bytes())
    }

    /// Ends the line a prompt that was given up left open.
    pub(crate) fn line_break(&mut self) -> io::Result<()> {
        let Renderer::Human(_) = self else { return Ok(()) };
        crate::output::write(b"\n".to_vec())
    }

    /// Human mode: a line of its own about the run (`↳ text`), not from an event. `--json`
    /// writes events only.
    pub(crate) fn note(&mut self, text: &str) -> io::Result<()> {
        let Renderer::Human(human) = self else { return Ok(()) };
        let mut out = Vec::new();
        human.clear_spinner(&mut out)?;
        writeln!(out, "  ↳ {}", visible(text))?;
        crate::output::write(out)
    }

    /// Removes the spinner line, before something else writes to the terminal.
    pub(crate) fn clear(&mut self) -> io::Result<()> {
        let Renderer::Human(human) = self else { return Ok(()) };
        if !human.spinning {
            return Ok(());
        }
        let mut out = Vec::new();
        human.clear_spinner(&mut out)?;
        crate::output::write(out)
    }
}

/// The spinner's frames.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The state of the human view: which messages were already streamed as deltas, whether the
/// turn said anything, and whether the cursor is at the start of a line.
#[derive(Debug)]
pub(crate) struct Human {
    streamed: HashSet<Option<ItemId>>,
    /// Whether the turn's messages showed any text (else its end shows its result's text).
    said: bool,
    line_start: bool,
    /// Whether to show the spinner, whether it is shown, and its next frame.
    spinner: bool,
    spinning: bool,
    frame: usize,
}

impl Default for Human {
    fn default() -> Self {
        Human { streamed: HashSet::new(), said: false, line_start: true, spinner: false, spinning: false, frame: 0 }
    }
}

impl Human {
    fn clear_spinner(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.spinning {
            self.spinning = false;
            out.write_all(b"\r\x1b[2K")?;
        }
        Ok(())
    }

    fn event(&mut self, out: &mut impl Write, event: &Event) -> io::Result<()> {
        match &event.kind {
            EventKind::MessageDelta { item_id, text } => {
                self.streamed.insert(item_id.clone());
                self.text(out, text)?;
                self.said |= !text.is_empty();
            }
            EventKind::AssistantMessage { item_id, text } => {
                // Deltas without an item ID (a preset's CLI may name only the whole message)
                // were the next message's.
                let streamed = self.streamed.remove(item_id) || item_id.is_some() && self.streamed.remove(&None);
                if !streamed {
                    self.text(out, text)?;
                }
                self.said |= !text.is_empty();
                self.line(out, "")?;
            }
            EventKind::ToolStarted { name, input, .. } => {
                self.line(out, &format!("▸ {name} {}", summary(input.as_ref())))?;
            }
            EventKind::ToolCompleted { status, exit_code, .. } => {
                let status = match status {
                    ToolStatus::Completed => "done",
                    ToolStatus::Failed => "failed",
                    ToolStatus::Declined => "declined",
                    ToolStatus::Interrupted => "interrupted",
                    _ => "ended",
                };
                let code = exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default();
                self.line(out, &format!("  ↳ {status}{code}"))?;
            }
            EventKind::RequestCreated(request) => {
                // Whole: what is approved must be what is shown (a command cut short could hide
                // the `| sh` at its end).
                self.line(out, &format!("? {}: {}", request.kind, request.prompt))?;
            }
            EventKind::RequestExpired { reason, .. } => {
                let why = match reason {
                    ExpiryReason::Timeout => "timed out",
                    ExpiryReason::Cancelled => "the turn was cancelled",
                    ExpiryReason::TurnEnded => "the turn ended",
                    ExpiryReason::ProviderResolved => "settled by the agent",
                    ExpiryReason::SessionClosed => "the session closed",
                    _ => "expired",
                };
                self.line(out, &format!("  ↳ no longer asked: {why}"))?;
            }
            EventKind::RequestResolved { response, .. } => {
                let answer = match &**response {
                    Response::Approve { .. } | Response::ApproveEdited { .. } => "approved".to_owned(),
                    Response::Deny { reason } | Response::Cancel { reason } => {
                        format!("refused{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())
                    }
                    Response::Answer { .. } => "answered".to_owned(),
                    Response::Choose { value } => format!("chose {value}"),
                    _ => "answered".to_owned(),
                };
                self.line(out, &format!("  ↳ {answer}"))?;
            }
            EventKind::StoreFailed { reason, policy } => {
                let then = match policy {
                    StoreFailurePolicy::Stop => "the session stops",
                    _ => "the session goes on without storing",
                };
                self.line(out, &format!("! the store failed, {then}: {}", truncate(reason, 300)))?;
            }
            EventKind::Warning { message } | EventKind::ProviderError { message, .. } => {
                self.line(out, &format!("! {}", truncate(message, 300)))?;
            }
            kind => {
                if let Some(end) = kind.terminal_end() {
                    // A turn whose words came only as its result (a preset without message
                    // rules, say) shows them.
                    if !std::mem::take(&mut self.said)
                        && let Some(text) = end.result.text.as_deref().filter(|text| !text.is_empty())
                    {
                        self.line(out, "")?;
                        self.text(out, text)?;
                        self.line(out, "")?;
                    }
                    self.streamed.clear();
                    let reason = end.result.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
                    self.line(out, &format!("── turn {}{reason}", event.type_name().trim_start_matches("turn_")))?;
                }
            }
        }
        Ok(())
    }

    fn text(&mut self, out: &mut impl Write, text: &str) -> io::Result<()> {
        out.write_all(visible(text).as_bytes())?;
        if !text.is_empty() {
            self.line_start = text.ends_with('\n');
        }
        Ok(())
    }

    /// Writes `text` on a line of its own (an empty `text` only ends the current line).
    fn line(&mut self, out: &mut impl Write, text: &str) -> io::Result<()> {
        if !self.line_start {
            out.write_all(b"\n")?;
            self.line_start = true;
        }
        if !text.is_empty() {
            writeln!(out, "{}", visible(text))?;
        }
        Ok(())
    }
}

/// `text` as the terminal should show it: what the agent or its CLI wrote may hold control
/// characters (an escape sequence that clears the screen, retitles the window or moves the
/// cursor over what was printed), which are shown as symbols instead of acted on. Newlines and
/// tabs pass.
pub(crate) fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    visible_but(text, |c| c == '\n' || c == '\t')
}

/// [`visible`] for one field of a row: newlines and tabs are shown as symbols too.
pub(crate) fn visible_field(text: &str) -> std::borrow::Cow<'_, str> {
    visible_but(text, |_| false)
}

/// `text` with every control character that `kept` does not keep shown as a symbol.
fn visible_but(text: &str, kept: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    let control = |c: char| c.is_control() && !kept(c);
    if !text.contains(control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let shown = text
        .chars()
        .map(|c| match c {
            // The Unicode control pictures: ␛ for escape, ␍ for a carriage return, ␡ for delete.
            '\u{0}'..='\u{1f}' if control(c) => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            c if control(c) => '\u{fffd}',
            c => c,
        })
        .collect();
    std::borrow::Cow::Owned(shown)
}

/// A tool's input in a few words: its command line when it has one, else compact JSON.
fn summary(input: Option<&Value>) -> String {
    let text = match input {
        None => return String::new(),
        Some(Value::String(command)) => command.clone(),
        Some(value) => match value.get("command") {
            Some(Value::String(command)) => command.clone(),
            Some(Value::Array(parts)) => parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "),
            _ => value.to_string(),
        },
    };
    truncate(&crate::exit::one_line(&text), 120)
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use agent_harness::{TurnEnd, TurnResult, TurnStatus};

    use super::*;

    fn event(kind: EventKind) -> Event {
        use agent_harness::{EventId, ProviderId, SessionId, Timestamp};
        Event::from_parts(
            EventId::generate(),
            3,
            SessionId::generate(),
            None,
            ProviderId::new("codex"),
            Timestamp::now(),
            kind,
            None,
        )
    }

    fn shown(kinds: impl IntoIterator<Item = EventKind>) -> String {
        let mut human = Human::default();
        let mut out = Vec::new();
        for kind in kinds {
            human.event(&mut out, &event(kind)).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    fn delta(item: Option<&str>, text: &str) -> EventKind {
        EventKind::MessageDelta { item_id: item.map(ItemId::new), text: text.into() }
    }

    fn message(item: Option<&str>, text: &str) -> EventKind {
        EventKind::AssistantMessage { item_id: item.map(ItemId::new), text: text.into() }
    }

    fn completed(text: Option<&str>) -> EventKind {
        let result = text.map_or_else(TurnResult::default, TurnResult::text);
        EventKind::TurnCompleted(Box::new(TurnEnd::new(TurnStatus::Completed, result)))
    }

    /// A store that failed is said in human mode: a run whose store degraded keeps nothing.
    #[test]
    fn a_store_failure_is_shown() {
        let kind = EventKind::StoreFailed { reason: "disk full".into(), policy: StoreFailurePolicy::Degrade };
        let shown = shown([kind]);
        assert!(shown.contains("the store failed") && shown.contains("disk full"), "{shown:?}");
    }

    /// A message is shown once, whether its deltas name it or not (a preset's CLI may name only
    /// the whole message).
    #[test]
    fn a_streamed_message_is_shown_once() {
        let named = [delta(Some("m1"), "Hel"), delta(Some("m1"), "lo"), message(Some("m1"), "Hello")];
        assert_eq!(shown(named), "Hello\n");
        let unnamed = [delta(None, "Hel"), delta(None, "lo"), message(Some("m1"), "Hello")];
        assert_eq!(shown(unnamed), "Hello\n");
        let unstreamed = [message(Some("m1"), "Hello"), message(Some("m2"), "again")];
        assert_eq!(shown(unstreamed), "Hello\nagain\n");
    }

    /// A turn's result text is shown when its messages said nothing, and only then.
    #[test]
    fn a_result_is_shown_when_no_message_said_it() {
        assert_eq!(shown([completed(Some("echo: hi"))]), "echo: hi\n── turn completed\n");
        assert_eq!(shown([message(None, "hi"), completed(Some("hi"))]), "hi\n── turn completed\n");
        assert_eq!(shown([completed(None)]), "── turn completed\n");
        let two_turns = [message(None, "hi"), completed(Some("hi")), completed(Some("again"))];
        assert_eq!(shown(two_turns), "hi\n── turn completed\nagain\n── turn completed\n");
    }

    #[test]
    fn a_row_field_shows_line_breaks_and_escapes_as_symbols() {
        assert_eq!(visible_field("/tmp/a\nb\tc\x1b]0;x\x07\u{9b}2J"), "/tmp/a␊b␉c␛]0;x␇\u{fffd}2J");
        assert_eq!(visible("one\ntwo\u{8}"), "one\ntwo␈");
    }

    #[test]
    fn tool_inputs_show_their_command() {
        assert_eq!(summary(Some(&serde_json::json!({"command": "ls -la"}))), "ls -la");
        assert_eq!(summary(Some(&serde_json::json!({"command": ["bash", "-lc", "ls"]}))), "bash -lc ls");
        assert_eq!(summary(Some(&serde_json::json!({"path": "a"}))), r#"{"path":"a"}"#);
        assert_eq!(truncate("abcdef", 3), "abc…");
    }

    #[test]
    fn control_characters_are_shown_not_acted_on() {
        assert_eq!(visible("plain\ttext\n"), "plain\ttext\n");
        assert!(matches!(visible("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(visible("\u{1b}[2Jgone\r\u{7}"), "␛[2Jgone␍␇");
        assert_eq!(visible("\u{1b}]0;title\u{9c}x\u{7f}"), "␛]0;title\u{fffd}x␡");
        let mut out = Vec::new();
        let mut human = Human::default();
        human.text(&mut out, "\u{1b}[2J").unwrap();
        human.line(&mut out, "! \u{1b}]0;owned\u{7}").unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(!shown.contains('\u{1b}') && shown.contains("␛[2J"), "{shown:?}");
    }
}
