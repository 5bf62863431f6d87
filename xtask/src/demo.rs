//! `cargo xtask demo`: the README's first command. Installs the pinned CLIs when they are
//! missing (`cargo xtask clis`), builds `agent-harness` and the testkit's `demo` program, then
//! runs one session per provider through `agent-harness` against the fake model server on
//! 127.0.0.1 (`agent_testkit::demo`), storing the events in `target/demo/demo.db`.
//! No account, no internet.

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use xshell::{Shell, cmd};

use crate::test::workspace_root;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// Runs the task.
pub(crate) fn run() -> Result<()> {
    crate::clis::run()?;
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    println!("==> building agent-harness and the demo");
    cmd!(sh, "cargo build --locked -p agent-harness-cli -p agent-testkit --bin agent-harness --bin demo").run()?;
    let target = target_dir();
    let (agent_harness, demo) = (target.join("debug/agent-harness"), target.join("debug/demo"));
    let dir = target.join("demo");
    let started = Instant::now();
    cmd!(sh, "{demo} {agent_harness} {dir}").run().map_err(|e| format!("the demo failed: {e}"))?;
    println!("cargo xtask demo: done in {:.1} s after the build", started.elapsed().as_secs_f64());
    Ok(())
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `<workspace>/target`.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}
