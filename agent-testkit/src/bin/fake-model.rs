//! `fake-model`: serves a scenario script on 127.0.0.1 for manual runs of a real CLI.
//!
//! ```text
//! fake-model SCENARIO.jsonl [--log FILE]
//! ```
//!
//! Prints `port <n>` and `proxy <url>` on stdout once listening, then one JSON line per request
//! (credentials hidden) to `--log FILE`, or to stderr. Stops on Ctrl-C.

use std::io::Write;
use std::process::ExitCode;

use agent_testkit::{FakeModel, Scenario};

const USAGE: &str = "usage: fake-model SCENARIO.jsonl [--log FILE]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fake-model: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut script, mut log_path) = (None, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--log" => log_path = Some(args.next().ok_or(USAGE)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ if script.is_none() => script = Some(arg),
            _ => return Err(USAGE.to_owned()),
        }
    }
    let scenario = Scenario::from_file(script.ok_or(USAGE)?).map_err(|e| e.to_string())?;
    let mut log: Box<dyn Write + Send> = match &log_path {
        Some(path) => Box::new(std::fs::File::create(path).map_err(|e| format!("cannot create {path}: {e}"))?),
        None => Box::new(std::io::stderr()),
    };
    let server = FakeModel::start(scenario).await.map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    println!("port {}", server.addr().port());
    println!("proxy {}", server.proxy().url());
    std::io::stdout().flush().map_err(|e| e.to_string())?;

    let mut written = 0;
    loop {
        tokio::select! {
            requests = server.wait_for_requests(written + 1) => {
                for request in &requests[written..] {
                    writeln!(log, "{}", request.to_json()).map_err(|e| format!("cannot write the log: {e}"))?;
                }
                written = requests.len();
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
