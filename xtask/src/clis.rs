//! `cargo xtask clis`: installs every `[[install]]` of `clis.toml` with npm, one prefix each,
//! checks `--version` of each CLI and prints how to start it.
//!
//! Each entry installs from a committed lockfile, `xtask/clis/<name>/package.json` and
//! `package-lock.json`, with `npm ci`: the CLI's whole dependency tree is pinned, not only the
//! CLI itself. The lockfile keeps every platform's optional packages (the native Codex and
//! Claude Code binaries); `npm ci` installs the ones for this platform.
//!
//! `cargo xtask clis --lock` writes those files from `clis.toml`: run it after changing an
//! `[[install]]` entry. It resolves each entry with `npm install --package-lock-only` in a
//! scratch copy of its committed files, so versions that still fit stay as they are; delete an
//! entry's directory first to resolve it afresh. A tidy test fails while a lockfile is missing or
//! names another version than `clis.toml`.
//!
//! Idempotent: an install whose package has the pinned version, whose files exist and whose
//! `package-lock.json` is the committed one is not touched, so a second run makes no npm call.

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

/// Where the committed lockfiles live, relative to the workspace root: one directory per
/// `[[install]]` name.
const LOCK_DIR: &str = "xtask/clis";

/// The command that writes the lockfiles, for error messages.
const LOCK_COMMAND: &str = "cargo xtask clis --lock";

/// The npm manifest of an install's prefix.
const PACKAGE_JSON: &str = "package.json";

/// The npm lockfile of an install's prefix.
const LOCKFILE: &str = "package-lock.json";

/// `cargo xtask clis [--lock]`.
pub(crate) fn main(args: &[String]) -> Result<()> {
    match args {
        [] => run(),
        [flag] if flag == "--lock" => lock(),
        _ => Err(format!("usage: cargo xtask clis [--lock]; got {args:?}").into()),
    }
}

/// Installs the pinned CLIs.
pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    let manifest = Manifest::pinned()?;
    for install in &manifest.install {
        check_lock(install).map_err(|problem| format!("{problem}; regenerate the lockfiles with `{LOCK_COMMAND}`"))?;
    }
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

/// Installs `install` from its committed lockfile unless that install is already there; returns
/// how to start it.
fn ensure_installed(sh: &Shell, manifest: &Manifest, install: &Install, dir: &Path) -> Result<Launch> {
    let spec = format!("{}@{}", install.package, install.version);
    let prefix = install.prefix(dir);
    let locked = lock_dir(install);
    let committed_lock = read(&locked.join(LOCKFILE))?;
    match install.launch(manifest, dir) {
        Ok(launch) if fs::read_to_string(prefix.join(LOCKFILE)).is_ok_and(|lock| lock == committed_lock) => {
            println!("{spec}: already installed");
            return Ok(launch);
        }
        Ok(_) => println!("{spec}: installed, but not from the committed lockfile; installing again"),
        Err(Missing::NotInstalled { .. } | Missing::WrongVersion { .. } | Missing::File(_)) => {}
        Err(other) => return Err(format!("{spec}: {other}").into()),
    }
    println!("{spec}: installing into {} from {}", prefix.display(), locked.display());
    fs::create_dir_all(&prefix).map_err(|e| format!("cannot create {}: {e}", prefix.display()))?;
    for file in [PACKAGE_JSON, LOCKFILE] {
        let (from, to) = (locked.join(file), prefix.join(file));
        fs::copy(&from, &to).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
    }
    npm_ci(sh, &prefix, &spec)?;
    install.launch(manifest, dir).map_err(|missing| format!("{spec} after npm ci: {missing}").into())
}

/// `npm ci` in `prefix`, tried again after a pause when it fails. Every package is locked to a
/// version and a tarball URL, so what is left to fail is the registry or the network, and such a
/// failure is often over a minute later.
fn npm_ci(sh: &Shell, prefix: &Path, spec: &str) -> Result<()> {
    const PAUSES: [std::time::Duration; 2] = [std::time::Duration::from_secs(15), std::time::Duration::from_secs(45)];
    // Optional dependencies carry the native binaries, so they must not be omitted, whatever
    // the user's npm configuration says.
    let install =
        || cmd!(sh, "npm ci --prefix {prefix} --include=optional --no-audit --no-fund --no-update-notifier").run();
    for pause in PAUSES {
        match install() {
            Ok(()) => return Ok(()),
            Err(error) => {
                eprintln!("{spec}: npm ci failed ({error}); trying again in {} s", pause.as_secs());
                std::thread::sleep(pause);
            }
        }
    }
    Ok(install()?)
}

