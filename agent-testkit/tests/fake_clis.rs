//! The fake CLI binaries, driven as plain processes: a normal turn in each protocol, approvals,
//! questions and interrupts, every fault kind, and script errors naming the line.

use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agent_testkit::fake_cli::{
    CODEX_THREAD_ID, Direction, FakeCli, FakeCliEnv, FakeScript, InterruptMode, codex_turn_id,
};
use agent_testkit::programs::ProgramDir;
use agent_testkit::streams::{CodexIds, write_codex_app, write_codex_app_stamped};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Longest wait for any one line or exit.
const WAIT: Duration = Duration::from_secs(10);

/// How long a test watches for output that must not come.
const QUIET: Duration = Duration::from_millis(300);

fn program(cli: FakeCli) -> &'static str {
    match cli {
        FakeCli::Codex => env!("CARGO_BIN_EXE_fake-codex"),
        FakeCli::Claude => env!("CARGO_BIN_EXE_fake-claude"),
        _ => env!("CARGO_BIN_EXE_fake-pi"),
    }
}

/// A running fake and a minimal client of its protocol.
struct Fake {
    cli: FakeCli,
    env: FakeCliEnv,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Codex thread and turn IDs, for `turn/interrupt`.
    thread: String,
    turn: String,
}

impl Fake {
    async fn start(cli: FakeCli, script: &FakeScript) -> Fake {
        let env = FakeCliEnv::with_program(cli, program(cli), script).unwrap();
        let mut command = Command::from(env.command());
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Fake { cli, env, child, stdin, stdout, thread: String::new(), turn: String::new() }
    }

    async fn write(&mut self, text: &str) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(text.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await
    }

    async fn send(&mut self, msg: Value) {
        self.write(&msg.to_string()).await.expect("the fake reads stdin");
    }

