//! The fake CLI's stdio: a reader thread for stdin, a writer thread for stdout, the transcript.
//!
//! Both pipes are served by plain threads with blocking I/O, so a client that stops reading
//! blocks the writer exactly as it blocks a real CLI, and the reader can stop reading on purpose.

use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::fake_cli::NOW_NS;

/// Frames queued for the writer thread. When full, the script waits, like a CLI whose stdout
/// pipe is full.
const OUTPUT_CAPACITY: usize = 64;

/// Lines read from stdin waiting for the dispatcher. When full, the reader thread stops reading,
/// so the client's writes back up into the pipe.
const INPUT_CAPACITY: usize = 64;

/// Lines longer than this are recorded by size only.
const RECORD_LIMIT: usize = 64 * 1024;

/// The longest wait for queued output before an exit.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// What the reader thread saw.
#[derive(Debug)]
pub(super) enum Input {
    /// One line, without its newline.
    Line(Vec<u8>),
    /// End of file (or a read error).
    Eof,
}

/// The transcript file: one `{"dir","t",...}` line per message in and out.
#[derive(Debug)]
pub(super) struct Recorder {
    file: Mutex<File>,
    started: Instant,
}

impl Recorder {
    /// Creates (or truncates) the transcript at `path`.
    pub(super) fn create(path: &Path) -> std::io::Result<Recorder> {
        Ok(Recorder { file: Mutex::new(File::create(path)?), started: Instant::now() })
    }

    /// Records a line read or written: as `msg` when it is JSON, as `text` when not, as `bytes`
    /// when it is too long to keep.
    pub(super) fn line(&self, dir: &str, line: &[u8]) {
        let payload = if line.len() > RECORD_LIMIT {
            ("bytes", json!(line.len()))
        } else {
            match serde_json::from_slice::<Value>(line) {
                Ok(msg) => ("msg", msg),
                Err(_) => ("text", json!(String::from_utf8_lossy(line))),
            }
        };
        self.write(dir, payload);
    }

    /// Records a note (argv, a fault the script injected).
    pub(super) fn note(&self, msg: Value) {
        self.write("note", ("msg", msg));
    }

    /// Writes one entry; its time is taken under the lock, so times never go backwards.
    fn write(&self, dir: &str, (key, value): (&str, Value)) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut entry = json!({"dir": dir, "t": self.started.elapsed().as_secs_f64()});
        entry[key] = value;
        // A transcript that cannot be written must not change how the fake behaves.
        let _ = writeln!(file, "{entry}");
    }
}

/// What the writer thread is asked to do.
#[derive(Debug)]
enum OutMsg {
    Line(String),
    Hold,
    Release { reverse: bool },
    Duplicate(u32),
    Close(oneshot::Sender<()>),
    Flush(oneshot::Sender<()>),
    File { path: PathBuf, lines_per_second: Option<u32>, done: oneshot::Sender<std::io::Result<u64>> },
}

/// A handle on the writer thread. Frames are written whole, in the order they are queued.
#[derive(Clone, Debug)]
pub(super) struct Output {
    tx: mpsc::Sender<OutMsg>,
}

impl Output {
    /// Starts the writer thread on the process's stdout.
    pub(super) fn start(recorder: Option<Arc<Recorder>>) -> Output {
        let (tx, rx) = mpsc::channel(OUTPUT_CAPACITY);
        std::thread::spawn(move || Writer { recorder, ..Writer::default() }.run(rx));
        Output { tx }
    }

    async fn send(&self, msg: OutMsg) {
        // The writer thread lives as long as the process.
        let _ = self.tx.send(msg).await;
    }

    /// Queues one line (without its newline).
    pub(super) async fn line(&self, line: String) {
        self.send(OutMsg::Line(line)).await;
    }

    /// Holds back lines until [`Output::release`].
    pub(super) async fn hold(&self) {
        self.send(OutMsg::Hold).await;
    }

    /// Writes the held lines, reversed if asked.
    pub(super) async fn release(&self, reverse: bool) {
        self.send(OutMsg::Release { reverse }).await;
    }

