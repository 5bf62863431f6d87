//! `agent-harness presets` and `agent-harness run --provider preset:ID`, run as a process: the
//! shipped `claude-print` preset on the real claude (from `cargo xtask clis`) offline against
//! the testkit's fake model server on 127.0.0.1, and a user preset for a made-up CLI (a shell
//! script the test writes) from a presets directory.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use agent_testkit::programs::ProgramDir;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Longest any one command may take.
const LIMIT: Duration = Duration::from_secs(90);

/// The made-up CLI: prints its session, what it was asked, and a result or a failure.
const MINI_AGENT: &str = r#"
if [ "$1" = "--version" ]; then echo "mini-agent 1.2.0"; exit 0; fi
session=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) session="$2"; shift 2;;
    --) shift; break;;
    *) shift;;
  esac
done
[ -n "$session" ] || session="s-$$"
echo "SESSION $session"
echo "$1" >> "history-$session"
echo "SAY turn $(wc -l < "history-$session" | tr -d ' ') of $session"
case "$1" in
  fail*) echo "FAILED no luck"; exit 0;;
  tty*) if (exec </dev/tty) 2>/dev/null; then read x </dev/tty; echo "RESULT read the terminal"; else echo "RESULT no terminal"; fi;;
  block*) while :; do sleep 0.05; done;;
  *) echo "RESULT echo: $1";;
esac
"#;

fn mini_preset(program: &Path) -> Value {
    json!({
        "schema_version": 1,
        "id": "mini-agent",
        "description": "A made-up CLI",
        "program": program,
        "args": [{"if": "resume", "then": ["--resume", "{session_id}"]}, "--", "{prompt}"],
        "framing": "lines",
        "matchers": {
            "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}],
            "failure": [{"when": "^FAILED (?P<why>.*)$", "value": "why"}]
        },
        "events": [{"when": "^SAY (?P<t>.*)$", "emit": "assistant_message", "text": "t"}],
        "other_lines": "drop"
    })
}

#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Output {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Every stdout line as a JSON value.
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
            .collect()
    }

    /// Every stdout line as an event: `seq` strictly increasing.
    fn events(&self) -> Vec<Value> {
        let events = self.json_lines();
        let mut last = 0;
        for event in &events {
            assert!(event["type"].is_string(), "an event without a type: {event}");
            let seq = event["seq"].as_u64().unwrap_or_else(|| panic!("an event without a seq: {event}"));
            assert!(seq > last, "seq {seq} after {last}");
            last = seq;
        }
        events
    }
}

fn terminals(events: &[Value]) -> Vec<&Value> {
    let terminal = ["turn_completed", "turn_failed", "turn_cancelled", "turn_interrupted"];
    events.iter().filter(|e| terminal.contains(&e["type"].as_str().unwrap_or_default())).collect()
}

/// `agent-harness ARGS` in `dir` with the environment `vars` only.
async fn agent_harness<'a>(dir: &Path, vars: impl IntoIterator<Item = (&'a str, &'a str)>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-harness"));
    command.env_clear().envs(vars).current_dir(dir).args(args);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("agent-harness {args:?} did not finish"))
        .expect("agent-harness runs");
    Output {
        status: output.status,
        stdout: String::from_utf8(output.stdout).expect("utf-8"),
        stderr: String::from_utf8(output.stderr).expect("utf-8"),
    }
}

/// A presets directory with the mini-agent preset, the script, and a workspace.
struct Mini {
    programs: ProgramDir,
    script: PathBuf,
    presets: PathBuf,
    work: PathBuf,
}

impl Mini {
    fn new() -> Mini {
        let programs = ProgramDir::new("cli-presets");
        let script = programs.script("mini-agent", MINI_AGENT);
        let presets = programs.dir("presets");
        std::fs::write(presets.join("mini-agent.json"), mini_preset(&script).to_string()).expect("written");
        let work = programs.dir("work");
        Mini { programs, script, presets, work }
    }