    /// The next stdout line; `None` at end of file.
    async fn line(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.stdout.next_line()).await.expect("a line in time").unwrap()
    }

    async fn recv(&mut self) -> Value {
        let line = self.line().await.expect("a frame before end of file");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Frames up to and including the first that `stop` accepts.
    async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Asserts nothing arrives on stdout for a while.
    async fn quiet(&mut self) {
        let next = tokio::time::timeout(QUIET, self.stdout.next_line()).await;
        assert!(next.is_err(), "unexpected output: {next:?}");
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    async fn exit(&mut self) -> ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait()).await.expect("the fake exits in time").unwrap()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends the opening requests and reads their answers.
    async fn open(&mut self) {
        match self.cli {
            FakeCli::Codex => {
                self.send(json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t"}}})).await;
                assert!(self.recv().await["result"]["userAgent"].is_string());
                self.send(json!({"method": "initialized"})).await;
                self.send(json!({"id": 2, "method": "thread/start", "params": {"cwd": "/tmp"}})).await;
                let started = self.recv().await;
                assert_eq!(started["id"], 2);
                self.thread = started["result"]["thread"]["id"].as_str().unwrap().to_owned();
                assert_eq!(self.recv().await["method"], "thread/started");
            }
            FakeCli::Claude => {
                let init = json!({"type": "control_request", "request_id": "req_1", "request": {"subtype": "initialize", "hooks": null}});
                self.send(init).await;
                let answer = self.recv().await;
                assert_eq!(answer["response"]["request_id"], "req_1");
                assert_eq!(answer["response"]["subtype"], "success");
            }
            _ => {
                self.send(json!({"id": "s0", "type": "get_state"})).await;
                let state = self.recv().await;
                assert_eq!((state["id"].as_str(), state["success"].as_bool()), (Some("s0"), Some(true)));
                assert!(state["data"]["sessionId"].is_string());
            }
        }
    }

    fn prompt(&self, text: &str) -> Value {
        match self.cli {
            FakeCli::Codex => {
                json!({"id": 10, "method": "turn/start", "params": {"threadId": self.thread, "input": [{"type": "text", "text": text}]}})
            }
            FakeCli::Claude => {
                json!({"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": null, "session_id": ""})
            }
            _ => json!({"id": "p1", "type": "prompt", "message": text}),
        }
    }

    /// Starts a turn and reads until the fake accepted it.
    async fn start_turn(&mut self, text: &str) -> Vec<Value> {
        self.send(self.prompt(text)).await;
        let frames = match self.cli {
            FakeCli::Codex => self.until(|f| f["method"] == "turn/started").await,
            FakeCli::Claude => self.until(|f| f["type"] == "system" && f["subtype"] == "init").await,
            _ => self.until(|f| f["type"] == "message_end" && f["message"]["role"] == "user").await,
        };
        if self.cli == FakeCli::Codex {
            self.turn = frames[0]["result"]["turn"]["id"].as_str().unwrap().to_owned();
        }
        frames
    }

    fn interrupt(&self) -> Value {
        match self.cli {
            FakeCli::Codex => {
                json!({"id": 20, "method": "turn/interrupt", "params": {"threadId": self.thread, "turnId": self.turn}})
            }
            FakeCli::Claude => {
                json!({"type": "control_request", "request_id": "req_int", "request": {"subtype": "interrupt"}})
            }
            _ => json!({"id": "a1", "type": "abort"}),
        }
    }

    fn is_terminal(&self, frame: &Value) -> bool {
        match self.cli {
            FakeCli::Codex => frame["method"] == "turn/completed",
            FakeCli::Claude => frame["type"] == "result",
            _ => frame["type"] == "agent_settled",
        }
    }

    /// Reads the rest of a turn, answering approvals and questions with `answer`.
    async fn finish_turn(&mut self, answer: impl Fn(FakeCli, &Value) -> Option<Value>) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            if let Some(reply) = answer(self.cli, &frame) {
                self.send(reply).await;
            }
            let done = self.is_terminal(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

/// How a turn ended, read from its frames: `completed`, `failed` or `interrupted`.
fn end_status(cli: FakeCli, frames: &[Value]) -> String {
    let last = frames.last().expect("frames");
    match cli {
        FakeCli::Codex => last["params"]["turn"]["status"].as_str().unwrap().to_owned(),
        FakeCli::Claude => match (last["subtype"].as_str(), last["is_error"].as_bool()) {
            (Some("success"), Some(false)) => "completed".into(),
            (Some("success"), Some(true)) => "failed".into(),
            _ => "interrupted".into(),
        },
        _ => {
            let end = frames.iter().rev().find(|f| f["type"] == "message_end").expect("a message_end");
            match end["message"]["stopReason"].as_str() {
                Some("aborted") => "interrupted".into(),
                Some("error") => "failed".into(),
                _ => "completed".into(),
            }
        }
    }
}

/// The text deltas of a turn, joined.
fn streamed(cli: FakeCli, frames: &[Value]) -> String {
    frames
        .iter()
        .filter_map(|f| match cli {
            FakeCli::Codex => (f["method"] == "item/agentMessage/delta").then(|| &f["params"]["delta"]),
            FakeCli::Claude => (f["type"] == "stream_event" && f["event"]["type"] == "content_block_delta")
                .then(|| &f["event"]["delta"]["text"]),
            _ => (f["assistantMessageEvent"]["type"] == "text_delta").then(|| &f["assistantMessageEvent"]["delta"]),
        })
        .filter_map(Value::as_str)
        .collect()
}

/// Answers an approval request with `approve`, a question with "blue".
fn answer_with(approve: bool) -> impl Fn(FakeCli, &Value) -> Option<Value> {
    move |cli, frame| match cli {
        FakeCli::Codex => match frame["method"].as_str() {
            Some(m) if m.ends_with("requestApproval") => {
                Some(json!({"id": frame["id"], "result": {"decision": if approve { "accept" } else { "decline" }}}))
            }
            Some("item/tool/requestUserInput") => {
                let question = frame["params"]["questions"][0]["id"].as_str().unwrap();
                Some(json!({"id": frame["id"], "result": {"answers": {question: {"answers": ["blue"]}}}}))
            }
            _ => None,
        },
        FakeCli::Claude if frame["type"] == "control_request" && frame["request"]["subtype"] == "can_use_tool" => {
            let request = &frame["request"];
            let response = if request["tool_name"] == "AskUserQuestion" {
                let mut input = request["input"].clone();
                let question = input["questions"][0]["question"].as_str().unwrap().to_owned();
                input["answers"] = json!({question: "blue"});
                json!({"behavior": "allow", "updatedInput": input})
            } else if approve {
                json!({"behavior": "allow", "updatedInput": request["input"]})
            } else {
                json!({"behavior": "deny", "message": "not today"})
            };
            Some(
                json!({"type": "control_response", "response": {"subtype": "success", "request_id": frame["request_id"], "response": response}}),
            )
        }
        FakeCli::Pi if frame["type"] == "extension_ui_request" => match frame["method"].as_str() {
            Some("confirm") => Some(json!({"type": "extension_ui_response", "id": frame["id"], "confirmed": approve})),
            Some("select") => Some(json!({"type": "extension_ui_response", "id": frame["id"], "value": "blue"})),
            _ => None,
        },
        _ => None,
    }
}

fn no_answers(_: FakeCli, _: &Value) -> Option<Value> {
    None
}

#[tokio::test]
async fn a_normal_turn_in_each_protocol() {
    for cli in FakeCli::ALL {
        let script = FakeScript::new().handshake().turn_start().deltas(["Hel", "lo ", "world"]).complete();
        let mut fake = Fake::start(cli, &script).await;
        fake.open().await;
        fake.start_turn("Say hello").await;
        let frames = fake.finish_turn(no_answers).await;
        assert_eq!(end_status(cli, &frames), "completed", "{cli:?}: {frames:#?}");
        assert_eq!(streamed(cli, &frames), "Hello world", "{cli:?}");
        match cli {
            FakeCli::Codex => {
                let end = &frames.last().unwrap()["params"]["turn"];
                assert_eq!(end["id"], fake.turn.as_str());
                assert_eq!(end["items"][0]["text"], "Hello world");
                assert!(frames.iter().all(|f| f.get("jsonrpc").is_none() && f["emittedAtMs"].is_u64()));
            }
            FakeCli::Claude => {
                assert_eq!(frames.last().unwrap()["result"], "Hello world");
                assert!(frames.iter().any(|f| f["type"] == "assistant"));
            }
            _ => {
                assert_eq!(frames[frames.len() - 2]["type"], "agent_end");
                assert_eq!(frames[frames.len() - 2]["willRetry"], false);
            }
        }
        fake.close_stdin();
        assert_eq!(fake.exit().await.code(), Some(0), "{cli:?} exits 0 when stdin closes");
    }
}

#[tokio::test]
async fn claude_streams_partial_messages_only_when_asked_and_finishes_the_turn_after_eof() {
    let script = FakeScript::new().turn_start().deltas(["a", "b"]).complete();
    let env = FakeCliEnv::with_program(FakeCli::Claude, program(FakeCli::Claude), &script).unwrap();
    let mut child = Command::new(env.program())
        .args(["-p", "--output-format", "stream-json", "--resume", "11111111-2222-4333-8444-555555555555"])
        .envs(env.vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n").await.unwrap();
    drop(stdin);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).await.unwrap();
    let frames: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["system", "assistant", "result"]);
    assert_eq!(frames[0]["session_id"], "11111111-2222-4333-8444-555555555555", "the session comes from --resume");
    assert_eq!(frames[2]["result"], "ab");
    assert_eq!(child.wait().await.unwrap().code(), Some(0), "stdin EOF: the turn finished, then the fake exited");
}

#[tokio::test]
async fn two_turns_then_the_script_ends_idle() {
    for cli in FakeCli::ALL {
        let script = FakeScript::new().handshake().turn("first").turn("second");
        let mut fake = Fake::start(cli, &script).await;
        fake.open().await;
        for text in ["first", "second"] {
            fake.start_turn("go").await;
            let frames = fake.finish_turn(no_answers).await;
            assert_eq!(streamed(cli, &frames), text, "{cli:?}");
        }
        fake.quiet().await;
        assert!(fake.running(), "{cli:?}: an ended script idles until stdin closes");
        fake.close_stdin();
        assert_eq!(fake.exit().await.code(), Some(0));
    }
}

#[tokio::test]
async fn approvals_round_trip_in_each_protocol() {
    for cli in FakeCli::ALL {
        for approve in [true, false] {
            let script = FakeScript::new()
                .handshake()
                .turn_start()
                .approval_with_output("touch approved.txt", "created")
                .deltas(["Tool said: ${tool_output} (${decision})"])
                .complete();
            let mut fake = Fake::start(cli, &script).await;
            fake.open().await;
            fake.start_turn("make the file").await;
            let frames = fake.finish_turn(answer_with(approve)).await;
            assert_eq!(end_status(cli, &frames), "completed", "{cli:?} approve={approve}");
            let text = streamed(cli, &frames);
            if approve {
                assert_eq!(text, "Tool said: created (approved)", "{cli:?}");
            } else {
                assert!(text.ends_with("(denied)"), "{cli:?}: {text}");
            }
            let tool_status: Vec<&Value> = frames
                .iter()
                .filter_map(|f| match cli {
                    FakeCli::Codex => (f["method"] == "item/completed"
                        && f["params"]["item"]["type"] == "commandExecution")
                        .then(|| &f["params"]["item"]["status"]),
                    FakeCli::Claude => f["message"]["content"][0].get("is_error"),
                    _ => (f["type"] == "tool_execution_end").then(|| &f["isError"]),
                })
                .collect();
            let expected = match (cli, approve) {
                (FakeCli::Codex, true) => json!("completed"),
                (FakeCli::Codex, false) => json!("declined"),
                (_, approved) => json!(!approved),
            };
            assert_eq!(tool_status, [&expected], "{cli:?} approve={approve}");
        }
    }
}

#[tokio::test]
async fn a_cancelled_codex_approval_interrupts_the_turn_and_the_next_turn_runs() {
    let script = FakeScript::new()
        .handshake()
        .turn_start()
        .approval("touch never.txt")
        .deltas(["unreachable"])
        .complete()
        .turn("next turn");
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    let frames = fake
        .finish_turn(|_, f| {
            (f["method"] == "item/commandExecution/requestApproval")
                .then(|| json!({"id": f["id"], "result": {"decision": "cancel"}}))
        })
        .await;
    assert_eq!(end_status(FakeCli::Codex, &frames), "interrupted");
    assert_eq!(streamed(FakeCli::Codex, &frames), "");
    fake.start_turn("again").await;
    assert_eq!(streamed(FakeCli::Codex, &fake.finish_turn(no_answers).await), "next turn");
}

#[tokio::test]
async fn a_codex_stream_file_is_copied_into_the_running_turn_as_it_is() {
    let dir = ProgramDir::new("stream-file");
    let path = dir.path().join("codex_app.jsonl");
    let mut stream = Vec::new();
    write_codex_app(&mut stream, 100, &CodexIds::default()).unwrap();
    std::fs::write(&path, &stream).unwrap();
    let script = FakeScript::new().handshake().turn_start().stream_file(&path).turn("next turn");
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    assert_eq!((fake.thread.as_str(), fake.turn.as_str()), (CODEX_THREAD_ID, codex_turn_id(1).as_str()));
    // The user message item, then the file, line for line.
    let user_item = fake.until(|f| f["method"] == "item/completed").await;
    assert_eq!(user_item.len(), 2, "{user_item:?}");
    let mut copied = Vec::new();
    for _ in 0..104 {
        copied.push(fake.line().await.expect("a streamed line"));
    }
    let expected: Vec<&str> = std::str::from_utf8(&stream).unwrap().lines().collect();
    assert_eq!(copied, expected);
    // The file ended the turn: the next one starts.
    fake.start_turn("again").await;
    assert_eq!(fake.turn, codex_turn_id(2));
    assert_eq!(streamed(FakeCli::Codex, &fake.finish_turn(no_answers).await), "next turn");
    let note =
        fake.env.transcript().unwrap().into_iter().find_map(|l| l.msg.filter(|m| m.get("stream_file").is_some()));
    assert_eq!(note.expect("a stream_file note")["bytes"], stream.len());
}

#[tokio::test]
async fn a_paced_stream_file_stamps_each_line_with_its_write_time() {
    let dir = ProgramDir::new("stream-paced");
    let path = dir.path().join("stamped.jsonl");
    let mut stream = Vec::new();
    write_codex_app_stamped(&mut stream, 50, &CodexIds::default()).unwrap();
    std::fs::write(&path, &stream).unwrap();
    let script = FakeScript::new().handshake().turn_start().stream_file_paced(&path, 1000);
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    fake.until(|f| f["method"] == "item/completed").await;
    let frames = fake.until(|f| f["method"] == "turn/completed" && f["params"]["turn"]["id"] == "fake-turn-1").await;
    let stamps: Vec<u128> = frames
        .iter()
        .filter(|f| f["method"] == "item/agentMessage/delta")
        .map(|f| {
            let text = f["params"]["delta"].as_str().unwrap();
            text.split(' ').next().unwrap().parse().unwrap_or_else(|e| panic!("{e}: {text:?}"))
        })
        .collect();
    assert_eq!(stamps.len(), 50);
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    // 50 lines at 1000 per second: the last is written about 49 ms after the first.
    let spread_ms = (stamps[49] - stamps[0]) / 1_000_000;
    assert!((45..1000).contains(&spread_ms), "{spread_ms} ms");
}

#[tokio::test]
async fn questions_are_answered_in_each_protocol() {
    for cli in FakeCli::ALL {
        let script = FakeScript::new()
            .handshake()
            .turn_start()
            .question("Pick a color", ["red", "blue"])
            .deltas(["You chose ${answer}"])
            .complete();
        let mut fake = Fake::start(cli, &script).await;
        fake.open().await;
        fake.start_turn("ask me").await;
        let frames = fake.finish_turn(answer_with(true)).await;
        assert_eq!(streamed(cli, &frames), "You chose blue", "{cli:?}");
        assert_eq!(end_status(cli, &frames), "completed");
    }
}

#[tokio::test]
async fn interrupts_end_the_turn_and_the_session_stays_usable() {
    for cli in FakeCli::ALL {
        let script = FakeScript::new().handshake().turn_start().deltas(["thinking"]).stall().turn("back again");
        let mut fake = Fake::start(cli, &script).await;
        fake.open().await;
        fake.start_turn("take your time").await;
        fake.until(|f| streamed(cli, std::slice::from_ref(f)) == "thinking").await;
        fake.send(fake.interrupt()).await;
        let frames = fake.finish_turn(no_answers).await;
        assert_eq!(end_status(cli, &frames), "interrupted", "{cli:?}: {frames:#?}");
        let acked = frames.iter().chain(std::iter::once(&fake.recv_ack_if_pi().await)).any(|f| match cli {
            FakeCli::Codex => f["id"] == 20 && f["result"] == json!({}),
            FakeCli::Claude => f["response"]["request_id"] == "req_int",
            _ => f["command"] == "abort" && f["success"] == true,
        });
        assert!(acked, "{cli:?} acknowledged the interrupt");
        fake.start_turn("still there?").await;
        assert_eq!(streamed(cli, &fake.finish_turn(no_answers).await), "back again", "{cli:?}");
    }
}

impl Fake {
    /// Pi answers `abort` after `agent_settled`; the other protocols answer before the end.
    async fn recv_ack_if_pi(&mut self) -> Value {
        if self.cli == FakeCli::Pi { self.recv().await } else { Value::Null }
    }
}

#[tokio::test]
async fn interrupts_can_be_acknowledged_without_ending_or_ignored() {
    let script = FakeScript::new().interrupts(InterruptMode::AckOnly).handshake().turn_start().stall();
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    fake.send(fake.interrupt()).await;
    let frames = fake.until(|f| f["id"] == 20).await;
    assert_eq!(frames.last(), Some(&json!({"id": 20, "result": {}})));
    fake.quiet().await;

    let script = FakeScript::new().interrupts(InterruptMode::Ignore).handshake().turn_start().stall();
    let mut fake = Fake::start(FakeCli::Claude, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    fake.send(fake.interrupt()).await;
    fake.quiet().await;
}

#[tokio::test]
async fn exit_codes_at_each_protocol_phase() {
    for cli in FakeCli::ALL {
        // Before the handshake reply: the request arrives, no answer, exit 3.
        let mut fake =
            Fake::start(cli, &FakeScript::new().expect(agent_testkit::fake_cli::ExpectKind::Handshake).exit(3)).await;
        match cli {
            FakeCli::Codex => fake.send(json!({"id": 1, "method": "initialize", "params": {}})).await,
            FakeCli::Claude => {
                fake.send(json!({"type": "control_request", "request_id": "r", "request": {"subtype": "initialize"}}))
                    .await
            }
            _ => fake.send(json!({"type": "get_state"})).await,
        }
        assert_eq!(fake.line().await, None, "{cli:?}: no handshake reply");
        assert_eq!(fake.exit().await.code(), Some(3));

        // After the handshake.
        let mut fake = Fake::start(cli, &FakeScript::new().handshake().exit(4)).await;
        fake.open().await;
        assert_eq!(fake.line().await, None);
        assert_eq!(fake.exit().await.code(), Some(4));

        // Mid-turn: deltas, then exit without a terminal frame.
        let mut fake = Fake::start(cli, &FakeScript::new().handshake().turn_start().deltas(["part"]).exit(5)).await;
        fake.open().await;
        fake.start_turn("go").await;
        let mut rest = Vec::new();
        while let Some(line) = fake.line().await {
            rest.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        assert_eq!(streamed(cli, &rest), "part", "{cli:?}");
        assert!(!rest.iter().any(|f| fake.is_terminal(f)), "{cli:?}: no terminal frame");
        assert_eq!(fake.exit().await.code(), Some(5));

        // After the terminal frame.
        let mut fake = Fake::start(cli, &FakeScript::new().handshake().turn("done").exit(6)).await;
        fake.open().await;
        fake.start_turn("go").await;
        fake.finish_turn(no_answers).await;
        assert_eq!(fake.exit().await.code(), Some(6));
    }
}

#[tokio::test]
async fn a_hung_fake_answers_nothing_and_outlives_stdin() {
    let mut fake = Fake::start(FakeCli::Pi, &FakeScript::new().handshake().hang()).await;
    fake.open().await;
    fake.send(json!({"id": "p", "type": "prompt", "message": "hello?"})).await;
    fake.send(json!({"id": "s", "type": "get_state"})).await;
    fake.quiet().await;
    fake.close_stdin();
    tokio::time::sleep(QUIET).await;
    assert!(fake.running(), "a hung fake ignores stdin EOF");
    fake.child.kill().await.unwrap();
}

#[tokio::test]
async fn no_terminal_event_then_exit_zero_or_hang() {
    let mut fake = Fake::start(FakeCli::Codex, &FakeScript::new().handshake().turn_start().deltas(["x"]).exit(0)).await;
    fake.open().await;
    fake.start_turn("go").await;
    let frames = fake.until(|f| f["method"] == "item/completed" && f["params"]["item"]["type"] == "agentMessage").await;
    assert!(!frames.iter().any(|f| fake.is_terminal(f)));
    assert_eq!(fake.line().await, None);
    assert_eq!(fake.exit().await.code(), Some(0));

    let mut fake = Fake::start(FakeCli::Claude, &FakeScript::new().turn_start().deltas(["x"]).hang()).await;
    fake.start_turn("go").await;
    fake.until(|f| f["type"] == "assistant").await;
    fake.until(|f| f["event"]["type"] == "message_stop").await;
    fake.quiet().await;
    assert!(fake.running());
}

#[tokio::test]
async fn garbage_and_huge_lines() {
    let bytes = agent_testkit::fake_cli::DEFAULT_HUGE_LINE_BYTES;
    let script = FakeScript::new().handshake().garbage().huge_line(bytes).turn("after");
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    let garbage = fake.line().await.unwrap();
    assert!(serde_json::from_str::<Value>(&garbage).is_err(), "{garbage}");
    let huge = fake.line().await.unwrap();
    assert_eq!(huge.len(), bytes, "exactly 10 MiB");
    let frame: Value = serde_json::from_str(&huge).unwrap();
    assert_eq!(frame["method"], "fake/padding");
    fake.start_turn("go").await;
    assert_eq!(streamed(FakeCli::Codex, &fake.finish_turn(no_answers).await), "after");
    let transcript = fake.env.transcript().unwrap();
    assert!(transcript.iter().any(|l| l.dir == Direction::Out && l.bytes == Some(bytes)));
    assert!(transcript.iter().any(|l| l.text.as_deref() == Some(garbage.as_str())));
}

#[tokio::test]
async fn a_stderr_flood_waits_for_the_reader() {
    let bytes = 3 * 1024 * 1024 + 17;
    let script = FakeScript::new().stderr("starting").stderr_flood(bytes).handshake().turn("after the flood");
    let mut fake = Fake::start(FakeCli::Pi, &script).await;
    let mut stderr = fake.child.stderr.take().unwrap();
    let drain = tokio::spawn(async move {
        let mut all = Vec::new();
        stderr.read_to_end(&mut all).await.unwrap();
        all
    });
    fake.open().await;
    fake.start_turn("go").await;
    assert_eq!(streamed(FakeCli::Pi, &fake.finish_turn(no_answers).await), "after the flood");
    fake.close_stdin();
    assert_eq!(fake.exit().await.code(), Some(0));
    let all = drain.await.unwrap();
    assert_eq!(all.len(), "starting\n".len() + bytes);
    assert!(all.starts_with(b"starting\nfake-cli stderr flood line 00000001"));
}

#[tokio::test]
async fn duplicate_and_out_of_order_frames() {
    let script = FakeScript::new().handshake().turn_start().deltas(["once"]).complete().duplicate(2);
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    let first = fake.finish_turn(no_answers).await.pop().unwrap();
    assert_eq!(fake.recv().await, first);
    assert_eq!(fake.recv().await, first);

    let script = FakeScript::new().handshake().turn_start().hold().deltas(["a", "b"]).complete().release_reversed();
    let mut fake = Fake::start(FakeCli::Pi, &script).await;
    fake.open().await;
    fake.start_turn("go").await;
    let reversed = fake.until(|f| f["type"] == "message_start").await;
    let types: Vec<&str> = reversed.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"agent_settled"), "the terminal frame comes first: {types:?}");
    assert_eq!(streamed(FakeCli::Pi, &reversed), "ba");
}

#[tokio::test]
async fn stdin_closed_by_the_fake_breaks_the_clients_writes() {
    let script = FakeScript::new().handshake().close_stdin().sleep(200).send(json!({"type": "still_alive"})).exit(0);
    let mut fake = Fake::start(FakeCli::Pi, &script).await;
    fake.open().await;
    let started = Instant::now();
    let mut failed = None;
    while started.elapsed() < WAIT {
        if let Err(e) = fake.write("{\"type\":\"get_state\"}").await {
            failed = Some(e.kind());
            break;
        }
    }
    assert_eq!(failed, Some(std::io::ErrorKind::BrokenPipe));
    let rest = fake.until(|f| f["type"] == "still_alive").await;
    let answered = rest.iter().filter(|f| f["command"] == "get_state").count();
    assert_eq!(answered + 1, rest.len(), "only answers to whole lines read before the close");
    assert_eq!(fake.exit().await.code(), Some(0));
}

#[tokio::test]
async fn stdin_eof_exits_or_is_ignored_as_scripted() {
    let mut fake = Fake::start(FakeCli::Claude, &FakeScript::new().exit_on_stdin_eof(7).turn("never")).await;
    fake.close_stdin();
    assert_eq!(fake.exit().await.code(), Some(7));

    let script = FakeScript::new().ignore_stdin_eof().sleep(100).send(json!({"type": "after_eof"})).exit(0);
    let mut fake = Fake::start(FakeCli::Claude, &script).await;
    fake.close_stdin();
    assert_eq!(fake.recv().await["type"], "after_eof");
    assert_eq!(fake.exit().await.code(), Some(0));
}

#[tokio::test]
async fn stdout_closed_early_while_the_fake_keeps_running() {
    let script = FakeScript::new().handshake().close_stdout().sleep(300).exit(3);
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.open().await;
    assert_eq!(fake.line().await, None, "end of file on stdout");
    assert!(fake.running(), "the process outlives its stdout");
    assert_eq!(fake.exit().await.code(), Some(3));
}

#[tokio::test]
async fn a_slow_reader_backs_up_the_clients_writes() {
    let pause = Duration::from_millis(600);
    let script = FakeScript::new().pause_reading(pause.as_millis() as u64).handshake();
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    // Codex ignores lines that are not JSON; 2 MiB of them fill the pipe while the fake is not reading.
    let filler = "x".repeat(1024);
    let started = Instant::now();
    for _ in 0..2048 {
        fake.write(&filler).await.unwrap();
    }
    let blocked = started.elapsed();
    assert!(blocked >= pause / 2, "the writes went through in {blocked:?}");
    fake.open().await;
}

#[tokio::test]
async fn generic_steps_expect_reply_send_and_on_rules() {
    let script = FakeScript::new()
        .on(json!({"method": "ping"}), json!({"pong": "${in.params.n}"}))
        .expect_match(json!({"method": "custom/op"}))
        .reply(json!({"echo": "${in.params}"}))
        .send(json!({"method": "custom/done", "params": {"for": "${in.id}"}}))
        .expect_match(json!({"method": "custom/fail"}))
        .reply_error("nope");
    let mut fake = Fake::start(FakeCli::Codex, &script).await;
    fake.send(json!({"id": 1, "method": "ping", "params": {"n": 5}})).await;
    assert_eq!(fake.recv().await, json!({"id": 1, "result": {"pong": 5}}));
    fake.send(json!({"id": 2, "method": "custom/fail"})).await;
    fake.send(json!({"id": 3, "method": "custom/op", "params": {"a": [1]}})).await;
    assert_eq!(fake.recv().await, json!({"id": 3, "result": {"echo": {"a": [1]}}}));
    assert_eq!(fake.recv().await, json!({"method": "custom/done", "params": {"for": 3}}));
    assert_eq!(
        fake.recv().await,
        json!({"id": 2, "error": {"code": -32600, "message": "nope"}}),
        "queued messages wait"
    );
    fake.send(json!({"id": 4, "method": "ping", "params": {"n": "again"}})).await;
    assert_eq!(fake.recv().await["result"]["pong"], "again");
}

#[tokio::test]
async fn failed_turns_in_each_protocol() {
    for cli in FakeCli::ALL {
        let mut fake = Fake::start(cli, &FakeScript::new().handshake().turn_start().fail("model exploded")).await;
        fake.open().await;
        fake.start_turn("go").await;
        let frames = fake.finish_turn(no_answers).await;
        assert_eq!(end_status(cli, &frames), "failed", "{cli:?}");
        assert!(frames.iter().any(|f| f.to_string().contains("model exploded")), "{cli:?}");
    }
}

#[tokio::test]
async fn pi_answers_housekeeping_and_rejects_bad_lines() {
    let mut fake = Fake::start(FakeCli::Pi, &FakeScript::new().handshake().turn_start().stall()).await;
    fake.write("this is not json").await.unwrap();
    let parse = fake.recv().await;
    assert_eq!((parse["command"].as_str(), parse["success"].as_bool()), (Some("parse"), Some(false)));
    fake.open().await;
    fake.send(json!({"id": "r", "type": "set_auto_retry", "enabled": false})).await;
    assert_eq!(fake.recv().await, json!({"id": "r", "type": "response", "command": "set_auto_retry", "success": true}));
    fake.start_turn("go").await;
    fake.send(json!({"id": "busy", "type": "prompt", "message": "again"})).await;
    let busy = fake.recv().await;
    assert_eq!((busy["id"].as_str(), busy["success"].as_bool()), (Some("busy"), Some(false)));
    fake.send(json!({"id": "s", "type": "get_state"})).await;
    assert_eq!(fake.recv().await["data"]["isStreaming"], true);
}

#[tokio::test]
async fn the_transcript_records_both_directions() {
    let mut fake = Fake::start(FakeCli::Claude, &FakeScript::new().handshake().turn("hi")).await;
    fake.open().await;
    fake.start_turn("hello").await;
    fake.finish_turn(no_answers).await;
    fake.close_stdin();
    fake.exit().await;
    let transcript = fake.env.transcript().unwrap();
    assert_eq!(transcript[0].dir, Direction::Note);
    assert_eq!(transcript[0].msg.as_ref().unwrap()["argv"][0], "-p");
    let received = fake.env.received().unwrap();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1]["message"]["content"], "hello");
    assert!(
        transcript.iter().any(|l| l.dir == Direction::Out && l.msg.as_ref().is_some_and(|m| m["type"] == "result"))
    );
    assert!(transcript.windows(2).all(|w| w[0].t <= w[1].t));
}