    /// Writes the last line again `count` times.
    pub(super) async fn duplicate(&self, count: u32) {
        self.send(OutMsg::Duplicate(count)).await;
    }

    /// Writes what is queued, then closes stdout (the client reads end of file).
    pub(super) async fn close(&self) {
        let (done, wait) = oneshot::channel();
        self.send(OutMsg::Close(done)).await;
        let _ = wait.await;
    }

    /// Copies the file at `path` to stdout after what is queued, in large writes or paced and
    /// stamped line by line (not held back by [`Output::hold`]); returns the bytes copied once
    /// they are written.
    pub(super) async fn file(&self, path: PathBuf, lines_per_second: Option<u32>) -> std::io::Result<u64> {
        let (done, wait) = oneshot::channel();
        self.send(OutMsg::File { path, lines_per_second, done }).await;
        wait.await.unwrap_or(Ok(0))
    }

    /// Waits until everything queued so far is written, at most [`FLUSH_TIMEOUT`] (a client that
    /// does not read would block it forever).
    pub(super) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        let flushed = async {
            self.send(OutMsg::Flush(done)).await;
            let _ = wait.await;
        };
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
    }
}

#[derive(Default)]
struct Writer {
    recorder: Option<Arc<Recorder>>,
    held: Option<Vec<String>>,
    last: Option<String>,
    closed: bool,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<OutMsg>) {
        while let Some(msg) = rx.blocking_recv() {
            match msg {
                OutMsg::Line(line) => match &mut self.held {
                    Some(held) => held.push(line),
                    None => self.write(line),
                },
                OutMsg::Hold => self.held = Some(self.held.take().unwrap_or_default()),
                OutMsg::Release { reverse } => {
                    let mut held = self.held.take().unwrap_or_default();
                    if reverse {
                        held.reverse();
                    }
                    held.into_iter().for_each(|line| self.write(line));
                }
                OutMsg::Duplicate(count) => {
                    if let Some(last) = self.last.clone() {
                        (0..count).for_each(|_| self.write(last.clone()));
                    }
                }
                OutMsg::Close(done) => {
                    self.closed = true;
                    swap_for_dev_null(1);
                    let _ = done.send(());
                }
                OutMsg::Flush(done) => {
                    let _ = done.send(());
                }
                OutMsg::File { path, lines_per_second, done } => {
                    let _ = done.send(self.copy_file(&path, lines_per_second));
                }
            }
        }
    }

    /// Copies a file to stdout. Unpaced, in chunks of [`COPY_CHUNK`] written straight to the
    /// descriptor (as `cat` does), never line by line.
    fn copy_file(&mut self, path: &Path, lines_per_second: Option<u32>) -> std::io::Result<u64> {
        let mut file = File::open(path)?;
        let copied = if self.closed {
            0
        } else {
            let mut stdout = std::io::stdout().lock();
            let written = match lines_per_second {
                None => stdout.flush().and_then(|()| chunked_copy(&mut file)),
                Some(rate) => paced_copy(std::io::BufReader::new(file), &mut stdout, rate),
            };
            match written.and_then(|n| stdout.flush().map(|()| n)) {
                Ok(n) => n,
                // The client closed our stdout (EPIPE), as in `write`.
                Err(_) => {
                    self.closed = true;
                    0
                }
            }
        };
        if let Some(recorder) = &self.recorder {
            recorder.note(json!({"stream_file": path.display().to_string(), "bytes": copied}));
        }
        Ok(copied)
    }

    fn write(&mut self, line: String) {
        if !self.closed {
            let mut stdout = std::io::stdout().lock();
            let written = stdout.write_all(line.as_bytes()).and_then(|()| stdout.write_all(b"\n"));
            // The client closed our stdout (EPIPE): later lines go nowhere, like a real CLI's.
            if written.and_then(|()| stdout.flush()).is_err() {
                self.closed = true;
            }
        }
        if let Some(recorder) = &self.recorder {
            recorder.line("out", line.as_bytes());
        }
        self.last = Some(line);
    }
}

