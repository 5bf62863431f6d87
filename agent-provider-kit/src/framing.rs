//! Reading a CLI's output one line at a time: a capped line reader, JSON-lines frames, and the
//! tail of stderr kept for error reports.
//!
//! Agent CLIs speak newline-delimited JSON on stdout and write logs to stderr. Neither is
//! trusted: a line may be longer than any sane message, not UTF-8, not JSON, or end in `\r\n`.
//! [`LineReader`] never buffers more than its cap of one line (a longer line is skipped and
//! reported with its length), hands each line out as a borrowed slice (no allocation per line),
//! and keeps reading after anything odd; [`JsonFrame`] sorts a line into JSON, blank or garbage
//! so that a provider reports garbage instead of stopping.
//!
//! ```
//! use agent_provider_kit::framing::{JsonFrame, LineReader};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let output: &[u8] = b"{\"id\":1}\r\nnot json\n";
//! let mut lines = LineReader::new(output, 1024);
//! let mut frames = Vec::new();
//! while let Some(line) = lines.next_line().await.unwrap() {
//!     frames.push(JsonFrame::from_line(line));
//! }
//! assert!(matches!(&frames[0], JsonFrame::Json(raw) if raw.get() == r#"{"id":1}"#));
//! assert!(matches!(&frames[1], JsonFrame::NotJson { len: 8 }));
//! # });
//! ```

use std::future::Future;
use std::task::Poll;

use self::redact::Redactor;
use agent_core::provider::{SinkBuffer, SinkClosed};
pub use bytes::Bytes;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

mod frame;
mod redact;
mod stderr;

pub use self::frame::{JsonFrame, TextFrame, is_not_json, keep_line, unparsed_line_warning};
pub use self::stderr::{
    STDERR_LINE_CHARS, STDERR_MAX_LINE, STDERR_TAIL_LINES, StderrCollector, StderrTail, stderr_note,
};

/// Capacity of the buffer between the reader and the pipe once the stream is busy.
const READ_BUFFER: usize = 64 * 1024;
/// Capacity of the buffer until a read fills it: an idle session's pipes (most sessions, most
/// of the time) hold a page each instead of 64 KiB.
const FIRST_READ_BUFFER: usize = 4 * 1024;
/// The first read buffer of a stderr reader: a quiet CLI writes nothing or a line or two there.
const FIRST_STDERR_BUFFER: usize = 512;

/// One line of output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line, without its `\n` or `\r\n`. Valid until the next read.
    Text(&'a [u8]),
    /// A line longer than the cap: its bytes were read and dropped. Carries its length
    /// (without the line end).
    TooLong(usize),
}

/// Splits a byte stream into lines of at most `max` bytes.
///
/// Memory stays bounded by the read buffer plus `max`, whatever the stream holds. A line that
/// fits in the read buffer is handed out from it without copying; a line spread over several
/// reads is gathered in one buffer that is reused for every line — except a line of
/// [`OWN_CHUNK`] bytes or more, whose buffer becomes the line's own chunk, so that what a
/// provider keeps of it (its raw JSON, a text in it) shares those bytes instead of copying a
/// line of megabytes once more each. The read buffer starts at
/// 4 KiB and grows to 64 KiB the first time a read fills it. A reader made
/// [`redacting`](LineReader::redacting) a session's credentials hands out a line that holds one
/// as a copy with each replaced.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: ReadBuffer<R>,
    max: usize,
    /// A line spread over several reads, gathered; reused.
    line: Vec<u8>,
    /// The last line handed out, when it was gathered and is at least [`OWN_CHUNK`] bytes: its
    /// own chunk (let go on the next call).
    own: Bytes,
    /// Bytes of the read buffer the last line was handed out from, consumed on the next call.
    consume: usize,
    /// The first [`TOO_LONG_HEAD`] bytes of the last line handed out as [`Line::TooLong`].
    head: Vec<u8>,
    /// The credentials replaced in the lines handed out, if any.
    redact: Option<Redactor>,
}

/// The length from which a gathered line becomes a chunk of its own (see [`LineReader`]): large
/// enough that the allocation it takes is nothing beside the copies it saves.
pub const OWN_CHUNK: usize = 64 * 1024;