async fn run_script(cli: FakeCli, script: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("fake-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.jsonl", cli.binary_name()));
    std::fs::write(&path, script).unwrap();
    let output = Command::new(program(cli)).env("FAKE_CLI_SCRIPT", &path).output().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn script_errors_name_the_line_and_exit_2() {
    let cases = [
        ("{\"step\":\"handshake\"}\n{\"step\": \n", "script line 2: not valid JSON"),
        ("# comment\n\n{\"step\":\"moonwalk\"}\n", "script line 3: unknown step \"moonwalk\"; known steps: handshake"),
        ("{\"step\":\"sleep\",\"ms\":\"soon\"}\n", "script line 1: step \"sleep\": invalid type"),
        ("{\"step\":\"approval\"}\n", "script line 1: step \"approval\": a command approval needs `command`"),
    ];
    for cli in FakeCli::ALL {
        for (script, message) in cases {
            let (code, stderr) = run_script(cli, script).await;
            assert_eq!(code, Some(2), "{cli:?} {script:?}: {stderr}");
            assert!(stderr.starts_with(&format!("{}: {message}", cli.binary_name())), "{stderr}");
        }
    }
    let output = Command::new(program(FakeCli::Pi)).env_remove("FAKE_CLI_SCRIPT").output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("set FAKE_CLI_SCRIPT or pass --fake-script"));
}

