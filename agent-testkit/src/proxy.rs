//! A proxy that refuses everything and records what it was asked for.
//!
//! The offline environments set `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` to it (with
//! `NO_PROXY=127.0.0.1,localhost`), so a CLI that tries to reach any host outside loopback
//! (update checks, telemetry, plugin sync) leaves an [`ProxyAttempt`] here instead of a network
//! connection, and a test asserts there were none.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::redact;

/// Largest request head read from a client; a longer one is recorded truncated.
const MAX_HEAD_BYTES: usize = 64 * 1024;

const REFUSAL: &[u8] = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// One refused request: `CONNECT host:443` for HTTPS, an absolute URI for plain HTTP.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProxyAttempt {
    /// Request method (`CONNECT`, `GET`, ...).
    pub method: String,
    /// Request target (`api.github.com:443`, `http://example.com/x`).
    pub target: String,
    /// Headers, names lowercase.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for ProxyAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyAttempt")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("headers", &redact::headers(&self.headers))
            .finish()
    }
}

/// A running refusing proxy on `127.0.0.1:0`; stops when dropped.
pub struct RefusingProxy {
    addr: SocketAddr,
    attempts: Arc<Mutex<Vec<ProxyAttempt>>>,
    task: JoinHandle<()>,
}

impl RefusingProxy {
    /// Starts the proxy.
    pub async fn start() -> std::io::Result<RefusingProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&attempts)));
        Ok(RefusingProxy { addr, attempts, task })
    }

    /// `http://127.0.0.1:<port>`: the value for the proxy variables.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every refused request so far.
    pub fn attempts(&self) -> Vec<ProxyAttempt> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for RefusingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for RefusingProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefusingProxy").field("addr", &self.addr).field("attempts", &self.attempts()).finish()
    }
}

async fn accept_loop(listener: TcpListener, attempts: Arc<Mutex<Vec<ProxyAttempt>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let attempts = Arc::clone(&attempts);
        tokio::spawn(async move {
            if let Some(attempt) = refuse(stream).await {
                attempts.lock().unwrap_or_else(|p| p.into_inner()).push(attempt);
            }
        });
    }
}

/// Reads one request head, answers 403 and closes. `None` when nothing was sent.
async fn refuse(mut stream: TcpStream) -> Option<ProxyAttempt> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD_BYTES {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    // The client may already be gone; the attempt is recorded either way.
    let _ = stream.write_all(REFUSAL).await;
    let _ = stream.shutdown().await;
    parse_head(&String::from_utf8_lossy(&head))
}

fn parse_head(head: &str) -> Option<ProxyAttempt> {
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split_whitespace();
    let method = request_line.next()?.to_owned();
    let target = request_line.next().unwrap_or_default().to_owned();
    let headers = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Some(ProxyAttempt { method, target, headers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_connect_heads() {
        let attempt = parse_head(
            "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\nProxy-Authorization: x\r\n\r\n",
        )
        .unwrap();
        assert_eq!(attempt.method, "CONNECT");
        assert_eq!(attempt.target, "api.github.com:443");
        assert_eq!(attempt.headers[0], ("host".to_owned(), "api.github.com:443".to_owned()));
        assert!(!format!("{attempt:?}").contains("\"x\""));
        assert!(parse_head("").is_none());
    }
}
