//! The pinned real CLIs, installed by `cargo xtask clis` under `target/agent-clis/`.
//!
//! Versions come from `clis.toml` at the workspace root, embedded at compile time; the install
//! directory can be moved with `AGENT_CLIS_DIR`. A CLI that is not installed (or installed at
//! another version) is an error whose message ends with the command that installs it, so a test
//! that needs it fails with that message instead of skipping.
//!
//! ```no_run
//! use agent_testkit::clis::{Cli, Provider};
//!
//! let codex = Cli::latest(Provider::Codex).unwrap_or_else(|e| panic!("{e}"));
//! let mut command = codex.command();
//! command.arg("--version");
//! ```

mod manifest;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use manifest::FAKE_MODEL;
use manifest::Manifest;

/// The command that installs the pinned CLIs.
pub const INSTALL_COMMAND: &str = "cargo xtask clis";

/// An agent CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Codex (`codex`).
    Codex,
    /// Claude Code (`claude`).
    Claude,
    /// Pi coding agent (`pi`).
    Pi,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [Provider::Codex, Provider::Claude, Provider::Pi];

    /// The provider id used in `clis.toml`.
    pub fn id(self) -> &'static str {
        match self {
            Provider::Codex => "codex",
            Provider::Claude => "claude",
            Provider::Pi => "pi",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// Which pinned version of a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// The oldest version the adapter supports (`min_supported`).
    MinSupported,
    /// The newest version the adapter is validated against (`latest_validated`).
    LatestValidated,
}

/// Why a CLI cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClisError {
    /// The pinned version is not installed.
    #[error("{provider} {version} is not installed: {reason}. Install the pinned CLIs with: {INSTALL_COMMAND}")]
    NotInstalled {
        /// The provider.
        provider: Provider,
        /// The pinned version.
        version: String,
        /// What is missing.
        reason: String,
    },
    /// `clis.toml` is broken or does not list the provider.
    #[error("{0}")]
    Manifest(String),
}

/// An installed CLI and how to start it: [`Cli::program`] followed by [`Cli::leading_args`]
/// (the entry script for Node CLIs), then the CLI's own arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cli {
    provider: Provider,
    version: String,
    program: PathBuf,
    leading_args: Vec<PathBuf>,
    path_dirs: Vec<PathBuf>,
    model_catalog: Option<PathBuf>,
}

impl Cli {
    /// The installed CLI of `provider` at the `channel` version.
    pub fn locate(provider: Provider, channel: Channel) -> Result<Cli, ClisError> {
        Cli::locate_in(provider, channel, &manifest::clis_dir())
    }

    /// The `latest_validated` version of `provider`.
    pub fn latest(provider: Provider) -> Result<Cli, ClisError> {
        Cli::locate(provider, Channel::LatestValidated)
    }

    /// The `min_supported` version of `provider`.
    pub fn min_supported(provider: Provider) -> Result<Cli, ClisError> {
        Cli::locate(provider, Channel::MinSupported)
    }

    /// Every installed version of `provider` its adapter is tested against, newest first:
    /// `latest_validated`, the `also_tested` versions between, `min_supported`.
    pub fn pinned(provider: Provider) -> Result<Vec<Cli>, ClisError> {
        let dir = manifest::clis_dir();
        let manifest = Manifest::pinned().map_err(ClisError::Manifest)?;
        let versions = Cli::versions(&manifest, provider)?;
        versions.tested().into_iter().map(|version| Cli::at_version(&manifest, provider, version, &dir)).collect()
    }

    /// Like [`Cli::locate`], with the install directory given.
    pub fn locate_in(provider: Provider, channel: Channel, dir: &Path) -> Result<Cli, ClisError> {
        let manifest = Manifest::pinned().map_err(ClisError::Manifest)?;
        let versions = Cli::versions(&manifest, provider)?;
        let version = match channel {
            Channel::MinSupported => &versions.min_supported,
            Channel::LatestValidated => &versions.latest_validated,
        };
        Cli::at_version(&manifest, provider, version, dir)
    }

    fn versions(manifest: &Manifest, provider: Provider) -> Result<&manifest::ProviderVersions, ClisError> {
        manifest
            .providers
            .get(provider.id())
            .ok_or_else(|| ClisError::Manifest(format!("clis.toml has no [providers.{provider}]")))
    }

    fn at_version(manifest: &Manifest, provider: Provider, version: &str, dir: &Path) -> Result<Cli, ClisError> {
        let install = manifest
            .find(provider.id(), version)
            .ok_or_else(|| ClisError::Manifest(format!("clis.toml: no [[install]] of {provider} {version}")))?;
        let not_installed = |reason: String| ClisError::NotInstalled { provider, version: version.to_owned(), reason };
        let launch = install.launch(manifest, dir).map_err(|missing| not_installed(missing.to_string()))?;
        let model_catalog = install.model_catalog_path(dir);
        if let Some(catalog) = model_catalog.as_ref().filter(|c| !c.is_file()) {
            return Err(not_installed(format!("the model catalog {} does not exist", catalog.display())));
        }
        Ok(Cli {
            provider,
            version: version.to_owned(),
            program: launch.program,
            leading_args: launch.args,
            path_dirs: launch.path_dirs,
            model_catalog,
        })
    }

    /// A CLI at made-up paths, for tests of code that only reads its fields.
    #[cfg(test)]
    pub(crate) fn for_tests(
        provider: Provider,
        program: PathBuf,
        path_dirs: Vec<PathBuf>,
        model_catalog: Option<PathBuf>,
    ) -> Cli {
        Cli { provider, version: "0.0.0".into(), program, leading_args: Vec::new(), path_dirs, model_catalog }
    }

    /// The provider.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The installed version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The program to spawn: the native binary, or `node` for Pi.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Arguments before the CLI's own: the entry script for Pi, nothing for native binaries.
    pub fn leading_args(&self) -> &[PathBuf] {
        &self.leading_args
    }

    /// Directories that, first on `PATH`, make the CLI's name (and its `node`) resolve to this
    /// install.
    pub fn path_dirs(&self) -> &[PathBuf] {
        &self.path_dirs
    }

    /// Codex: the model catalog that describes the fake model (see `clis.toml`).
    pub fn model_catalog(&self) -> Option<&Path> {
        self.model_catalog.as_deref()
    }

    /// `program leading_args..` with the inherited environment; add the CLI's arguments.
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.leading_args);
        command
    }

    /// `program` and `leading_args` as one argv prefix.
    pub fn argv(&self) -> Vec<OsString> {
        std::iter::once(self.program.as_os_str())
            .chain(self.leading_args.iter().map(|a| a.as_os_str()))
            .map(Into::into)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_install_error_names_the_install_command() {
        let err = Cli::locate_in(Provider::Claude, Channel::LatestValidated, Path::new("/nonexistent")).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("claude 2.1.332 is not installed: "), "{message}");
        assert!(message.ends_with("Install the pinned CLIs with: cargo xtask clis"), "{message}");
    }

    #[test]
    fn pi_has_two_pinned_versions() {
        let dir = Path::new("/nonexistent");
        let latest = Cli::locate_in(Provider::Pi, Channel::LatestValidated, dir).unwrap_err();
        let min = Cli::locate_in(Provider::Pi, Channel::MinSupported, dir).unwrap_err();
        assert!(matches!(latest, ClisError::NotInstalled { ref version, .. } if version == "1.6.0"));
        assert!(matches!(min, ClisError::NotInstalled { ref version, .. } if version == "0.73.1"));
    }
}
