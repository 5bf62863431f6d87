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

pub mod ends;
mod frame;
pub mod head;
mod redact;
mod stderr;
pub mod tail;
mod unreadable;

pub use self::frame::{JsonFrame, TextFrame, is_not_json, keep_line, unparsed_line_warning};
pub use self::stderr::{
    STDERR_LINE_CHARS, STDERR_MAX_LINE, STDERR_TAIL_LINES, StderrCollector, StderrTail, stderr_note,
};
pub use self::unreadable::{UNREADABLE_REPORTED, Unreadable};

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
    /// The last [`TOO_LONG_TAIL`] bytes of that line.
    tail: Vec<u8>,
    /// The credentials replaced in the lines handed out, if any.
    redact: Option<Redactor>,
}

/// The length from which a gathered line becomes a chunk of its own (see [`LineReader`]): large
/// enough that the allocation it takes is nothing beside the copies it saves.
pub const OWN_CHUNK: usize = 64 * 1024;

/// How much of a line over the cap [`LineReader::too_long_head`] keeps: enough for a provider
/// to tell what kind of message was dropped (claude's `{"type":"result",…`).
pub const TOO_LONG_HEAD: usize = 256;

/// How much of the end of a line over the cap [`LineReader::too_long_tail`] keeps: the members
/// a CLI writes after a long text (a newer claude's result line has its `type` there).
pub const TOO_LONG_TAIL: usize = 4096;

/// Keeps the last bytes of what `tail` held followed by `bytes`: [`TOO_LONG_TAIL`] and one
/// more, for a `\r` that [`end_tail`] may take off.
fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    const KEPT: usize = TOO_LONG_TAIL + 1;
    if bytes.len() >= KEPT {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - KEPT..]);
    } else {
        let excess = (tail.len() + bytes.len()).saturating_sub(KEPT);
        tail.drain(..excess);
        tail.extend_from_slice(bytes);
    }
}

/// The tail of a line handed out as too long: without the `\r` of its line end (`cr`), at most
/// [`TOO_LONG_TAIL`] bytes.
fn end_tail(tail: &mut Vec<u8>, cr: bool) {
    if cr && tail.last() == Some(&b'\r') {
        tail.pop();
    }
    tail.drain(..tail.len().saturating_sub(TOO_LONG_TAIL));
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads lines from `inner`, each at most `max` bytes (without its line end).
    pub fn new(inner: R, max: usize) -> Self {
        Self::with_first_buffer(inner, max, FIRST_READ_BUFFER)
    }

    /// Like [`LineReader::new`], starting with a read buffer of `first` bytes.
    fn with_first_buffer(inner: R, max: usize, first: usize) -> Self {
        let inner = ReadBuffer::new(inner, first.max(1));
        let (head, tail) = (Vec::new(), Vec::new());
        LineReader { inner, max, line: Vec::new(), own: Bytes::new(), consume: 0, head, tail, redact: None }
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

    /// The last bytes (up to [`TOO_LONG_TAIL`]) of the last line handed out as
    /// [`Line::TooLong`], without its line end: what the line's head cannot tell may be there
    /// (see [`tail`]).
    pub fn too_long_tail(&self) -> &[u8] {
        &self.tail
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
                    self.tail.clear();
                    keep_tail(&mut self.tail, &available[..len]);
                    end_tail(&mut self.tail, false);
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
                        keep_tail(&mut self.tail, &available[..chunk_len]);
                    }
                    // One byte of slack: a `\r` that ends a line of exactly `max` bytes.
                    None if self.line.len() + chunk_len > self.max.saturating_add(1) => {
                        skipped = Some(self.line.len() + chunk_len);
                        self.head.clear();
                        self.head.extend_from_slice(&self.line[..self.line.len().min(TOO_LONG_HEAD)]);
                        let rest = TOO_LONG_HEAD - self.head.len();
                        self.head.extend_from_slice(&available[..chunk_len.min(rest)]);
                        self.tail.clear();
                        keep_tail(&mut self.tail, &self.line);
                        keep_tail(&mut self.tail, &available[..chunk_len]);
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
                Some(len) => {
                    end_tail(&mut self.tail, cr);
                    Line::TooLong(len - usize::from(cr))
                }
                None if available_was_empty(newline, &self.line) => return Ok(None),
                None => {
                    let len = without_cr(&self.line).len();
                    if len > self.max {
                        self.head.clear();
                        self.head.extend_from_slice(&self.line[..len.min(TOO_LONG_HEAD)]);
                        self.tail.clear();
                        keep_tail(&mut self.tail, &self.line[..len]);
                        end_tail(&mut self.tail, false);
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
mod tests;
