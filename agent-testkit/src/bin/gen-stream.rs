//! `gen-stream`: writes a synthetic CLI output stream to stdout; see `agent_testkit::streams`.
//!
//! ```text
//! gen-stream codex-app <deltas> [--thread ID] [--turn ID] [--item ID] [--stamped]
//! gen-stream codex-exec <deltas>
//! gen-stream claude <deltas> [--session ID]
//! ```
//!
//! The IDs default to the ones `fake-codex` and `fake-claude` use for their first turn.
//! `--stamped` starts every delta with the placeholder a paced `stream_file` step replaces with
//! the time of the write (for latency runs).

use std::process::ExitCode;

use agent_testkit::fake_cli::CLAUDE_SESSION_ID;
use agent_testkit::streams::{CodexIds, write_claude, write_codex_app, write_codex_app_stamped, write_codex_exec};

const USAGE: &str = "usage: gen-stream codex-app <deltas> [--thread ID] [--turn ID] [--item ID] [--stamped]
       gen-stream codex-exec <deltas>
       gen-stream claude <deltas> [--session ID]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gen-stream: {message}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let [kind, deltas, flags @ ..] = args.as_slice() else { return Err("missing arguments".to_owned()) };
    let deltas: u64 = deltas.parse().map_err(|e| format!("deltas {deltas:?}: {e}"))?;
    let mut ids = CodexIds::default();
    let mut session = CLAUDE_SESSION_ID.to_owned();
    let mut stamped = false;
    let mut flags = flags.iter();
    while let Some(flag) = flags.next() {
        if kind == "codex-app" && flag == "--stamped" {
            stamped = true;
            continue;
        }
        let value = flags.next().ok_or_else(|| format!("{flag} needs a value"))?.clone();
        match (kind.as_str(), flag.as_str()) {
            ("codex-app", "--thread") => ids.thread = value,
            ("codex-app", "--turn") => ids.turn = value,
            ("codex-app", "--item") => ids.item = value,
            ("claude", "--session") => session = value,
            _ => return Err(format!("unknown flag {flag} for {kind}")),
        }
    }
    let mut out = std::io::stdout().lock();
    let written = match kind.as_str() {
        "codex-app" if stamped => write_codex_app_stamped(&mut out, deltas, &ids),
        "codex-app" => write_codex_app(&mut out, deltas, &ids),
        "codex-exec" => write_codex_exec(&mut out, deltas),
        "claude" => write_claude(&mut out, deltas, &session),
        other => return Err(format!("unknown stream {other:?}")),
    };
    written.map(|_| ()).map_err(|e| format!("cannot write: {e}"))
}
