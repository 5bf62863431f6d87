//! Which provider conversation a session opens, and the checks on the IDs that name one.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;
#[cfg(doc)]
use crate::{error::Error, options::SessionOptions};

/// Which provider conversation a session opens: a new one (the default), or an earlier one
/// resumed or forked. A session never falls back to a fresh conversation when the one asked for
/// cannot be continued: the start fails with [`Error::ResumeFailed`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "from")]
#[non_exhaustive]
pub enum Conversation {
    /// A new provider conversation.
    #[default]
    New,
    /// Continue an earlier conversation (needs the `resume` capability).
    Resume(ConversationSource),
    /// Branch an earlier conversation into a new one (needs the `fork` capability).
    Fork(ConversationSource),
}

impl Conversation {
    /// Resume or fork; `None` for a new conversation.
    pub fn mode(&self) -> Option<ConversationMode> {
        match self {
            Conversation::New => None,
            Conversation::Resume(_) => Some(ConversationMode::Resume),
            Conversation::Fork(_) => Some(ConversationMode::Fork),
        }
    }

    /// Where a resumed or forked conversation comes from.
    pub fn source(&self) -> Option<&ConversationSource> {
        match self {
            Conversation::New => None,
            Conversation::Resume(source) | Conversation::Fork(source) => Some(source),
        }
    }
}

/// Where a resumed or forked conversation comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConversationSource {
    /// A stopped session of the session's store: its provider conversation is the one recorded in
    /// its snapshot. Resuming it continues the session under its own ID and its stored history
    /// (`seq` goes on where it stopped); forking it starts a new session.
    Session(SessionId),
    /// A provider conversation by the provider's own ID (a Codex thread ID, a Claude session ID).
    /// The session starts with an empty history.
    Provider(String),
}

/// The longest provider conversation ID taken, in bytes: a path's length, far beyond the UUIDs
/// the CLIs use, and far below the longest argument Linux passes (128 KiB).
pub const MAX_PROVIDER_CONVERSATION_ID: usize = 4096;

/// Why `id` cannot be a provider conversation ID, if it cannot: blank, starting with `-` (a CLI
/// given `--resume <id>` would read it as an option of its own — `--help`, or a flag the auth
/// guard refuses in `extra_args`), holding a control character, or longer than
/// [`MAX_PROVIDER_CONVERSATION_ID`] bytes (passed back as one argument, it would fail every
/// later turn's spawn). Checked for the IDs callers pass ([`SessionOptions::validate`]), the IDs
/// a stored session records when it is resumed, and the IDs a preset reads from its CLI's
/// output.
///
/// ```
/// use agent_core::options::provider_conversation_problem;
///
/// assert_eq!(provider_conversation_problem("5e55105e-0000-4000-8000-000000000001"), None);
/// assert!(provider_conversation_problem("--settings={}").is_some());
/// assert!(provider_conversation_problem(" ").is_some());
/// assert!(provider_conversation_problem("a\nb").is_some());
/// assert!(provider_conversation_problem(&"s".repeat(200_000)).is_some());
/// ```
pub fn provider_conversation_problem(id: &str) -> Option<&'static str> {
    if id.trim().is_empty() {
        Some("must not be empty")
    } else if id.len() > MAX_PROVIDER_CONVERSATION_ID {
        Some("is longer than 4096 bytes")
    } else if id.starts_with('-') {
        Some("must not start with `-` (the CLI would read it as an option)")
    } else if id.chars().any(char::is_control) {
        Some("must not hold control characters")
    } else {
        None
    }
}

/// Resume or fork, for errors and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConversationMode {
    /// Continue the conversation.
    Resume,
    /// Branch the conversation.
    Fork,
}

impl fmt::Display for ConversationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConversationMode::Resume => "resume",
            ConversationMode::Fork => "fork",
        })
    }
}
