//! `demo`: the program `cargo xtask demo` runs (see `agent_testkit::demo`).
//!
//! ```text
//! demo AGENT_HARNESS_BINARY DIR
//! ```
//!
//! Runs one session per provider through `AGENT_HARNESS_BINARY`, keeps the SQLite file under
//! `DIR`, and exits 0 when every session completed both turns and the approved command ran.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: demo AGENT_HARNESS_BINARY DIR";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [binary, dir] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(64);
    };
    let report = match agent_testkit::demo::run(binary, dir, &mut std::io::stdout()).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("demo: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!();
    let mut ok = report.sessions.0 == Some(0);
    for run in &report.runs {
        let done = run.code == Some(0) && run.command_ran;
        ok &= done;
        let verdict = if done { "both turns completed, the approved command ran" } else { "FAILED" };
        println!(
            "{} {}: {verdict} (exit {}, {:.1} s)",
            run.provider.id(),
            run.version,
            run.code.map_or_else(|| "by a signal".to_owned(), |c| c.to_string()),
            run.took.as_secs_f64()
        );
    }
    println!("events stored in {}", report.db.display());
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