/// How much of a line over the cap [`LineReader::too_long_head`] keeps: enough for a provider
/// to tell what kind of message was dropped (claude's `{"type":"result",…`).
pub const TOO_LONG_HEAD: usize = 256;

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads lines from `inner`, each at most `max` bytes (without its line end).
    pub fn new(inner: R, max: usize) -> Self {
        Self::with_first_buffer(inner, max, FIRST_READ_BUFFER)
    }

    /// Like [`LineReader::new`], starting with a read buffer of `first` bytes.
    fn with_first_buffer(inner: R, max: usize, first: usize) -> Self {
        let inner = ReadBuffer::new(inner, first.max(1));
        LineReader { inner, max, line: Vec::new(), own: Bytes::new(), consume: 0, head: Vec::new(), redact: None }
    }

    /// Replaces each of `secrets`' credentials ([`Secrets::credentials`]) in the lines handed
    /// out with `[redacted]`, as is or as a JSON string escapes it, before anything parses them:
    /// what a CLI prints (a tool's output of `env`, say) cannot carry a session's key into
    /// events or the store. A line that holds one is handed out as a copy, without its chunk;
    /// the others as before, after one search per credential.
    ///
    /// A credential split between two lines (a tool's output streamed in pieces) is not found.
    ///
    /// ```
    /// use agent_provider_kit::framing::{Line, LineReader};
    /// use agent_provider_kit::secrets::Secrets;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let secrets = Secrets::new(["sk-live-0123456789".to_owned()]);
    /// let output: &[u8] = b"{\"out\":\"KEY=sk-live-0123456789\"}\n";
    /// let mut lines = LineReader::new(output, 1024).redacting(&secrets);
    /// let line = lines.next_line().await.unwrap();
    /// assert_eq!(line, Some(Line::Text(br#"{"out":"KEY=[redacted]"}"#)));
    /// # });
    /// ```
    ///
    /// [`Secrets::credentials`]: crate::secrets::Secrets::credentials
    pub fn redacting(mut self, secrets: &crate::secrets::Secrets) -> Self {
        self.redact = Redactor::new(secrets);
        self
    }

    /// The first bytes (up to [`TOO_LONG_HEAD`]) of the last line handed out as
    /// [`Line::TooLong`]: the line was dropped, but a provider may need to know what it was (a
    /// turn's end must still end the turn).
    pub fn too_long_head(&self) -> &[u8] {
        &self.head
    }

    /// The longest line handed out.
    pub fn max_line(&self) -> usize {
        self.max
    }

    /// The next line, or `None` at the end of the stream. A final line without a newline is a
    /// line. Not cancel-safe: a line being read when the future is dropped is lost; drive the
    /// reader from one task.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        Ok(self.next_line_in_chunk().await?.map(|(line, _)| line))
    }

    /// [`LineReader::next_line`], with the chunk of the stream the line lies in when one read
    /// brought all of it (most lines), or when it was gathered from several reads and is at
    /// least [`OWN_CHUNK`] bytes (its own chunk): a line kept with [`RawJson::parsed_in`] and
    /// that chunk shares the bytes instead of copying them ([`keep_line`] does either). `None`
    /// for a shorter line gathered from several reads, which [`keep_line`] copies.
    ///
    /// [`RawJson::parsed_in`]: agent_core::event::RawJson::parsed_in
    pub async fn next_line_in_chunk(&mut self) -> std::io::Result<Option<(Line<'_>, Option<&Bytes>)>> {
        self.inner.consume(std::mem::take(&mut self.consume));
        self.line.clear();
        self.own = Bytes::new();
        // Bytes of an over-long line dropped so far; `Some` once the line is over the cap.
        let mut skipped: Option<usize> = None;
        // The last byte of the line so far is `\r` (not part of the line if a newline follows).
        let mut cr = false;
        loop {
            let available = self.inner.fill_buf().await?;
            let newline = memchr::memchr(b'\n', available);
            let chunk_len = newline.unwrap_or(available.len());
            let consumed = newline.map_or(available.len(), |i| i + 1);
            if available.is_empty() {
                // End of stream: a final line without a newline is still a line.
            } else if skipped.is_none() && self.line.is_empty() && newline.is_some() {
                // The whole line is in the read buffer: hand it out from there.
                let len = without_cr(&available[..chunk_len]).len();
                if len > self.max {
                    self.head.clear();
                    self.head.extend_from_slice(&available[..len.min(TOO_LONG_HEAD)]);
                    self.inner.consume(consumed);
                    return Ok(Some((Line::TooLong(len), None)));
                }
                self.consume = consumed;
                let text = &self.inner.buffer()[..len];
                if let Some(redact) = self.redact.as_mut().filter(|redact| redact.finds(text)) {
                    redact.redact_into(text, &mut self.line);
                    return Ok(Some((Line::Text(&self.line), None)));
                }
                return Ok(Some((Line::Text(text), Some(&self.inner.chunk))));
            } else {
                if chunk_len > 0 {
                    cr = available[chunk_len - 1] == b'\r';
                }
                match skipped.as_mut() {
                    Some(len) => {
                        *len += chunk_len;
                        let rest = TOO_LONG_HEAD.saturating_sub(self.head.len());
                        self.head.extend_from_slice(&available[..chunk_len.min(rest)]);
                    }
                    // One byte of slack: a `\r` that ends a line of exactly `max` bytes.
                    None if self.line.len() + chunk_len > self.max.saturating_add(1) => {
                        skipped = Some(self.line.len() + chunk_len);
                        self.head.clear();
                        self.head.extend_from_slice(&self.line[..self.line.len().min(TOO_LONG_HEAD)]);
                        let rest = TOO_LONG_HEAD - self.head.len();
                        self.head.extend_from_slice(&available[..chunk_len.min(rest)]);
                        self.line.clear();
                    }
                    None => self.line.extend_from_slice(&available[..chunk_len]),
                }
                self.inner.consume(consumed);
                if newline.is_none() {
                    continue;
                }
            }
            let line = match skipped {
                Some(len) => Line::TooLong(len - usize::from(cr)),
                None if available_was_empty(newline, &self.line) => return Ok(None),
                None => {
                    let len = without_cr(&self.line).len();
                    if len > self.max {
                        self.head.clear();
                        self.head.extend_from_slice(&self.line[..len.min(TOO_LONG_HEAD)]);
                        Line::TooLong(len)
                    } else {
                        self.line.truncate(len);
                        if let Some(redact) = self.redact.as_mut().filter(|redact| redact.finds(&self.line)) {
                            let line = std::mem::take(&mut self.line);
                            redact.redact_into(&line, &mut self.line);
                        }
                        if self.line.len() >= OWN_CHUNK {
                            // Shrunk in place (a large allocation is remapped, not copied), so
                            // that the chunk holds no spare room for as long as it is kept.
                            let mut line = std::mem::take(&mut self.line);
                            line.shrink_to_fit();
                            self.own = Bytes::from(line);
                            return Ok(Some((Line::Text(&self.own), Some(&self.own))));
                        }
                        Line::Text(&self.line)
                    }
                }
            };
            return Ok(Some((line, None)));
        }
    }
}

