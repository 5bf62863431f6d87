//! The pinned-CLI manifest (`clis.toml` at the workspace root) and the install layout under
//! `target/agent-clis/`.
//!
//! `cargo xtask clis` compiles this same file (through `#[path]`), so the installer and the
//! test-side lookup can never disagree about where a CLI lives or how it is started.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The manifest text, embedded at compile time.
const MANIFEST: &str = include_str!("../../../clis.toml");

/// Environment variable that moves the install directory away from `target/agent-clis`.
pub(crate) const DIR_ENV: &str = "AGENT_CLIS_DIR";

/// The model name the offline environments and the Codex model catalog use for the fake model.
pub(crate) const FAKE_MODEL: &str = "fake-model";

/// Codex model catalog written next to the Codex install (see `Install::model_catalog`).
const MODEL_CATALOG_FILE: &str = "fake-model-catalog.json";

/// `node = "system"`: the `node` found on `PATH`.
const SYSTEM_NODE: &str = "system";

/// The parsed `clis.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    /// Supported version range per provider id.
    pub(crate) providers: BTreeMap<String, ProviderVersions>,
    /// Every npm install, in install order.
    pub(crate) install: Vec<Install>,
}

/// `[providers.<id>]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderVersions {
    /// Oldest version the adapter is tested against.
    pub(crate) min_supported: String,
    /// Newest version the adapter is tested against.
    pub(crate) latest_validated: String,
    /// Versions between the two the adapter is tested against too: releases that changed how
    /// the CLI speaks (each names an `[[install]]` of the provider).
    #[serde(default)]
    pub(crate) also_tested: Vec<String>,
}

impl ProviderVersions {
    /// Every version the adapter is tested against, newest first: `latest_validated`,
    /// `also_tested` as listed, `min_supported`; each once.
    pub(crate) fn tested(&self) -> Vec<&String> {
        let mut versions = vec![&self.latest_validated];
        for version in self.also_tested.iter().chain([&self.min_supported]) {
            if !versions.contains(&version) {
                versions.push(version);
            }
        }
        versions
    }
}

/// One `[[install]]` entry: one npm prefix.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Install {
    /// Directory name under the install directory.
    pub(crate) name: String,
    /// Provider id, absent for a runtime.
    pub(crate) provider: Option<String>,
    /// npm package name.
    pub(crate) package: String,
    /// Exact npm version.
    pub(crate) version: String,
    /// Native binary, relative to the prefix.
    executable: Option<String>,
    /// Node entry script, relative to the prefix.
    script: Option<String>,
    /// Node for `script`: an install name or `"system"`.
    node: Option<String>,
    /// Minimum version of the system Node (checked by the installer).
    #[allow(dead_code, reason = "read by `cargo xtask clis` only")]
    pub(crate) node_min: Option<String>,
    /// Directory prepended to `PATH`, relative to the prefix.
    bin_dir: String,
    /// Text `--version` prints.
    #[allow(dead_code, reason = "read by `cargo xtask clis` only")]
    pub(crate) version_output: String,
    /// Codex: bundled model copied into the fake model's catalog.
    pub(crate) model_catalog: Option<String>,
}

/// How to start an installed CLI: `program args..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// Absolute path of the program to spawn.
    pub(crate) program: PathBuf,
    /// Arguments that come before the CLI's own (the entry script for Node CLIs).
    pub(crate) args: Vec<PathBuf>,
    /// Directories to put first on `PATH` so the CLI's name resolves to this install.
    pub(crate) path_dirs: Vec<PathBuf>,
}

/// Why an install cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Nothing installed in the prefix.
    NotInstalled { package: String, prefix: PathBuf },
    /// Another version installed in the prefix.
    WrongVersion { package: String, found: String, wanted: String },
    /// A file the launch needs does not exist.
    File(PathBuf),
    /// `node = "system"` but no `node` on `PATH`.
    NoSystemNode,
    /// The manifest refers to an install it does not define.
    UnknownInstall(String),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::NotInstalled { package, prefix } => {
                write!(f, "{package} is not installed in {}", prefix.display())
            }
            Missing::WrongVersion { package, found, wanted } => {
                write!(f, "{package} {found} is installed, {wanted} is pinned")
            }
            Missing::File(path) => write!(f, "{} does not exist", path.display()),
            Missing::NoSystemNode => write!(f, "no `node` on PATH (Node.js >= 20.6 is required)"),
            Missing::UnknownInstall(name) => write!(f, "clis.toml refers to an unknown install {name:?}"),
        }
    }
}

impl Manifest {
    /// The embedded manifest, parsed and checked.
    pub(crate) fn pinned() -> Result<Manifest, String> {
        let manifest: Manifest = toml::from_str(MANIFEST).map_err(|e| format!("clis.toml: {e}"))?;
        manifest.check()?;
        Ok(manifest)
    }

