//! An in-memory [`Exec`] whose "processes" play scripts, for provider unit tests.
//!
//! A test registers a [`Script`] per program name; each spawn of that program plays one. A
//! script writes stdout and stderr lines, sleeps on tokio's clock (so it runs instantly under a
//! paused clock), waits for and checks what the provider writes to stdin, answers stdin lines
//! as they arrive, reacts to signals, and ends with an exit code or a signal. Every spawn is
//! recorded as a [`ScriptedRun`]: the command, its effective environment, everything written to
//! stdin, the signals received and how it ended.
//!
//! For JSON-RPC over JSON Lines, a script expects requests by method and answers them with the
//! ID the client chose ([`Script::expect_request`], [`Script::respond`], [`Script::on_request`]),
//! so it never depends on the order in which a client numbers its requests; requests the script
//! sends itself carry IDs of its own choosing, and [`LineMatch::response`] finds their answers.
//!
//! ```
//! use agent_core::exec::{Command, Exec};
//! use agent_exec::scripted::{Script, ScriptedExec};
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let exec = ScriptedExec::new();
//! exec.script(
//!     "fake-cli",
//!     Script::new()
//!         .stdout(r#"{"type":"ready"}"#)
//!         .expect_request("initialize")
//!         .respond(r#"{"version":1}"#)
//!         .reply("ping", "pong")
//!         .wait_eof()
//!         .exit(0),
//! );
//!
//! let mut child = exec.spawn(Command::new("fake-cli").arg("--json")).await?;
//! let mut stdin = child.stdin.take().expect("stdin");
//! let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
//! assert_eq!(stdout.next_line().await?.as_deref(), Some(r#"{"type":"ready"}"#));
//! stdin.write_all(b"{\"id\":7,\"method\":\"initialize\"}\nping\n").await?;
//! assert_eq!(stdout.next_line().await?.as_deref(), Some(r#"{"id":7,"result":{"version":1}}"#));
//! assert_eq!(stdout.next_line().await?.as_deref(), Some("pong"));
//! drop(stdin);
//! assert!(child.handle.wait().await?.success());
//!
//! let run = exec.last_run().expect("spawned");
//! assert_eq!(run.command().args, ["--json"]);
//! assert_eq!(run.stdin_lines().len(), 2);
//! exec.verify();
//! # Ok(()) }
//! ```

mod process;
mod rpc;
mod script;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_core::exec::{Child, Command, Exec, ExecError, ExitStatus};
use async_trait::async_trait;

use self::process::RunShared;
pub use self::script::{Answer, LineMatch, Script, Step};
use crate::validate::{check_command, child_env};

/// The exit code of a scripted process whose expectation about stdin failed. The failure is
/// also written to its stderr and recorded in [`ScriptedRun::failures`].
pub const EXPECTATION_FAILED_EXIT_CODE: i32 = 101;

/// Builds a script for one spawn from the command being spawned.
type ProgramFn = Arc<dyn Fn(&Command) -> Script + Send + Sync>;

/// An [`Exec`] that plays [`Script`]s instead of starting processes. Cheap to clone; clones
/// share scripts and recorded runs.
///
/// `spawn` validates the command like a real exec (empty argv, NUL bytes, bad environment
/// names and values) but does not touch the filesystem: the working directory is recorded,
/// not checked. A program is found when a script is queued or a program is registered for its
/// exact name or for its file name (`codex` matches `/usr/local/bin/codex`); otherwise
/// spawning fails with [`ExecError::ProgramNotFound`].
#[derive(Clone, Default)]
pub struct ScriptedExec {
    registry: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    queued: HashMap<OsString, VecDeque<Script>>,
    programs: HashMap<OsString, ProgramFn>,
    runs: Vec<ScriptedRun>,
}

