//! `agent-bench`: runs one consumer over one prepared stream and prints one JSON line; the
//! measurement harness is `cargo xtask bench`, which times each run as a whole process.
//!
//! ```text
//! agent-bench cat|value|typed|typed-claude|typed-codex-exec <stream>
//! agent-bench harness-disabled|harness-memory|harness-sqlite <stream> --fake <fake-codex> --work <dir>
//! agent-bench harness-claude <claude stream> --fake <fake-claude> --work <dir>
//! agent-bench idle-harness|idle-direct <sessions> --fake <fake-codex> --work <dir>
//! agent-bench latency-plain|latency-tokio|latency-harness|latency-harness-task <stamped stream> --fake <fake-codex> --work <dir> [--rate N]
//! ```
//!
//! - `cat`: the stream through a pipe from a `cat` child, read in 64 KiB chunks and discarded
//!   (the pipe's limit).
//! - `value` / `typed`: the same pipe, one `read_line` per line, parsed into a
//!   `serde_json::Value` or a small derived struct (the bare-parse baselines): `typed` for Codex
//!   app-server lines, `typed-claude` and `typed-codex-exec` for the streams the TypeScript SDK
//!   rows read.
//! - `harness-*`: a real `Harness` with the Codex provider, spawning `fake-codex` through
//!   `LocalExec`; the fake does its handshake, accepts the turn and copies the stream to its
//!   stdout (`stream_file`). One subscriber counts `message_delta` events until the turn's
//!   terminal event. The store is disabled, in memory or SQLite (durable: `synchronous = FULL`,
//!   group commit).
//! - `idle-harness`: starts `<sessions>` Codex sessions on a fake that only does its handshake,
//!   one after another, and reports the start time and this process's resident memory per
//!   session. `idle-direct` does the same by hand: spawns the fake and does the handshake.
//! - `latency-plain` / `latency-tokio` / `latency-harness`: the fake writes a stamped stream
//!   (`gen-stream codex-app N --stamped`) at `--rate` lines per second (default 10,000); the
//!   report gives percentiles of the time from a line's write to its arrival, read by hand
//!   (`read_line` and a typed parse) on a blocking thread (`latency-plain`) or in a task on a
//!   Tokio runtime (`latency-tokio`: what any async reader pays for the runtime's I/O driver), or
//!   as a harness subscriber (memory store): on the thread that drives the runtime (`block_on`,
//!   `latency-harness`) or in a task spawned on it (`latency-harness-task`, as a service would
//!   consume events).
//!
//! The reports' `self_peak_rss_kib` is this process's peak resident set (`VmHWM`).

mod direct;
mod harness;
mod idle;
mod latency;
mod readers;

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

const USAGE: &str = "usage: agent-bench cat|value|typed|typed-claude|typed-codex-exec <stream>
       agent-bench harness-disabled|harness-memory|harness-sqlite <stream> --fake <fake-codex> --work <dir>
       agent-bench harness-claude <claude stream> --fake <fake-claude> --work <dir>
       agent-bench idle-harness|idle-direct <sessions> --fake <fake-codex> --work <dir>
       agent-bench latency-plain|latency-tokio|latency-harness|latency-harness-task <stamped stream> --fake <fake-codex> --work <dir> [--rate N]";

/// The command line: a mode, its subject (a stream or a count), and the options.
struct Args {
    mode: String,
    subject: String,
    fake: Option<PathBuf>,
    work: Option<PathBuf>,
    rate: u32,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mode = args.next().ok_or("no mode")?;
        let subject = args.next().ok_or("no stream or session count")?;
        let (mut fake, mut work, mut rate) = (None, None, 10_000);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--fake" => fake = Some(PathBuf::from(value)),
                "--work" => work = Some(PathBuf::from(value)),
                "--rate" => rate = value.parse().map_err(|e| format!("--rate {value:?}: {e}"))?,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(Args { mode, subject, fake, work, rate })
    }

    fn fake(&self) -> Result<PathBuf, String> {
        let fake = self.fake.clone().ok_or_else(|| format!("{} needs --fake <fake-codex>", self.mode))?;
        std::fs::canonicalize(&fake).map_err(|e| format!("{}: {e}", fake.display()))
    }

    fn work(&self) -> Result<PathBuf, String> {
        let work = self.work.clone().ok_or_else(|| format!("{} needs --work <dir>", self.mode))?;
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        std::fs::canonicalize(&work).map_err(|e| format!("{}: {e}", work.display()))
    }
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("agent-bench: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(mut report) => {
            report["self_peak_rss_kib"] = self_status_kib("VmHWM").into();
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("agent-bench {}: {message}", args.mode);
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<Value, String> {
    let stream = || PathBuf::from(&args.subject);
    let sessions = || args.subject.parse::<usize>().map_err(|e| format!("session count {:?}: {e}", args.subject));
    let runtime =
        || tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"));
    match args.mode.as_str() {
        mode if readers::MODES.contains(&mode) => readers::run(mode, &stream()),
        "harness-disabled" | "harness-memory" | "harness-sqlite" => {
            let store = args.mode.trim_start_matches("harness-").to_owned();
            let (fake, work) = (args.fake()?, args.work()?);
            runtime()?.block_on(harness::run(&store, &stream(), &fake, &work))
        }
        "harness-claude" => {
            let (fake, work) = (args.fake()?, args.work()?);
            runtime()?.block_on(harness::run_row(harness::Row::Claude, "memory", &stream(), &fake, &work))
        }
        "idle-harness" => {
            let (n, fake, work) = (sessions()?, args.fake()?, args.work()?);
            runtime()?.block_on(idle::harness(n, &fake, &work))
        }
        "idle-direct" => idle::direct(sessions()?, &args.fake()?, &args.work()?),
        "latency-plain" => latency::plain(&stream(), &args.fake()?, &args.work()?, args.rate),
        "latency-tokio" => {
            let (fake, work) = (args.fake()?, args.work()?);
            runtime()?.block_on(latency::tokio_reader(&stream(), &fake, &work, args.rate))
        }
        "latency-harness" => {
            let (fake, work) = (args.fake()?, args.work()?);
            runtime()?.block_on(latency::harness(&stream(), &fake, &work, args.rate, false))
        }
        "latency-harness-task" => {
            let (fake, work) = (args.fake()?, args.work()?);
            runtime()?.block_on(latency::harness(&stream(), &fake, &work, args.rate, true))
        }
        other => Err(format!("unknown mode {other:?}")),
    }
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`); 0 where there is none.
fn self_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
