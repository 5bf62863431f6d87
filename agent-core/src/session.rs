//! Session handles, status and stored snapshots.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{ProviderId, SessionId, TurnId};
use crate::request::Request;
use crate::time::Timestamp;
use crate::turn::Turn;

/// A stable handle to a session: plain data, no task or process inside.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionRef {
    /// The provider it runs on.
    pub provider: ProviderId,
    /// Its logical ID.
    pub id: SessionId,
}

impl fmt::Display for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.id)
    }
}

/// Lifecycle state of a session (live or as last stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionState {
    /// The provider runtime is opening.
    Opening,
    /// Opened; the initial store commit and hand-off are running.
    Finalizing,
    /// Ready for a turn.
    Idle,
    /// A turn was recorded and awaits provider admission.
    Starting,
    /// A turn is running.
    Running,
    /// A turn waits on a request.
    AwaitingInput,
    /// Cancellation was requested.
    Cancelling,
    /// The provider transport failed or was retired; no new turns.
    Unavailable,
    /// Closed by the harness; the snapshot's `ended` says why.
    Closed,
    /// Not live, but its end was never recorded: its host was killed, or its store failed before
    /// the final write. The rest of the snapshot is the last thing known. The runtime never writes
    /// this state; the harness reports a stale snapshot this way when it reads one back.
    Abandoned,
}

impl SessionState {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Opening => "opening",
            SessionState::Finalizing => "finalizing",
            SessionState::Idle => "idle",
            SessionState::Starting => "starting",
            SessionState::Running => "running",
            SessionState::AwaitingInput => "awaiting_input",
            SessionState::Cancelling => "cancelling",
            SessionState::Unavailable => "unavailable",
            SessionState::Closed => "closed",
            SessionState::Abandoned => "abandoned",
        }
    }

    /// True for the states of a session a runtime holds (idle through unavailable); false for
    /// the startup states and the two ends, closed and abandoned.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            SessionState::Idle
                | SessionState::Starting
                | SessionState::Running
                | SessionState::AwaitingInput
                | SessionState::Cancelling
                | SessionState::Unavailable
        )
    }

    /// True while a turn is active.
    pub fn has_active_turn(self) -> bool {
        matches!(
            self,
            SessionState::Starting | SessionState::Running | SessionState::AwaitingInput | SessionState::Cancelling
        )
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the session's history is being persisted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
#[non_exhaustive]
pub enum Durability {
    /// Every event is committed to the store before subscribers see it.
    #[default]
    Durable,
    /// The session runs without a store.
    Disabled,
    /// A store write failed; the session continues live-only.
    Degraded {
        /// The store's error.
        reason: String,
        /// When it failed.
        at: Timestamp,
    },
}

/// What [`crate::Harness::status`] reports.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The session.
    pub session: SessionRef,
    /// Its lifecycle state.
    pub status: SessionState,
    /// Persistence state.
    pub durability: Durability,
    /// The provider's own session/thread ID, once known.
    pub provider_session_id: Option<String>,
    /// The active turn.
    pub current_turn: Option<Turn>,
    /// Pending requests, oldest first.
    pub pending_requests: Vec<Request>,
    /// The sequence number of the last published event.
    pub last_seq: u64,
}

/// Why the harness closed a session (data of `session_closed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum CloseReason {
    /// `stop_session` on an idle session.
    Stopped,
    /// `stop_session` with `force`.
    ForcedStop,
    /// The store failed under the `Stop` policy.
    StoreFailed,
    /// The harness was dropped or shut down.
    HarnessShutdown,
}

