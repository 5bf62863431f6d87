//! Output limits: a reader that counts what a child writes and ends the child when it goes over.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use agent_core::exec::{ChildOutput, KillCause, Limits};
use tokio::io::{AsyncRead, ReadBuf};

/// Why a child's stdout or stderr stream failed: the child went over one of its [`Limits`] and
/// was killed. Reads fail with `io::ErrorKind::InvalidData` carrying this as the source; the
/// same cause shows in the child's `ExitStatus::killed_by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(*.cause, *.limit))]
#[non_exhaustive]
pub struct LimitExceeded {
    /// Which limit: `LineLimit`, `StdoutLimit` or `StderrLimit`.
    pub cause: KillCause,
    /// The limit, in bytes.
    pub limit: u64,
}

fn describe(cause: KillCause, limit: u64) -> String {
    match cause {
        KillCause::LineLimit => format!("a line exceeded the limit of {limit} bytes"),
        KillCause::StdoutLimit => format!("stdout exceeded the limit of {limit} bytes"),
        KillCause::StderrLimit => format!("stderr exceeded the limit of {limit} bytes"),
        other => format!("{other:?} limit of {limit} exceeded"),
    }
}

impl LimitExceeded {
    /// The `InvalidData` I/O error a limited stream fails with.
    fn to_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }
}

/// Which output stream a reader limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// What a limited reader ends when its stream goes over a limit.
pub(crate) trait LimitTarget: Send + Sync {
    /// Kills the process (and its group) for `cause`.
    fn limit_exceeded(&self, cause: KillCause);
}

/// Wraps `inner` in a limit-checking reader when `limits` constrains `stream`; otherwise boxes it
/// as is, so unlimited streams cost nothing per read.
pub(crate) fn limit_output<R>(inner: R, stream: Stream, limits: &Limits, target: Arc<dyn LimitTarget>) -> ChildOutput
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let (max_total, total_cause) = match stream {
        Stream::Stdout => (limits.max_stdout_bytes, KillCause::StdoutLimit),
        Stream::Stderr => (limits.max_stderr_bytes, KillCause::StderrLimit),
    };
    if limits.max_line_bytes.is_none() && max_total.is_none() {
        return Box::new(inner);
    }
    Box::new(LimitedReader {
        inner,
        max_line: limits.max_line_bytes,
        max_total,
        total_cause,
        line_len: 0,
        total: 0,
        failed: None,
        target,
    })
}

/// Delivers bytes up to the first one past a limit, then kills the child and fails every later
/// read with [`LimitExceeded`].
struct LimitedReader<R> {
    inner: R,
    max_line: Option<usize>,
    max_total: Option<u64>,
    total_cause: KillCause,
    /// Bytes since the last newline.
    line_len: usize,
    total: u64,
    failed: Option<LimitExceeded>,
    target: Arc<dyn LimitTarget>,
}

impl<R> LimitedReader<R> {
    /// How many of `fresh` may be delivered, and the limit the next byte would break.
    fn admit(&mut self, fresh: &[u8]) -> (usize, Option<LimitExceeded>) {
        let mut allowed = fresh.len();
        let mut exceeded = None;
        if let Some(max) = self.max_total {
            let remaining = max.saturating_sub(self.total);
            if fresh.len() as u64 > remaining {
                // Fits in usize: it is below `fresh.len()`.
                allowed = remaining as usize;
                exceeded = Some(LimitExceeded { cause: self.total_cause, limit: max });
            }
        }
        if let Some(max) = self.max_line {
            let (within, line_len) = scan_lines(&fresh[..allowed], self.line_len, max);
            self.line_len = line_len;
            if within < allowed {
                allowed = within;
                exceeded = Some(LimitExceeded { cause: KillCause::LineLimit, limit: max as u64 });
            }
        }
        self.total += allowed as u64;
        (allowed, exceeded)
    }
}

/// Scans `bytes` continuing a line of `line_len` bytes. Returns how many bytes stay within
/// `max` bytes per line (newlines not counted) and the length of the open line after them.
fn scan_lines(bytes: &[u8], mut line_len: usize, max: usize) -> (usize, usize) {
    let mut start = 0;
    while start < bytes.len() {
        let rest = &bytes[start..];
        let (segment, newline) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (rest.len(), false),
        };
        if line_len + segment > max {
            return (start + (max - line_len), max);
        }
        if newline {
            line_len = 0;
            start += segment + 1;
        } else {
            line_len += segment;
            start += segment;
        }
    }
    (bytes.len(), line_len)
}

