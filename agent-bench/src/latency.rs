//! Latency from a line written by the CLI to its consumer: `fake-codex` writes a stamped stream
//! at a fixed rate (`stream_file` with `lines_per_second`), and each delta's text starts with the
//! time its line was written. `latency-plain` reads the fake's stdout by hand (`read_line` and a
//! typed parse) on a blocking thread, `latency-tokio` the same in a task on a Tokio runtime;
//! `latency-harness` is a subscriber of a `Harness` session (memory store).

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_harness::stores::memory::MemoryStore;
use agent_harness::{EventKind, Replay, StoreChoice, TurnOptions};
use agent_testkit::fake_cli::FakeScript;
use serde_json::{Value, json};

use crate::direct::Fake;
use crate::harness::{codex_harness, fake_options, write_script};
use crate::readers::{AppLine, DELTA_METHOD};

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// The stamp at the start of a delta's text.
fn stamp(text: &str) -> Result<u128, String> {
    let digits = text.split(' ').next().unwrap_or_default();
    digits.parse().map_err(|e| format!("delta without a stamp ({e}): {text:?}"))
}

fn script(stream: &Path, rate: u32) -> Result<FakeScript, String> {
    let stream = std::fs::canonicalize(stream).map_err(|e| format!("{}: {e}", stream.display()))?;
    Ok(FakeScript::new().handshake().turn_start().stream_file_paced(stream, rate))
}

/// A line read by hand: the typed parse, and a delta's latency. True at the turn's end.
fn on_line(line: &str, latencies: &mut Vec<u128>) -> Result<bool, String> {
    let parsed: AppLine = serde_json::from_str(line.trim_end()).map_err(|e| format!("{e}: {line:?}"))?;
    match parsed.method.as_deref() {
        Some(DELTA_METHOD) => {
            let text = parsed.params.and_then(|p| p.delta).unwrap_or_default();
            latencies.push(now_ns().saturating_sub(stamp(&text)?));
            Ok(false)
        }
        Some("turn/completed") => Ok(true),
        _ => Ok(false),
    }
}

/// Reads the paced stream from the fake's stdout by hand.
pub(crate) fn plain(stream: &Path, fake: &Path, work: &Path, rate: u32) -> Result<Value, String> {
    let script = write_script(work, "latency-plain", &script(stream, rate)?)?;
    let mut cli = Fake::start(fake, &script, work)?;
    cli.handshake(work)?;
    let cpu = Cpu::start();
    cli.start_turn("stream")?;
    let mut latencies = Vec::new();
    let mut line = String::new();
    loop {
        cli.read_line(&mut line)?;
        if on_line(&line, &mut latencies)? {
            break;
        }
    }
    let cpu = cpu.used();
    cli.stop();
    let _ = std::fs::remove_file(&script);
    Ok(report("latency-plain", rate, latencies, cpu))
}

/// Reads the paced stream by hand in a task on the runtime: the fake's stdout read through
/// Tokio's I/O driver (`read_line` and the typed parse), without the harness.
pub(crate) async fn tokio_reader(stream: &Path, fake: &Path, work: &Path, rate: u32) -> Result<Value, String> {
    use tokio::io::AsyncBufReadExt;
    let script = write_script(work, "latency-tokio", &script(stream, rate)?)?;
    let mut cli = Fake::start(fake, &script, work)?;
    cli.handshake(work)?;
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(cli.stdout_fd()?).map_err(|e| format!("pipe: {e}"))?;
    let cpu = Cpu::start();
    cli.start_turn("stream")?;
    let read = async move {
        let mut stdout = tokio::io::BufReader::new(pipe);
        let mut latencies = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line).await.map_err(|e| format!("read: {e}"))? == 0 {
                return Err("the fake closed its stdout".to_owned());
            }
            if on_line(&line, &mut latencies)? {
                return Ok(latencies);
            }
        }
    };
    let latencies = tokio::spawn(read).await.map_err(|e| format!("reader task: {e}"))??;
    let cpu = cpu.used();
    cli.stop();
    let _ = std::fs::remove_file(&script);
    Ok(report("latency-tokio", rate, latencies, cpu))
}

/// Reads the paced stream as a subscriber of a harness session: on the caller's task, or in a
/// task of its own (`in_task`).
pub(crate) async fn harness(
    stream: &Path,
    fake: &Path,
    work: &Path,
    rate: u32,
    in_task: bool,
) -> Result<Value, String> {
    let consumer = if in_task { "latency-harness-task" } else { "latency-harness" };
    let script = write_script(work, consumer, &script(stream, rate)?)?;
    let harness = codex_harness(StoreChoice::Custom(Arc::new(MemoryStore::new())))?;
    let session = harness
        .start_session("codex", fake_options(fake, &script, work))
        .await
        .map_err(|e| format!("start_session: {e}"))?;
    let mut events = harness.subscribe(&session, Replay::Latest).await.map_err(|e| format!("subscribe: {e}"))?;
    let cpu = Cpu::start();
    let turn = harness.start_turn(&session, "stream", TurnOptions::new()).await.map_err(|e| format!("{e}"))?;
    let consume = async move {
        let mut latencies = Vec::new();
        while let Some(item) = events.next().await {
            let event = item.map_err(|e| format!("subscription: {e}"))?;
            if let EventKind::MessageDelta { text, .. } = &event.kind {
                latencies.push(now_ns().saturating_sub(stamp(text)?));
            }
            if event.is_terminal() && event.turn_id.as_ref() == Some(&turn.id) {
                break;
            }
        }
        Ok::<_, String>(latencies)
    };
    let latencies = if in_task {
        tokio::spawn(consume).await.map_err(|e| format!("consumer task: {e}"))??
    } else {
        consume.await?
    };
    let cpu = cpu.used();
    harness.stop_session(&session, true).await.map_err(|e| format!("stop_session: {e}"))?;
    harness.shutdown().await;
    let _ = std::fs::remove_file(&script);
    Ok(report(consumer, rate, latencies, cpu))
}

/// The CPU time of this process's threads (not the fake's) over the stream.
///
/// How long the consumer runs per line decides more than its own share of the latency: Linux
/// lets a woken thread preempt the CLI that wrote the line only while it has used less than its
/// share of the CPU, otherwise it waits until the CLI sleeps (see `misses.md`).
struct Cpu(u64);

impl Cpu {
    fn start() -> Cpu {
        Cpu(threads_cpu_ns())
    }

    /// Nanoseconds on a CPU since `start`, summed over the threads alive now.
    fn used(self) -> u64 {
        threads_cpu_ns().saturating_sub(self.0)
    }
}

/// The time every thread of this process has run, from `/proc/self/task/*/schedstat` (ns); 0
/// where that is not available.
fn threads_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Percentiles in microseconds, and the consumer's CPU time per delta.
fn report(consumer: &str, rate: u32, mut latencies: Vec<u128>, cpu_ns: u64) -> Value {
    let cpu_us_per_line = cpu_ns as f64 / 1000.0 / latencies.len().max(1) as f64;
    latencies.sort_unstable();
    let at = |q: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let index = ((latencies.len() - 1) as f64 * q).round() as usize;
        latencies[index] as f64 / 1000.0
    };
    json!({
        "consumer": consumer, "lines_per_second": rate, "deltas": latencies.len(),
        "p50_us": at(0.50), "p90_us": at(0.90), "p99_us": at(0.99), "p999_us": at(0.999), "max_us": at(1.0),
        "cpu_us_per_line": cpu_us_per_line,
    })
}
