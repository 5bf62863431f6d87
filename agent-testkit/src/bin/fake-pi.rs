//! `fake-pi`: plays a script as `pi --mode rpc`; see `agent_testkit::fake_cli`.
//!
//! ```text
//! FAKE_CLI_SCRIPT=script.jsonl [FAKE_CLI_RECORD=transcript.jsonl] fake-pi [--fake-script script.jsonl] [CLI flags...]
//! fake-pi --version
//! ```

use std::process::ExitCode;

use agent_testkit::fake_cli::{FakeCli, main as fake_main};

fn main() -> ExitCode {
    fake_main(FakeCli::Pi)
}
