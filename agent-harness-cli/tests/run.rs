//! `agent-harness` run as a process against the real codex, claude and pi (from `cargo xtask
//! clis`), offline, each with the testkit's fake model server on 127.0.0.1.
//!
//! The command runs with a cleared environment plus the offline environment's variables and
//! `--auth inherit`, so the CLI it spawns reaches the fake server and nothing else.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Longest any one command may take.
const LIMIT: Duration = Duration::from_secs(90);

/// A value passed with `--env` that must never be printed.
const SECRET: &str = "s3cr3t-env-value-91f2";

/// Typing at a terminal: when the screen so far passes the test, the text (and a newline).
type Step = (Box<dyn Fn(&str) -> bool + Send>, &'static str);

/// One test's world: a pinned CLI, a fake model server and an offline environment.
struct World {
    cli: Cli,
    env: OfflineEnv,
    _server: FakeModel,
}

impl World {
    async fn start(provider: Provider, scenario: Scenario) -> World {
        let cli = Cli::latest(provider).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"));
        let server = FakeModel::start(scenario).await.expect("fake model server");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        World { cli, env, _server: server }
    }

    /// `agent-harness ARGS` in the offline environment, nothing inherited.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-harness"));
        command.env_clear().envs(self.env.vars()).current_dir(self.env.workspace()).args(args);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        command
    }

    /// `run --json` arguments that point the provider at the pinned CLI (pi through a config
    /// file with its entry script and offline flags), with `extra` and the prompts after.
    fn run_args(&self, extra: &[&str], prompts: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = ["run", "--json", "--auth", "inherit", "--env"].map(String::from).to_vec();
        args.push(format!("AGENT_HARNESS_TEST_SECRET={SECRET}"));
        match self.cli.provider() {
            Provider::Pi => {
                let config = serde_json::json!({
                    "provider": "pi",
                    "provider_options": {
                        "binary": self.cli.program(),
                        "binary_args": self.cli.leading_args(),
                        "args": self.env.args(),
                    }
                });
                let path = self.env.dir().join("pi-config.json");
                std::fs::write(&path, config.to_string()).expect("config written");
                args.extend(["--config".into(), path.display().to_string()]);
            }
            provider => {
                args.extend(["--provider".into(), provider.id().into()]);
                args.extend(["--cli-path".into(), self.cli.program().display().to_string()]);
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(prompts.iter().map(|s| s.to_string()));
        args
    }

    /// `run` (human mode) on a pseudo-terminal, typing `y` once when `answer` says the screen
    /// so far asks; its exit status and everything it showed.
    async fn on_a_terminal(
        &self,
        extra: &[&str],
        prompts: &[&str],
        answer: impl Fn(&str) -> bool + Send + 'static,
    ) -> (std::process::ExitStatus, String) {
        self.on_a_terminal_typing(extra, prompts, answer, "y").await
    }

    /// [`World::on_a_terminal`], typing `typed` (and a newline) once `answer` says so.
    async fn on_a_terminal_typing(
        &self,
        extra: &[&str],
        prompts: &[&str],
        answer: impl Fn(&str) -> bool + Send + 'static,
        typed: &'static str,
    ) -> (std::process::ExitStatus, String) {
        self.on_a_terminal_steps(extra, prompts, vec![(Box::new(answer), typed)]).await
    }

    /// [`World::on_a_terminal`], typing each step's text (and a newline) once the screen so
    /// far passes its test, the steps in order.
    async fn on_a_terminal_steps(
        &self,
        extra: &[&str],
        prompts: &[&str],
        steps: Vec<Step>,
    ) -> (std::process::ExitStatus, String) {
        let mut args = self.run_args(extra, prompts);
        args.retain(|arg| arg != "--json");
        let (master, slave) = pty();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"));
        command.env_clear().envs(self.env.vars()).current_dir(self.env.workspace()).args(&args);
        command.stdin(slave.try_clone().expect("pty")).stdout(slave.try_clone().expect("pty")).stderr(slave);
        let mut child = command.spawn().expect("spawn");
        drop(command); // closes this process's copies of the terminal's slave side
        let mut reader = std::fs::File::from(master.try_clone().expect("pty"));
        let mut writer = std::fs::File::from(master);
        let screen = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let (mut screen, mut buf, mut steps) = (String::new(), [0u8; 4096], steps.into_iter().peekable());
            // The read fails (EIO) once the command exited and the slave side closed.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                screen.push_str(&String::from_utf8_lossy(&buf[..n]));
                if let Some((_, text)) = steps.next_if(|(ready, _)| ready(&screen)) {
                    writer.write_all(format!("{text}\n").as_bytes()).expect("typed");
                }
            }
            screen
        });
        let Ok(screen) = tokio::time::timeout(LIMIT, screen).await else {
            // Ended, its terminal closes and the reader above returns: the test fails rather
            // than waits on it for good.
            let _ = child.kill();
            let _ = child.wait();
            panic!("the command did not end within {LIMIT:?}");
        };
        (child.wait().expect("status"), screen.expect("screen"))
    }

    async fn run(&self, extra: &[&str], prompts: &[&str]) -> Output {
        let args = self.run_args(extra, prompts);
        self.output(&args.iter().map(String::as_str).collect::<Vec<_>>()).await
    }

    async fn output(&self, args: &[&str]) -> Output {
        self.output_of(self.command(args), args).await
    }

    async fn output_of(&self, mut command: Command, args: &[&str]) -> Output {
        let output = tokio::time::timeout(LIMIT, command.output())
            .await
            .unwrap_or_else(|_| panic!("agent-harness {args:?} did not finish"))
            .expect("agent-harness runs");
        let out = Output {
            status: output.status,
            stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
        };
        assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET), "an --env value was printed: {out:?}");
        out
    }

    /// Processes whose working directory is inside the environment: the CLI and its children.
    fn processes(&self) -> Vec<u32> {
        let dir = std::fs::canonicalize(self.env.dir()).expect("env dir");
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
            .collect()
    }

    /// Waits a moment for the environment's processes to go, and fails if any stay.
    async fn assert_no_process_left(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.processes().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.processes(), Vec::<u32>::new(), "a CLI process outlived agent-harness");
    }
}

