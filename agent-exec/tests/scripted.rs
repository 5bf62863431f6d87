//! ScriptedExec under a paused clock: timing, stdin expectations and rules, signals, limits and
//! the records a provider test inspects.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use agent_core::SessionId;
use agent_core::exec::{
    Child, ChildOutput, Command, Exec, ExecError, ExitStatus, KillCause, KillPolicy, OWNER_MARKER_ENV,
    OWNER_NAMESPACE_MARKER_ENV, SESSION_MARKER_ENV,
};
use agent_exec::scripted::{EXPECTATION_FAILED_EXIT_CODE, LineMatch, Script, ScriptedExec, Step};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::time::Instant;

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

async fn spawn(exec: &ScriptedExec, command: Command) -> (Child, Lines<BufReader<ChildOutput>>) {
    let mut child = exec.spawn(command).await.expect("spawn");
    let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, stdout)
}

async fn next(lines: &mut Lines<BufReader<ChildOutput>>) -> Option<String> {
    lines.next_line().await.expect("read")
}

#[tokio::test(start_paused = true)]
async fn output_plays_on_tokio_time() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().stdout("a").sleep(Duration::from_secs(5)).stdout("b").exit(3));
    let started = Instant::now();
    let (child, mut stdout) = spawn(&exec, Command::new("cli")).await;
    assert_eq!(next(&mut stdout).await.as_deref(), Some("a"));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(next(&mut stdout).await.as_deref(), Some("b"));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(next(&mut stdout).await, None, "stdout closes at exit");
    assert_eq!(child.handle.wait().await.expect("wait"), ExitStatus::code(3));
}

