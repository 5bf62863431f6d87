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
    // A clean build gains nothing from incremental state, and it is a third of the target
    // directory; a caller who wants it sets the variable.
    let _incremental = std::env::var_os("CARGO_INCREMENTAL").is_none().then(|| sh.push_env("CARGO_INCREMENTAL", "0"));
    step("rustfmt", || cmd!(sh, "cargo fmt --all --check").run())?;
    step("clippy", || cmd!(sh, "cargo clippy --workspace --all-targets --all-features --locked -- -D warnings").run())?;
    step("tests", || cmd!(sh, "cargo test --workspace --all-features --locked").run())?;
    step("facade features", || facade_features(&sh))?;
    step("docs", || {
        let _deny = sh.push_env("RUSTDOCFLAGS", "-D warnings");
        cmd!(sh, "cargo doc --workspace --all-features --no-deps --locked").run()
    })?;
    println!("cargo xtask test: all checks passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Builds and tests the facade with no features, its default set, and each feature alone, so a
/// feature that only compiles next to another one is caught.
fn facade_features(sh: &Shell) -> Result<()> {
    let manifest = std::fs::read_to_string(workspace_root().join("agent-harness/Cargo.toml"))
        .map_err(|e| format!("agent-harness/Cargo.toml: {e}"))?;
    cmd!(sh, "cargo test -p agent-harness --locked").run()?;
    cmd!(sh, "cargo test -p agent-harness --no-default-features --locked").run()?;
    for feature in facade_feature_names(&manifest) {
        println!("--> agent-harness --features {feature}");
        cmd!(sh, "cargo test -p agent-harness --no-default-features --features {feature} --locked").run()?;
    }
    Ok(())
}

/// The features `[features]` of a manifest declares, `default` excepted.
pub(crate) fn facade_feature_names(manifest: &str) -> Vec<String> {
    let parsed: toml::Table = manifest.parse().unwrap_or_default();
    parsed
        .get("features")
        .and_then(toml::Value::as_table)
        .map(|features| features.keys().filter(|name| *name != "default").cloned().collect())
        .unwrap_or_default()
}

fn step<E: std::fmt::Display>(name: &str, run: impl FnOnce() -> std::result::Result<(), E>) -> Result<()> {
    let started = Instant::now();
    println!("==> {name}");
    run().map_err(|e| format!("{name} failed: {e}"))?;
    println!("==> {name}: ok ({:.0} s)", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_facade_feature_is_built_alone() {
        let manifest = std::fs::read_to_string(workspace_root().join("agent-harness/Cargo.toml")).expect("manifest");
        let features = facade_feature_names(&manifest);
        for expected in ["memory", "sqlite", "local-exec", "codex", "claude", "pi", "presets", "all-providers"] {
            assert!(features.iter().any(|f| f == expected), "{expected} missing from {features:?}");
        }
        assert!(!features.iter().any(|f| f == "default"), "{features:?}");
    }
}