/// The directory holding the committed `package.json` and `package-lock.json` of `install`.
fn lock_dir(install: &Install) -> PathBuf {
    manifest::workspace_root().join(LOCK_DIR).join(&install.name)
}

/// The `package.json` that pins `install`: its package at exactly its version.
fn package_json(install: &Install) -> serde_json::Value {
    serde_json::json!({ "private": true, "dependencies": { &install.package: &install.version } })
}

/// [`package_json`] as npm writes it, `private` first.
fn package_json_text(install: &Install) -> String {
    let (package, version) = (serde_json::json!(install.package), serde_json::json!(install.version));
    format!("{{\n  \"private\": true,\n  \"dependencies\": {{\n    {package}: {version}\n  }}\n}}\n")
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    serde_json::from_str(&read(path)?).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

/// Fails unless the committed files of `install` exist and pin what `clis.toml` pins: the
/// `package.json` names exactly its package and version, and so does the lockfile, at the root
/// and in `node_modules`.
fn check_lock(install: &Install) -> Result<(), String> {
    check_lock_files(&lock_dir(install), &package_json(install), &install.package, &install.version)
}

fn check_lock_files(dir: &Path, wanted: &serde_json::Value, package: &str, version: &str) -> Result<(), String> {
    let spec = format!("{package}@{version}");
    for file in [PACKAGE_JSON, LOCKFILE] {
        if !dir.join(file).is_file() {
            return Err(format!("{} is missing (clis.toml installs {spec} from it)", dir.join(file).display()));
        }
    }
    let package_json = dir.join(PACKAGE_JSON);
    if read_json(&package_json)? != *wanted {
        return Err(format!("{} does not pin exactly {spec} (clis.toml): want {wanted}", package_json.display()));
    }
    let lockfile = dir.join(LOCKFILE);
    let lock = read_json(&lockfile)?;
    if lock["packages"][""]["dependencies"] != wanted["dependencies"] {
        return Err(format!(
            "{}: the root dependencies are {}, clis.toml pins {spec}",
            lockfile.display(),
            lock["packages"][""]["dependencies"]
        ));
    }
    let locked = &lock["packages"][format!("node_modules/{package}")]["version"];
    if locked.as_str() != Some(version) {
        return Err(format!("{}: locks {package} at {locked}, clis.toml pins {version}", lockfile.display()));
    }
    Ok(())
}

/// Every way the committed lockfiles disagree with `clis.toml`, including a directory under
/// `xtask/clis/` that no `[[install]]` names.
#[cfg(test)]
pub(crate) fn lock_problems() -> Result<Vec<String>> {
    let manifest = Manifest::pinned()?;
    let mut problems: Vec<String> = manifest.install.iter().filter_map(|install| check_lock(install).err()).collect();
    for stale in stale_lock_dirs(&manifest)? {
        problems.push(format!("{} belongs to no [[install]] of clis.toml", stale.display()));
    }
    Ok(problems)
}

/// The directories under `xtask/clis/` whose name is no `[[install]]`'s.
fn stale_lock_dirs(manifest: &Manifest) -> Result<Vec<PathBuf>> {
    let root = manifest::workspace_root().join(LOCK_DIR);
    let Ok(entries) = fs::read_dir(&root) else { return Ok(Vec::new()) };
    let mut stale = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if manifest.get(&name.to_string_lossy()).is_none() {
            stale.push(entry.path());
        }
    }
    stale.sort();
    Ok(stale)
}