#[tokio::test(start_paused = true)]
async fn rules_answer_stdin_lines_while_the_script_sleeps() {
    let exec = ScriptedExec::new();
    let request_id = |line: &str| line.split('"').nth(3).unwrap_or_default().to_owned();
    let script = Script::new()
        .on_line(r#""method":"ping""#, move |line| vec![Step::stdout(format!(r#"{{"id":"{}"}}"#, request_id(line)))])
        .sleep(Duration::from_secs(60))
        .stdout("done");
    exec.script("cli", script);
    let (mut child, mut stdout) = spawn(&exec, Command::new("cli")).await;
    let mut stdin = child.stdin.take().expect("stdin");
    let started = Instant::now();
    stdin.write_all(b"{\"id\":\"7\",\"method\":\"ping\"}\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"{"id":"7"}"#));
    assert!(started.elapsed() < Duration::from_secs(60), "the answer does not wait for the sleep");
    assert_eq!(next(&mut stdout).await.as_deref(), Some("done"));
    assert_eq!(started.elapsed(), Duration::from_secs(60), "the sleep keeps its deadline");
    assert!(child.handle.wait().await.expect("wait").success());
}

#[tokio::test(start_paused = true)]
async fn expectations_check_stdin_in_order() {
    let exec = ScriptedExec::new();
    exec.script(
        "cli",
        Script::new().expect_line(LineMatch::exact("hello")).wait_line("go").stdout("went").expect_line("bye"),
    );
    let (mut child, mut stdout) = spawn(&exec, Command::new("cli")).await;
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"hello\nnoise\ngo\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some("went"));
    stdin.write_all(b"bye").await.expect("write a partial line");
    drop(stdin);
    assert!(child.handle.wait().await.expect("wait").success(), "a partial last line still counts");
    let run = exec.last_run().expect("run");
    assert_eq!(run.stdin_lines(), ["hello", "noise", "go"]);
    assert_eq!(run.stdin(), b"hello\nnoise\ngo\nbye");
    assert!(run.stdin_closed());
    exec.verify();
}

#[tokio::test(start_paused = true)]
async fn requests_are_answered_with_the_ids_the_client_chose() {
    let exec = ScriptedExec::new();
    let script = Script::new()
        .on_request("turn/interrupt", "{}")
        .expect_request("initialize")
        .respond(r#"{"ready":true}"#)
        .wait_request("turn/start")
        .respond_error(r#"{"code":-32600,"message":"busy"}"#)
        .stdout(r#"{"id":0,"method":"item/approve"}"#)
        .wait_line(LineMatch::response(0))
        .answer(|line| vec![Step::stdout(format!("took {line}"))]);
    exec.script("cli", script);
    let (mut child, mut stdout) = spawn(&exec, Command::new("cli")).await;
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"{\"id\":41,\"method\":\"initialize\"}\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"{"id":41,"result":{"ready":true}}"#));
    // A notification and a request of another method are skipped; the rule answers at once.
    stdin.write_all(b"{\"method\":\"turn/start\"}\n{\"id\":\"x\",\"method\":\"turn/steer\"}\n").await.expect("write");
    stdin.write_all(b"{\"method\":\"turn/interrupt\",\"id\":5}\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"{"id":5,"result":{}}"#));
    stdin.write_all(b"{\"id\":\"t-1\",\"method\":\"turn/start\",\"params\":{\"id\":9}}\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"{"id":"t-1","error":{"code":-32600,"message":"busy"}}"#));
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"{"id":0,"method":"item/approve"}"#));
    // Neither a request with the same ID nor the response to another request is the answer.
    stdin.write_all(b"{\"id\":0,\"method\":\"ping\"}\n{\"id\":10,\"result\":{}}\n").await.expect("write");
    stdin.write_all(b"{\"id\":0,\"result\":{\"decision\":\"accept\"}}\n").await.expect("write");
    assert_eq!(next(&mut stdout).await.as_deref(), Some(r#"took {"id":0,"result":{"decision":"accept"}}"#));
    drop(stdin);
    assert!(child.handle.wait().await.expect("wait").success());
    exec.verify();
}

#[tokio::test(start_paused = true)]
async fn an_answer_needs_a_taken_line_with_an_id() {
    let exec = ScriptedExec::new();
    exec.script("early", Script::new().respond("{}").stdout("never"));
    exec.script("no-id", Script::new().expect_line("hello").respond("{}").stdout("never"));
    exec.script("notification", Script::new().expect_request("initialize"));
    for (program, input) in [("early", ""), ("no-id", "hello\n"), ("notification", "{\"method\":\"initialize\"}\n")] {
        let (mut child, mut stdout) = spawn(&exec, Command::new(program)).await;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).await.expect("write");
        assert_eq!(child.handle.wait().await.expect("wait").code, Some(EXPECTATION_FAILED_EXIT_CODE), "{program}");
        assert_eq!(next(&mut stdout).await, None, "{program} writes nothing");
    }
    let failures: Vec<String> = exec.runs().iter().flat_map(|run| run.failures()).collect();
    assert_eq!(
        failures,
        [
            r#"no line was taken before Answer("result {}")"#,
            r#"cannot answer "hello": it has no "id""#,
            r#"expected a line holding a "initialize" request, got "{\"method\":\"initialize\"}""#,
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_broken_expectation_fails_the_run_and_verify() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().expect_line("initialize").stdout("never"));
    let mut child = exec.spawn(Command::new("cli")).await.expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"shutdown\n").await.expect("write");
    let status = child.handle.wait().await.expect("wait");
    assert_eq!(status.code, Some(EXPECTATION_FAILED_EXIT_CODE));
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).await.expect("stderr");
    assert_eq!(stderr, "scripted process: expected a line containing \"initialize\", got \"shutdown\"\n");
    let verified = std::panic::catch_unwind(AssertUnwindSafe(|| exec.verify()));
    let message = *verified.expect_err("verify must panic").downcast::<String>().expect("message");
    assert!(message.contains("got \"shutdown\""), "{message}");
}

#[tokio::test(start_paused = true)]
async fn stdin_closing_early_fails_a_waiting_step() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().wait_line("never-sent"));
    let mut child = exec.spawn(Command::new("cli")).await.expect("spawn");
    drop(child.stdin.take());
    assert_eq!(child.handle.wait().await.expect("wait").code, Some(EXPECTATION_FAILED_EXIT_CODE));
    let failures = exec.last_run().expect("run").failures();
    assert_eq!(failures, ["stdin closed while waiting for a line containing \"never-sent\""]);
}

#[tokio::test(start_paused = true)]
async fn signal_reactions_run_instead_of_dying() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().on_signal(SIGINT, [Step::stdout("interrupted"), Step::Exit(0)]).hang());
    let (child, mut stdout) = spawn(&exec, Command::new("cli")).await;
    let status = child.handle.terminate().await.expect("terminate");
    assert_eq!((status.code, status.killed_by), (Some(0), Some(KillCause::Requested)), "{status}");
    assert_eq!(next(&mut stdout).await.as_deref(), Some("interrupted"));
    assert_eq!(exec.last_run().expect("run").signals(), [SIGINT]);
}

#[tokio::test(start_paused = true)]
async fn escalation_reaches_sigkill_after_both_graces() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().ignore_signal(SIGINT).ignore_signal(SIGTERM).hang());
    let mut policy = KillPolicy::default();
    policy.interrupt_grace = Duration::from_secs(2);
    policy.terminate_grace = Duration::from_secs(3);
    let child = exec.spawn(Command::new("cli").kill_policy(policy)).await.expect("spawn");
    let started = Instant::now();
    let status = child.handle.terminate().await.expect("terminate");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!((status.signal, status.killed_by), (Some(9), Some(KillCause::Requested)));
    assert_eq!(exec.last_run().expect("run").signals(), [SIGINT, SIGTERM, 9]);
}

#[tokio::test(start_paused = true)]
async fn crashes_and_unhandled_signals_end_the_process() {
    let exec = ScriptedExec::new();
    exec.script("crash", Script::new().stdout("boom").die(11));
    exec.script("plain", Script::new().hang());
    let crashed = exec.spawn(Command::new("crash")).await.expect("spawn");
    assert_eq!(crashed.handle.wait().await.expect("wait"), ExitStatus::signal(11));
    let plain = exec.spawn(Command::new("plain").kill_policy(KillPolicy::default())).await.expect("spawn");
    let status = plain.handle.terminate().await.expect("terminate");
    assert_eq!(status, ExitStatus::signal(SIGINT).with_cause(KillCause::Requested));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_kills_and_writes_then_fail() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().hang());
    let mut child = exec.spawn(Command::new("cli")).await.expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    drop(child);
    let run = exec.last_run().expect("run");
    assert_eq!(run.wait().await, ExitStatus::signal(9).with_cause(KillCause::Requested));
    let error = stdin.write_all(b"late\n").await.expect_err("the process is gone");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe);
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_limit_applies_on_tokio_time() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new().hang());
    let mut limits = agent_core::exec::Limits::default();
    limits.wall_clock = Some(Duration::from_secs(30));
    let child = exec.spawn(Command::new("cli").limits(limits)).await.expect("spawn");
    let started = Instant::now();
    let status = child.handle.wait().await.expect("wait");
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(status, ExitStatus::signal(9).with_cause(KillCause::WallClock));
}

