//! Turns: one request within a session, and its outcome.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Event, Usage};
use crate::exec::ExitStatus;
use crate::ids::{SessionId, TurnId};
use crate::time::Timestamp;

/// Where a turn stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnStatus {
    /// Recorded; the provider has not accepted it yet.
    Starting,
    /// The provider accepted it and is working.
    Running,
    /// Waiting on at least one request.
    AwaitingInput,
    /// Cancellation was requested; waiting for the provider's outcome.
    Cancelling,
    /// Finished successfully.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled by the provider.
    Cancelled,
    /// Interrupted (provider interrupt or forced stop).
    Interrupted,
}

impl TurnStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Starting => "starting",
            TurnStatus::Running => "running",
            TurnStatus::AwaitingInput => "awaiting_input",
            TurnStatus::Cancelling => "cancelling",
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::Cancelled => "cancelled",
            TurnStatus::Interrupted => "interrupted",
        }
    }

    /// True for the four terminal statuses.
    pub fn is_terminal(self) -> bool {
        matches!(self, TurnStatus::Completed | TurnStatus::Failed | TurnStatus::Cancelled | TurnStatus::Interrupted)
    }
}

/// One part of structured turn input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputItem {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A local image file.
    LocalImage {
        /// Absolute path.
        path: PathBuf,
    },
    /// An image by URL (including `data:` URLs).
    ImageUrl {
        /// The URL.
        url: String,
    },
    /// A configured skill to apply in this turn.
    Skill {
        /// The skill's name.
        name: String,
    },
}

/// What a turn asks the agent to do.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TurnInput {
    /// A plain prompt.
    Text(String),
    /// Structured input (needs the `structured_input` capability).
    Items(Vec<InputItem>),
}

impl TurnInput {
    /// The input's text parts joined by newlines.
    pub fn text(&self) -> String {
        match self {
            TurnInput::Text(t) => t.clone(),
            TurnInput::Items(items) => items
                .iter()
                .filter_map(|i| match i {
                    InputItem::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        match self {
            TurnInput::Text(t) => t.trim().is_empty(),
            TurnInput::Items(items) => items.is_empty(),
        }
    }

    /// Why this input cannot be sent, if it cannot: nothing in it, or an item that says nothing
    /// (blank text, a skill without a name, an image URL that is blank or a file path that is
    /// not absolute). [`Harness::start_turn`](crate::Harness::start_turn) refuses such input
    /// with `InvalidOption` for `input`.
    pub fn problem(&self) -> Option<String> {
        if self.is_empty() {
            return Some("must not be empty".into());
        }
        let TurnInput::Items(items) = self else { return None };
        items.iter().enumerate().find_map(|(n, item)| {
            let what = match item {
                InputItem::Text { text } if text.trim().is_empty() => "is blank text",
                InputItem::Skill { name } if name.trim().is_empty() => "is a skill without a name",
                InputItem::ImageUrl { url } if url.trim().is_empty() => "is an image without a URL",
                InputItem::LocalImage { path } if !path.is_absolute() => "is an image whose path is not absolute",
                _ => return None,
            };
            Some(format!("item {n} {what}"))
        })
    }
}

impl std::fmt::Display for TurnStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for TurnInput {
    // Prompts can carry anything the caller typed; Debug shows only their size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnInput::Text(t) => write!(f, "TurnInput::Text({} bytes)", t.len()),
            TurnInput::Items(items) => write!(f, "TurnInput::Items({} items)", items.len()),
        }
    }
}

impl From<&str> for TurnInput {
    fn from(s: &str) -> Self {
        TurnInput::Text(s.to_owned())
    }
}

impl From<String> for TurnInput {
    fn from(s: String) -> Self {
        TurnInput::Text(s)
    }
}

impl From<Vec<InputItem>> for TurnInput {
    fn from(items: Vec<InputItem>) -> Self {
        TurnInput::Items(items)
    }
}

/// A turn handle: plain data, safe to store and send anywhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Turn {
    /// Turn ID.
    pub id: TurnId,
    /// The session it runs in.
    pub session_id: SessionId,
    /// What was asked.
    pub input: TurnInput,
    /// Status when this handle was made.
    pub status: TurnStatus,
    /// Caller-owned metadata.
    #[serde(default)]
    pub metadata: serde_json::Map<String, Value>,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// When the provider accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// The terminal result, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TurnResult>,
}

impl Turn {
    /// A reference to this turn.
    pub fn turn_ref(&self) -> TurnRef {
        TurnRef { session_id: self.session_id.clone(), id: self.id.clone() }
    }
}

/// The two IDs that name a turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TurnRef {
    /// The session.
    pub session_id: SessionId,
    /// The turn.
    pub id: TurnId,
}

impl From<&Turn> for TurnRef {
    fn from(turn: &Turn) -> Self {
        turn.turn_ref()
    }
}

/// The provider's result carried by a terminal event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnResult {
    /// The final assistant text, where available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Token usage of the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The provider's turn ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_turn_id: Option<String>,
    /// Why it did not complete (failure reason, forced stop, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Provider error details (e.g. Codex `codexErrorInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_null::deserialize")]
    pub error: Option<Value>,
    /// The CLI process's exit status, when the turn failed because it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<ExitStatus>,
    /// The last lines of the CLI's stderr, when it exited without a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// Provider-specific result fields (duration, stop reason, …).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_null::deserialize")]
    pub details: Option<Value>,
    /// Who or what ended the turn, set by the runtime on every terminal event it records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<EndCause>,
}

/// Who or what ended a turn: tells a user's cancel, a stall, a forced stop and a shutdown apart
/// without reading `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndCause {
    /// The provider ended it on its own (completed, or failed by itself).
    Provider,
    /// The caller cancelled it (`Harness::cancel`); the provider's terminal event followed.
    Cancel,
    /// The inactivity deadline cancelled it (`TurnOptions::inactivity_timeout`).
    Stalled,
    /// The provider refused to admit it.
    Rejected,
    /// `stop_session(.., force: true)` interrupted it.
    ForcedStop,
    /// The harness shut down (dropped, or `Harness::shutdown`).
    HarnessShutdown,
    /// The session stopped because its store failed (`StoreFailurePolicy::Stop`).
    StoreFailed,
    /// The provider's transport went down (the CLI exited). A provider tells the runtime so by
    /// setting it as `ended_by` of the terminal event it sends for the exit; any other
    /// `ended_by` a provider sets is replaced by the runtime's.
    TransportLost,
    /// An uncertain provider outcome (a timeout, a crash) retired the session.
    Uncertain,
}

impl TurnResult {
    /// A result that only carries a reason.
    pub fn reason(reason: impl Into<String>) -> Self {
        TurnResult { reason: Some(reason.into()), ..TurnResult::default() }
    }

    /// A result that only carries final text.
    pub fn text(text: impl Into<String>) -> Self {
        TurnResult { text: Some(text.into()), ..TurnResult::default() }
    }
}

/// What [`crate::Harness::await_turn`] returns for a finished turn.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The terminal status.
    pub status: TurnStatus,
    /// The provider's result.
    pub result: TurnResult,
    /// The terminal event itself.
    pub event: Arc<Event>,
}

impl TurnOutcome {
    /// Builds an outcome from a terminal event; `None` for other events.
    pub fn from_event(event: Arc<Event>) -> Option<Self> {
        let end = event.kind.terminal_end()?;
        Some(TurnOutcome { status: end.status, result: end.result.clone(), event: event.clone() })
    }
}
