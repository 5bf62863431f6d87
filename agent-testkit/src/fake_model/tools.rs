//! Abstract tool steps rendered as the tools each CLI advertises.

use serde_json::{Value, json};

use super::Wire;
use super::plan::{ToolCall, ToolInput};
use crate::scenario::Step;

/// The tool naming of one CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `exec_command` / `shell_command` / `shell`, `apply_patch`, `request_user_input`.
    Codex,
    /// `Bash`, `Write`, `Edit`, `AskUserQuestion`.
    Claude,
    /// `bash`, `write`, `edit`, `ask_user` (the question tool comes from an extension).
    Pi,
}

const CODEX_SHELLS: [&str; 3] = ["exec_command", "shell_command", "shell"];

impl Family {
    /// Recognizes the CLI from the tools its request advertises, else assumes the usual client
    /// of the endpoint.
    fn of(advertised: &[String], wire: Wire) -> Family {
        let has = |name: &str| advertised.iter().any(|a| a == name);
        if CODEX_SHELLS.iter().any(|n| has(n)) || has("apply_patch") {
            Family::Codex
        } else if has("Bash") || has("Write") {
            Family::Claude
        } else if has("bash") || has("write") {
            Family::Pi
        } else {
            match wire {
                Wire::Responses => Family::Codex,
                Wire::Messages => Family::Claude,
                Wire::ChatCompletions => Family::Pi,
            }
        }
    }
}

/// The tool call `step` (a shell, write, edit or question step) means for this client.
pub(super) fn call_for(step: &Step, advertised: &[String], wire: Wire) -> ToolCall {
    let family = Family::of(advertised, wire);
    let json = |name: &str, value: Value| ToolCall { name: name.to_owned(), input: ToolInput::Json(value) };
    let patch = |body: String| ToolCall {
        name: "apply_patch".to_owned(),
        input: ToolInput::Freeform(format!("*** Begin Patch\n{body}*** End Patch\n")),
    };
    match (step, family) {
        (Step::Shell { command }, Family::Codex) => {
            let shell = CODEX_SHELLS.into_iter().find(|n| advertised.iter().any(|a| a == n)).unwrap_or("exec_command");
            match shell {
                "exec_command" => json(shell, json!({"cmd": command, "yield_time_ms": 2000})),
                "shell_command" => json(shell, json!({"command": command})),
                _ => json(shell, json!({"command": ["bash", "-lc", command]})),
            }
        }
        (Step::Shell { command }, Family::Claude) => {
            json("Bash", json!({"command": command, "description": "Run a command"}))
        }
        (Step::Shell { command }, Family::Pi) => json("bash", json!({"command": command})),
        (Step::WriteFile { path, content }, Family::Codex) => {
            patch(format!("*** Add File: {path}\n{}", prefixed_lines('+', content)))
        }
        (Step::WriteFile { path, content }, Family::Claude) => {
            json("Write", json!({"file_path": path, "content": content}))
        }
        (Step::WriteFile { path, content }, Family::Pi) => json("write", json!({"path": path, "content": content})),
        (Step::EditFile { path, old, new }, Family::Codex) => {
            patch(format!("*** Update File: {path}\n@@\n{}{}", prefixed_lines('-', old), prefixed_lines('+', new)))
        }
        (Step::EditFile { path, old, new }, Family::Claude) => {
            json("Edit", json!({"file_path": path, "old_string": old, "new_string": new}))
        }
        (Step::EditFile { path, old, new }, Family::Pi) => {
            json("edit", json!({"path": path, "edits": [{"oldText": old, "newText": new}]}))
        }
        (Step::AskUser { question, options }, Family::Codex) => json(
            "request_user_input",
            json!({"questions": [{
                "id": "q1",
                "header": "Question",
                "question": question,
                "options": options.iter().map(|o| json!({"label": o, "description": o})).collect::<Vec<_>>(),
            }]}),
        ),
        (Step::AskUser { question, options }, Family::Claude) => json(
            "AskUserQuestion",
            json!({"questions": [{
                "question": question,
                "header": "Question",
                "multiSelect": false,
                "options": options.iter().map(|o| json!({"label": o, "description": o})).collect::<Vec<_>>(),
            }]}),
        ),
        (Step::AskUser { question, options }, Family::Pi) => {
            json("ask_user", json!({"question": question, "options": options}))
        }
        (other, _) => json(other.name(), Value::Null),
    }
}

/// Every line of `text` with `marker` in front, each ending in a newline.
fn prefixed_lines(marker: char, text: &str) -> String {
    text.lines().map(|line| format!("{marker}{line}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shell_follows_the_advertised_tools() {
        let step = Step::Shell { command: "ls".into() };
        let codex = call_for(&step, &names(&["shell_command", "view_image"]), Wire::Responses);
        assert_eq!(codex.name, "shell_command");
        let pi_on_responses = call_for(&step, &names(&["read", "bash", "edit", "write"]), Wire::Responses);
        assert_eq!(pi_on_responses.name, "bash");
        let claude = call_for(&step, &[], Wire::Messages);
        assert_eq!(claude.name, "Bash");
    }

    #[test]
    fn codex_file_steps_are_patches() {
        let write =
            call_for(&Step::WriteFile { path: "a.txt".into(), content: "one\ntwo\n".into() }, &[], Wire::Responses);
        let ToolInput::Freeform(patch) = write.input else { panic!("not freeform") };
        assert_eq!(patch, "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** End Patch\n");
        let edit = call_for(
            &Step::EditFile { path: "a.txt".into(), old: "one".into(), new: "uno".into() },
            &[],
            Wire::Responses,
        );
        let ToolInput::Freeform(patch) = edit.input else { panic!("not freeform") };
        assert_eq!(patch, "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n*** End Patch\n");
    }
}
