//! `cargo xtask bench`: the throughput, memory and start-up benchmarks, written to
//! `BENCHMARKS.md`. Not part of CI.
//!
//! Method (as in `perf-anchors.md`): every measurement is one child process (`agent-bench`),
//! timed from spawn to reap with a monotonic clock; CPU time and peak RSS come from the
//! kernel's rusage of the reaped child (`wait4`), which covers its waited-for children (`cat`,
//! `fake-codex`). Each harness row is paired with the `typed` parse of the same bytes, run just
//! before it in the same round, and its ratio is taken pair by pair.

use std::error::Error;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;
use xshell::{Shell, cmd};

use crate::test::workspace_root;
use report::{load_average, render};

mod report;
mod sdk;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const USAGE: &str =
    "usage: cargo xtask bench [--deltas N] [--rounds N] [--sessions N] [--latency-deltas N] [--out FILE]

  --deltas N          deltas in the streamed turn (default 1000000)
  --rounds N          interleaved rounds (default 5)
  --sessions N        idle sessions (default 1000)
  --latency-deltas N  deltas of the latency runs, written at 10,000 lines/s (default 20000)
  --no-sdks           skip the TypeScript SDK rows (by default they are installed with npm
                      under target/bench/node and run when Node.js and npm are on PATH)
  --out FILE          the report (default BENCHMARKS.md at the workspace root)";

/// What to run.
struct Options {
    deltas: u64,
    rounds: usize,
    sessions: usize,
    latency_deltas: u64,
    /// Run the TypeScript SDK rows.
    sdks: bool,
    out: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options> {
        let mut options = Options {
            deltas: 1_000_000,
            rounds: 5,
            sessions: 1000,
            latency_deltas: 20_000,
            sdks: true,
            out: workspace_root().join("BENCHMARKS.md"),
        };
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            if matches!(flag.as_str(), "-h" | "--help") {
                return Err(USAGE.into());
            }
            if flag == "--no-sdks" {
                options.sdks = false;
                continue;
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))?;
            match flag.as_str() {
                "--deltas" => options.deltas = value.parse()?,
                "--rounds" => options.rounds = value.parse()?,
                "--sessions" => options.sessions = value.parse()?,
                "--latency-deltas" => options.latency_deltas = value.parse()?,
                "--out" => options.out = PathBuf::from(value),
                _ => return Err(format!("unknown flag {flag}\n\n{USAGE}").into()),
            }
        }
        if options.deltas == 0 || options.rounds == 0 || options.sessions == 0 || options.latency_deltas == 0 {
            return Err("--deltas, --rounds, --sessions and --latency-deltas must be positive".into());
        }
        Ok(options)
    }
}

/// One measured process.
#[derive(Clone, Debug)]
struct Run {
    wall: f64,
    cpu: f64,
    /// `ru_maxrss`: the largest of the process and its reaped children, KiB.
    max_rss_kib: u64,
    /// The driver's JSON line.
    report: Value,
}

impl Run {
    fn field(&self, name: &str) -> f64 {
        self.report[name].as_f64().unwrap_or(f64::NAN)
    }
}

/// The binaries and files a run needs.
struct Setup {
    driver: PathBuf,
    fake: PathBuf,
    /// `fake-claude`, for the Claude provider row.
    fake_claude: PathBuf,
    /// The Claude stream-json turn (`gen-stream claude N`).
    claude_stream: PathBuf,
    stream: PathBuf,
    /// The latency stream (`gen-stream codex-app N --stamped`).
    stamped: PathBuf,
    work: PathBuf,
    lines: u64,
    bytes: u64,
}

impl Setup {
    /// A stream consumer: `cat`, `value`, `typed` or `harness-*`.
    fn command(&self, mode: &str) -> Command {
        let mut command = Command::new(&self.driver);
        command.arg(mode).arg(&self.stream);
        if mode.starts_with("harness-") {
            command.arg("--fake").arg(&self.fake).arg("--work").arg(&self.work);
        }
        command
    }

    /// The Claude provider row (`harness-claude`): the Claude stream through `fake-claude`.
    fn claude_command(&self) -> Command {
        let mut command = Command::new(&self.driver);
        command.arg("harness-claude").arg(&self.claude_stream);
        command.arg("--fake").arg(&self.fake_claude).arg("--work").arg(&self.work);
        command
    }

    /// A reader (`typed-claude`, ...) of another stream.
    fn reader(&self, mode: &str, stream: &std::path::Path) -> Command {
        let mut command = Command::new(&self.driver);
        command.arg(mode).arg(stream);
        command
    }

    /// `latency-plain` or `latency-harness` at `rate` lines per second.
    fn latency_command(&self, mode: &str, rate: u32) -> Command {
        let mut command = Command::new(&self.driver);
        command.arg(mode).arg(&self.stamped).arg("--fake").arg(&self.fake).arg("--work").arg(&self.work);
        command.arg("--rate").arg(rate.to_string());
        command
    }

