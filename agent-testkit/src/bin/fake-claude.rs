//! `fake-claude`: plays a script as `claude -p` (stream-json and the control protocol); see `agent_testkit::fake_cli`.
//!
//! ```text
//! FAKE_CLI_SCRIPT=script.jsonl [FAKE_CLI_RECORD=transcript.jsonl] fake-claude [--fake-script script.jsonl] [CLI flags...]
//! fake-claude --version
//! ```

use std::process::ExitCode;

use agent_testkit::fake_cli::{FakeCli, main as fake_main};

fn main() -> ExitCode {
    fake_main(FakeCli::Claude)
}