    fn path_var(&self) -> (&'static str, String) {
        ("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()))
    }

    async fn run(&self, args: &[&str]) -> Output {
        let (key, path) = self.path_var();
        let presets = self.presets.display().to_string();
        let script = self.script.display().to_string();
        let mut all = vec!["run", "--presets-dir", &presets, "--allow-executable", &script];
        all.extend_from_slice(args);
        agent_harness(&self.work, [(key, path.as_str())], &all).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_lists_what_each_preset_takes_and_reports_the_files_that_do_not_load() {
    let mini = Mini::new();
    let dir = mini.programs.path();
    let shipped = agent_harness(dir, [], &["presets", "--json"]).await;
    assert_eq!(shipped.code(), Some(0), "{shipped:?}");
    let listed = shipped.json_lines();
    let ids: Vec<&str> = listed.iter().map(|p| p["provider"].as_str().unwrap_or_default()).collect();
    assert_eq!(ids, ["preset:claude-print", "preset:codex-exec", "preset:pi-print"]);
    let claude = &listed[0];
    assert_eq!(claude["capabilities"]["approvals"], "native");
    assert_eq!(claude["capabilities"]["resume"], "native");
    assert_eq!(claude["approval_conversation"], "claude_control");
    let option = |name: &str| claude["options"].as_array().unwrap().iter().find(|o| o["name"] == name).cloned();
    assert_eq!(option("on_busy").map(|o| o["default"].clone()), Some(json!("wait")));
    assert_eq!(option("approval_timeout_ms").map(|o| o["default"].clone()), Some(json!(300_000)));
    assert_eq!(listed[1]["capabilities"]["approvals"], "unsupported", "codex-exec declares no approval conversation");

    let mut broken = mini_preset(&mini.script);
    broken["id"] = json!("broken");
    broken["matchers"]["result"][0]["when"] = json!("^RESULT (");
    std::fs::write(mini.presets.join("broken.json"), broken.to_string()).expect("written");
    let presets = mini.presets.display().to_string();
    let script = mini.script.display().to_string();
    let args = ["presets", "--presets-dir", &presets, "--allow-executable", &script];
    let output = agent_harness(dir, [], &args).await;
    assert_eq!(output.code(), Some(1), "a preset did not load: {output:?}");
    assert!(output.stdout.contains("preset:mini-agent\tA made-up CLI"), "{}", output.stdout);
    assert!(output.stdout.contains("preset:claude-print"), "{}", output.stdout);
    let errors: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{}", output.stderr);
    assert!(errors[0].contains("broken.json: matchers.result[0].when: invalid regex"), "{}", errors[0]);

    // Without the allow-list entry the user preset does not load, and says why.
    let output = agent_harness(dir, [], &["presets", "--json", "--presets-dir", &presets]).await;
    assert_eq!(output.code(), Some(1));
    assert_eq!(output.json_lines().len(), 3, "the shipped presets still load");
    assert!(
        output.stderr.contains("mini-agent.json: program: ") && output.stderr.contains("allow-list"),
        "{}",
        output.stderr
    );

    // A file meant to replace a shipped preset that does not load leaves no preset of that ID:
    // running it is the file's error, never the shipped CLI.
    let mut replacement = mini_preset(&mini.script);
    replacement["id"] = json!("codex-exec");
    std::fs::remove_file(mini.presets.join("broken.json")).expect("removed");
    std::fs::write(mini.presets.join("override.json"), replacement.to_string()).expect("written");
    let output = agent_harness(dir, [], &["presets", "--json", "--presets-dir", &presets]).await;
    let ids: Vec<String> =
        output.json_lines().iter().map(|p| p["provider"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(!ids.contains(&"preset:codex-exec".to_owned()), "{ids:?}");
    let output =
        agent_harness(dir, [], &["run", "--provider", "preset:codex-exec", "--presets-dir", &presets, "hi"]).await;
    assert_eq!(output.code(), Some(64), "{output:?}");
    assert!(
        output.stderr.contains("preset `codex-exec` did not load: ")
            && output.stderr.contains("override.json: program: "),
        "{}",
        output.stderr
    );

    // So does a file that cannot even be read: it replaces the preset its file name names.
    std::fs::write(mini.presets.join("claude-print.json"), b"{\"id\": \"\xff\"}").expect("written");
    let output = agent_harness(dir, [], &["presets", "--json", "--presets-dir", &presets]).await;
    let ids: Vec<String> =
        output.json_lines().iter().map(|p| p["provider"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(!ids.contains(&"preset:claude-print".to_owned()), "{ids:?}");
    let output =
        agent_harness(dir, [], &["run", "--provider", "preset:claude-print", "--presets-dir", &presets, "hi"]).await;
    assert_eq!(output.code(), Some(64), "{output:?}");
    assert!(output.stderr.contains("preset `claude-print` did not load: "), "{}", output.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_user_preset_continues_its_conversation_and_exits_by_the_turns() {
    let mini = Mini::new();
    let output = mini.run(&["--json", "--provider", "preset:mini-agent", "first", "second"]).await;
    assert_eq!(output.code(), Some(0), "{output:?}");
    let events = output.events();
    let ends = terminals(&events);
    assert_eq!(ends.len(), 2, "{output:?}");
    assert!(ends.iter().all(|e| e["type"] == "turn_completed"), "{ends:?}");
    let payload = &ends[1]["data"]["result"]["details"];
    assert_eq!(payload["turn"], 2, "{payload}");
    assert_eq!(ends[1]["data"]["result"]["text"], "echo: second");
    let said: Vec<&str> =
        events.iter().filter(|e| e["type"] == "assistant_message").filter_map(|e| e["data"]["text"].as_str()).collect();
    assert!(said[1].starts_with("turn 2 of s-"), "{said:?}");

    let failed = mini.run(&["--json", "--provider", "preset:mini-agent", "fail now", "never run"]).await;
    assert_eq!(failed.code(), Some(1), "a failed turn exits 1: {failed:?}");
    let ends = failed.events();
    let ends = terminals(&ends);
    assert_eq!(ends.len(), 1, "the run stops at the failed turn");
    assert_eq!(ends[0]["data"]["result"]["reason"], "no luck");

    for (args, code, says) in [
        (vec!["--provider", "preset:nope", "hi"], 64, "unknown preset `nope`: expected one of preset:claude-print"),
        (vec!["--provider", "preset:mini-agent", "--cli-path", "/no/such/mini-agent", "hi"], 69, "/no/such/mini-agent"),
        (vec!["--provider", "preset:mini-agent", "--sandbox", "read-only", "hi"], 64, "sandbox"),
        (vec!["--provider", "preset:mini-agent", "--allow-executable", "bin/x", "hi"], 64, "--allow-executable bin/x"),
    ] {
        let output = mini.run(&args).await;
        assert_eq!(output.code(), Some(code), "{args:?}: {output:?}");
        assert_eq!(output.stdout, "", "{args:?}");
        assert_eq!(output.stderr.trim_end().lines().count(), 1, "{args:?}: {}", output.stderr);
        assert!(output.stderr.contains(says), "{args:?}: {}", output.stderr);
    }
    // A preset whose program is not allowed did not load: run says so.
    let presets = mini.presets.display().to_string();
    let (key, path) = mini.path_var();
    let output = agent_harness(
        &mini.work,
        [(key, path.as_str())],
        &["run", "--presets-dir", &presets, "--provider", "preset:mini-agent", "hi"],
    )
    .await;
    assert_eq!(output.code(), Some(64), "{output:?}");
    assert!(
        output.stderr.contains("preset `mini-agent` did not load") && output.stderr.contains("allow-list"),
        "{}",
        output.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_with_claude_print_prints_events_asks_approvals_and_exits_by_the_turns() {
    let cli = Cli::latest(Provider::Claude).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"));
    let scenario = Scenario::new()
        .text("first answer")
        .echo("second: ")
        .shell("touch denied.txt && echo denied")
        .quote_tool_result("Tool said: ")
        .http_error(400, "the fake model refuses");
    let server = FakeModel::start(scenario).await.expect("fake model");
    let env = OfflineEnv::new(&cli, &server).expect("offline environment");
    let program = cli.program().display().to_string();
    let run = |extra: &'static [&'static str], prompts: &'static [&'static str]| {
        let mut args = vec!["run", "--json", "--provider", "preset:claude-print", "--auth", "inherit", "--cli-path"];
        args.push(program.as_str());
        args.extend_from_slice(extra);
        args.extend_from_slice(prompts);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let env = &env;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            agent_harness(env.workspace(), env.vars(), &args).await
        }
    };

    let output = run(&[], &["first question", "second question"]).await;
    assert_eq!(output.code(), Some(0), "{output:?}");
    let events = output.events();
    let ends = terminals(&events);
    assert_eq!(
        ends.iter().map(|e| e["type"].as_str().unwrap()).collect::<Vec<_>>(),
        ["turn_completed", "turn_completed"]
    );
    assert_eq!(ends[0]["data"]["result"]["text"], "first answer");
    assert_eq!(ends[1]["data"]["result"]["text"], "second: second question");
    assert_eq!(ends[1]["data"]["result"]["details"]["turn"], 2);
    assert_eq!(events[0]["provider"], "preset:claude-print");
    assert!(events.iter().any(|e| e["type"] == "message_delta"), "streamed");

    // --approvals deny: the request is asked (the preset's approval conversation) and denied.
    let output = run(&["--approvals", "deny"], &["make the file"]).await;
    assert_eq!(output.code(), Some(0), "{output:?}");
    let events = output.events();
    let request = events.iter().find(|e| e["type"] == "request_created").expect("an approval request");
    assert_eq!(request["data"]["kind"], "command_approval");
    assert!(events.iter().any(|e| e["type"] == "request_resolved"), "{}", output.stdout);
    assert!(!env.workspace().join("denied.txt").exists(), "the denied command did not run");

    let output = run(&[], &["fail now"]).await;
    assert_eq!(output.code(), Some(1), "{output:?}");
    let events = output.events();
    assert_eq!(terminals(&events)[0]["type"], "turn_failed");
    assert!(server.proxy().attempts().is_empty(), "claude tried to reach outside 127.0.0.1");
}

/// Processes whose working directory is `dir` or below it.
fn processes_in(dir: &Path) -> Vec<u32> {
    let dir = std::fs::canonicalize(dir).expect("dir");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_turn_of_a_preset_exits_2_and_leaves_no_process() {
    let mini = Mini::new();
    let presets = mini.presets.display().to_string();
    let script = mini.script.display().to_string();
    let (key, path) = mini.path_var();
    let args = [
        "run",
        "--json",
        "--presets-dir",
        &presets,
        "--allow-executable",
        &script,
        "--provider",
        "preset:mini-agent",
        "block",
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-harness"));
    command.env_clear().env(key, path).current_dir(&mini.work).args(args);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen: Vec<Value> = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let event: Value = serde_json::from_str(&line).expect("JSON event");
            let said = event["type"] == "assistant_message";
            seen.push(event);
            if said {
                return;
            }
        }
        panic!("the turn ended before it said anything: {seen:?}");
    })
    .await
    .expect("the turn runs");
    assert!(!processes_in(&mini.work).is_empty(), "the preset's CLI runs (so the check below can fail)");
    let pid = child.id().expect("running") as libc::pid_t;
    // SAFETY: sending a signal to the child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    while let Some(line) = lines.next_line().await.expect("read") {
        seen.push(serde_json::from_str(&line).expect("JSON event"));
    }
    let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("exits").expect("status");
    assert_eq!(status.code(), Some(2), "{seen:?}");
    let ends: Vec<&str> = terminals(&seen).iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(ends, ["turn_interrupted"], "{seen:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !processes_in(&mini.work).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(processes_in(&mini.work), Vec::<u32>::new(), "a preset process outlived agent-harness");
}

/// A listing written to a closed pipe (`… | head -1` once `head` exited) ends with exit 1 and
/// one line on stderr, not a panic; so does `doctor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_to_a_closed_pipe_fail_with_one_line() {
    use std::os::fd::FromRawFd;
    let dir = ProgramDir::new("cli-closed-pipe");
    for args in [&["presets"][..], &["doctor", "--provider", "codex"]] {
        let mut fds = [-1; 2];
        // SAFETY: `pipe` writes two new descriptors, owned below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        // SAFETY: both were just opened and are owned by nothing else; the read end closes here.
        let (read, write) =
            unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1])) };
        drop(read);
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-harness"));
        command.args(args).current_dir(dir.path()).stdin(Stdio::null()).stdout(write).stderr(Stdio::piped());
        let output = command.spawn().expect("spawned").wait_with_output().await.expect("ran");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write to stdout"), "{args:?}: {stderr}");
    }
}

/// `sessions` and `events` read a store that exists: a SQLite database without one is refused
/// with 64 and left as it was, not made a store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_database_without_a_store_refuses_it_and_changes_nothing() {
    let dir = ProgramDir::new("cli-no-store");
    let path = dir.path().join("empty.db");
    rusqlite::Connection::open(&path).expect("a database").execute_batch("VACUUM").expect("vacuumed");
    let before = std::fs::read(&path).expect("read");
    let store = format!("sqlite:{}", path.display());
    for args in [&["sessions", "--store", &store][..], &["events", "--store", &store, "some-session"]] {
        let output = agent_harness(dir.path(), [], args).await;
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", output.stderr);
        assert!(output.stderr.contains("holds no agent-harness store"), "{args:?}: {}", output.stderr);
        assert_eq!(std::fs::read(&path).expect("read"), before, "{args:?}: the file is as it was");
    }
}

/// A store path naming a FIFO is refused at once, not opened (which would wait for a writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_path_naming_a_fifo_is_refused_without_waiting() {
    let dir = ProgramDir::new("cli-fifo-store");
    let path = dir.path().join("events.db");
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
    // SAFETY: a valid NUL-terminated path; mkfifo reads it and nothing else.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
    let store = format!("sqlite:{}", path.display());
    for args in
        [&["sessions", "--store", &store][..], &["events", "--store", &store, "s"], &["purge", "--store", &store, "s"]]
    {
        let output = tokio::time::timeout(std::time::Duration::from_secs(20), agent_harness(dir.path(), [], args))
            .await
            .unwrap_or_else(|_| panic!("{args:?} waited on the FIFO"));
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", output.stderr);
        assert!(output.stderr.contains("not a regular file"), "{args:?}: {}", output.stderr);
    }
}

