//! A `fake-codex` started and spoken to by hand, without the harness.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use agent_testkit::fake_cli::{CODEX_THREAD_ID, FakeCli, SCRIPT_ENV};
use serde_json::{Value, json};

/// A fake started by hand.
pub(crate) struct Fake {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Fake {
    pub(crate) fn start(program: &Path, script: &Path, work: &Path) -> Result<Fake, String> {
        let mut child = Command::new(program)
            .args(FakeCli::Codex.protocol_args())
            .env(SCRIPT_ENV, script)
            .current_dir(work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Fake { child, stdin, stdout })
    }

    fn send(&mut self, message: Value) -> Result<(), String> {
        writeln!(self.stdin, "{message}").and_then(|()| self.stdin.flush()).map_err(|e| format!("write: {e}"))
    }

    fn recv(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        self.read_line(&mut line)?;
        serde_json::from_str(&line).map_err(|e| format!("not JSON ({e}): {line:?}"))
    }

    /// Reads one line into `line` (cleared first); end of file is an error.
    pub(crate) fn read_line(&mut self, line: &mut String) -> Result<(), String> {
        line.clear();
        match self.stdout.read_line(line) {
            Ok(0) => Err("the fake closed its stdout".to_owned()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Starts a turn on the fake's thread.
    pub(crate) fn start_turn(&mut self, prompt: &str) -> Result<(), String> {
        let input = json!([{"type": "text", "text": prompt}]);
        self.send(json!({"id": 3, "method": "turn/start", "params": {"threadId": CODEX_THREAD_ID, "input": input}}))
    }

    /// `initialize`, `initialized`, `thread/start`; waits for `thread/started`.
    pub(crate) fn handshake(&mut self, cwd: &Path) -> Result<(), String> {
        self.send(
            json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "agent-bench", "version": "0"}}}),
        )?;
        self.recv()?;
        self.send(json!({"method": "initialized"}))?;
        self.send(json!({"id": 2, "method": "thread/start", "params": {"cwd": cwd.display().to_string()}}))?;
        while self.recv()?.get("method").and_then(Value::as_str) != Some("thread/started") {}
        Ok(())
    }

    /// A second descriptor of the fake's stdout, for a reader of its own; nothing may be left
    /// in this one's buffer.
    pub(crate) fn stdout_fd(&self) -> Result<std::os::fd::OwnedFd, String> {
        use std::os::fd::AsFd;
        if !self.stdout.buffer().is_empty() {
            return Err("output is buffered".into());
        }
        self.stdout.get_ref().as_fd().try_clone_to_owned().map_err(|e| format!("dup: {e}"))
    }

    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
