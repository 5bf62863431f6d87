//! Pi's extension UI dialogs (`extension_ui_request`): the approval gate's `confirm` and its
//! reason `input`, `ask_user`'s questions, any other extension's dialogs — as requests, answers
//! given at once, or dismissals.

use agent_core::request::RequestSpec;
use agent_core::{Choice, EventKind, Question, RequestKind};
use agent_provider_kit::rpc::CliRequestId;
use serde_json::json;

use super::{Action, Dialog, Ending, Frame, Normalizer};
use crate::extension::{APPROVAL_TITLES, REASON_TITLE, approval_title};

impl Normalizer {
    pub(super) fn on_dialog(&mut self, frame: Frame<'_>, actions: &mut Vec<Action>) {
        let Some(id) = frame.id.as_ref().and_then(CliRequestId::of) else {
            // Nothing pi could match an answer with: a dialog without one waits for its timeout.
            let message = "pi asked through an extension dialog without a string or number `id`: it could not be \
                           answered"
                .to_owned();
            actions.push(self.emit(EventKind::Warning { message }));
            return;
        };
        let method = frame.method.clone().unwrap_or_default();
        let dismiss =
            |id: &CliRequestId| json!({"type": "extension_ui_response", "id": id.to_json(), "cancelled": true});
        let title = frame.title.clone().unwrap_or_default();
        let text = frame.message.and_then(|m| serde_json::from_str::<String>(m.get()).ok());
        if method == "input" && title == REASON_TITLE {
            // The gate asks why its last approval was denied: the answer was given with the
            // denial, and asks nobody.
            let answer = match self.deny_reason.take().filter(|reason| !reason.trim().is_empty()) {
                Some(reason) => json!({"type": "extension_ui_response", "id": id.to_json(), "value": reason}),
                None => dismiss(&id),
            };
            actions.push(Action::Write(answer));
            return;
        }
        let spec = match method.as_str() {
            "confirm" => {
                let (base, call) = approval_title(&title);
                let approval = APPROVAL_TITLES.iter().find(|(t, _)| *t == base).map(|(_, tool)| *tool);
                // The call the gate named, else (a call another tool made) the last started of
                // the tool.
                let tools = self.turn.as_ref().map(|turn| &turn.tools);
                let started = approval.and_then(|tool| {
                    let tools = tools?;
                    let named = call.and_then(|call| tools.iter().find(|(id, n, _)| id == call && n == tool));
                    named.or_else(|| tools.iter().rev().find(|(_, n, _)| n == tool))
                });
                let title = base.to_owned();
                let running_tool = started.map(|(id, _, _)| id.clone());
                let input = started.and_then(|(_, _, args)| args.clone());
                let (kind, prompt) = match approval {
                    Some("bash") => (RequestKind::CommandApproval, text.clone().unwrap_or_default()),
                    Some(tool) => {
                        (RequestKind::FileChangeApproval, format!("{tool} {}", text.clone().unwrap_or_default()))
                    }
                    None => (RequestKind::Confirmation, join(&title, text.as_deref())),
                };
                let mut spec =
                    RequestSpec::new(kind, prompt, id.as_str()).meta("method", "confirm").meta("title", title);
                match (approval, &text) {
                    (Some("bash"), Some(command)) => spec = spec.meta("command", command.clone()),
                    (Some(_), Some(path)) => spec = spec.meta("path", path.clone()),
                    _ => {}
                }
                if let Some(tool) = approval {
                    spec = spec.meta("tool", tool);
                }
                if let Some(call) = &running_tool {
                    spec = spec.meta("tool_call_id", call.clone());
                }
                if let Some(input) = input {
                    spec = spec.meta("input", input);
                }
                (spec, running_tool)
            }
            "select" | "input" | "editor" => {
                let choices: Vec<Choice> =
                    frame.options.iter().flatten().filter_map(|o| o.as_str().map(Choice::new)).collect();
                let mut question = Question::new("answer", title.clone()).with_choices(choices);
                question.allow_other = method != "select";
                let prompt = join(&title, text.as_deref());
                let mut spec = RequestSpec::new(RequestKind::Question, prompt, id.as_str())
                    .questions([question])
                    .meta("method", method.clone());
                if let Some(placeholder) = &frame.placeholder {
                    spec = spec.meta("placeholder", placeholder.clone());
                }
                (spec, None)
            }
            // Fire-and-forget methods: nothing waits for an answer.
            "notify" if matches!(frame.notify_type.as_deref(), Some("warning" | "error")) => {
                actions.push(self.emit(EventKind::Warning { message: text.unwrap_or_default() }));
                return;
            }
            "notify" | "setStatus" | "setWidget" | "setTitle" | "set_editor_text" => {
                actions.push(self.provider_event("extension_ui_request"));
                return;
            }
            // A method this provider does not know may be a dialog pi waits on: dismissed, as a
            // user closing it would (pi drops an answer nothing waits for).
            _ => {
                actions.push(Action::Write(dismiss(&id)));
                actions.push(self.provider_event("extension_ui_request"));
                let shown = if method.is_empty() { "no method".to_owned() } else { format!("method `{method}`") };
                let message = format!(
                    "pi asked through an extension dialog with {shown}, which this provider does not know: it was dismissed"
                );
                actions.push(self.emit(EventKind::Warning { message }));
                return;
            }
        };
        let (mut spec, tool_call) = spec;
        if let Some(ms) = frame.timeout {
            spec = spec.timeout(std::time::Duration::from_millis(ms));
        }
        // Only a turn pi accepted can ask: a dialog read before the `prompt` reply belongs to
        // no run of ours.
        match self.turn.as_ref().filter(|r| r.admitted && r.ending == Ending::Running) {
            Some(running) => {
                let turn = running.id.clone();
                self.dialogs.insert(id.as_str().to_owned(), Dialog { id, method, turn: turn.clone(), tool_call });
                actions.push(Action::Request { turn, spec: Box::new(spec), raw: None });
            }
            None => {
                // No turn to ask in: dismiss it, as a user closing the dialog would.
                actions.push(Action::Write(dismiss(&id)));
                actions.push(self.provider_event("extension_ui_request"));
            }
        }
    }

    /// Dismisses a dialog of pi's whose line was over `max_line_bytes`: its first or last bytes
    /// named it (`id`, and `method` when they reach it), and pi would wait for its answer for
    /// good. A warning says so.
    pub(crate) fn unread_dialog(
        &mut self,
        id: &CliRequestId,
        method: Option<&str>,
        len: usize,
        max_line: usize,
    ) -> Vec<Action> {
        let dismiss = json!({"type": "extension_ui_response", "id": id.to_json(), "cancelled": true});
        let method = method.map_or_else(|| "dialog".to_owned(), |method| format!("`{method}` dialog"));
        let message = format!(
            "pi asked through an extension {method} in a line of {len} bytes, over the {max_line}-byte limit \
             (`max_line_bytes`): it could not be read, and was dismissed"
        );
        vec![Action::Write(dismiss), self.emit(EventKind::Warning { message })]
    }
}

/// `title: text`, or whichever is there.
fn join(title: &str, text: Option<&str>) -> String {
    match text.filter(|t| !t.is_empty()) {
        Some(text) if !title.is_empty() => format!("{title}: {text}"),
        Some(text) => text.to_owned(),
        None => title.to_owned(),
    }
}