#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Output {
    /// Every stdout line as an event, checked: JSON objects with a `type`, `seq` strictly
    /// increasing.
    fn events(&self) -> Vec<Value> {
        let events: Vec<Value> = self
            .stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON event ({e}): {line}")))
            .collect();
        let mut last = 0;
        for event in &events {
            assert!(event["type"].is_string(), "an event without a type: {event}");
            let seq = event["seq"].as_u64().unwrap_or_else(|| panic!("an event without a seq: {event}"));
            assert!(seq > last, "seq {seq} after {last}");
            last = seq;
        }
        events
    }

    fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect()
}

fn terminals(events: &[Value]) -> Vec<&str> {
    types(events)
        .into_iter()
        .filter(|t| matches!(*t, "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted"))
        .collect()
}

/// Two prompts, one session: two completed turns, exit 0.
async fn two_text_turns(provider: Provider) -> (World, Output) {
    let world = World::start(provider, Scenario::new().text("first answer").text("second answer")).await;
    let output = world.run(&[], &["first question", "second question"]).await;
    let events = output.events();
    assert_eq!(terminals(&events), ["turn_completed", "turn_completed"], "{output:?}");
    assert_eq!(output.code(), Some(0), "{output:?}");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "turn_completed")
        .map(|e| e["data"]["result"]["text"].to_string())
        .collect();
    assert!(text.contains("first answer") && text.contains("second answer"), "{text}");
    world.assert_no_process_left().await;
    (world, output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_with_codex_prints_each_event_and_its_sqlite_store_returns_the_same() {
    let world = World::start(Provider::Codex, Scenario::new().text("first answer").text("second answer")).await;
    let db = world.env.dir().join("events.db");
    let store = format!("sqlite:{}", db.display());
    let extra = ["--approval-policy", "untrusted", "--sandbox", "workspace-write", "--store", &store];
    let output = world.run(&[&extra[..], &["--session-id", "cli-run-1"]].concat(), &["first", "second"]).await;
    let events = output.events();
    assert_eq!(terminals(&events), ["turn_completed", "turn_completed"], "{output:?}");
    assert_eq!(output.code(), Some(0), "{output:?}");
    world.assert_no_process_left().await;

    let sessions = world.output(&["sessions", "--store", &store, "--json"]).await;
    assert_eq!(sessions.code(), Some(0), "{sessions:?}");
    let listed: Vec<Value> = sessions.stdout.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(listed.len(), 1, "{sessions:?}");
    assert_eq!(listed[0]["id"], "cli-run-1");
    assert_eq!(listed[0]["provider"], "codex");
    assert!(output.stdout.contains("second answer"), "{output:?}");

    let stored = world.output(&["events", "--store", &store, "cli-run-1", "--json"]).await;
    assert_eq!(stored.code(), Some(0), "{stored:?}");
    assert_eq!(stored.stdout, output.stdout, "events --json differs from what run printed");
    let after = world.output(&["events", "--store", &store, "cli-run-1", "--json", "--after", "3"]).await;
    assert_eq!(after.events().first().map(|e| e["seq"].clone()), Some(4.into()));

    let purged = world.output(&["purge", "--store", &store, "cli-run-1"]).await;
    assert_eq!(purged.code(), Some(0), "{purged:?}");
    let sessions = world.output(&["sessions", "--store", &store, "--json"]).await;
    assert_eq!(sessions.stdout, "", "purged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_prints_a_running_session_to_its_end() {
    let scenario = Scenario::new().deltas(["one ", "two ", "three ", "four ", "five"], 300);
    let world = World::start(Provider::Codex, scenario).await;
    let store = format!("sqlite:{}", world.env.dir().join("events.db").display());
    let args = world.run_args(&["--store", &store, "--session-id", "followed"], &["count"]);
    let mut run = world.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().expect("spawn");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    // The first event is stored before it is printed: the session is in the store now.
    let mut printed = lines.next_line().await.expect("read").expect("a first event") + "\n";
    let follow = world.command(&["events", "--store", &store, "followed", "--follow", "--json"]).output();
    let rest = async {
        while let Some(line) = lines.next_line().await.expect("read") {
            printed += &line;
            printed += "\n";
        }
        run.wait().await.expect("status")
    };
    let (followed, status) = tokio::time::timeout(LIMIT, async { tokio::join!(follow, rest) }).await.expect("both end");
    let followed = followed.expect("events runs");
    assert_eq!(status.code(), Some(0), "{printed}");
    assert_eq!(followed.status.code(), Some(0));
    assert_eq!(String::from_utf8(followed.stdout).expect("utf-8"), printed, "--follow saw every event, in order");
    assert!(printed.contains("\"message_delta\"") && printed.contains("\"session_closed\""), "{printed}");
}

/// Ctrl-C ends `events --follow` with 0 while the session it follows goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_ends_at_ctrl_c() {
    let scenario = Scenario::new().deltas(["one ", "two ", "three ", "four ", "five ", "six"], 400);
    let world = World::start(Provider::Codex, scenario).await;
    let store = format!("sqlite:{}", world.env.dir().join("events.db").display());
    let args = world.run_args(&["--store", &store, "--session-id", "followed"], &["count"]);
    let mut run = world.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().expect("spawn");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    lines.next_line().await.expect("read").expect("a first event");
    let mut follow =
        world.command(&["events", "--store", &store, "followed", "--follow", "--json"]).spawn().expect("spawn");
    let mut followed = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    followed.next_line().await.expect("read").expect("a first event followed");
    assert!(follow.try_wait().expect("status").is_none(), "still following when Ctrl-C is pressed");
    let pid = i32::try_from(follow.id().expect("running")).expect("a pid");
    // SAFETY: signals the process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(10), follow.wait()).await.expect("ended").expect("status");
    assert_eq!(status.code(), Some(0), "ended by its own exit, not by the signal");
    while lines.next_line().await.expect("read").is_some() {}
    assert_eq!(run.wait().await.expect("status").code(), Some(0), "the followed session went on to its end");
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_with_claude_completes_two_turns() {
    two_text_turns(Provider::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_with_pi_completes_two_turns() {
    two_text_turns(Provider::Pi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_deny_keeps_the_command_from_running() {
    let scenario = Scenario::new().shell("touch denied.txt && echo denied-ran").quote_tool_result("Tool said: ");
    let world = World::start(Provider::Codex, scenario).await;
    let extra = ["--approval-policy", "untrusted", "--sandbox", "workspace-write", "--approvals", "deny"];
    let output = world.run(&extra, &["run it"]).await;
    let events = output.events();
    assert!(types(&events).contains(&"request_created"), "{output:?}");
    assert!(!world.env.workspace().join("denied.txt").exists(), "the denied command ran");
    assert_eq!(terminals(&events).len(), 1, "{output:?}");
    let expected = if terminals(&events) == ["turn_completed"] { 0 } else { 1 };
    assert_eq!(output.code(), Some(expected), "{output:?}");
    world.assert_no_process_left().await;
}

/// Under `--auth inherit`, a credential of the host's environment that a tool prints (here
/// through claude's Bash) is redacted from the events, by its name, like one given with `--env`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_credential_a_tool_prints_is_redacted_from_the_events() {
    const HOST_TOKEN: &str = "host-deploy-token-0123456789";
    let scenario = Scenario::new().shell("echo token=$DEPLOY_TOKEN").quote_tool_result("Tool said: ");
    let world = World::start(Provider::Claude, scenario).await;
    let args = world.run_args(&["--approvals", "approve"], &["show the token"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = world.command(&args);
    command.env("DEPLOY_TOKEN", HOST_TOKEN);
    let output = world.output_of(command, &args).await;
    assert_eq!(output.code(), Some(0), "{output:?}");
    assert!(output.stdout.contains("Tool said: token=[redacted]"), "{output:?}");
    assert!(!output.stdout.contains(HOST_TOKEN) && !output.stderr.contains(HOST_TOKEN), "{output:?}");
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_answers_the_agents_question() {
    let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("Tool said: ");
    let world = World::start(Provider::Codex, scenario).await;
    let output = world.run(&["--answer", "blue"], &["ask me"]).await;
    let events = output.events();
    let resolved: Vec<&Value> = events.iter().filter(|e| e["type"] == "request_resolved").collect();
    assert_eq!(resolved.len(), 1, "{output:?}");
    assert_eq!(resolved[0]["data"]["response"]["action"], "answer", "{output:?}");
    let end = events.iter().find(|e| e["type"] == "turn_completed").expect("the turn completed");
    assert!(end["data"]["result"]["text"].as_str().is_some_and(|t| t.contains("blue")), "{end}");
    assert_eq!(output.code(), Some(0));
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_a_stored_session_under_its_id() {
    let world = World::start(Provider::Codex, Scenario::new().text("first answer").text("second answer")).await;
    let store = format!("sqlite:{}", world.env.dir().join("events.db").display());
    let first = world.run(&["--store", &store, "--session-id", "resumed-1"], &["first"]).await;
    assert_eq!(first.code(), Some(0), "{first:?}");
    let last = first.events().last().expect("events")["seq"].as_u64().expect("seq");
    let second = world.run(&["--store", &store, "--resume", "resumed-1"], &["second"]).await;
    assert_eq!(second.code(), Some(0), "{second:?}");
    let events = second.events();
    assert!(events[0]["seq"].as_u64() > Some(last), "seq goes on after {last}: {second:?}");
    assert!(events.iter().all(|e| e["session_id"] == "resumed-1"));
    let stored = world.output(&["events", "--store", &store, "resumed-1", "--json"]).await;
    assert_eq!(stored.stdout, format!("{}{}", first.stdout, second.stdout), "one history across both runs");
    world.assert_no_process_left().await;
}

/// `--resume` without `--cwd` runs in the directory the session ran in, not in the one the
/// command was started from; `--cwd` still overrides it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_without_cwd_runs_where_the_session_ran() {
    let world = World::start(Provider::Codex, Scenario::new().text("one").text("two").text("three")).await;
    let store = format!("sqlite:{}", world.env.dir().join("events.db").display());
    let stored_cwd = async || {
        let sessions = world.output(&["sessions", "--store", &store, "--json"]).await;
        let listed: Value = serde_json::from_str(sessions.stdout.trim()).expect("one session");
        listed["cwd"].as_str().expect("a cwd").to_owned()
    };
    let first = world.run(&["--store", &store, "--session-id", "moved"], &["first"]).await;
    assert_eq!(first.code(), Some(0), "{first:?}");
    let ran_in = stored_cwd().await;
    let elsewhere = world.env.dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("a directory");

    let args = world.run_args(&["--store", &store, "--resume", "moved"], &["second"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = world.command(&args);
    command.current_dir(&elsewhere);
    let second = world.output_of(command, &args).await;
    assert_eq!(second.code(), Some(0), "{second:?}");
    assert_eq!(stored_cwd().await, ran_in, "the resume ran where the session ran");

    let elsewhere = std::fs::canonicalize(&elsewhere).expect("canonical").display().to_string();
    let third = world.run(&["--store", &store, "--resume", "moved", "--cwd", &elsewhere], &["third"]).await;
    assert_eq!(third.code(), Some(0), "{third:?}");
    assert_eq!(stored_cwd().await, elsewhere, "--cwd overrides it");
    world.assert_no_process_left().await;
}

/// A resume after a run whose store failed (its snapshot's `published_seq` past the last stored
/// event) prints the new events: the history's gap is where that run's unstored events were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_a_run_whose_store_failed_prints_the_new_turn() {
    let world = World::start(Provider::Codex, Scenario::new().text("first answer").text("second answer")).await;
    let db = world.env.dir().join("events.db");
    let store = format!("sqlite:{}", db.display());
    let first = world.run(&["--store", &store, "--session-id", "gap-1"], &["first"]).await;
    assert_eq!(first.code(), Some(0), "{first:?}");
    let last = first.events().last().expect("events")["seq"].as_u64().expect("seq");
    {
        let conn = rusqlite::Connection::open(&db).expect("the store");
        let snapshot: String = conn
            .query_row("SELECT snapshot FROM sessions WHERE id = 'gap-1'", [], |row| row.get(0))
            .expect("the snapshot");
        let mut snapshot: Value = serde_json::from_str(&snapshot).expect("JSON");
        snapshot["published_seq"] = (last + 5).into();
        let updated = conn
            .execute("UPDATE sessions SET snapshot = ?1 WHERE id = 'gap-1'", [snapshot.to_string()])
            .expect("updated");
        assert_eq!(updated, 1);
    }
    let second = world.run(&["--store", &store, "--resume", "gap-1"], &["second"]).await;
    assert_eq!(second.code(), Some(0), "{second:?}");
    let events = second.events();
    assert!(events[0]["seq"].as_u64() > Some(last + 5), "seq goes on after the published {}: {second:?}", last + 5);
    assert_eq!(terminals(&events), ["turn_completed"], "{second:?}");
    world.assert_no_process_left().await;
}

/// `--env` sets a variable the config file removes (the flags override the config), and a
/// value starting with `-` is taken for `--answer` and `--system-prompt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_override_the_configs_removal_and_take_values_starting_with_a_dash() {
    let world = World::start(Provider::Codex, Scenario::new().text("ok")).await;
    let config = world.env.dir().join("unset.json");
    let removed = serde_json::json!({"provider": "codex", "env": {"unset": ["AGENT_HARNESS_TEST_FLAG"]}});
    std::fs::write(&config, removed.to_string()).expect("config written");
    let config = config.display().to_string();
    let extra = [
        "--config",
        config.as_str(),
        "--env",
        "AGENT_HARNESS_TEST_FLAG=1",
        "--answer",
        "-1",
        "--system-prompt",
        "-be brief",
    ];
    let output = world.run(&extra, &["hi"]).await;
    assert_eq!(output.code(), Some(0), "{output:?}");
    assert_eq!(terminals(&output.events()), ["turn_completed"], "{output:?}");
}

/// On a terminal, an `--answer` the question does not take is said so and the question asked
/// again, showing its choices; the answer typed then is taken (it did hang, unanswered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_an_answer_not_taken_is_asked_again_with_the_choices() {
    let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("Tool said: ");
    let world = World::start(Provider::Pi, scenario).await;
    let asked = |screen: &str| screen.contains("answer (red, blue) > ");
    let (status, screen) = world.on_a_terminal_typing(&["--answer", "purple"], &["ask me"], asked, "blue").await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("↳ not taken: "), "the refused answer is said so:\n{screen}");
    assert!(screen.contains("Tool said: ") && screen.contains("blue"), "the typed answer was taken:\n{screen}");
    world.assert_no_process_left().await;
}

/// On a terminal, `--approvals` answers approvals only: a question with no `--answer` left is
/// still asked there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_approvals_approve_still_asks_the_question() {
    let scenario = Scenario::new().ask_user("Pick a color", ["red", "blue"]).quote_tool_result("Tool said: ");
    let world = World::start(Provider::Pi, scenario).await;
    let asked = |screen: &str| screen.contains("answer (red, blue) > ");
    let (status, screen) = world.on_a_terminal_typing(&["--approvals", "approve"], &["ask me"], asked, "blue").await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("answer (red, blue) > "), "the question was asked:\n{screen}");
    assert!(screen.contains("Tool said: ") && screen.contains("blue"), "the typed answer was taken:\n{screen}");
    world.assert_no_process_left().await;
}

/// The answer to a secret question is not shown as it is typed: the prompt says it is hidden.
/// It reaches the agent, and where the agent quotes it back the runtime has redacted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_secret_answer_is_not_echoed() {
    const TYPED: &str = "typed-secret-5e1c";
    let question = serde_json::json!({"questions": [
        {"id": "token", "header": "Token", "question": "Paste the token", "isSecret": true,
         "options": [{"label": "none", "description": "no token"}]}
    ]});
    let scenario = Scenario::new().tool_call("request_user_input", question).quote_tool_result("Tool said: ");
    let world = World::start(Provider::Codex, scenario).await;
    let asked = |screen: &str| screen.contains("  answer") && screen.contains(" > ");
    let (status, screen) = world.on_a_terminal_typing(&[], &["ask me"], asked, TYPED).await;
    assert_eq!(status.code(), Some(0), "{screen}");
    let screen = screen.replace("\r\n", "\n");
    let (before, quoted) = screen.split_once("Tool said: ").unwrap_or_else(|| panic!("no quote:\n{screen}"));
    assert!(!before.contains(TYPED), "the typed answer was shown:\n{screen}");
    assert!(quoted.contains("[redacted]") && !quoted.contains(TYPED), "the quote of it is redacted:\n{screen}");
    let sent: String = world._server.model_requests().iter().map(|r| format!("{:?}", r.body)).collect();
    assert!(sent.contains(TYPED), "the typed answer reached the agent");
    assert!(
        before.contains("  answer (none, …) (hidden) > \n"),
        "the prompt says the answer is hidden, its line ends:\n{screen}"
    );
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_text_streams_and_typing_y_approves_the_tool_call() {
    let scenario = Scenario::new().shell("touch approved.txt && echo approved-ran").quote_tool_result("Tool said: ");
    let world = World::start(Provider::Codex, scenario).await;
    let extra = ["--approval-policy", "untrusted", "--sandbox", "workspace-write"];
    let (status, screen) = world.on_a_terminal(&extra, &["run it"], |screen| screen.contains("allow? [y/N]")).await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(world.env.workspace().join("approved.txt").exists(), "the approved command ran:\n{screen}");
    let shown = ["⠋ working 0s", "? command_approval", "allow? [y/N]", "approved", "▸ ", "Tool said: ", "approved-ran"];
    for shown in shown.into_iter().chain(["── turn completed"]) {
        assert!(screen.contains(shown), "{shown:?} not shown:\n{screen}");
    }
    world.assert_no_process_left().await;
}

/// A prompt whose request expired stops reading the terminal: the `y` typed at the next turn's
/// prompt approves that turn's command (it went to the expired prompt's reader, and was lost),
/// and an approval shows its whole command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_prompt_leaves_the_next_answer_to_the_next_prompt() {
    let long = format!("echo {} && touch second.txt", "a".repeat(300));
    let scenario = Scenario::new().shell("touch first.txt").text("first done").shell(&long).text("second done");
    let world = World::start(Provider::Codex, scenario).await;
    let config = world.env.dir().join("timeout.json");
    std::fs::write(&config, serde_json::json!({"provider": "codex", "request_timeout_ms": 1000}).to_string())
        .expect("config written");
    let config = config.display().to_string();
    let extra = ["--approval-policy", "untrusted", "--sandbox", "workspace-write", "--config", config.as_str()];
    // The first prompt is left to expire; the second is answered once.
    let answer = |screen: &str| screen.matches("allow? [y/N]").count() == 2;
    let (status, screen) = world.on_a_terminal(&extra, &["first", "second"], answer).await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(!world.env.workspace().join("first.txt").exists(), "the expired request ran nothing:\n{screen}");
    assert!(world.env.workspace().join("second.txt").exists(), "the one `y` approved the second:\n{screen}");
    assert!(screen.contains("no longer asked: timed out"), "the expiry is shown:\n{screen}");
    assert!(screen.contains(&long), "the whole command is shown:\n{screen}");
    world.assert_no_process_left().await;
}

/// A line typed before the first prompt showed answers nothing: the prompt waits for a line
/// typed while it shows (here `n`, which denies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_line_typed_before_the_first_prompt_answers_nothing() {
    let scenario = Scenario::new().deltas(["Thinking ", "it over"], 500).shell("touch typed-ahead.txt").text("done");
    let world = World::start(Provider::Codex, scenario).await;
    let extra = ["--approval-policy", "untrusted", "--sandbox", "workspace-write"];
    let steps: Vec<Step> = vec![
        // Typed during the first turn, which asks nothing.
        (Box::new(|screen: &str| screen.contains("Thinking")), "y"),
        (Box::new(|screen: &str| screen.contains("allow? [y/N]")), "n"),
    ];
    let (status, screen) = world.on_a_terminal_steps(&extra, &["first", "second"], steps).await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(!world.env.workspace().join("typed-ahead.txt").exists(), "the early `y` approved the command:\n{screen}");
    assert!(screen.contains("denied"), "the `n` typed at the prompt denied it:\n{screen}");
    world.assert_no_process_left().await;
}

/// A run in the background of its terminal (`agent-harness run … &` from a shell) goes on to
/// its end: it reads the terminal, which would stop it (SIGTTIN), only in the foreground.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_run_in_the_background_is_not_stopped() {
    use std::os::unix::process::CommandExt;
    let world = World::start(Provider::Codex, Scenario::new().text("done in the background")).await;
    let mut args = world.run_args(&[], &["hello"]);
    args.retain(|arg| arg != "--json");
    let (master, slave) = pty();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"));
    command.env_clear().envs(world.env.vars()).current_dir(world.env.workspace()).args(&args);
    command.stdin(slave.try_clone().expect("pty")).stdout(slave.try_clone().expect("pty")).stderr(slave);
    // SAFETY: `in_the_background` makes only async-signal-safe calls.
    unsafe { command.pre_exec(in_the_background) };
    let mut shell = command.spawn().expect("spawn");
    drop(command); // closes this process's copies of the terminal's slave side
    let mut reader = std::fs::File::from(master);
    let screen = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let (mut screen, mut buf) = (Vec::new(), [0u8; 4096]);
        // The read fails (EIO) once the command exited and the slave side closed.
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            screen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&screen).into_owned()
    });
    let Ok(screen) = tokio::time::timeout(LIMIT, screen).await else {
        let _ = shell.kill();
        let _ = shell.wait();
        panic!("the command did not end within {LIMIT:?}");
    };
    let (status, screen) = (shell.wait().expect("status"), screen.expect("screen"));
    assert_ne!(status.code(), Some(STOPPED), "the run stopped in the background:\n{screen}");
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("done in the background"), "{screen}");
    world.assert_no_process_left().await;
}

