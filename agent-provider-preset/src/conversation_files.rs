//! The checks a preset turn makes before it continues a conversation of a CLI whose files the
//! harness knows (a preset's `conversation_files`), as that CLI's native provider makes them.

use std::path::{Path, PathBuf};

use agent_core::exec::EnvSpec;
use agent_core::{ConversationMode, Error, Result, SessionId};
use agent_provider_kit::conversations::{Claim, real_path};
use agent_provider_kit::transcript::{MAX_SCANNED, any_line, claude, pi};

use crate::preset::ConversationFiles;

/// Claims conversation `id` for `session` as a native session of the CLI would (refused while
/// another live session, of any provider, process or preset key, holds it) and checks that the
/// file the CLI will read still holds a message: claude's transcript under `cwd`'s project, or
/// pi's session file where `argv` and `env` (the CLI's environment) make pi look for it. Either
/// CLI would take a file that lost its messages for an empty conversation, reported as
/// continued. A refusal is [`Error::ResumeFailed`].
pub(crate) async fn check_and_claim(
    files: ConversationFiles,
    id: &str,
    session: &SessionId,
    env: &EnvSpec,
    cwd: &Path,
    argv: &[String],
) -> Result<Claim> {
    let failed = |reason: String| Error::ResumeFailed { mode: ConversationMode::Resume, reason };
    match files {
        ConversationFiles::Claude => {
            let config_dir = claude::config_dir(|name| env.value(name));
            let place = config_dir.as_deref().map(real_path).unwrap_or_default();
            let claim = Claim::take("claude", &place, id, session).map_err(|c| failed(c.to_string()))?;
            let Some(config_dir) = config_dir else { return Ok(claim) };
            let transcripts = claude::Transcripts::find(config_dir, Some(cwd.to_path_buf()), id).await;
            if let Some(project) = transcripts.messageless().await {
                return Err(failed(format!(
                    "claude's transcript of conversation `{id}` (under `projects/{project}` of its configuration \
                     directory) holds none of its messages: claude would go on from an empty conversation (no \
                     fresh conversation was started)"
                )));
            }
            Ok(claim)
        }
        ConversationFiles::Pi => {
            let claim = Claim::take("pi", Path::new(""), id, session).map_err(|c| failed(c.to_string()))?;
            let session_dir = option_value(argv, "--session-dir").map(PathBuf::from);
            let dirs = pi::session_dirs(|name| env.value(name), Some(cwd), session_dir.as_deref());
            // A session pi cannot find it refuses itself ("No session found").
            let Some(file) = pi::session_file(dirs, id).await else { return Ok(claim) };
            if any_line(file.clone(), MAX_SCANNED, pi::is_message).await == Some(false) {
                return Err(failed(format!(
                    "pi's session file of conversation `{id}` ({}) holds none of its messages: pi would go on \
                     from an empty conversation (no fresh conversation was started)",
                    file.display()
                )));
            }
            Ok(claim)
        }
    }
}

/// The value the arguments `args` give option `name` as `name value`, the last one given. (Pi
/// reads `--session-dir` in that form only: `--session-dir=value` is an extension's flag to it.)
fn option_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == name {
            found = args.next().map(String::as_str).or(found);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_options_value_is_the_last_one_given() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let given = args(&["--session-dir", "/a", "--verbose", "--session-dir", "/b"]);
        assert_eq!(option_value(&given, "--session-dir"), Some("/b"));
        assert_eq!(option_value(&args(&["--session-dir", "/a", "--session-dir=/b"]), "--session-dir"), Some("/a"));
        assert_eq!(option_value(&args(&["--session-directory", "/x", "--session-dir"]), "--session-dir"), None);
        assert_eq!(option_value(&args(&[]), "--session-dir"), None);
    }
}
