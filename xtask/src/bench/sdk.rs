//! The TypeScript SDK rows: `@anthropic-ai/claude-agent-sdk` and `@openai/codex-sdk`, installed
//! with npm under `target/bench/node`, each run by a small Node script against a fake CLI that
//! copies a prepared stream to its stdout.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use xshell::{Shell, cmd};

use super::Result;

/// The SDK versions measured (those of `perf-anchors.md`).
pub(super) const CLAUDE_SDK: &str = "@anthropic-ai/claude-agent-sdk@0.3.332";
/// The Codex SDK version measured.
pub(super) const CODEX_SDK: &str = "@openai/codex-sdk@0.163.0";

const CLAUDE_SCRIPT: &str = include_str!("claude-sdk.mjs");
const CODEX_SCRIPT: &str = include_str!("codex-sdk.mjs");

/// One SDK row: how to run it and which stream it reads.
#[derive(Debug)]
pub(super) struct Sdk {
    /// `ts-claude-agent-sdk` or `ts-codex-sdk`.
    pub(super) name: &'static str,
    /// The `agent-bench` reader of the same bytes it is paired with.
    pub(super) baseline: &'static str,
    pub(super) stream: PathBuf,
    /// Lines in the stream.
    pub(super) lines: u64,
    node_script: PathBuf,
    fake: PathBuf,
    fake_script: PathBuf,
}

impl Sdk {
    pub(super) fn command(&self) -> Command {
        let mut command = Command::new("node");
        command
            .arg(&self.node_script)
            .env("AGENT_BENCH_FAKE", &self.fake)
            .env("FAKE_CLI_SCRIPT", &self.fake_script)
            .current_dir(self.node_script.parent().unwrap_or(Path::new(".")));
        command
    }
}

/// Installs the SDKs (once) and writes the scripts; `Ok(None)` when Node.js or npm is missing.
pub(super) fn prepare(
    bench_dir: &Path,
    release: &Path,
    work: &Path,
    claude_stream: PathBuf,
    exec_stream: PathBuf,
    deltas: u64,
) -> Result<Option<Vec<Sdk>>> {
    let sh = Shell::new()?;
    if cmd!(sh, "node --version").quiet().ignore_stdout().run().is_err()
        || cmd!(sh, "npm --version").quiet().ignore_stdout().run().is_err()
    {
        println!("==> Node.js or npm not found: the TypeScript SDK rows are skipped");
        return Ok(None);
    }
    let node_dir = bench_dir.join("node");
    std::fs::create_dir_all(&node_dir)?;
    let installed = [CLAUDE_SDK, CODEX_SDK].iter().all(|spec| {
        let (name, version) = spec.rsplit_once('@').unwrap_or((spec, ""));
        let manifest = node_dir.join("node_modules").join(name).join("package.json");
        let text = std::fs::read_to_string(manifest).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|m| m["version"] == version)
    });
    if !installed {
        println!("==> installing {CLAUDE_SDK} and {CODEX_SDK} under {}", node_dir.display());
        std::fs::write(node_dir.join("package.json"), r#"{"name":"agent-bench-sdks","private":true,"type":"module"}"#)?;
        sh.change_dir(&node_dir);
        cmd!(sh, "npm install --no-audit --no-fund --save-exact {CLAUDE_SDK} {CODEX_SDK}").run()?;
    }
    std::fs::write(node_dir.join("claude-sdk.mjs"), CLAUDE_SCRIPT)?;
    std::fs::write(node_dir.join("codex-sdk.mjs"), CODEX_SCRIPT)?;
    // fake-claude: the initialize handshake, the user message, then the prepared turn.
    let claude_script = work.join("ts-claude.jsonl");
    let lines = [
        json!({"step": "handshake"}),
        json!({"step": "turn_start"}),
        json!({"step": "stream_file", "path": claude_stream}),
    ];
    std::fs::write(&claude_script, lines.iter().map(|l| format!("{l}\n")).collect::<String>())?;
    // fake-codex as `codex exec`: the SDK writes the prompt and closes stdin; the fake copies
    // the prepared events and exits.
    let exec_script = work.join("ts-codex.jsonl");
    let lines = [
        json!({"step": "on_stdin_eof", "action": "ignore"}),
        json!({"step": "stream_file", "path": exec_stream, "ends_turn": false}),
        json!({"step": "exit", "code": 0}),
    ];
    std::fs::write(&exec_script, lines.iter().map(|l| format!("{l}\n")).collect::<String>())?;
    Ok(Some(vec![
        Sdk {
            name: "ts-claude-agent-sdk",
            baseline: "typed-claude",
            stream: claude_stream,
            lines: deltas + 8,
            node_script: node_dir.join("claude-sdk.mjs"),
            fake: release.join("fake-claude"),
            fake_script: claude_script,
        },
        Sdk {
            name: "ts-codex-sdk",
            baseline: "typed-codex-exec",
            stream: exec_stream,
            lines: deltas + 5,
            node_script: node_dir.join("codex-sdk.mjs"),
            fake: release.join("fake-codex"),
            fake_script: exec_script,
        },
    ]))
}
