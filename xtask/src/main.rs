//! Project tasks: `cargo xtask <task>`.
//!
//! - `clis`: installs the pinned agent CLIs from `clis.toml` into `target/agent-clis/`.
//! - `test`: the whole check CI runs — installs the CLIs, then rustfmt, clippy with warnings
//!   denied, every test, and the docs with warnings denied.

mod clis;
mod test;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  clis    install the pinned Codex, Claude Code and Pi CLIs (clis.toml) into target/agent-clis/
  test    everything CI checks: clis, fmt, clippy -D warnings, all tests, docs";

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let result = match task.as_deref() {
        Some("clis") => clis::run(),
        Some("test") => test::run(),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("cargo xtask: unknown task {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
        None => {
            eprintln!("cargo xtask: no task given\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cargo xtask: error: {err}");
            ExitCode::FAILURE
        }
    }
}