impl ScriptedExec {
    /// An exec with no programs.
    pub fn new() -> Self {
        ScriptedExec::default()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `script` for the next spawn of `program`. Queued scripts play in order, before
    /// any program registered with [`ScriptedExec::program`].
    pub fn script(&self, program: impl Into<OsString>, script: Script) -> &Self {
        self.lock().queued.entry(program.into()).or_default().push_back(script);
        self
    }

    /// Registers `program`: every spawn without a queued script plays the script `build`
    /// returns for the command (to echo arguments, say).
    pub fn program(
        &self,
        program: impl Into<OsString>,
        build: impl Fn(&Command) -> Script + Send + Sync + 'static,
    ) -> &Self {
        self.lock().programs.insert(program.into(), Arc::new(build));
        self
    }

    /// Every run so far, in spawn order.
    pub fn runs(&self) -> Vec<ScriptedRun> {
        self.lock().runs.clone()
    }

    /// The most recent run.
    pub fn last_run(&self) -> Option<ScriptedRun> {
        self.lock().runs.last().cloned()
    }

    /// The commands spawned so far, in order.
    pub fn spawned(&self) -> Vec<Command> {
        self.lock().runs.iter().map(|run| run.command().clone()).collect()
    }

    /// Panics if a run broke an expectation of its script or a queued script never played.
    #[track_caller]
    pub fn verify(&self) {
        let registry = self.lock();
        let mut problems: Vec<String> = registry
            .runs
            .iter()
            .flat_map(|run| {
                let program = run.command().program.clone();
                run.failures().into_iter().map(move |failure| format!("{program:?}: {failure}"))
            })
            .collect();
        for (program, scripts) in &registry.queued {
            if !scripts.is_empty() {
                problems.push(format!("{program:?}: {} queued script(s) never spawned", scripts.len()));
            }
        }
        drop(registry);
        assert!(problems.is_empty(), "scripted exec: {}", problems.join("; "));
    }

    fn script_for(&self, command: &Command) -> Option<Script> {
        let mut registry = self.lock();
        let file_name = Path::new(&command.program).file_name().unwrap_or(OsStr::new(""));
        for key in [command.program.as_os_str(), file_name] {
            if let Some(script) = registry.queued.get_mut(key).and_then(VecDeque::pop_front) {
                return Some(script);
            }
        }
        [command.program.as_os_str(), file_name]
            .into_iter()
            .find_map(|key| registry.programs.get(key).cloned())
            .map(|build| build(command))
    }
}

#[async_trait]
impl Exec for ScriptedExec {
    async fn spawn(&self, command: Command) -> Result<Child, ExecError> {
        check_command(&command)?;
        let Some(script) = self.script_for(&command) else {
            let searched_path = !command.program.as_encoded_bytes().contains(&b'/');
            return Err(ExecError::ProgramNotFound { program: command.program, searched_path });
        };
        let env = child_env(&command.env, command.session.as_ref(), command.harness, std::env::vars_os());
        let (limits, policy) = (command.limits.clone(), command.kill_policy);
        let run = ScriptedRun { shared: RunShared::new(command, env) };
        self.lock().runs.push(run.clone());
        Ok(process::start(script, Arc::clone(&run.shared), &limits, policy))
    }
}

impl fmt::Debug for ScriptedExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = self.lock();
        f.debug_struct("ScriptedExec")
            .field("queued", &registry.queued.iter().map(|(k, v)| (k, v.len())).collect::<BTreeMap<_, _>>())
            .field("programs", &registry.programs.keys().collect::<Vec<_>>())
            .field("runs", &registry.runs.len())
            .finish()
    }
}

/// One spawn of a [`ScriptedExec`]: what was asked for and what happened. Cheap to clone.
#[derive(Clone)]
pub struct ScriptedRun {
    shared: Arc<RunShared>,
}

impl ScriptedRun {
    /// The command as spawned.
    pub fn command(&self) -> &Command {
        self.shared.command()
    }

    /// The environment the process would have had: the host's, shaped by the command's
    /// `EnvSpec`, stamped with the session and owner markers.
    pub fn env(&self) -> &BTreeMap<OsString, OsString> {
        self.shared.env()
    }

    /// Every byte written to stdin.
    pub fn stdin(&self) -> Vec<u8> {
        self.shared.stdin()
    }

    /// The newline-terminated lines written to stdin, without their newlines.
    pub fn stdin_lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.stdin())
            .split_inclusive('\n')
            .filter_map(|l| l.strip_suffix('\n'))
            .map(str::to_owned)
            .collect()
    }

    /// Whether stdin was closed (shut down or dropped).
    pub fn stdin_closed(&self) -> bool {
        self.shared.stdin_closed()
    }

    /// The signals sent to the process, in order (SIGKILL included).
    pub fn signals(&self) -> Vec<i32> {
        self.shared.signals()
    }

    /// How the process ended, once it has.
    pub fn status(&self) -> Option<ExitStatus> {
        self.shared.status()
    }

    /// Waits until the process ends.
    pub async fn wait(&self) -> ExitStatus {
        self.shared.wait().await.expect("a run keeps its status sender")
    }

    /// The expectations of the script that failed.
    pub fn failures(&self) -> Vec<String> {
        self.shared.failures()
    }
}

impl fmt::Debug for ScriptedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedRun")
            .field("command", self.command())
            .field("stdin_bytes", &self.stdin().len())
            .field("signals", &self.signals())
            .field("status", &self.status())
            .field("failures", &self.failures())
            .finish_non_exhaustive()
    }
}