impl CloseReason {
    /// The snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloseReason::Stopped => "stopped",
            CloseReason::ForcedStop => "forced_stop",
            CloseReason::StoreFailed => "store_failed",
            CloseReason::HarnessShutdown => "harness_shutdown",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session's runtime ended; what [`crate::Harness::monitor`] resolves with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum ExitReason {
    /// Closed normally ([`CloseReason`] says how).
    Closed {
        /// How.
        reason: CloseReason,
    },
    /// Retired after an uncertain provider outcome (admission or command timeout, crash).
    Retired {
        /// What was uncertain.
        reason: String,
    },
    /// The store failed and the policy is `Stop`.
    StoreFailed {
        /// The store's error.
        reason: String,
    },
    /// The session is not live in this harness: a subscription replays its stored history (a
    /// session whose end is known reports that end instead, an abandoned one `Abandoned`).
    NotLive,
    /// The runtime ended without recording its end (host killed, store lost); the stored
    /// snapshot was last written in `last_status`.
    Abandoned {
        /// The status the stored snapshot was left in.
        last_status: SessionState,
    },
    /// The runtime task ended unexpectedly (a bug); the reason is the panic message if any.
    Crashed {
        /// What is known.
        reason: String,
    },
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitReason::Closed { reason } => write!(f, "closed ({reason})"),
            ExitReason::Retired { reason } => write!(f, "retired: {reason}"),
            ExitReason::StoreFailed { reason } => write!(f, "store failed: {reason}"),
            ExitReason::NotLive => f.write_str("not live in this harness"),
            ExitReason::Abandoned { last_status } => {
                write!(f, "abandoned: its end was never recorded (last stored status: {last_status})")
            }
            ExitReason::Crashed { reason } => write!(f, "crashed: {reason}"),
        }
    }
}

/// Marks a snapshot whose startup hand-off has not been acknowledged by its caller.
///
/// A later `start_session` with the same ID reclaims such a snapshot whatever its `reuse`
/// setting: the startup never completed, so nobody holds a handle to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartupMarker {
    /// Unique per startup attempt.
    pub attempt_id: String,
    /// Always `false` while present.
    pub acknowledged: bool,
}

/// The harness that holds (or last held) a session: a process of one host, and a `Harness` in
/// that process. A second harness sharing the store reads it to tell a session that is live
/// elsewhere from one whose host died without recording its end (see
/// [`Error::SessionLiveElsewhere`](crate::Error::SessionLiveElsewhere)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionOwner {
    /// The harness process's PID.
    pub pid: u32,
    /// When that process started, in clock ticks since boot (`/proc/<pid>/stat`), so a PID used
    /// again by a later process is not mistaken for it.
    pub started: u64,
    /// The boot it ran in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// Which harness of that process: a number unique within it.
    pub harness: u64,
}

/// The persisted summary of a session. Holds no environment values, MCP configuration or
/// provider options; `config_fingerprint` detects configuration drift without storing them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionSnapshot {
    /// The session.
    pub id: SessionId,
    /// Its provider.
    pub provider: ProviderId,
    /// Lifecycle state when written.
    pub status: SessionState,
    /// The provider's session/thread ID.
    #[serde(default)]
    pub provider_session_id: Option<String>,
    /// The active turn when written.
    #[serde(default)]
    pub current_turn_id: Option<TurnId>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Model, if chosen.
    #[serde(default)]
    pub model: Option<String>,
    /// Caller metadata (never put secrets here).
    #[serde(default)]
    pub metadata: serde_json::Map<String, Value>,
    /// Hex digest of the session configuration (values of secrets included only as digests).
    pub config_fingerprint: String,
    /// Present while the startup hand-off is unacknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<StartupMarker>,
    /// The harness that ran the session last, written with each run's initial commit; `None`
    /// where the host cannot be identified (outside Linux) and in stores written before it.
    /// Boxed: a session's task holds its snapshot in several places, and this keeps each one
    /// pointer-sized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Box<SessionOwner>>,
    /// How the session ended, once it has (written with the final `closed` snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<ExitReason>,
    /// Whether the stored history is complete: `degraded` when a store write failed and the
    /// session went on live-only (events after that point are missing).
    #[serde(default)]
    pub durability: Durability,
    /// The last `seq` the session published, in the final snapshot of a session whose stored
    /// history is incomplete ([`Durability::Degraded`]): subscribers saw events the store never
    /// got, and a resume goes on after them, so that no `seq` names two events. `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_seq: Option<u64>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// When this snapshot was written.
    pub updated_at: Timestamp,
}

impl SessionSnapshot {
    /// True when the snapshot says a runtime holds the session: its status is a live state
    /// ([`SessionState::is_live`]) and its startup hand-off completed. Stores refuse to delete
    /// such a session ([`crate::StoreError::SessionLive`]); `Harness::purge_session` reconciles a
    /// stale one first.
    pub fn is_open(&self) -> bool {
        self.status.is_live() && self.startup.is_none()
    }
}

/// One entry of [`crate::Harness::list_stored_sessions`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StoredSession {
    /// The session.
    pub session_id: SessionId,
    /// Its stored snapshot.
    pub snapshot: SessionSnapshot,
    /// True when a live session with this ID runs in this harness.
    pub live: bool,
}
