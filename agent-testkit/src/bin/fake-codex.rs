//! `fake-codex`: plays a script as `codex app-server`; see `agent_testkit::fake_cli`.
//!
//! ```text
//! FAKE_CLI_SCRIPT=script.jsonl [FAKE_CLI_RECORD=transcript.jsonl] fake-codex [--fake-script script.jsonl] [CLI flags...]
//! fake-codex --version
//! ```

use std::process::ExitCode;

use agent_testkit::fake_cli::{FakeCli, main as fake_main};

fn main() -> ExitCode {
    fake_main(FakeCli::Codex)
}