/// What a reader does once the messages of the lines it normalized are sent (see
/// [`LineReader::normalize_buffered`]).
#[derive(Debug)]
pub enum AfterLines<R> {
    /// Go on with the next line.
    Next,
    /// The last line ended the turn: send everything, then wake those waiting for it.
    TurnEnded,
    /// The last line is the CLI's reply to a request of ours: send everything first, then
    /// answer its caller.
    Reply(R),
}

/// The most lines of one read [`LineReader::normalize_buffered`] takes: a reader holds its
/// protocol state's lock while it normalizes them, so the state's other users (a turn starting,
/// an answer) wait for no longer than that.
pub const LINES_PER_LOCK: usize = 64;

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// The next line with the chunk it lies in, when the last read brought all of it; `None`
    /// when the next line needs a read (or is over the cap, or holds a credential it redacts:
    /// [`LineReader::next_line_in_chunk`] reports or copies it). Never waits: a reader that
    /// took a line with `next_line_in_chunk` takes the rest of that read's lines with this one,
    /// without an `await` between them (a lock can stay held), and goes back to
    /// `next_line_in_chunk` when it returns `None`.
    ///
    /// ```
    /// use agent_provider_kit::framing::{Line, LineReader};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let mut lines = LineReader::new(&b"a\nb\nc"[..], 1024);
    /// assert!(matches!(lines.next_line_in_chunk().await.unwrap(), Some((Line::Text(b"a"), Some(_)))));
    /// assert!(matches!(lines.next_buffered_line(), Some((Line::Text(b"b"), _))));
    /// // The last line has no newline yet: only a read can tell where it ends.
    /// assert!(lines.next_buffered_line().is_none());
    /// assert!(matches!(lines.next_line_in_chunk().await.unwrap(), Some((Line::Text(b"c"), None))));
    /// # });
    /// ```
    pub fn next_buffered_line(&mut self) -> Option<(Line<'_>, &Bytes)> {
        let rest = &self.inner.chunk[(self.inner.pos + self.consume).min(self.inner.chunk.len())..];
        let newline = memchr::memchr(b'\n', rest)?;
        let len = without_cr(&rest[..newline]).len();
        if len > self.max || self.redact.as_ref().is_some_and(|redact| redact.finds(&rest[..len])) {
            return None;
        }
        self.inner.consume(std::mem::take(&mut self.consume));
        self.consume = newline + 1;
        Some((Line::Text(&self.inner.buffer()[..len]), &self.inner.chunk))
    }

    /// After a line taken with [`LineReader::next_line_in_chunk`] and normalized (to `then`),
    /// normalizes the other complete lines the same read brought with `normalize`, while it
    /// returns [`AfterLines::Next`] and up to [`LINES_PER_LOCK`] lines in all, without waiting
    /// (see [`LineReader::next_buffered_line`]): a reader takes its protocol state's lock once
    /// per read instead of once per line, and sends what the lines produced together. Returns
    /// the last line's outcome.
    ///
    /// ```
    /// use agent_provider_kit::framing::{AfterLines, LineReader, TextFrame};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let mut lines = LineReader::new(&b"a\nreply\nb\n"[..], 1024);
    /// let mut seen = Vec::new();
    /// let mut normalize = |line: TextFrame<'_>, _chunk: Option<&_>| {
    ///     let text = line.into_text("cli", 1024).unwrap().unwrap().to_owned();
    ///     let then = if text == "reply" { AfterLines::Reply(()) } else { AfterLines::Next };
    ///     seen.push(text);
    ///     then
    /// };
    /// let (line, chunk) = lines.next_line_in_chunk().await.unwrap().unwrap();
    /// let first = normalize(TextFrame::from_line(line), chunk);
    /// // `b` waits for the next call: the reply goes to its caller first.
    /// assert!(matches!(lines.normalize_buffered(first, &mut normalize), AfterLines::Reply(())));
    /// assert_eq!(seen, ["a", "reply"]);
    /// # });
    /// ```
    pub fn normalize_buffered<T>(
        &mut self,
        mut then: AfterLines<T>,
        mut normalize: impl FnMut(TextFrame<'_>, Option<&Bytes>) -> AfterLines<T>,
    ) -> AfterLines<T> {
        for _ in 1..LINES_PER_LOCK {
            if !matches!(then, AfterLines::Next) {
                break;
            }
            let Some((line, chunk)) = self.next_buffered_line() else { break };
            then = normalize(TextFrame::from_line(line), Some(chunk));
        }
        then
    }
}