    /// `idle-harness` or `idle-direct`.
    fn idle_command(&self, mode: &str, sessions: usize) -> Command {
        let mut command = Command::new(&self.driver);
        command.arg(mode).arg(sessions.to_string()).arg("--fake").arg(&self.fake).arg("--work").arg(&self.work);
        command
    }
}

/// Writes `gen-stream <args>` to `path` unless it exists.
fn generate(gen_stream: &std::path::Path, path: &std::path::Path, args: &[&str]) -> Result<()> {
    if path.is_file() {
        return Ok(());
    }
    println!("==> generating {}", path.display());
    let partial = path.with_extension("partial");
    let status = Command::new(gen_stream).args(args).stdout(std::fs::File::create(&partial)?).status()?;
    if !status.success() {
        return Err(format!("gen-stream failed: {status}").into());
    }
    std::fs::rename(&partial, path)?;
    Ok(())
}

/// Runs the benchmarks and writes the report.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = Options::parse(args)?;
    let started = Instant::now();
    let load_before = load_average();
    let root = workspace_root();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    println!("==> building agent-bench and the fake CLIs (release)");
    cmd!(sh, "cargo build --release --locked -p agent-bench -p agent-testkit --bins").run()?;
    let release = root.join("target/release");
    let bench_dir = root.join("target/bench");
    std::fs::create_dir_all(&bench_dir)?;
    let gen_stream = release.join("gen-stream");
    let stream = bench_dir.join(format!("codex_app-{}.jsonl", options.deltas));
    generate(&gen_stream, &stream, &["codex-app", &options.deltas.to_string()])?;
    let stamped = bench_dir.join(format!("codex_app_stamped-{}.jsonl", options.latency_deltas));
    generate(&gen_stream, &stamped, &["codex-app", &options.latency_deltas.to_string(), "--stamped"])?;
    let work = bench_dir.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let claude = bench_dir.join(format!("claude-{}.jsonl", options.deltas));
    generate(&gen_stream, &claude, &["claude", &options.deltas.to_string()])?;
    let sdks = if options.sdks {
        let exec = bench_dir.join(format!("codex_exec-{}.jsonl", options.deltas));
        generate(&gen_stream, &exec, &["codex-exec", &options.deltas.to_string()])?;
        sdk::prepare(&bench_dir, &release, &work, claude.clone(), exec, options.deltas)?.unwrap_or_default()
    } else {
        Vec::new()
    };
    let bytes = std::fs::metadata(&stream)?.len();
    let setup = Setup {
        driver: release.join("agent-bench"),
        fake: release.join("fake-codex"),
        fake_claude: release.join("fake-claude"),
        claude_stream: claude,
        stream,
        stamped,
        work,
        lines: options.deltas + 4,
        bytes,
    };

    println!("==> warm-up (page cache, binaries)");
    for mode in ["cat", "typed", "harness-disabled"] {
        measure(&mut setup.command(mode), mode)?;
    }

    let mut results = Results::default();
    for round in 1..=options.rounds {
        println!("==> round {round}/{}", options.rounds);
        results.cat.push(measure(&mut setup.command("cat"), "cat")?);
        let value = measure(&mut setup.command("value"), "value")?;
        let typed = measure(&mut setup.command("typed"), "typed")?;
        results.value.push((value, typed));
        for (index, mode) in HARNESS_MODES.iter().enumerate() {
            let typed = measure(&mut setup.command("typed"), "typed")?;
            let harness = measure(&mut setup.command(mode), mode)?;
            check_harness_run(&harness, mode, options.deltas)?;
            results.harness[index].push((typed, harness));
        }
        let typed = measure(&mut setup.reader("typed-claude", &setup.claude_stream), "typed-claude")?;
        let claude = measure(&mut setup.claude_command(), "harness-claude")?;
        check_harness_run(&claude, "harness-claude", options.deltas)?;
        results.claude.push((typed, claude));
        let idle = measure(&mut setup.idle_command("idle-harness", options.sessions), "idle-harness")?;
        let direct = measure(&mut setup.idle_command("idle-direct", options.sessions), "idle-direct")?;
        results.idle.push((idle, direct));
        let latency = |mode: &str| measure(&mut setup.latency_command(mode, LATENCY_RATE), mode);
        results.latency.push(LatencyRound {
            plain: latency("latency-plain")?,
            tokio: latency("latency-tokio")?,
            thread: latency("latency-harness")?,
            task: latency("latency-harness-task")?,
        });
        for (index, sdk) in sdks.iter().enumerate() {
            let typed = measure(&mut setup.reader(sdk.baseline, &sdk.stream), sdk.baseline)?;
            let run = measure(&mut sdk.command(), sdk.name)?;
            check_sdk_run(&run, sdk.name, options.deltas)?;
            results.sdks.resize_with(sdks.len(), Vec::new);
            results.sdks[index].push((typed, run));
        }
    }
    let _ = std::fs::remove_dir_all(&setup.work);

    let load = (load_before, load_average());
    let report = render(&options, &setup, &sdks, &results, load, started.elapsed())?;
    std::fs::write(&options.out, report)?;
    println!("cargo xtask bench: wrote {} in {:.0} s", options.out.display(), started.elapsed().as_secs_f64());
    Ok(())
}

