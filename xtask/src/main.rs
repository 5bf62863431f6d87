//! Project tasks: `cargo xtask <task>`.
//!
//! - `demo`: installs the pinned CLIs when missing, then runs one session per provider through
//!   the `agent-harness` binary against a fake model server on 127.0.0.1 (no account, no
//!   internet).
//! - `clis [--lock]`: installs the pinned agent CLIs from `clis.toml` into `target/agent-clis/`,
//!   each from its committed lockfile in `xtask/clis/`; `--lock` writes those lockfiles.
//! - `test`: the whole check CI runs — installs the CLIs, then rustfmt, clippy with warnings
//!   denied, every test, and the docs with warnings denied.
//! - `live [codex|claude|pi]... [--yes]`: the live tests against the user's logged-in CLIs
//!   (checks the logins, warns about quota); not part of CI.
//! - `bench`: the benchmarks (release builds, whole-process timing), written to
//!   `BENCHMARKS.md`; not part of CI.

mod bench;
mod clis;
mod demo;
mod live;
mod test;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  demo    run a session with each of codex, claude and pi through agent-harness, offline (installs the CLIs first)
  clis    install the pinned Codex, Claude Code and Pi CLIs (clis.toml) into target/agent-clis/;
          clis --lock writes their lockfiles (xtask/clis/) after a change to clis.toml
  test    everything CI checks: clis, fmt, clippy -D warnings, all tests, docs
  live    the live tests against your logged-in CLIs: live [codex|claude|pi]... [--yes] (spends quota; not CI)
  bench   the benchmarks, written to BENCHMARKS.md (not part of CI; --help for options)";

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let result = match task.as_deref() {
        Some("demo") => demo::run(),
        Some("clis") => clis::main(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("test") => test::run(),
        Some("live") => live::run(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("bench") => bench::run(&std::env::args().skip(2).collect::<Vec<_>>()),
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