/// The error line shows what it quotes of the input or a CLI as text: control characters as
/// symbols, never acted on by the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_line_shows_control_characters_as_symbols() {
    let dir = ProgramDir::new("cli-error-line");
    let output =
        agent_harness(dir.path(), [], &["run", "--provider", "codex", "--cwd", "/nowhere/\u{7}\u{8}x", "hi"]).await;
    assert_eq!(output.status.code(), Some(64), "{}", output.stderr);
    assert!(!output.stderr.contains(['\u{7}', '\u{8}']), "{:?}", output.stderr);
    assert!(output.stderr.contains("␇␈x"), "{:?}", output.stderr);
}

/// `presets` shows what it prints of the files as text: a file name or an error holding
/// terminal control sequences is shown with symbols, never acted on by the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_shows_control_characters_in_file_names_as_symbols() {
    let mini = Mini::new();
    let mut titled = mini_preset(&mini.script);
    titled["id"] = json!("titled");
    std::fs::write(mini.presets.join("x\u{1b}]0;PWNED\u{7}.json"), titled.to_string()).expect("written");
    std::fs::write(mini.presets.join("y\u{1b}[2J.json"), "not json").expect("written");
    let presets = mini.presets.display().to_string();
    let script = mini.script.display().to_string();
    let args = ["presets", "--presets-dir", &presets, "--allow-executable", &script];
    let output = agent_harness(mini.programs.path(), [], &args).await;
    assert_eq!(output.code(), Some(1), "a file did not load: {output:?}");
    assert!(output.stdout.contains("preset:titled"), "{}", output.stdout);
    for shown in [&output.stdout, &output.stderr] {
        assert!(!shown.contains(['\u{1b}', '\u{7}']), "{shown:?}");
    }
    assert!(output.stdout.contains("x␛]0;PWNED␇.json"), "{}", output.stdout);
    assert!(output.stderr.contains("y␛[2J.json: not JSON"), "{}", output.stderr);
}

