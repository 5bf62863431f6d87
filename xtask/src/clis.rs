//! `cargo xtask clis`: installs every `[[install]]` of `clis.toml` with npm, one prefix each,
//! checks `--version` of each CLI and prints how to start it.
//!
//! Idempotent: an install whose `package.json` already has the pinned version and whose files
//! exist is not touched, so a second run makes no npm call.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use xshell::{Shell, cmd};

#[path = "../../agent-testkit/src/clis/manifest.rs"]
mod manifest;

use manifest::{FAKE_MODEL, Install, Launch, Manifest, Missing};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// Runs the task.
pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    let manifest = Manifest::pinned()?;
    let dir = manifest::clis_dir();
    let sh = Shell::new()?;
    let node_version = require_node_and_npm(&sh)?;
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let scratch = scratch_home(&dir)?;

    let mut launches = Vec::new();
    for install in &manifest.install {
        if let Some(min) = &install.node_min {
            require_min_node(install, &node_version, min)?;
        }
        let launch = ensure_installed(&sh, &manifest, install, &dir)?;
        if let Some(catalog) = install.model_catalog_path(&dir) {
            ensure_model_catalog(install, &launch, &catalog, &scratch)?;
        }
        launches.push((install, launch));
    }
    verify_versions(&launches, &scratch)?;

    println!("agent CLIs in {} ({:.1} s):", dir.display(), started.elapsed().as_secs_f64());
    for (install, launch) in &launches {
        println!("  {}: {}", label(&manifest, install), command_line(launch));
    }
    Ok(())
}

/// Fails with an install hint unless `npm` and `node` run; returns `node --version`.
fn require_node_and_npm(sh: &Shell) -> Result<String> {
    const HINT: &str = "cargo xtask clis installs the CLIs with npm: install Node.js >= 20.6 with npm \
                        (for example `apt-get install nodejs npm`) and put `node` and `npm` on PATH";
    cmd!(sh, "npm --version")
        .quiet()
        .ignore_stderr()
        .read()
        .map_err(|_| format!("`npm` not found or not working; {HINT}"))?;
    let node = cmd!(sh, "node --version").quiet().ignore_stderr().read();
    node.map_err(|_| format!("`node` not found or not working; {HINT}").into())
}

fn require_min_node(install: &Install, found: &str, min: &str) -> Result<()> {
    let parse =
        |v: &str| -> Vec<u64> { v.trim().trim_start_matches('v').split('.').filter_map(|p| p.parse().ok()).collect() };
    if parse(found) < parse(min) {
        return Err(
            format!("{} {} needs Node >= {min} on PATH, found {found}", install.package, install.version).into()
        );
    }
    Ok(())
}

/// Installs `install` unless the pinned version is already there; returns how to start it.
fn ensure_installed(sh: &Shell, manifest: &Manifest, install: &Install, dir: &Path) -> Result<Launch> {
    match install.launch(manifest, dir) {
        Ok(launch) => {
            println!("{} {}: already installed", install.package, install.version);
            return Ok(launch);
        }
        Err(Missing::NotInstalled { .. } | Missing::WrongVersion { .. } | Missing::File(_)) => {}
        Err(other) => return Err(format!("{} {}: {other}", install.package, install.version).into()),
    }
    let prefix = install.prefix(dir);
    let spec = format!("{}@{}", install.package, install.version);
    println!("{spec}: installing into {}", prefix.display());
    npm_install(sh, &prefix, &spec)?;
    install.launch(manifest, dir).map_err(|missing| format!("{spec} after npm install: {missing}").into())
}

/// `npm install` of `spec` into `prefix`, tried again after a pause when it fails: the pinned
/// CLIs' own dependencies are not pinned, and a registry part-way through publishing a set of
/// them answers `ETARGET` for a version it lists a minute later (seen here).
fn npm_install(sh: &Shell, prefix: &Path, spec: &str) -> Result<()> {
    const PAUSES: [std::time::Duration; 2] = [std::time::Duration::from_secs(15), std::time::Duration::from_secs(45)];
    // Optional dependencies carry the native binaries, so they must not be omitted.
    let install = || cmd!(sh, "npm install --prefix {prefix} --no-audit --no-fund --no-update-notifier {spec}").run();
    for pause in PAUSES {
        match install() {
            Ok(()) => return Ok(()),
            Err(error) => {
                eprintln!("{spec}: npm install failed ({error}); trying again in {} s", pause.as_secs());
                std::thread::sleep(pause);
            }
        }
    }
    Ok(install()?)
}

