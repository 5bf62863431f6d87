//! The line reader's tests: framing, caps, redaction and the hand-over before a wait.

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

/// A line over the cap keeps its first and last bytes for the provider to tell what was
/// dropped, whether one read brought it, several did, or it was gathered before it went over;
/// the tail without the line's end.
#[tokio::test]
async fn an_over_long_line_keeps_its_head_and_tail() {
    let long = |n: usize| {
        let mut line = br#"{"type":"result","result":""#.to_vec();
        line.extend((0..n - line.len()).map(|i| b'a' + (i % 26) as u8));
        line
    };
    let cases =
        [(1 << 16, 4096, 5000, "\n"), (7, 16, 100_000, "\r\n"), (7, 4096, 33, "\n"), (1 << 16, 1 << 16, 9000, "\r\n")];
    for (pipe, first, size, end) in cases {
        let (mut writer, reader) = tokio::io::duplex(pipe);
        let line = long(size);
        let written = line.clone();
        let write = async move {
            writer.write_all(&written).await.expect("writes");
            writer.write_all(end.as_bytes()).await.expect("writes");
            writer.write_all(b"next\n").await.expect("writes");
        };
        let read = async {
            let mut lines = LineReader::with_first_buffer(reader, 32, first);
            let Some(Line::TooLong(len)) = lines.next_line().await.expect("reads") else { panic!("too long") };
            assert_eq!(len, size);
            assert_eq!(lines.too_long_head(), &line[..size.min(TOO_LONG_HEAD)], "pipe {pipe}, first {first}");
            let tail = &line[size - size.min(TOO_LONG_TAIL)..];
            assert!(lines.too_long_tail() == tail, "pipe {pipe}, first {first}, size {size}");
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