#[tokio::test]
async fn the_script_can_come_from_the_command_line() {
    let env = FakeCliEnv::with_program(FakeCli::Codex, program(FakeCli::Codex), &FakeScript::new().exit(9)).unwrap();
    // Stdin stays open: at end of file the fake would exit 0 before the script's `exit`.
    // (`Child::wait` closes a stdin it still holds, so it is taken out first.)
    let mut child =
        Command::new(env.program()).arg("--fake-script").arg(env.script_path()).stdin(Stdio::piped()).spawn().unwrap();
    let stdin = child.stdin.take();
    assert_eq!(child.wait().await.unwrap().code(), Some(9));
    drop(stdin);
}

#[tokio::test]
async fn version_output_matches_the_real_clis() {
    for cli in FakeCli::ALL {
        let output = Command::new(program(cli)).arg("--version").output().await.unwrap();
        assert!(output.status.success());
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), cli.version_line());
    }
    let output =
        Command::new(program(FakeCli::Codex)).arg("--version").env("FAKE_CLI_VERSION", "9.9.9").output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "codex-cli 9.9.9");
}

#[test]
fn binaries_are_found_next_to_the_test_executable() {
    for cli in FakeCli::ALL {
        let found = cli.binary().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found, std::path::Path::new(program(cli)));
    }
}
