//! Tidy checks: the workspace's structural rules (DESIGN.md §2), enforced as tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::test::workspace_root;

/// Workspace packages and their normal (non-dev) dependencies' names.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("name").to_owned())
                .collect();
            (package["name"].as_str().expect("name").to_owned(), deps)
        })
        .collect()
}

fn is_plugin(name: &str) -> bool {
    name.starts_with("agent-provider-") || name.starts_with("agent-store-") || name == "agent-exec"
}

/// What a plugin may depend on inside the workspace: agent-core, and for providers (not the kit
/// itself) agent-provider-kit.
fn allowed_internal(package: &str, dep: &str) -> bool {
    let provider = package.starts_with("agent-provider-") && package != "agent-provider-kit";
    dep == "agent-core" || (provider && dep == "agent-provider-kit")
}

#[test]
fn providers_stores_and_exec_depend_on_agent_core_only() {
    let deps = dependencies();
    let workspace: Vec<&String> = deps.keys().collect();
    for (package, package_deps) in deps.iter().filter(|(name, _)| is_plugin(name)) {
        for dep in package_deps {
            let internal = workspace.contains(&dep);
            assert!(
                !internal || allowed_internal(package, dep),
                "{package} depends on {dep}: stores, exec backends and the provider kit may depend on agent-core \
                 only, providers on agent-core and agent-provider-kit"
            );
        }
    }
    assert!(!allowed_internal("agent-provider-kit", "agent-provider-kit"));
    assert!(!allowed_internal("agent-store-sqlite", "agent-provider-kit"));
    assert!(allowed_internal("agent-provider-codex", "agent-provider-kit"));
}

#[test]
fn agent_core_has_no_processes_sqlite_or_http() {
    let deps = dependencies();
    let core = &deps["agent-core"];
    for forbidden in ["rusqlite", "axum", "hyper", "reqwest", "libc", "nix"] {
        assert!(!core.iter().any(|d| d == forbidden), "agent-core must not depend on {forbidden}");
    }
    let cargo = fs::read_to_string(workspace_root().join("agent-core/Cargo.toml")).expect("agent-core manifest");
    let tokio_line = cargo.lines().find(|l| l.starts_with("tokio ")).expect("agent-core depends on tokio");
    for feature in ["process", "net", "fs", "full"] {
        assert!(!tokio_line.contains(&format!("\"{feature}\"")), "agent-core must not enable tokio's {feature}");
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = fs::read_to_string(&path).expect("readable source");
            out.push((path.display().to_string(), text));
        }
    }
    out
}

#[test]
fn only_agent_exec_spawns_processes() {
    let root = workspace_root();
    for package in [
        "agent-core",
        "agent-provider-kit",
        "agent-provider-codex",
        "agent-provider-claude",
        "agent-provider-pi",
        "agent-provider-preset",
        "agent-store-memory",
        "agent-store-sqlite",
    ] {
        for (path, text) in sources(&root.join(package).join("src")) {
            for needle in ["tokio::process", "std::process::Command", "process::Command::new"] {
                assert!(!text.contains(needle), "{path} uses {needle}: spawn through the injected Exec instead");
            }
        }
    }
}

#[test]
fn the_facade_holds_no_logic() {
    let lib = fs::read_to_string(workspace_root().join("agent-harness/src/lib.rs")).expect("facade");
    let mut in_use_list = false;
    for line in lib.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if in_use_list {
            // The names of a multi-line `pub use …::{ … };`.
            let names = line.trim_end_matches("};").split(',').map(str::trim).filter(|n| !n.is_empty());
            assert!(
                names.clone().all(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')),
                "agent-harness/src/lib.rs holds more than re-exports: {line:?}"
            );
            in_use_list = !line.ends_with("};");
            continue;
        }
        let allowed = line.starts_with("//")
            || line.starts_with("#![")
            || line.starts_with("#[cfg(feature")
            || line.starts_with("pub use ")
            || line.starts_with("pub mod ")
            || line == "}";
        assert!(allowed, "agent-harness/src/lib.rs holds more than re-exports: {line:?}");
        in_use_list = line.starts_with("pub use ") && line.ends_with('{');
    }
}

/// The names `agent_core`'s crate root exports: its public modules and re-exported items.
fn core_exports() -> Vec<String> {
    let lib = fs::read_to_string(workspace_root().join("agent-core/src/lib.rs")).expect("agent-core root");
    let mut names = Vec::new();
    let mut statement = String::new();
    for line in lib.lines().map(str::trim) {
        if let Some(module) = line.strip_prefix("pub mod ").and_then(|m| m.strip_suffix(';')) {
            names.push(module.to_owned());
        }
        if line.starts_with("pub use ") || !statement.is_empty() {
            statement.push_str(line);
            if line.ends_with(';') {
                let list = statement.split_once('{').map_or_else(
                    || statement.rsplit("::").next().unwrap_or_default().trim_end_matches(';').to_owned(),
                    |(_, rest)| rest.trim_end_matches("};").to_owned(),
                );
                names.extend(list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned));
                statement.clear();
            }
        }
    }
    names
}

#[test]
fn the_facade_re_exports_everything_agent_core_exports() {
    let facade = fs::read_to_string(workspace_root().join("agent-harness/src/lib.rs")).expect("facade");
    let words: std::collections::HashSet<&str> =
        facade.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    let exports = core_exports();
    assert!(exports.iter().any(|n| n == "Harness") && exports.iter().any(|n| n == "exec"), "{exports:?}");
    // `testing` is agent-core's feature-gated test support, not part of the facade.
    for name in exports.iter().filter(|n| *n != "testing") {
        assert!(words.contains(name.as_str()), "agent-harness does not re-export agent_core::{name}");
    }
}

#[test]
fn ci_runs_exactly_the_readme_test_command() {
    let root = workspace_root();
    let ci = fs::read_to_string(root.join(".ci/run")).expect(".ci/run exists");
    let command = ci
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("set ") && !l.starts_with("cd "))
        .expect(".ci/run runs a command");
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md exists");
    assert!(readme.contains(command), "README.md must give the test command .ci/run runs: {command}");
}

#[test]
fn every_cli_install_has_a_lockfile_that_pins_its_version() {
    let problems = crate::clis::lock_problems().expect("clis.toml and xtask/clis/ are readable");
    assert!(
        problems.is_empty(),
        "the committed CLI lockfiles disagree with clis.toml:\n  {}\nregenerate them with: cargo xtask clis --lock",
        problems.join("\n  ")
    );
}