#[tokio::test(start_paused = true)]
async fn programs_are_found_by_name_queued_first() {
    let exec = ScriptedExec::new();
    exec.program("codex", |command: &Command| Script::new().stdout(format!("args={}", command.args.len())));
    exec.script("codex", Script::new().stdout("queued"));
    let (_first, mut first) = spawn(&exec, Command::new("/usr/local/bin/codex")).await;
    assert_eq!(next(&mut first).await.as_deref(), Some("queued"), "a queued script plays first");
    let (_second, mut second) = spawn(&exec, Command::new("codex").args(["a", "b"])).await;
    assert_eq!(next(&mut second).await.as_deref(), Some("args=2"), "then the program's script");

    let missing = exec.spawn(Command::new("claude")).await.expect_err("no script");
    assert!(matches!(missing, ExecError::ProgramNotFound { searched_path: true, .. }), "{missing:?}");
    let invalid = exec.spawn(Command::new("codex").env("A=B", "1")).await.expect_err("bad env");
    assert!(matches!(invalid, ExecError::InvalidEnv { .. }), "{invalid:?}");
    let programs: Vec<_> = exec.spawned().into_iter().map(|command| command.program).collect();
    assert_eq!(programs, ["/usr/local/bin/codex", "codex"], "only spawned commands are recorded");
}

#[tokio::test(start_paused = true)]
async fn runs_record_the_effective_environment() {
    let exec = ScriptedExec::new();
    exec.program("cli", |_| Script::new());
    let session = SessionId::new("scripted-env").expect("id");
    let command = Command::new("cli").env_clear(["PATH"]).env("OPENAI_API_KEY", "sk-secret").session(session);
    exec.spawn(command).await.expect("spawn");
    let run = exec.last_run().expect("run");
    let names: Vec<_> = run.env().keys().map(|key| key.to_string_lossy().into_owned()).collect();
    let mut expected = vec!["OPENAI_API_KEY".to_owned(), SESSION_MARKER_ENV.into(), OWNER_MARKER_ENV.into()];
    if std::env::var_os("PATH").is_some() {
        expected.push("PATH".into());
    }
    // Stamped where this process's PID namespace can be read (Linux).
    if std::fs::read_link("/proc/self/ns/pid").is_ok() {
        expected.push(OWNER_NAMESPACE_MARKER_ENV.into());
    }
    expected.sort();
    assert_eq!(names, expected);
    let debug = format!("{run:?}");
    assert!(!debug.contains("sk-secret"), "values stay out of Debug: {debug}");
}

#[tokio::test(start_paused = true)]
async fn verify_reports_scripts_that_never_ran() {
    let exec = ScriptedExec::new();
    exec.script("cli", Script::new());
    let verified = std::panic::catch_unwind(AssertUnwindSafe(|| exec.verify()));
    let message = *verified.expect_err("verify must panic").downcast::<String>().expect("message");
    assert_eq!(message, "scripted exec: \"cli\": 1 queued script(s) never spawned");
}