/// Awaits `next` (a reader's next line), first sending what `buffer` gathered if `next` cannot
/// finish at once: a reader loop parses every line one read of the CLI's output brought, then
/// hands their messages to the session together, just before it waits for the CLI again — one
/// wake-up of the session per read instead of one per line, and no message ever waits on the
/// CLI's next write.
///
/// ```
/// use agent_provider_kit::framing::{LineReader, flush_before_wait};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let (sink, mut sent) = agent_core::testing::sink();
/// let mut buffer = sink.buffer();
/// let mut lines = LineReader::new(&b"a\nb\n"[..], 1024);
/// while let Some(_line) = flush_before_wait(&mut buffer, lines.next_line()).await.unwrap().unwrap() {
///     buffer.transport_down("one message per line, for the example").await.unwrap();
/// }
/// buffer.flush().await.unwrap();
/// assert_eq!(sent.drain().len(), 2);
/// # });
/// ```
pub async fn flush_before_wait<F: Future>(buffer: &mut SinkBuffer, next: F) -> Result<F::Output, SinkClosed> {
    let mut next = std::pin::pin!(next);
    if let Poll::Ready(output) = poll_once(next.as_mut()).await {
        return Ok(output);
    }
    let mut flush = std::pin::pin!(buffer.flush());
    match poll_once(flush.as_mut()).await {
        Poll::Ready(flushed) => flushed?,
        Poll::Pending => {
            // The session's inbox is full. Whatever wakes this task meanwhile may be `next`'s
            // wake-up too, so `next` is polled again once the flush is done.
            flush.await?;
            return Ok(next.await);
        }
    }
    // `next` was polled with this task's waker and was not ready, and the task has not waited
    // since: `next` wakes it when it can go on (or already has), so the next look waits for
    // that instead of polling it again at once for nothing.
    let mut woken = false;
    Ok(std::future::poll_fn(|cx| {
        if !std::mem::replace(&mut woken, true) {
            return Poll::Pending;
        }
        next.as_mut().poll(cx)
    })
    .await)
}

