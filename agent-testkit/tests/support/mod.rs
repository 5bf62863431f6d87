//! Helpers shared by the integration tests: a minimal HTTP/1.1 client and a JSON Lines child
//! process driver.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A response read by [`request`].
#[derive(Debug)]
pub(crate) struct HttpResponse {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    /// False when the connection ended before the body did.
    pub(crate) complete: bool,
}

impl HttpResponse {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// `(event name, data)` of each SSE frame.
    pub(crate) fn sse(&self) -> Vec<(Option<String>, String)> {
        self.body
            .split("\n\n")
            .filter(|frame| !frame.trim().is_empty() && !frame.starts_with(':'))
            .map(|frame| {
                let mut event = None;
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(name) = line.strip_prefix("event: ") {
                        event = Some(name.to_owned());
                    } else if let Some(text) = line.strip_prefix("data: ") {
                        data.push_str(text);
                    }
                }
                (event, data)
            })
            .collect()
    }

    /// The SSE data frames parsed as JSON (skipping `[DONE]`).
    pub(crate) fn sse_json(&self) -> Vec<Value> {
        self.sse().into_iter().filter(|(_, d)| d != "[DONE]").map(|(_, d)| serde_json::from_str(&d).unwrap()).collect()
    }
}

/// Sends one request and writes its head and body; returns the open connection.
pub(crate) async fn send(addr: SocketAddr, method: &str, target: &str, body: Option<&Value>) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nx-api-key: sk-test-secret\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

/// Sends one request and reads the whole response (until its body ends or the connection does).
pub(crate) async fn request(addr: SocketAddr, method: &str, target: &str, body: Option<&Value>) -> HttpResponse {
    let stream = send(addr, method, target, body).await;
    read_response(stream, method == "HEAD").await
}

/// Reads one response from `stream`.
pub(crate) async fn read_response(mut stream: TcpStream, head_only: bool) -> HttpResponse {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut rest = raw[head_end..].to_vec();
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    if head_only {
        return HttpResponse { status, headers, body: String::new(), complete: true };
    }
    let (body, complete) = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(&mut stream, &mut rest).await
    } else {
        let length: usize = find("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while rest.len() < length {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => rest.extend_from_slice(&buf[..n]),
            }
        }
        let complete = rest.len() >= length;
        (rest, complete)
    };
    HttpResponse { status, headers, body: String::from_utf8(body).unwrap(), complete }
}

async fn read_chunked(stream: &mut TcpStream, pending: &mut Vec<u8>) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // Parse every whole chunk in `pending`.
        while let Some(line_end) = pending.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&pending[..line_end]).trim(), 16).unwrap();
            if pending.len() < line_end + 2 + size + 2 {
                break;
            }
            if size == 0 {
                return (body, true);
            }
            body.extend_from_slice(&pending[line_end + 2..line_end + 2 + size]);
            pending.drain(..line_end + 2 + size + 2);
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (body, false),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
}

/// How long a real CLI gets for one whole test.
pub(crate) const CLI_DEADLINE: Duration = Duration::from_secs(120);

/// A child process speaking JSON Lines on stdin/stdout.
pub(crate) struct JsonlChild {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Every line read so far.
    pub(crate) seen: Vec<Value>,
    /// Everything written to stderr so far.
    stderr: Arc<Mutex<String>>,
}

impl JsonlChild {
    pub(crate) fn spawn(command: std::process::Command) -> JsonlChild {
        let mut command = tokio::process::Command::from(command);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot spawn {command:?}: {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr_lines.next_line().await {
                let mut sink = sink.lock().unwrap();
                sink.push_str(&line);
                sink.push('\n');
            }
        });
        JsonlChild { child, stdin, stdout, seen: Vec::new(), stderr }
    }

    pub(crate) async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Reads lines until one matches `predicate`; non-JSON lines are kept as strings.
    pub(crate) async fn until(&mut self, what: &str, predicate: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self.stdout.next_line().await.unwrap();
            let Some(line) = line else {
                panic!(
                    "stdout closed while waiting for {what}; lines so far: {:#?}\nstderr:\n{}",
                    self.seen,
                    self.stderr()
                )
            };
            let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
            self.seen.push(value.clone());
            if predicate(&value) {
                return value;
            }
        }
    }

    /// Fails the test after a deadline, with what the child wrote.
    pub(crate) fn timed_out(&self, what: &str) -> ! {
        panic!("timed out waiting for {what}; lines so far: {:#?}\nstderr:\n{}", self.seen, self.stderr())
    }

    /// Everything the child wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Closes stdin and waits for the exit status.
    pub(crate) async fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().await.unwrap()
    }
}
