//! `cargo xtask test`: the one command CI runs (`.ci/run` calls it), and the README's test
//! command. Each step builds on the previous one's artifacts where cargo allows it.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use xshell::{Shell, cmd};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// The workspace root (this crate's parent directory).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// Runs every check, stopping at the first failure.
pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    crate::clis::run()?;
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    step("rustfmt", || cmd!(sh, "cargo fmt --all --check").run())?;
    step("clippy", || cmd!(sh, "cargo clippy --workspace --all-targets --all-features --locked -- -D warnings").run())?;
    step("tests", || cmd!(sh, "cargo test --workspace --all-features --locked").run())?;
    step("docs", || {
        let _deny = sh.push_env("RUSTDOCFLAGS", "-D warnings");
        cmd!(sh, "cargo doc --workspace --all-features --no-deps --locked").run()
    })?;
    println!("cargo xtask test: all checks passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn step(name: &str, run: impl FnOnce() -> xshell::Result<()>) -> Result<()> {
    let started = Instant::now();
    println!("==> {name}");
    run().map_err(|e| format!("{name} failed: {e}"))?;
    println!("==> {name}: ok ({:.0} s)", started.elapsed().as_secs_f64());
    Ok(())
}