/// Polls `future` once with the task's waker.
async fn poll_once<F: Future>(mut future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

/// A read buffer in front of `inner` that grows from its first size to [`READ_BUFFER`]
/// once a read fills it.
///
/// Each read goes into the free end of one allocation and is split off as a shared [`Bytes`]
/// chunk, so a line handed out from it can be kept (as
/// [`RawJson::parsed_in`](agent_core::event::RawJson::parsed_in)) without a copy.
/// Once less than a quarter of the buffer is free, the next read goes into a new allocation; the
/// old one is freed with the last line kept from it, or reused when nothing kept any.
#[derive(Debug)]
struct ReadBuffer<R> {
    inner: R,
    /// The free space the next read goes into.
    spare: BytesMut,
    /// The last read's bytes; the unconsumed ones are `chunk[pos..]`.
    chunk: Bytes,
    pos: usize,
    /// What the free space is topped up to before a read.
    size: usize,
}

impl<R: AsyncRead + Unpin> ReadBuffer<R> {
    fn new(inner: R, first: usize) -> Self {
        ReadBuffer { inner, spare: BytesMut::new(), chunk: Bytes::new(), pos: 0, size: first }
    }

    /// The unconsumed bytes, reading more when there are none (empty at the end of the stream).
    async fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos == self.chunk.len() {
            // Let go of the spent chunk first: if nothing kept a line of it, `reserve` reuses
            // its allocation instead of making a new one.
            self.chunk = Bytes::new();
            self.pos = 0;
            if self.spare.capacity() < self.size / 4 || self.spare.capacity() == 0 {
                self.spare.reserve(self.size);
            }
            let room = self.spare.capacity();
            let read = self.inner.read_buf(&mut self.spare).await?;
            if read == room && self.size < READ_BUFFER {
                // The read filled the buffer: the stream is busy.
                self.size = READ_BUFFER;
            }
            self.chunk = self.spare.split().freeze();
        }
        Ok(&self.chunk[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.chunk.len());
    }

    fn buffer(&self) -> &[u8] {
        &self.chunk[self.pos..]
    }
}

/// At the end of the stream with nothing gathered, there is no line.
fn available_was_empty(newline: Option<usize>, line: &[u8]) -> bool {
    newline.is_none() && line.is_empty()
}

fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// What `flush_before_wait` flushed, and how often it polled the line it waits for.
    #[tokio::test]
    async fn a_line_not_ready_is_looked_at_again_only_once_it_wakes_the_task() {
        use std::pin::Pin;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Wake, Waker};

        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (sink, mut sent) = agent_core::testing::sink();
        let mut buffer = sink.buffer();
        buffer.transport_down("gathered before the wait").await.unwrap();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<u32>();
        let polls = AtomicUsize::new(0);
        let next = std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut rx).poll(cx)
        });
        let mut waiting = std::pin::pin!(flush_before_wait(&mut buffer, next));
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);

        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "not polled again right after the flush");
        assert_eq!(sent.drain().len(), 1, "what was gathered went before the wait");
        tx.send(7).unwrap();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the line's readiness woke the task");
        assert!(matches!(waiting.as_mut().poll(&mut cx), Poll::Ready(Ok(Ok(7)))));
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    /// A line as the tests compare it: owned.
    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Text(Vec<u8>),
        TooLong(usize),
    }

    fn text(s: &str) -> Owned {
        Owned::Text(s.as_bytes().to_vec())
    }

    async fn read_all(input: impl AsyncRead + Unpin, max: usize) -> Vec<Owned> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().await.expect("reads") {
            out.push(match line {
                Line::Text(bytes) => Owned::Text(bytes.to_vec()),
                Line::TooLong(len) => Owned::TooLong(len),
            });
        }
        out
    }

    #[track_caller]
    fn check(input: &[u8], max: usize, expected: Vec<Owned>) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        assert_eq!(runtime.block_on(read_all(input, max)), expected, "{:?}", String::from_utf8_lossy(input));
    }

    /// `usize::MAX` as the cap (no limit) on a line that spans several reads.
    #[tokio::test]
    async fn a_cap_of_usize_max_reads_lines_across_reads() {
        let input: &[u8] = b"abcdefghij\nklm\n";
        let mut lines = LineReader::with_first_buffer(input, usize::MAX, 4);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().await.expect("reads") {
            out.push(match line {
                Line::Text(bytes) => Owned::Text(bytes.to_vec()),
                Line::TooLong(len) => Owned::TooLong(len),
            });
        }
        assert_eq!(out, [text("abcdefghij"), text("klm")]);
    }

    #[test]
    fn splits_lines() {
        check(b"a\n\nbc\nd", 10, vec![text("a"), text(""), text("bc"), text("d")]);
        check(b"", 10, vec![]);
        check(b"\n\n", 10, vec![text(""), text("")]);
        check(b"a\r\nb\r\n\r\nc\r", 10, vec![text("a"), text("b"), text(""), text("c")]);
        check(b"a\rb\n", 10, vec![text("a\rb")]);
    }

    #[test]
    fn keeps_garbage_as_lines() {
        check(b"\xff\xfe\n{\"a\":1}\n", 10, vec![Owned::Text(vec![0xff, 0xfe]), text("{\"a\":1}")]);
        check(b"\0\0\nok", 10, vec![Owned::Text(vec![0, 0]), text("ok")]);
    }

    #[test]
    fn skips_overlong_lines_and_continues() {
        check(b"0123456789abc\nok\n", 10, vec![Owned::TooLong(13), text("ok")]);
        check(b"0123456789", 10, vec![text("0123456789")]);
        check(b"0123456789\r\n", 10, vec![text("0123456789")]);
        check(b"0123456789a", 10, vec![Owned::TooLong(11)]);
        check(b"0123456789a\r\n", 10, vec![Owned::TooLong(11)]);
    }

    /// Taking the rest of a read's lines with `next_buffered_line` hands out the same lines as
    /// `next_line` alone, each in the chunk given with it, whatever the reads' sizes: random
    /// streams of short, blank, `\r\n`-ended and over-long lines through pipes of several sizes.
    #[tokio::test]
    async fn buffered_lines_are_the_lines_next_line_hands_out() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for round in 0..40 {
            let mut input = Vec::new();
            for _ in 0..200 {
                let len = match next(10) {
                    0 => 0,
                    1 => 40 + next(30) as usize, // over the cap of 32
                    _ => next(32) as usize,
                };
                input.extend((0..len).map(|i| b'a' + (i % 26) as u8));
                input.extend_from_slice(if next(4) == 0 { b"\r\n" } else { b"\n" });
            }
            if round % 2 == 1 {
                input.extend_from_slice(b"no newline at the end");
            }
            let expected = read_all(&input[..], 32).await;

            let (mut writer, reader) = tokio::io::duplex(1 + next(300) as usize);
            let written = input.clone();
            let write = async move { writer.write_all(&written).await.expect("writes") };
            let read = async {
                let mut lines = LineReader::new(reader, 32);
                let (mut out, mut buffered) = (Vec::new(), 0);
                while let Some((line, _)) = lines.next_line_in_chunk().await.expect("reads") {
                    out.push(match line {
                        Line::Text(bytes) => Owned::Text(bytes.to_vec()),
                        Line::TooLong(len) => Owned::TooLong(len),
                    });
                    while let Some((line, chunk)) = lines.next_buffered_line() {
                        let Line::Text(bytes) = line else { panic!("an over-long line is left to next_line_in_chunk") };
                        let range = chunk.as_ptr_range();
                        assert!(range.start <= bytes.as_ptr() && bytes.as_ptr_range().end <= range.end);
                        out.push(Owned::Text(bytes.to_vec()));
                        buffered += 1;
                    }
                }
                (out, buffered)
            };
            let (_, (lines, buffered)) = tokio::join!(write, read);
            assert_eq!(lines, expected, "round {round}");
            assert!(round < 2 || buffered > 0, "some lines came from the buffer");
        }
    }

    /// A line spread over many small reads, and a 1 MiB line over a 64 KiB cap, through a pipe
    /// small enough that nothing arrives whole.
    #[tokio::test]
    async fn reads_lines_split_across_reads() {
        let (mut writer, reader) = tokio::io::duplex(7);
        let big = vec![b'x'; 1024 * 1024];
        let write = async move {
            for piece in [&b"{\"a\":"[..], b"1}\r", b"\n", b"par", b"tial\n"] {
                writer.write_all(piece).await.expect("writes");
            }
            writer.write_all(&big).await.expect("writes");
            writer.write_all(b"\r\nafter\nlast").await.expect("writes");
        };
        let (_, lines) = tokio::join!(write, read_all(reader, 64 * 1024));
        assert_eq!(
            lines,
            vec![text("{\"a\":1}"), text("partial"), Owned::TooLong(1024 * 1024), text("after"), text("last")]
        );
    }

    /// A line of megabytes gathered from many reads is handed out as a chunk of its own, so
    /// that its raw JSON and a text in it share its bytes; a short gathered line is not (it is
    /// copied when kept, and the gathering buffer is reused).
    #[tokio::test]
    async fn a_long_gathered_line_is_its_own_chunk() {
        let long = [br#"{"text":""#.to_vec(), vec![b'x'; 3 << 20], br#""}"#.to_vec()].concat();
        let (mut writer, reader) = tokio::io::duplex(1 << 12);
        let written = long.clone();
        let write = async move {
            writer.write_all(b"{\"short\":\"longer than a read\"}\n").await.expect("writes");
            writer.write_all(&written).await.expect("writes");
            writer.write_all(b"\n").await.expect("writes");
        };
        let read = async {
            let mut lines = LineReader::with_first_buffer(reader, 4 << 20, 16);
            let Some((Line::Text(short), chunk)) = lines.next_line_in_chunk().await.expect("reads") else {
                panic!("a line")
            };
            assert_eq!(short, br#"{"short":"longer than a read"}"#);
            assert!(chunk.is_none(), "a short gathered line is copied when kept");
            let Some((Line::Text(text), Some(chunk))) = lines.next_line_in_chunk().await.expect("reads") else {
                panic!("a long gathered line comes with its chunk")
            };
            assert_eq!(text, &long[..]);
            let text = std::str::from_utf8(text).expect("UTF-8");
            let raw = keep_line(text, Some(chunk));
            assert_eq!(raw.get().as_ptr(), chunk.as_ptr(), "the raw JSON shares the line's bytes");
            assert_eq!(chunk.len(), long.len(), "the chunk holds the line and no spare room");
            let body = &text[9..text.len() - 2];
            let kept = agent_core::event::TextArena::new().keep(body, Some(chunk));
            assert_eq!(kept.as_ptr(), body.as_ptr(), "a text in it is a slice, not a copy");
            drop(raw);
            assert!(lines.next_line_in_chunk().await.expect("reads").is_none());
            assert!(lines.own.is_empty(), "the reader lets the line go");
        };
        tokio::join!(write, read);
    }

    /// A redacting reader replaces a credential in every line that holds one, whether the line
    /// came alone, was the rest of a read (left to `next_line_in_chunk`, which copies it) or was
    /// gathered from several reads; a line without one is still handed out in its chunk.
    #[tokio::test]
    async fn credentials_are_redacted_from_every_kind_of_line() {
        const KEY: &str = "sk-test-0123456789";
        let secrets = crate::secrets::Secrets::new([KEY.to_owned()]);
        let input = format!("clean\nkey={KEY}\r\nalso clean\n{{\"env\":\"A=1\\nK={KEY}\"}}\ntwice {KEY}{KEY}\n");
        let expected =
            ["clean", "key=[redacted]", "also clean", r#"{"env":"A=1\nK=[redacted]"}"#, "twice [redacted][redacted]"];
        for pipe in [1 << 16, 5] {
            let (mut writer, reader) = tokio::io::duplex(pipe);
            let written = input.clone();
            let write = async move { writer.write_all(written.as_bytes()).await.expect("writes") };
            let read = async {
                let mut lines = LineReader::new(reader, 1024).redacting(&secrets);
                let mut out: Vec<(String, bool)> = Vec::new();
                while let Some((line, chunk)) = lines.next_line_in_chunk().await.expect("reads") {
                    let Line::Text(bytes) = line else { panic!("no line is over the cap") };
                    out.push((String::from_utf8(bytes.to_vec()).expect("UTF-8"), chunk.is_some()));
                    while let Some((Line::Text(bytes), _)) = lines.next_buffered_line() {
                        out.push((String::from_utf8(bytes.to_vec()).expect("UTF-8"), true));
                    }
                }
                out
            };
            let (_, out) = tokio::join!(write, read);
            let texts: Vec<&str> = out.iter().map(|(text, _)| text.as_str()).collect();
            assert_eq!(texts, expected, "pipe {pipe}");
            for (text, in_chunk) in &out {
                assert!(!(text.contains("[redacted]") && *in_chunk), "a redacted line is a copy: {text}");
            }
            if pipe > 5 {
                assert!(out[0].1 && out[2].1, "clean lines stay in their chunk: {out:?}");
            }
        }
    }

    /// A line over the cap keeps its first bytes for the provider to tell what was dropped,
    /// whether one read brought it, several did, or it was gathered before it went over.
    #[tokio::test]
    async fn an_over_long_line_keeps_its_head() {
        let long = |n: usize| {
            let mut line = br#"{"type":"result","result":""#.to_vec();
            line.resize(n, b'x');
            line
        };
        for (pipe, first, size) in [(1 << 16, 4096, 5000), (7, 16, 100_000), (7, 4096, 33)] {
            let (mut writer, reader) = tokio::io::duplex(pipe);
            let line = long(size);
            let written = line.clone();
            let write = async move {
                writer.write_all(&written).await.expect("writes");
                writer.write_all(b"\nnext\n").await.expect("writes");
            };
            let read = async {
                let mut lines = LineReader::with_first_buffer(reader, 32, first);
                let Some(Line::TooLong(len)) = lines.next_line().await.expect("reads") else { panic!("too long") };
                assert_eq!(len, size);
                assert_eq!(lines.too_long_head(), &line[..size.min(TOO_LONG_HEAD)], "pipe {pipe}, first {first}");
                assert_eq!(lines.next_line().await.expect("reads"), Some(Line::Text(b"next")));
            };
            tokio::join!(write, read);
        }
    }

    /// An over-long line is dropped as it is read: the gathering buffer never holds more than
    /// the cap.
    #[tokio::test]
    async fn memory_stays_bounded_by_the_cap() {
        let input = [vec![b'y'; 1024 * 1024], b"\nok\n".to_vec()].concat();
        let mut reader = LineReader::new(&input[..], 64 * 1024);
        assert_eq!(reader.next_line().await.expect("reads"), Some(Line::TooLong(1024 * 1024)));
        assert!(reader.line.capacity() <= 2 * 64 * 1024 + 2, "{}", reader.line.capacity());
        assert_eq!(reader.next_line().await.expect("reads"), Some(Line::Text(b"ok")));
        assert_eq!(reader.next_line().await.expect("reads"), None);
    }

    /// A quiet stream keeps the small buffer; the first read that fills it grows it, and the
    /// lines around the growth come out whole.
    #[tokio::test]
    async fn the_read_buffer_grows_only_for_a_busy_stream() {
        let (mut writer, reader) = tokio::io::duplex(1 << 20);
        let mut lines = LineReader::new(reader, 1024);
        writer.write_all(b"{\"ready\":true}\n").await.expect("writes");
        assert_eq!(lines.next_line().await.expect("reads"), Some(Line::Text(b"{\"ready\":true}")));
        assert_eq!(lines.inner.size, FIRST_READ_BUFFER, "one small line keeps the small buffer");

        let burst: Vec<u8> = (0..2000).flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes()).collect();
        writer.write_all(&burst).await.expect("writes");
        drop(writer);
        let mut n = 0;
        while let Some(line) = lines.next_line().await.expect("reads") {
            assert_eq!(line, Line::Text(format!("{{\"n\":{n}}}").as_bytes()));
            n += 1;
        }
        assert_eq!(n, 2000);
        assert_eq!(lines.inner.size, READ_BUFFER, "a full read grew the buffer");
    }

    /// A line one read brought comes with that read's chunk, and keeping it shares the chunk's
    /// bytes; a line gathered from several reads comes without one and is copied. Kept lines
    /// stay as they were while the reader goes on into new buffers.
    #[tokio::test]
    async fn lines_are_kept_as_slices_of_the_read_they_came_in() {
        let (mut writer, reader) = tokio::io::duplex(1 << 20);
        let mut lines = LineReader::new(reader, 64 * 1024);
        writer.write_all(b"{\"a\":1}\n{\"b\":2}\n").await.expect("writes");
        let (line, chunk) = lines.next_line_in_chunk().await.expect("reads").expect("a line");
        let (Line::Text(bytes), Some(chunk)) = (line, chunk) else { panic!("a line in one read: {line:?}") };
        let text = std::str::from_utf8(bytes).expect("UTF-8");
        let first = keep_line(text, Some(chunk));
        assert_eq!(first.get(), r#"{"a":1}"#);
        assert!(chunk.as_ptr_range().contains(&first.get().as_ptr()), "kept in place, not copied");
        let (line, chunk) = lines.next_line_in_chunk().await.expect("reads").expect("a line");
        let Line::Text(bytes) = line else { panic!("{line:?}") };
        let second = keep_line(std::str::from_utf8(bytes).expect("UTF-8"), chunk);
        assert_eq!(second.get(), r#"{"b":2}"#);

        // Text that is not in the chunk is copied.
        let elsewhere = keep_line(r#"{"c":3}"#, chunk);
        assert_eq!(elsewhere.get(), r#"{"c":3}"#);

        // A line spread over two reads is gathered, and comes without a chunk.
        writer.write_all(b"{\"spread\":").await.expect("writes");
        let next = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Some((line, chunk)) = lines.next_line_in_chunk().await.expect("reads") {
                let Line::Text(bytes) = line else { panic!("{line:?}") };
                kept.push((keep_line(std::str::from_utf8(bytes).expect("UTF-8"), chunk), chunk.is_some()));
            }
            kept
        });
        tokio::task::yield_now().await;
        writer.write_all(b"true}\n").await.expect("writes");
        // Enough lines to go through several buffers while `first` and `second` are held.
        let burst: Vec<u8> = (0..20_000).flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes()).collect();
        writer.write_all(&burst).await.expect("writes");
        drop(writer);
        let kept = next.await.expect("reader");
        assert_eq!(kept.len(), 20_001);
        assert_eq!(kept[0].0.get(), r#"{"spread":true}"#);
        assert!(!kept[0].1, "a line gathered from two reads comes without a chunk");
        for (n, (raw, _)) in kept[1..].iter().enumerate() {
            assert_eq!(raw.get(), format!("{{\"n\":{n}}}"));
        }
        assert!(kept.iter().filter(|(_, shared)| *shared).count() > 19_000, "most lines came in one read");
        assert_eq!((first.get(), second.get()), (r#"{"a":1}"#, r#"{"b":2}"#), "kept lines are unchanged");
    }

    /// A first buffer smaller than a line: the line is gathered whole, then the buffer grows.
    #[tokio::test]
    async fn a_small_first_buffer_still_reads_long_lines_whole() {
        let long = "e".repeat(2000);
        let input = format!("short\n{long}\nafter\n");
        let mut lines = LineReader::with_first_buffer(input.as_bytes(), 4096, FIRST_STDERR_BUFFER);
        assert_eq!(lines.next_line().await.expect("reads"), Some(Line::Text(b"short")));
        assert_eq!(lines.inner.chunk.len(), FIRST_STDERR_BUFFER, "the first read is small");
        assert_eq!(lines.next_line().await.expect("reads"), Some(Line::Text(long.as_bytes())));
        assert_eq!(lines.next_line().await.expect("reads"), Some(Line::Text(b"after")));
        assert_eq!(lines.inner.size, READ_BUFFER, "full reads grew it");
    }
}