/// [`in_the_background`]'s exit status when the command stopped.
const STOPPED: i32 = 125;

/// Run between fork and exec: makes this process a shell that started the command with `&`. It
/// leads a session of its own on the terminal at stdin, as its foreground process group, and
/// forks; the child goes on to exec the command in a process group of its own, in the
/// background, while this process waits for it and exits with its exit status, or with
/// [`STOPPED`] (after killing it) once it stops.
fn in_the_background() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls only; the waiting parent never returns from here.
    unsafe {
        if libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                libc::setpgid(0, 0);
                Ok(())
            }
            command => {
                libc::setpgid(command, command);
                // Nothing but the terminal: the spawning process's pipe that waits for the exec,
                // and other tests' descriptors, close when the command execs.
                libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0);
                let mut status = 0;
                loop {
                    if libc::waitpid(command, &mut status, libc::WUNTRACED) == -1 {
                        libc::_exit(1);
                    }
                    if libc::WIFSTOPPED(status) {
                        libc::kill(command, libc::SIGKILL);
                        libc::waitpid(command, &mut status, 0);
                        libc::_exit(STOPPED);
                    }
                    if libc::WIFEXITED(status) {
                        libc::_exit(libc::WEXITSTATUS(status));
                    }
                    if libc::WIFSIGNALED(status) {
                        libc::_exit(128 + libc::WTERMSIG(status));
                    }
                }
            }
        }
    }
}

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new descriptors, owned below; the other arguments may be null.
    let done =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(done, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    unsafe { (std::os::fd::OwnedFd::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_cancels_the_turn_and_exits_3() {
    let world = World::start(Provider::Codex, Scenario::new().stall("Thinking")).await;
    let started = Instant::now();
    let output = world.run(&["--timeout", "3"], &["take your time"]).await;
    assert_eq!(output.code(), Some(3), "{output:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    let events = output.events();
    assert_eq!(terminals(&events).len(), 1, "the cancelled turn ends: {output:?}");
    // The events of the stop are written too: output read at once is never given up.
    assert_eq!(events.last().map(|e| e["type"].clone()), Some("session_closed".into()), "{output:?}");
    world.assert_no_process_left().await;
}

/// A session that is still starting when `--timeout` runs out: exit 3 with a line that says
/// so (it exited without a word), and nothing left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_while_the_session_starts_says_so_and_exits_3() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::start(Provider::Codex, Scenario::new()).await;
    // A codex that answers its version and then never speaks.
    let hung = world.env.dir().join("hung-codex");
    std::fs::write(
        &hung,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'codex-cli 0.171.0'; exit 0; }\nexec sleep 120\n",
    )
    .expect("script written");
    std::fs::set_permissions(&hung, std::fs::Permissions::from_mode(0o755)).expect("executable");
    let args = ["run", "--json", "--auth", "inherit", "--provider", "codex", "--timeout", "2", "--cli-path"];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend([hung.display().to_string(), "hello".into()]);
    let output = world.output(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(output.code(), Some(3), "{output:?}");
    assert_eq!(output.stderr.trim(), "agent-harness: --timeout ran out while the session started", "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_turn_cancels_it_exits_2_and_leaves_no_process() {
    sigint_mid_turn(Provider::Codex).await;
}

/// Pi runs under Node: its process tree goes with the command too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_turn_with_pi_leaves_no_process() {
    sigint_mid_turn(Provider::Pi).await;
}

async fn sigint_mid_turn(provider: Provider) {
    let world = World::start(provider, Scenario::new().stall("Thinking")).await;
    let args = world.run_args(&[], &["take your time"]);
    let mut child = world.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("JSON event");
            let delta = event["type"] == "message_delta";
            seen.push(event);
            if delta {
                return;
            }
        }
        panic!("no message_delta before the end: {seen:?}");
    })
    .await
    .expect("the turn streams");
    assert!(!world.processes().is_empty(), "the CLI runs in the environment (so the check below can fail)");
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: sending a signal to the child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    while let Some(line) = lines.next_line().await.expect("read") {
        seen.push(serde_json::from_str(&line).expect("JSON event"));
    }
    let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("exits").expect("status");
    assert_eq!(status.code(), Some(2), "{seen:?}");
    let ends = terminals(&seen);
    assert!(matches!(ends.as_slice(), ["turn_cancelled" | "turn_interrupted"]), "{ends:?}");
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_exit_64_or_69_and_writes_nothing() {
    let world = World::start(Provider::Codex, Scenario::new().text("unused")).await;
    let dir = world.env.dir();
    let db = dir.join("never.db");
    let store = format!("sqlite:{}", db.display());
    let bad_config = dir.join("bad.json");
    std::fs::write(&bad_config, r#"{"provider": "codex", "sandbox": "everywhere"}"#).expect("written");
    let program = world.cli.program().display().to_string();
    let missing: PathBuf = dir.join("no-such-codex");
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (strings(&["run", "--provider", "gemini", "--store", &store, "hi"]), 64, "unknown provider `gemini`"),
        (strings(&["run", "--provider", "codex", "--env", SECRET, "--store", &store, "hi"]), 64, "--env #1"),
        (strings(&["run", "--config", &bad_config.display().to_string(), "--store", &store, "hi"]), 64, "sandbox"),
        (
            strings(&[
                "run",
                "--provider",
                "codex",
                "--cli-path",
                &program,
                "--store",
                "sqlite:/no/such/dir/x.db",
                "hi",
            ]),
            64,
            "/no/such/dir/x.db",
        ),
        (strings(&["run", "--provider", "codex", "--approvals", "maybe", "hi"]), 64, "maybe"),
        // A negative number is a value, not an unknown flag.
        (
            strings(&["run", "--provider", "codex", "--timeout", "-1", "hi"]),
            64,
            "--timeout -1: expected a positive number",
        ),
        // Empty prompts are refused with the other input: no store, no turn before them.
        (strings(&["run", "--provider", "codex", "--cli-path", &program, "--store", &store, ""]), 64, "PROMPT 1"),
        (
            strings(&["run", "--provider", "codex", "--cli-path", &program, "--store", &store, "hi", " "]),
            64,
            "PROMPT 2",
        ),
        // A store URL is not repeated: it may hold a password.
        (
            strings(&["run", "--provider", "codex", "--store", "postgres://u:s3cret@h/db", "hi"]),
            64,
            "--store: expected",
        ),
        (
            strings(&["run", "--provider", "preset:codex-exec", "--cli-path", "bin/codex", "--store", &store, "hi"]),
            64,
            "--cli-path bin/codex",
        ),
        (strings(&["sessions", "--store", &store]), 64, "never.db"),
        (
            strings(&[
                "run",
                "--provider",
                "codex",
                "--auth",
                "inherit",
                "--cli-path",
                &missing.display().to_string(),
                "--store",
                &store,
                "hi",
            ]),
            69,
            "no-such-codex",
        ),
    ];
    for (args, code, names) in cases {
        let output = world.output(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        assert_eq!(output.code(), Some(code), "{args:?}: {output:?}");
        assert_eq!(output.stdout, "", "{args:?}");
        assert_eq!(output.stderr.trim_end().lines().count(), 1, "{args:?}: one line: {}", output.stderr);
        assert!(output.stderr.contains(names), "{args:?}: names {names:?}: {}", output.stderr);
        assert!(!output.stderr.contains("s3cret"), "{args:?}: {}", output.stderr);
        assert!(!db.exists(), "{args:?} wrote the store");
    }
    world.assert_no_process_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_is_no_store_to_read_and_stays_empty_after_a_failed_run() {
    let world = World::start(Provider::Codex, Scenario::new().text("unused")).await;
    let dir = world.env.dir();
    let (empty, text) = (dir.join("empty.db"), dir.join("notes.db"));
    std::fs::write(&empty, "").expect("written");
    std::fs::write(&text, "not a database, but long enough to have a header").expect("written");
    for file in [&empty, &text] {
        let store = format!("sqlite:{}", file.display());
        let before = std::fs::read(file).expect("readable");
        for command in [
            &["sessions", "--store", &store][..],
            &["events", "--store", &store, "s"],
            &["purge", "--store", &store, "s"],
        ] {
            let output = world.output(command).await;
            assert_eq!(output.code(), Some(64), "{command:?}: {output:?}");
            assert!(output.stderr.contains("not a SQLite database"), "{command:?}: {}", output.stderr);
            assert_eq!(std::fs::read(file).expect("readable"), before, "{command:?} changed {}", file.display());
        }
    }
    // A run that cannot start its CLI leaves the empty file empty, not a database.
    let store = format!("sqlite:{}", empty.display());
    let missing = dir.join("no-such-codex").display().to_string();
    let output = world
        .output(&["run", "--provider", "codex", "--auth", "inherit", "--cli-path", &missing, "--store", &store, "hi"])
        .await;
    assert_eq!(output.code(), Some(69), "{output:?}");
    assert_eq!(std::fs::metadata(&empty).expect("still there").len(), 0, "{}", output.stderr);
    let companions = ["-wal", "-shm"].map(|suffix| dir.join(format!("empty.db{suffix}")));
    assert!(companions.iter().all(|c| !c.exists()), "{companions:?}");
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// An error line to a stderr nobody reads any more (`2>&1 | head -1`) is lost, not a panic:
/// the exit status still says what happened (64 for a usage error, not 101).
#[test]
fn a_closed_stderr_loses_the_error_line_not_the_exit_status() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"))
        .args(["run", "--provider", "no-such-provider", "hello"])
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .expect("runs");
    assert_eq!(status.code(), Some(64), "{status:?}");
}
