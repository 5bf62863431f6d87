//! Pi's session files, `<session dir>/<time>_<session ID>.jsonl`: where pi keeps them and how
//! one is found. Read by the Pi provider and by presets that run pi, before a resume.
//!
//! ```
//! use std::path::Path;
//! use agent_provider_kit::transcript::pi::session_dirs;
//!
//! let home = |name: &str| (name == "HOME").then(|| "/home/me".into());
//! let dirs = session_dirs(home, Some(Path::new("/work/app")), None);
//! assert_eq!(dirs.last().unwrap(), Path::new("/home/me/.pi/agent/sessions/--work-app--"));
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Pi's agent directory: `PI_CODING_AGENT_DIR` (a leading `~` as `$HOME`), else
/// `$HOME/.pi/agent`, with the variables as the CLI will see them (`var` answers for its
/// environment; an empty value counts as none, as pi counts it).
pub fn agent_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |name: &str| var(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    let home = var("HOME");
    match var("PI_CODING_AGENT_DIR") {
        Some(dir) => expand_home(&dir, home.as_deref()),
        None => Some(home?.join(".pi/agent")),
    }
}

/// `dir` with a leading `~` (alone or before a `/`) as `home`, as pi expands it.
fn expand_home(dir: &Path, home: Option<&Path>) -> Option<PathBuf> {
    match dir.strip_prefix("~") {
        Ok(rest) => Some(home?.join(rest)),
        Err(_) => Some(dir.to_path_buf()),
    }
}

/// Where pi looks for the sessions of `cwd`, first to last: `session_dir` (its `--session-dir`:
/// a leading `~` as `$HOME`, taken from `cwd` when relative) alone when it is given; else `PI_CODING_AGENT_SESSION_DIR`,
/// the `sessionDir` of pi's settings (the project's `.pi/settings.json` over the agent
/// directory's `settings.json`) and `<agent dir>/sessions/--<cwd with '/' as '-'>--/`. Pi writes
/// to the first of the last three that is set; all of them are searched, so a session is found
/// after its settings changed. Pi names the last after its `process.cwd()`, the real path: a cwd
/// given with a trailing `/` or through a symbolic link is resolved first (as it stands now).
pub fn session_dirs(
    var: impl Fn(&str) -> Option<OsString>,
    cwd: Option<&Path>,
    session_dir: Option<&Path>,
) -> Vec<PathBuf> {
    let home = var("HOME").filter(|home| !home.is_empty()).map(PathBuf::from);
    // Pi expands a leading `~` and takes a relative directory from its working directory.
    let place = |dir: &Path, cwd: Option<&Path>| -> Option<PathBuf> {
        let dir = expand_home(dir, home.as_deref())?;
        if dir.is_absolute() { Some(dir) } else { Some(cwd?.join(dir)) }
    };
    if let Some(dir) = session_dir {
        return place(dir, cwd).into_iter().collect();
    }
    let cwd = cwd.map(|cwd| std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf()));
    let agent_dir = agent_dir(&var);
    let place = |dir: &str| place(Path::new(dir), cwd.as_deref());
    let setting = |file: Option<PathBuf>| -> Option<PathBuf> {
        let text = std::fs::read(file?).ok()?;
        let settings: Value = serde_json::from_slice(&text).ok()?;
        place(settings.get("sessionDir")?.as_str().filter(|d| !d.is_empty())?)
    };
    let from_env =
        var("PI_CODING_AGENT_SESSION_DIR").and_then(|d| d.to_str().filter(|d| !d.is_empty()).and_then(place));
    let project = setting(cwd.as_ref().map(|cwd| cwd.join(".pi/settings.json")));
    let global = setting(agent_dir.as_ref().map(|d| d.join("settings.json")));
    let default = cwd.as_ref().and_then(|cwd| {
        let name = cwd.to_string_lossy().trim_start_matches('/').replace(['/', '\\', ':'], "-");
        Some(agent_dir.as_ref()?.join("sessions").join(format!("--{name}--")))
    });
    let mut dirs = Vec::new();
    for dir in [from_env, project, global, default].into_iter().flatten() {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The session file of the session with exactly this ID (`<time>_<id>.jsonl`) in `dir`. Pi
/// itself matches `--session <id>` by prefix, which can open another session (UUIDv7 prefixes
/// are timestamps).
pub fn find_session_file(dir: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("_{id}.jsonl");
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(&suffix)))
}