/// `cargo xtask clis --lock`: writes every entry's `package.json` from `clis.toml` and its
/// `package-lock.json` with npm, and removes the directories of entries `clis.toml` no longer has.
fn lock() -> Result<()> {
    let manifest = Manifest::pinned()?;
    let sh = Shell::new()?;
    require_node_and_npm(&sh)?;
    let scratch_root = crate::demo::target_dir().join("clis-lock");
    for install in &manifest.install {
        let scratch = scratch_root.join(&install.name);
        if scratch.exists() {
            fs::remove_dir_all(&scratch).map_err(|e| format!("cannot remove {}: {e}", scratch.display()))?;
        }
        fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        let locked = lock_dir(install);
        // The committed lockfile, when there is one, keeps the versions that still fit.
        if locked.join(LOCKFILE).is_file() {
            fs::copy(locked.join(LOCKFILE), scratch.join(LOCKFILE)).map_err(|e| {
                format!("cannot copy {} into {}: {e}", locked.join(LOCKFILE).display(), scratch.display())
            })?;
        }
        fs::write(scratch.join(PACKAGE_JSON), package_json_text(install))
            .map_err(|e| format!("cannot write {}: {e}", scratch.join(PACKAGE_JSON).display()))?;
        // The lockfile records each package's tarball URL whatever the user's npm configuration.
        cmd!(sh, "npm install --prefix {scratch} --package-lock-only --no-audit --no-fund --no-update-notifier")
            .arg("--omit-lockfile-registry-resolved=false")
            .run()
            .map_err(|e| format!("{}@{}: npm could not write the lockfile: {e}", install.package, install.version))?;
        fs::create_dir_all(&locked).map_err(|e| format!("cannot create {}: {e}", locked.display()))?;
        for file in [PACKAGE_JSON, LOCKFILE] {
            fs::copy(scratch.join(file), locked.join(file))
                .map_err(|e| format!("cannot write {}: {e}", locked.join(file).display()))?;
        }
        check_lock(install)?;
        fs::remove_dir_all(&scratch).map_err(|e| format!("cannot remove {}: {e}", scratch.display()))?;
        println!("{}: wrote {}", install.name, locked.join(LOCKFILE).display());
    }
    for stale in stale_lock_dirs(&manifest)? {
        // Only the two files this command writes; anything else keeps the directory, and the
        // tidy test reports it.
        for file in [PACKAGE_JSON, LOCKFILE] {
            let path = stale.join(file);
            if path.is_file() {
                fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            }
        }
        fs::remove_dir(&stale).map_err(|e| format!("cannot remove {}: {e}", stale.display()))?;
        println!("removed {}: no [[install]] of clis.toml has that name", stale.display());
    }
    let _ = fs::remove_dir(&scratch_root);
    Ok(())
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
            let also = v.also_tested.iter().map(|version| ("also_tested", version));
            [("min_supported", &v.min_supported), ("latest_validated", &v.latest_validated)]
                .into_iter()
                .chain(also)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("xtask-clis-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn write(&self, package_json: serde_json::Value, lock: serde_json::Value) {
            fs::write(self.0.join(PACKAGE_JSON), package_json.to_string()).unwrap();
            fs::write(self.0.join(LOCKFILE), lock.to_string()).unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn pinned(version: &str) -> serde_json::Value {
        serde_json::json!({ "private": true, "dependencies": { "cli": version } })
    }

    fn lock(root: &str, installed: &str) -> serde_json::Value {
        serde_json::json!({
            "lockfileVersion": 3,
            "packages": {
                "": { "dependencies": { "cli": root } },
                "node_modules/cli": { "version": installed },
            },
        })
    }

    fn check(dir: &Scratch) -> Result<(), String> {
        check_lock_files(&dir.0, &pinned("1.2.3"), "cli", "1.2.3")
    }

    #[test]
    fn a_lock_that_pins_the_manifest_version_passes() {
        let dir = Scratch::new("agree");
        dir.write(pinned("1.2.3"), lock("1.2.3", "1.2.3"));
        assert_eq!(check(&dir), Ok(()));
    }

    #[test]
    fn a_missing_lockfile_is_named() {
        let dir = Scratch::new("missing");
        fs::write(dir.0.join(PACKAGE_JSON), pinned("1.2.3").to_string()).unwrap();
        let error = check(&dir).unwrap_err();
        assert!(error.contains("package-lock.json is missing"), "{error}");
    }

    #[test]
    fn a_version_bump_without_a_new_lock_fails() {
        let dir = Scratch::new("package-json");
        dir.write(pinned("1.2.2"), lock("1.2.2", "1.2.2"));
        let error = check(&dir).unwrap_err();
        assert!(error.contains("does not pin exactly cli@1.2.3"), "{error}");

        dir.write(pinned("1.2.3"), lock("1.2.2", "1.2.2"));
        let error = check(&dir).unwrap_err();
        assert!(error.contains("the root dependencies are {\"cli\":\"1.2.2\"}"), "{error}");

        dir.write(pinned("1.2.3"), lock("1.2.3", "1.2.2"));
        let error = check(&dir).unwrap_err();
        assert!(error.contains("locks cli at \"1.2.2\", clis.toml pins 1.2.3"), "{error}");
    }

    #[test]
    fn a_range_is_not_an_exact_pin() {
        let dir = Scratch::new("range");
        dir.write(pinned("^1.2.3"), lock("^1.2.3", "1.2.3"));
        assert!(check(&dir).is_err());
    }
}