/// The chunk an unpaced file copy reads and writes: as large as a default pipe holds.
const COPY_CHUNK: usize = 64 * 1024;

/// Copies `file` to the stdout descriptor in [`COPY_CHUNK`]s. `std::io::copy` to a locked
/// stdout goes through its line buffer, which writes up to the last newline of every 8 KiB it
/// is given: eight times the writes, and wake-ups of the reader, of a plain `cat`.
fn chunked_copy(file: &mut File) -> std::io::Result<u64> {
    use std::io::Read;
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut out = File::from(stdout.as_fd().try_clone_to_owned()?);
    let mut chunk = vec![0; COPY_CHUNK];
    let mut written = 0u64;
    loop {
        let read = match file.read(&mut chunk) {
            Ok(0) => return Ok(written),
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        out.write_all(&chunk[..read])?;
        written += read as u64;
    }
}

/// Writes the lines of `file` one at a time, `rate` per second on a fixed schedule (a late line
/// is written at once, so the schedule catches up), each stamped with [`NOW_NS`] just before its
/// write. Returns the bytes written.
fn paced_copy(mut file: impl BufRead, out: &mut impl Write, rate: u32) -> std::io::Result<u64> {
    let interval = Duration::from_secs(1) / rate.max(1);
    let started = Instant::now();
    let (mut line, mut written, mut index) = (String::new(), 0u64, 0u32);
    loop {
        line.clear();
        if file.read_line(&mut line)? == 0 {
            return Ok(written);
        }
        let due = started + interval * index;
        index = index.saturating_add(1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let stamped = match line.find(NOW_NS) {
            Some(at) => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
                format!("{}{now}{}", &line[..at], &line[at + NOW_NS.len()..])
            }
            None => line.clone(),
        };
        out.write_all(stamped.as_bytes())?;
        out.flush()?;
        written += stamped.len() as u64;
    }
}

/// Controls the reader thread.
#[derive(Debug, Default)]
pub(super) struct StdinControl {
    /// No reading before this instant.
    paused_until: Mutex<Option<Instant>>,
    /// The script closed stdin; the end of file that follows is not the client's.
    closed: AtomicBool,
}

impl StdinControl {
    /// Starts the reader thread; lines arrive on the returned channel.
    pub(super) fn start(recorder: Option<Arc<Recorder>>) -> (Arc<StdinControl>, mpsc::Receiver<Input>) {
        let control = Arc::new(StdinControl::default());
        let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
        let reader = Arc::clone(&control);
        std::thread::spawn(move || reader.read(&tx, recorder.as_deref()));
        (control, rx)
    }

    fn read(&self, tx: &mpsc::Sender<Input>, recorder: Option<&Recorder>) {
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::new();
        loop {
            self.wait_until_resumed();
            line.clear();
            let read = stdin.read_until(b'\n', &mut line);
            if self.closed_by_script() {
                // What arrives after the close (or the partial line it cut) is not delivered.
                return;
            }
            match read {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(Input::Eof);
                    return;
                }
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    if let Some(recorder) = recorder {
                        recorder.line("in", &line);
                    }
                    if tx.blocking_send(Input::Line(line.clone())).is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn wait_until_resumed(&self) {
        let until = *self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(until) = until {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
    }

    /// Stops reading for `duration`, starting after the line being read.
    pub(super) fn pause(&self, duration: Duration) {
        *self.paused_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + duration);
    }

    /// Closes stdin: the client's writes fail from now on (after at most the one being read).
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        swap_for_dev_null(0);
    }

    /// True once the script closed stdin.
    pub(super) fn closed_by_script(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// Points file descriptor `fd` at `/dev/null`, dropping the pipe it held. The descriptor stays
/// open, so nothing else can take its number.
fn swap_for_dev_null(fd: i32) {
    use std::os::fd::AsRawFd;
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else {
        return;
    };
    // SAFETY: `dup2` only replaces what `fd` refers to; both descriptors are valid for the
    // call, and the process keeps using `fd` as before (now reading or writing /dev/null).
    unsafe {
        libc::dup2(null.as_raw_fd(), fd);
    }
}