    /// The install called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Install> {
        self.install.iter().find(|i| i.name == name)
    }

    /// The install of `provider` at `version`.
    pub(crate) fn find(&self, provider: &str, version: &str) -> Option<&Install> {
        self.install.iter().find(|i| i.provider.as_deref() == Some(provider) && i.version == version)
    }

    fn check(&self) -> Result<(), String> {
        for install in &self.install {
            if install.executable.is_some() == install.script.is_some() {
                return Err(format!(
                    "clis.toml: install {:?} needs exactly one of `executable`, `script`",
                    install.name
                ));
            }
            match (&install.script, install.node.as_deref()) {
                (Some(_), None) => {
                    return Err(format!("clis.toml: install {:?} has a script but no `node`", install.name));
                }
                (Some(_), Some(node)) if node != SYSTEM_NODE && self.get(node).is_none() => {
                    return Err(format!("clis.toml: install {:?} names an unknown node {node:?}", install.name));
                }
                _ => {}
            }
        }
        for (provider, versions) in &self.providers {
            for version in versions.tested() {
                if self.find(provider, version).is_none() {
                    return Err(format!("clis.toml: no [[install]] of {provider} {version}"));
                }
            }
            let (min, latest) = (dotted(&versions.min_supported), dotted(&versions.latest_validated));
            if let Some(outside) = versions.also_tested.iter().find(|v| !(min < dotted(v) && dotted(v) < latest)) {
                return Err(format!(
                    "clis.toml: {provider}'s also_tested {outside} is not between min_supported {} and \
                     latest_validated {}",
                    versions.min_supported, versions.latest_validated
                ));
            }
        }
        Ok(())
    }
}

/// A version's dotted numbers, for ordering (`0.79.10` after `0.79.9`); a part that is not a
/// number counts as 0.
fn dotted(version: &str) -> Vec<u64> {
    version.split('.').map(|part| part.parse().unwrap_or(0)).collect()
}

impl Install {
    /// The npm prefix of this install.
    pub(crate) fn prefix(&self, dir: &Path) -> PathBuf {
        dir.join(&self.name)
    }

    /// The version recorded in the installed package's `package.json`, if any.
    pub(crate) fn installed_version(&self, dir: &Path) -> Option<String> {
        let path = self.prefix(dir).join("node_modules").join(&self.package).join("package.json");
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json.get("version")?.as_str().map(str::to_owned)
    }

    /// Where the Codex model catalog for the fake model lives, for installs that have one.
    pub(crate) fn model_catalog_path(&self, dir: &Path) -> Option<PathBuf> {
        self.model_catalog.as_ref().map(|_| self.prefix(dir).join(MODEL_CATALOG_FILE))
    }

    /// Checks the installed version, then resolves how to start this install.
    pub(crate) fn launch(&self, manifest: &Manifest, dir: &Path) -> Result<Launch, Missing> {
        let prefix = self.prefix(dir);
        match self.installed_version(dir) {
            None => return Err(Missing::NotInstalled { package: self.package.clone(), prefix }),
            Some(found) if found != self.version => {
                return Err(Missing::WrongVersion {
                    package: self.package.clone(),
                    found,
                    wanted: self.version.clone(),
                });
            }
            Some(_) => {}
        }
        let mut path_dirs = Vec::new();
        let launch = if let Some(executable) = &self.executable {
            Launch { program: existing(prefix.join(executable))?, args: Vec::new(), path_dirs: Vec::new() }
        } else {
            let script = existing(prefix.join(self.script.as_deref().unwrap_or_default()))?;
            let program = match self.node.as_deref() {
                Some(SYSTEM_NODE) | None => find_on_path("node").ok_or(Missing::NoSystemNode)?,
                Some(node) => {
                    let node = manifest.get(node).ok_or_else(|| Missing::UnknownInstall(node.to_owned()))?;
                    let launch = node.launch(manifest, dir)?;
                    path_dirs.extend(launch.path_dirs);
                    launch.program
                }
            };
            Launch { program, args: vec![script], path_dirs: Vec::new() }
        };
        path_dirs.push(prefix.join(&self.bin_dir));
        Ok(Launch { path_dirs, ..launch })
    }
}

fn existing(path: PathBuf) -> Result<PathBuf, Missing> {
    if path.is_file() { Ok(path) } else { Err(Missing::File(path)) }
}

/// The first `name` in the directories of `PATH`.
pub(crate) fn find_on_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name.as_ref())).find(|candidate| candidate.is_file())
}

/// The workspace root (the directory holding `clis.toml`).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The install directory: `$AGENT_CLIS_DIR`, else `<workspace>/target/agent-clis`.
pub(crate) fn clis_dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join("target").join("agent-clis"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_manifest_parses_and_covers_every_provider() {
        let manifest = Manifest::pinned().unwrap();
        for provider in ["codex", "claude", "pi"] {
            let versions = &manifest.providers[provider];
            assert!(manifest.find(provider, &versions.min_supported).is_some());
            assert!(manifest.find(provider, &versions.latest_validated).is_some());
            assert!(versions.tested().iter().all(|version| manifest.find(provider, version).is_some()));
        }
    }

    #[test]
    fn an_also_tested_version_lies_between_the_two() {
        let manifest = |also: &str| {
            let text = MANIFEST.replace(r#"also_tested = ["0.79.10"]"#, &format!("also_tested = [{also:?}]"));
            toml::from_str::<Manifest>(&text).unwrap().check()
        };
        assert!(manifest("0.79.10").is_ok());
        let outside = manifest("1.6.0").unwrap_err();
        assert!(outside.contains("also_tested 1.6.0 is not between"), "{outside}");
        assert!(manifest("0.73.0").is_err(), "before min_supported");
    }

    #[test]
    fn missing_install_reports_prefix() {
        let manifest = Manifest::pinned().unwrap();
        let dir = Path::new("/nonexistent/agent-clis");
        let codex = manifest.get("codex-0.171.0").unwrap();
        let err = codex.launch(&manifest, dir).unwrap_err();
        assert_eq!(err, Missing::NotInstalled { package: "@openai/codex".into(), prefix: dir.join("codex-0.171.0") });
    }
}
