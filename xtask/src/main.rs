//! Project tasks: `cargo xtask <task>`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    eprintln!("cargo xtask: unknown task {task:?}\n\nusage: cargo xtask <task>");
    ExitCode::from(2)
}