/// Lines per second of the latency runs.
const LATENCY_RATE: u32 = 10_000;

const HARNESS_MODES: [&str; 3] = ["harness-disabled", "harness-memory", "harness-sqlite"];

#[derive(Default)]
struct Results {
    cat: Vec<Run>,
    /// (value, typed) pairs.
    value: Vec<(Run, Run)>,
    /// Per harness mode: (typed, harness) pairs.
    harness: [Vec<(Run, Run)>; 3],
    /// The Claude provider: (typed-claude, harness-claude) pairs.
    claude: Vec<(Run, Run)>,
    /// (through the harness, by hand) pairs.
    idle: Vec<(Run, Run)>,
    latency: Vec<LatencyRound>,
    /// Per SDK: (typed parse of the same bytes, SDK) pairs.
    sdks: Vec<Vec<(Run, Run)>>,
}

/// One round of the latency runs, in the order they run.
struct LatencyRound {
    /// By hand: `read_line` on a blocking thread.
    plain: Run,
    /// By hand on the runtime: one task reading the pipe through Tokio's I/O driver.
    tokio: Run,
    /// A harness subscriber on the `block_on` thread.
    thread: Run,
    /// A harness subscriber in a spawned task.
    task: Run,
}

/// A harness run that did not reach the terminal event, or lost deltas with a store (where a
/// subscriber never lags), is not a measurement. Without a store a lagging subscriber loses
/// events by design; the report shows how many arrived.
fn check_harness_run(run: &Run, mode: &str, deltas: u64) -> Result<()> {
    let report = &run.report;
    let delivered = report["deltas"].as_u64().unwrap_or(0);
    let complete = delivered == deltas || mode == "harness-disabled";
    if !complete || report["terminal"] != "turn_completed" {
        return Err(format!("incomplete {mode} run ({delivered} of {deltas} deltas): {report}").into());
    }
    Ok(())
}

/// An SDK run that did not get every delta and a successful end is not a measurement.
fn check_sdk_run(run: &Run, name: &str, deltas: u64) -> Result<()> {
    let report = &run.report;
    let ended = matches!(report["result"].as_str(), Some("success" | "turn.completed"));
    if report["deltas"].as_u64() != Some(deltas) || !ended {
        return Err(format!("incomplete {name} run: {report}").into());
    }
    Ok(())
}

/// Runs `command` as a child process and measures it.
fn measure(command: &mut Command, label: &str) -> Result<Run> {
    let started = Instant::now();
    let mut child = command.stdout(Stdio::piped()).stdin(Stdio::null()).spawn()?;
    let mut stdout = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        pipe.read_to_string(&mut stdout)?;
    }
    let (status, usage) = wait4(child.id())?;
    let wall = started.elapsed().as_secs_f64();
    if !status_success(status) {
        return Err(format!("{label} failed (wait status {status}); its output: {stdout}").into());
    }
    let report: Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("{label}: {e}: {stdout:?}"))?;
    let cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    let run = Run { wall, cpu, max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0), report };
    println!(
        "    {label:<17} {:>7.2} s wall  {:>7.2} s cpu  {:>8.1} MiB peak",
        run.wall,
        run.cpu,
        mib(run.max_rss_kib)
    );
    Ok(run)
}

/// Reaps `pid` with `wait4`, returning its wait status and the rusage of it and its reaped
/// children.
fn wait4(pid: u32) -> Result<(i32, libc::rusage)> {
    let pid = libc::pid_t::try_from(pid)?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own unreaped child (std's `Child` is never waited on after this),
        // and both out-pointers are valid for writes for the duration of the call.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            return Ok((status, usage));
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4({pid}): {error}").into());
        }
    }
}

fn status_success(status: i32) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

fn seconds(time: libc::timeval) -> f64 {
    time.tv_sec as f64 + time.tv_usec as f64 / 1e6
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_to_a_million_deltas_and_five_rounds() {
        let options = Options::parse(&[]).unwrap();
        assert_eq!((options.deltas, options.rounds, options.sessions), (1_000_000, 5, 1000));
        let options = Options::parse(&["--deltas".into(), "1000".into(), "--rounds".into(), "5".into()]).unwrap();
        assert_eq!((options.deltas, options.rounds), (1000, 5));
        assert!(Options::parse(&["--deltas".into(), "0".into()]).is_err());
        assert!(Options::parse(&["--colour".into(), "red".into()]).is_err());
    }
}
