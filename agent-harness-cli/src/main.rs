//! The `agent-harness` command-line tool.
//!
//! The subcommands `run`, `sessions`, `events`, `doctor` and `presets` arrive with the providers
//! they drive; until then the binary reports its version and what is planned, and fails for
//! anything else.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("agent-harness {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        None | Some("--help" | "-h") => {
            println!(
                "agent-harness {}\n\nplanned commands: run, sessions, events, doctor, presets",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("agent-harness: unknown command `{other}` (see --help)");
            ExitCode::from(2)
        }
    }
}