/// The preset flags name where presets come from: given with a native provider they would do
/// nothing, so they are a usage error naming the flag, and nothing is spawned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preset_flags_with_a_native_provider_are_refused() {
    let dir = ProgramDir::new("cli-preset-flags");
    let presets = dir.path().display().to_string();
    for (flag, value) in [("--presets-dir", presets.as_str()), ("--allow-executable", "mini-agent")] {
        let output = agent_harness(dir.path(), [], &["run", "--provider", "codex", flag, value, "hi"]).await;
        assert_eq!(output.status.code(), Some(64), "{flag}: {}", output.stderr);
        assert!(output.stderr.contains(flag) && output.stderr.contains("preset:ID"), "{flag}: {}", output.stderr);
    }
}

/// A CLI, or a command it runs for the agent, that reads its terminal (a password prompt, a
/// host key to confirm) finds none, even when `agent-harness` runs on one: it is not a job of
/// the user's terminal that the read would stop (SIGTTIN) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_finds_no_terminal_to_read_when_the_harness_runs_on_one() {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    let mini = Mini::new();
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new descriptors, owned below; the other arguments may be null.
    let opened =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (std::fs::File::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave)) };
    let (key, path) = mini.path_var();
    let presets = mini.presets.display().to_string();
    let script = mini.script.display().to_string();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agent-harness"));
    command.env_clear().env(key, path).current_dir(&mini.work);
    command.args(["run", "--json", "--presets-dir", &presets, "--allow-executable", &script]);
    command.args(["--provider", "preset:mini-agent", "--timeout", "10", "tty check"]);
    command.stdin(slave.try_clone().expect("pty")).stdout(slave.try_clone().expect("pty")).stderr(slave);
    // SAFETY: between fork and exec, async-signal-safe calls only: the command leads a session
    // with the terminal as its controlling terminal, as a login shell's job would.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let mut child = command.spawn().expect("spawn");
    drop(command); // closes this process's copies of the terminal's slave side
    let screen = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let (mut screen, mut buf, mut master) = (Vec::new(), [0u8; 4096], master);
        // The read fails (EIO) once the command exited and the slave side closed.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            screen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&screen).into_owned()
    });
    let screen = tokio::time::timeout(LIMIT, screen).await.expect("the run ends").expect("screen");
    let status = child.wait().expect("status");
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("no terminal"), "{screen}");
}
