//! The pi extension the provider ships: an approval gate before `bash`, `edit` and `write`
//! tool calls, and an `ask_user` question tool, both through pi's extension UI sub-protocol
//! (`extension_ui_request` / `extension_ui_response`). Pi has no approval prompts of its own.
//!
//! The file is written to a private directory (mode 0700) created for the session, loaded with
//! `-e`, and removed with the session.

use std::path::{Path, PathBuf};

use agent_provider_kit::private_dir::PrivateDir;

/// The titles of the gate's `confirm` dialogs, and the tool each one asks about. The gate adds
/// the tool call's ID, ` [<id>]` (see [`approval_title`]).
pub(crate) const APPROVAL_TITLES: &[(&str, &str)] =
    &[("Allow bash?", "bash"), ("Allow edit?", "edit"), ("Allow write?", "write")];

/// A gate dialog's title without the tool call's ID, and the ID: `Allow bash? [call_1]` asks
/// about the call `call_1`. A title without one gives `None`.
pub(crate) fn approval_title(title: &str) -> (&str, Option<&str>) {
    match title.strip_suffix(']').and_then(|t| t.split_once(" [")) {
        Some((base, id)) if !id.is_empty() => (base, Some(id)),
        _ => (title, None),
    }
}

/// The tool result the model sees when an approval is denied (followed by `: <reason>` when
/// the denial gave one).
pub(crate) const DENIED_REASON: &str = "Blocked by RPC client";

/// The title of the `input` dialog the gate opens after a denial, which the provider answers at
/// once with the denial's reason (or dismisses): a `confirm` dialog's answer is a yes or no.
pub(crate) const REASON_TITLE: &str = "agent-harness: why was this denied?";

/// The extension's source. `__GATE__` becomes `true` or `false`.
const SOURCE: &str = r#"// Written by agent-harness for one pi session; removed when the session ends.
// Asks the RPC client before bash, edit and write tool calls, and adds an ask_user tool.
const GATED = new Set(["bash", "edit", "write"]);
const GATE = __GATE__;

export default function (pi) {
  if (GATE) {
    pi.on("tool_call", async (event, ctx) => {
      if (!GATED.has(event.toolName)) return undefined;
      const input = event.input || {};
      const subject = event.toolName === "bash"
        ? String(input.command ?? "")
        : String(input.path ?? input.file_path ?? "");
      // With the turn's signal, an abort settles the open dialog: without it pi's abort waits
      // on the dialog for good.
      const dialog = { signal: ctx.signal };
      // The call's ID tells the client which of several running calls of a tool asks.
      const title = `Allow ${event.toolName}? [${event.toolCallId}]`;
      const ok = await ctx.ui.confirm(title, subject, dialog);
      if (!ok) {
        const why = await ctx.ui.input("__REASON__", "", dialog);
        return { block: true, reason: why ? `__DENIED__: ${why}` : "__DENIED__" };
      }
      return undefined;
    });
  }
  pi.registerTool({
    name: "ask_user",
    label: "Ask user",
    description: "Ask the user a question. With options, the user picks one of them; without, the user types an answer.",
    parameters: {
      type: "object",
      properties: {
        question: { type: "string", description: "The question" },
        options: { type: "array", items: { type: "string" }, description: "The choices, if any" },
      },
      required: ["question"],
    },
    async execute(id, params, signal, onUpdate, ctx) {
      const options = Array.isArray(params.options) ? params.options.map(String) : [];
      const dialog = { signal };
      const answer = options.length > 0
        ? await ctx.ui.select(String(params.question), options, dialog)
        : await ctx.ui.input(String(params.question), "", dialog);
      const text = answer === undefined || answer === null ? "(no answer)" : `User chose: ${answer}`;
      return { content: [{ type: "text", text }], details: {} };
    },
  });
}
"#;

/// The extension's source, with or without the approval gate.
pub(crate) fn source(gate: bool) -> String {
    SOURCE
        .replace("__GATE__", if gate { "true" } else { "false" })
        .replace("__DENIED__", DENIED_REASON)
        .replace("__REASON__", REASON_TITLE)
}

/// A private directory holding the extension (and the session's system prompt); removed on
/// drop.
#[derive(Debug)]
pub(crate) struct ExtensionDir {
    dir: PrivateDir,
    file: PathBuf,
}

impl ExtensionDir {
    /// Creates `<parent>/agent-harness-pi-…/` with mode 0700 and writes the extension.
    pub(crate) fn create(parent: &Path, gate: bool) -> std::io::Result<ExtensionDir> {
        let dir = PrivateDir::create(parent, "pi")?;
        let file = dir.write("agent-harness-approvals.ts", source(gate))?;
        Ok(ExtensionDir { dir, file })
    }

    /// The extension file, for `-e`.
    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    /// Writes `text` to a file beside the extension and returns its path, for
    /// `--system-prompt`: pi reads a value that names an existing file as that file's content,
    /// so a caller's text passed as is could make it send a file of the workspace instead.
    pub(crate) fn system_prompt(&self, text: &str) -> std::io::Result<PathBuf> {
        self.dir.write("system-prompt.md", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_lives_in_a_private_directory_that_goes_away() {
        let ext = ExtensionDir::create(&std::env::temp_dir(), true).unwrap();
        let dir = ext.file().parent().unwrap().to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let text = std::fs::read_to_string(ext.file()).unwrap();
        assert!(text.contains("const GATE = true;") && text.contains(DENIED_REASON));
        drop(ext);
        assert!(!dir.exists());
        assert!(source(false).contains("const GATE = false;"));
    }
}