impl<R: AsyncRead + Unpin> AsyncRead for LimitedReader<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(exceeded) = this.failed {
            return Poll::Ready(Err(exceeded.to_io()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let (allowed, exceeded) = this.admit(&buf.filled()[before..]);
        let Some(exceeded) = exceeded else {
            return Poll::Ready(Ok(()));
        };
        this.failed = Some(exceeded);
        this.target.limit_exceeded(exceeded.cause);
        buf.set_filled(before + allowed);
        if allowed == 0 { Poll::Ready(Err(exceeded.to_io())) } else { Poll::Ready(Ok(())) }
    }
}

impl<R> fmt::Debug for LimitedReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitedReader")
            .field("max_line", &self.max_line)
            .field("max_total", &self.max_total)
            .field("total", &self.total)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<KillCause>>);

    impl LimitTarget for Recorder {
        fn limit_exceeded(&self, cause: KillCause) {
            self.0.lock().expect("lock").push(cause);
        }
    }

    /// Returns each chunk from its own read.
    struct Chunks(VecDeque<Vec<u8>>);

    impl AsyncRead for Chunks {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if let Some(chunk) = self.0.pop_front() {
                buf.put_slice(&chunk);
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Reads `chunks` through a limited reader; returns what was delivered, the error, and the
    /// kills.
    async fn read_through(chunks: &[&[u8]], limits: Limits) -> (Vec<u8>, Option<LimitExceeded>, Vec<KillCause>) {
        let chunks = Chunks(chunks.iter().map(|c| c.to_vec()).collect());
        let recorder = Arc::new(Recorder::default());
        let mut reader = limit_output(chunks, Stream::Stdout, &limits, recorder.clone());
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        let error = loop {
            match reader.read(&mut buf).await {
                Ok(0) => break None,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
                    let inner = error.into_inner().expect("source").downcast::<LimitExceeded>().expect("typed");
                    break Some(*inner);
                }
            }
        };
        let kills = recorder.0.lock().expect("lock").clone();
        (out, error, kills)
    }

    fn limits(line: Option<usize>, stdout: Option<u64>) -> Limits {
        let mut limits = Limits::default();
        limits.max_line_bytes = line;
        limits.max_stdout_bytes = stdout;
        limits
    }

    #[test]
    fn scan_counts_lines_across_chunks() {
        assert_eq!(scan_lines(b"abc\nde", 0, 3), (6, 2));
        assert_eq!(scan_lines(b"abcd", 0, 3), (3, 3));
        assert_eq!(scan_lines(b"x\nabcd", 2, 3), (5, 3));
        assert_eq!(scan_lines(b"xy\n", 2, 3), (1, 3));
        assert_eq!(scan_lines(b"\n\n", 3, 3), (2, 0));
        assert_eq!(scan_lines(b"", 1, 3), (0, 1));
    }

    #[tokio::test]
    async fn lines_at_the_limit_pass() {
        let (out, error, kills) = read_through(&[b"abcd\nef", b"gh\n"], limits(Some(4), None)).await;
        assert_eq!((out.as_slice(), error, kills), (&b"abcd\nefgh\n"[..], None, vec![]));
    }

    #[tokio::test]
    async fn a_long_line_fails_after_the_bytes_before_it() {
        let (out, error, kills) = read_through(&[b"ok\nabc", b"de\nnever"], limits(Some(4), None)).await;
        assert_eq!(out, b"ok\nabcd");
        assert_eq!(error, Some(LimitExceeded { cause: KillCause::LineLimit, limit: 4 }));
        assert_eq!(kills, vec![KillCause::LineLimit]);
    }

    #[tokio::test]
    async fn total_cap_delivers_up_to_the_cap() {
        let (out, error, kills) = read_through(&[b"12345", b"67890"], limits(None, Some(7))).await;
        assert_eq!(out, b"1234567");
        assert_eq!(error, Some(LimitExceeded { cause: KillCause::StdoutLimit, limit: 7 }));
        assert_eq!(kills, vec![KillCause::StdoutLimit]);
    }

    #[tokio::test]
    async fn exactly_the_cap_is_not_a_violation() {
        let (out, error, kills) = read_through(&[b"12345"], limits(Some(10), Some(5))).await;
        assert_eq!((out.as_slice(), error, kills), (&b"12345"[..], None, vec![]));
    }

    #[tokio::test]
    async fn the_earlier_violation_wins() {
        let (out, error, _) = read_through(&[b"abcdefgh"], limits(Some(3), Some(6))).await;
        assert_eq!(out, b"abc");
        assert_eq!(error.map(|e| e.cause), Some(KillCause::LineLimit));
    }

    #[test]
    fn errors_read_well() {
        let line = LimitExceeded { cause: KillCause::LineLimit, limit: 8 };
        assert_eq!(line.to_string(), "a line exceeded the limit of 8 bytes");
        let stderr = LimitExceeded { cause: KillCause::StderrLimit, limit: 9 };
        assert_eq!(stderr.to_io().to_string(), "stderr exceeded the limit of 9 bytes");
    }
}