/// [`find_session_file`] in each of `dirs`, first to last, on a blocking thread.
pub async fn session_file(dirs: Vec<PathBuf>, id: &str) -> Option<PathBuf> {
    let id = id.to_owned();
    let look = move || dirs.iter().find_map(|dir| find_session_file(dir, &id));
    tokio::task::spawn_blocking(look).await.ok().flatten()
}

/// A message entry of a pi session file (the user's, the assistant's, a tool's result).
pub fn is_message(line: &Value) -> bool {
    line["type"] == "message" && line["message"].is_object()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_dir::PrivateDir;

    #[tokio::test]
    async fn session_files_are_looked_for_where_pi_keeps_them() {
        let dir = PrivateDir::create(&std::env::temp_dir(), "pi-sessions").unwrap();
        let home = dir.path().join("home");
        let cwd = dir.path().join("work");
        std::fs::create_dir_all(cwd.join(".pi")).unwrap();
        let env = |name: &str| (name == "HOME").then(|| home.clone().into_os_string());
        let real = std::fs::canonicalize(&cwd).unwrap();
        let name = real.to_string_lossy().trim_start_matches('/').replace('/', "-");
        let default = home.join(".pi/agent/sessions").join(format!("--{name}--"));
        assert_eq!(session_dirs(env, Some(&cwd), None), std::slice::from_ref(&default));
        // `--session-dir` alone, from the cwd when relative.
        assert_eq!(session_dirs(env, Some(&cwd), Some(Path::new("s"))), [cwd.join("s")]);
        assert_eq!(session_dirs(env, Some(&cwd), Some(Path::new("/s"))), [PathBuf::from("/s")]);
        assert_eq!(session_dirs(env, Some(&cwd), Some(Path::new("~/s"))), [home.join("s")]);
        // The project's setting and the environment's directory come before the default.
        std::fs::write(cwd.join(".pi/settings.json"), r#"{"sessionDir": "~/kept"}"#).unwrap();
        let with_env = |name: &str| match name {
            "PI_CODING_AGENT_SESSION_DIR" => Some("rel".into()),
            other => env(other),
        };
        assert_eq!(session_dirs(with_env, Some(&cwd), None), [real.join("rel"), home.join("kept"), default.clone()]);

        std::fs::create_dir_all(&default).unwrap();
        let file = default.join("2026-12-05T08-00-00-000Z_0193-abc.jsonl");
        std::fs::write(&file, "{}\n").unwrap();
        std::fs::write(default.join("2026-12-05T08-00-00-000Z_0193-abcd.jsonl"), "{}\n").unwrap();
        let dirs = session_dirs(env, Some(&cwd), None);
        assert_eq!(session_file(dirs.clone(), "0193-abc").await, Some(file), "the exact ID, not a prefix");
        assert_eq!(session_file(dirs, "0193-ab").await, None);
        assert_eq!(agent_dir(|name| (name == "PI_CODING_AGENT_DIR").then(|| "/pi".into())), Some("/pi".into()));
        assert_eq!(agent_dir(|_| Some(OsString::new())), None, "empty values are none");
        let tilde = |name: &str| match name {
            "PI_CODING_AGENT_DIR" => Some("~/agent".into()),
            other => env(other),
        };
        assert_eq!(agent_dir(tilde), Some(home.join("agent")));
        assert_eq!(agent_dir(|name| (name == "PI_CODING_AGENT_DIR").then(|| "~".into())), None, "no HOME");
        let message = serde_json::json!({"type": "message", "message": {"role": "user"}});
        assert!(is_message(&message) && !is_message(&serde_json::json!({"type": "session"})));
    }
}
