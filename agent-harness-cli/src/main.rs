//! The `agent-harness` command-line tool: run a coding-agent CLI as a supervised session, and
//! look back at what a SQLite store kept. See the crate README for usage and exit statuses.

mod args;
mod config;
mod doctor;
mod exit;
mod history;
mod output;
mod policy;
mod presets;
mod prompt;
mod render;
mod run;
mod store;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::{Exit, Failure};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // No command at all: the help is the answer, and still a usage error.
            let _ = error.print();
            return Exit::Usage.into();
        }
        Err(error) => {
            exit::complain(&usage_line(&error.render().to_string()));
            return Exit::Usage.into();
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            exit::complain(&format!("cannot start the async runtime: {error}"));
            return Exit::Failed.into();
        }
    };
    let outcome: Result<Exit, Failure> = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Sessions(args) => history::sessions(args).await,
            Command::Events(args) => history::events(args).await,
            Command::Purge(args) => history::purge(args).await,
            Command::Doctor(args) => doctor::doctor(args).await,
            Command::Presets(args) => presets::list(args),
        }
    });
    match outcome {
        Ok(exit) => exit.into(),
        Err(failure) => {
            exit::complain(&render::visible(&failure.to_string()));
            failure.exit.into()
        }
    }
}

/// Clap's error on one line: what is wrong (and the accepted values), without the usage block.
fn usage_line(rendered: &str) -> String {
    let lines: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty())
        .collect();
    let line = exit::one_line(&lines.join(" "));
    let line = line.strip_prefix("error: ").unwrap_or(&line).to_owned();
    format!("{line} (see --help)")
}