/// A directory used as HOME for the CLIs run here, so they write nothing into the real HOME.
fn scratch_home(dir: &Path) -> Result<PathBuf> {
    let home = dir.join(".scratch-home");
    fs::create_dir_all(&home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    Ok(home)
}

/// A command for `launch` with an isolated, offline environment.
fn offline_command(launch: &Launch, scratch: &Path) -> Command {
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .env("HOME", scratch)
        .env("CODEX_HOME", scratch.join(".codex"))
        .env("CLAUDE_CONFIG_DIR", scratch.join(".claude"))
        .env("PI_CODING_AGENT_DIR", scratch.join(".pi"))
        .env("PI_OFFLINE", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .stdin(Stdio::null());
    command
}

/// Writes the Codex model catalog: the bundled metadata of `install.model_catalog` under the
/// fake model's name. Kept until the install changes (it lives in the install's prefix).
fn ensure_model_catalog(install: &Install, launch: &Launch, catalog: &Path, scratch: &Path) -> Result<()> {
    if catalog.is_file() {
        return Ok(());
    }
    let source = install.model_catalog.as_deref().unwrap_or_default();
    fs::create_dir_all(scratch.join(".codex"))?;
    let output = offline_command(launch, scratch).args(["debug", "models", "--bundled"]).output()?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("`codex debug models --bundled` failed ({}): {stderr}", output.status).into());
    }
    let bundled: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("`codex debug models --bundled` printed no JSON model list: {e}"))?;
    let models =
        bundled.get("models").and_then(|m| m.as_array()).ok_or("`codex debug models --bundled`: no `models` array")?;
    let mut entry = models
        .iter()
        .find(|m| m.get("slug").and_then(|s| s.as_str()) == Some(source))
        .cloned()
        .ok_or_else(|| format!("clis.toml: model_catalog {source:?} is not a bundled model of {}", install.name))?;
    entry["slug"] = FAKE_MODEL.into();
    entry["display_name"] = FAKE_MODEL.into();
    let text = serde_json::to_string_pretty(&serde_json::json!({ "models": [entry] }))?;
    let partial = catalog.with_extension("json.partial");
    fs::write(&partial, text)?;
    fs::rename(&partial, catalog)?;
    println!("{}: wrote {}", install.name, catalog.display());
    Ok(())
}

/// Runs `--version` of every install at once and checks the output.
fn verify_versions(launches: &[(&Install, Launch)], scratch: &Path) -> Result<()> {
    let children: Vec<(&Install, Child)> = launches
        .iter()
        .map(|(install, launch)| {
            let mut command = offline_command(launch, scratch);
            command.arg("--version").stdout(Stdio::piped()).stderr(Stdio::piped());
            command
                .spawn()
                .map(|child| (*install, child))
                .map_err(|e| format!("cannot run {}: {e}", command_line(launch)))
        })
        .collect::<Result<_, _>>()?;
    for (install, child) in children {
        let output = child.wait_with_output()?;
        // Some versions print `--version` on stderr.
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        if !output.status.success() || !printed.contains(&install.version_output) {
            return Err(format!(
                "{} {}: `--version` exited with {} and printed {:?}, expected {:?}",
                install.package,
                install.version,
                output.status,
                printed.trim(),
                install.version_output
            )
            .into());
        }
    }
    Ok(())
}

fn label(manifest: &Manifest, install: &Install) -> String {
    let Some(provider) = &install.provider else {
        return format!("{} {} (runtime)", install.package, install.version);
    };
    let roles: Vec<&str> = manifest
        .providers
        .get(provider)
        .map(|v| {
            [("min_supported", &v.min_supported), ("latest_validated", &v.latest_validated)]
                .into_iter()
                .filter(|(_, version)| **version == install.version)
                .map(|(role, _)| role)
                .collect()
        })
        .unwrap_or_default();
    format!("{provider} {} [{}]", install.version, roles.join(", "))
}

fn command_line(launch: &Launch) -> String {
    std::iter::once(&launch.program).chain(&launch.args).map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ")
}
