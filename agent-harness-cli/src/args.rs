//! The command line, as clap reads it. Values that need more than clap checks (`--env`,
//! `--store`, `--provider`) stay strings here and are parsed by the command that uses them, so
//! their errors never echo a value that may be a secret.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `agent-harness`: run coding-agent CLIs as supervised sessions.
#[derive(Debug, Parser)]
#[command(name = "agent-harness", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a session: each PROMPT is one turn, in order.
    Run(Box<RunArgs>),
    /// List the sessions in a store.
    Sessions(SessionsArgs),
    /// Print a stored session's events.
    Events(EventsArgs),
    /// Delete a stopped session's history from a store.
    Purge(PurgeArgs),
    /// Check each provider's CLI, version, auth guard and login on this host.
    Doctor(DoctorArgs),
    /// List the presets `run --provider preset:ID` can run: options, defaults, capabilities.
    Presets(PresetsArgs),
}

/// Where presets come from: the shipped ones, a presets directory, and the executables they
/// may start.
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct PresetSourceArgs {
    /// A directory of preset JSON files (a file there replaces a shipped preset with its ID).
    #[arg(long, value_name = "DIR")]
    pub(crate) presets_dir: Option<PathBuf>,
    /// An executable presets may start besides claude, codex and pi (a bare name or an absolute
    /// path; repeatable).
    #[arg(long = "allow-executable", value_name = "PROGRAM")]
    pub(crate) allow_executables: Vec<PathBuf>,
}

/// `agent-harness presets`.
#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 every preset loaded, 1 a preset file did not load (each error on stderr), \
                        64 usage error.")]
pub(crate) struct PresetsArgs {
    #[command(flatten)]
    pub(crate) source: PresetSourceArgs,
    /// One JSON description per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// How requests for approval are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Approvals {
    /// Ask on a terminal; deny when there is none (and in `--json` mode).
    Ask,
    /// Approve every request.
    Approve,
    /// Deny every request.
    Deny,
}

/// How the provider CLI authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Auth {
    /// The CLI's saved login; API keys and endpoint overrides in the environment are refused.
    Subscription,
    /// The environment passes through as given (API keys, custom endpoints).
    Inherit,
}

/// `agent-harness run`.
#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 every turn completed, 1 a turn failed, 2 cancelled or interrupted (Ctrl-C), \
                        3 --timeout ran out, 64 usage error, 69 the provider's CLI cannot be brought up (missing, \
                        too old, no version, exited or hung during its start).")]
pub(crate) struct RunArgs {
    /// The provider: codex, claude, pi or preset:ID (overrides the config's).
    #[arg(long, value_name = "PROVIDER")]
    pub(crate) provider: Option<String>,
    /// Where `preset:ID` providers come from.
    #[command(flatten)]
    pub(crate) presets: PresetSourceArgs,
    /// The agent's working directory (default: the current directory; with --resume, the one the
    /// session ran in).
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// The provider's model name.
    #[arg(long, value_name = "MODEL")]
    pub(crate) model: Option<String>,
    /// The system prompt (Codex: developer instructions).
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub(crate) system_prompt: Option<String>,
    /// When the agent must ask: untrusted, on-failure, on-request or never.
    #[arg(long, value_name = "POLICY")]
    pub(crate) approval_policy: Option<String>,
    /// How far commands reach: read-only, workspace-write or danger-full-access.
    #[arg(long, value_name = "MODE")]
    pub(crate) sandbox: Option<String>,
    /// How approvals are answered.
    #[arg(long, value_enum, default_value_t = Approvals::Ask)]
    pub(crate) approvals: Approvals,
    /// An answer to the agent's next question (repeat for later questions, in order).
    #[arg(long = "answer", value_name = "TEXT", allow_hyphen_values = true)]
    pub(crate) answers: Vec<String>,
    /// A variable for the provider process (repeatable). Values are never printed.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// How the provider CLI authenticates.
    #[arg(long, value_enum)]
    pub(crate) auth: Option<Auth>,
    /// The provider CLI's executable (default: found on PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) cli_path: Option<PathBuf>,
    /// Where events are kept: `memory` or `sqlite:PATH`.
    #[arg(long, value_name = "STORE", default_value = "memory")]
    pub(crate) store: String,
    /// The session's ID (generated when left out).
    #[arg(long, value_name = "ID", conflicts_with = "resume")]
    pub(crate) session_id: Option<String>,
    /// Continue the stopped session ID of the store, under its own ID.
    #[arg(long, value_name = "ID")]
    pub(crate) resume: Option<String>,
    /// A SessionConfig JSON file; the flags override what it sets.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Give up after this many seconds: cancel the turn, stop the session, exit 3.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub(crate) timeout: Option<f64>,
    /// Print every event as one JSON line and answer requests by policy.
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompts, one turn each.
    #[arg(value_name = "PROMPT", required = true)]
    pub(crate) prompts: Vec<String>,
}

/// `agent-harness sessions`.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// The store: `sqlite:PATH`.
    #[arg(long, value_name = "STORE")]
    pub(crate) store: String,
    /// One JSON snapshot per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `agent-harness events`.
#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// The store: `sqlite:PATH`.
    #[arg(long, value_name = "STORE")]
    pub(crate) store: String,
    /// The session.
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// Only events with a greater seq.
    #[arg(long, value_name = "N")]
    pub(crate) after: Option<u64>,
    /// Keep printing new events until the session ends (or Ctrl-C).
    #[arg(long)]
    pub(crate) follow: bool,
    /// One JSON event per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `agent-harness purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// The store: `sqlite:PATH`.
    #[arg(long, value_name = "STORE")]
    pub(crate) store: String,
    /// The session.
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// Purge a session the store still shows running (its host was killed), or whose stored
    /// snapshot cannot be read (damaged, or written by a newer release).
    #[arg(long)]
    pub(crate) force: bool,
}

/// `agent-harness doctor`.
#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 every provider checked is ready, 1 one is not logged in or the auth guard \
                        refuses it under --auth subscription, 64 usage error, 69 a provider's CLI is missing or \
                        too old.")]
pub(crate) struct DoctorArgs {
    /// Check only this provider: codex, claude or pi (repeatable; default: all).
    #[arg(long = "provider", value_name = "PROVIDER")]
    pub(crate) providers: Vec<String>,
    /// One JSON object per provider per line.
    #[arg(long)]
    pub(crate) json: bool,
}
