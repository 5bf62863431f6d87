//! The report `cargo xtask bench` writes: the figures of a run as `BENCHMARKS.md`, with the
//! machine, the method and the targets beside them.

use std::fmt::Write as _;
use std::time::Duration;

use xshell::{Shell, cmd};

use crate::test::workspace_root;

use super::{HARNESS_MODES, LATENCY_RATE, LatencyRound, Options, Result, Results, Run, Setup, mib, sdk};

/// Picks one consumer's run out of a latency round.
type Pick = fn(&LatencyRound) -> &Run;

/// Median, min and max.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut values: Vec<f64> = values.into_iter().collect();
        values.sort_by(f64::total_cmp);
        if values.is_empty() {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN };
        }
        let mid = values.len() / 2;
        let median = if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 };
        Spread { median, min: values[0], max: values[values.len() - 1] }
    }

    /// `median (min–max)` with `digits` decimals.
    fn show(self, digits: usize) -> String {
        format!("{:.digits$} ({:.digits$}–{:.digits$})", self.median, self.min, self.max)
    }
}

/// `1.23 M` / `456 k` for a rate.
fn rate(per_second: f64) -> String {
    if per_second >= 1e6 { format!("{:.2} M", per_second / 1e6) } else { format!("{:.0} k", per_second / 1e3) }
}

/// `median (min–max)` of a rate.
fn rates(spread: Spread) -> String {
    format!("{} ({}–{})", rate(spread.median), rate(spread.min), rate(spread.max))
}

pub(super) fn render(
    options: &Options,
    setup: &Setup,
    sdks: &[sdk::Sdk],
    results: &Results,
    load: (String, String),
    took: Duration,
) -> Result<String> {
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    let commit = cmd!(sh, "git rev-parse --short=12 HEAD").read().unwrap_or_else(|_| "unknown".into());
    // The report of an earlier run, about to be replaced, is not a change to what was measured.
    let dirty = !cmd!(sh, "git status --porcelain --untracked-files=no -- . :!BENCHMARKS.md")
        .read()
        .unwrap_or_default()
        .is_empty();
    let date = cmd!(sh, "date -u +%Y-%m-%dT%H:%MZ").read().unwrap_or_else(|_| "unknown".into());
    let rustc = cmd!(sh, "rustc -V").read().unwrap_or_else(|_| "unknown".into());
    let mut md = String::new();
    let lines = setup.lines as f64;
    let deltas = options.deltas as f64;
    let w = &mut md;
    writeln!(w, "# Benchmarks\n")?;
    writeln!(
        w,
        "Written by `cargo xtask bench` (reproduce with that command; `--deltas N` for a quick run). Benchmarks \
         are not part of CI: `cargo xtask test` only builds the driver (`agent-bench`) and runs each of its \
         harness modes on a small stream (`agent-bench/tests/modes.rs`), so a row that no longer runs fails \
         there.\n"
    )?;
    writeln!(w, "- commit: `{commit}`{}", if dirty { " (with uncommitted changes)" } else { "" })?;
    writeln!(w, "- date: {date}")?;
    writeln!(w, "- machine: {}", machine())?;
    writeln!(w, "- toolchain: {rustc}, release profile")?;
    writeln!(w, "- {} rounds; the whole run took {:.0} s", options.rounds, took.as_secs_f64())?;
    writeln!(
        w,
        "- load average (1, 5, 15 min) before the run: {}, after it: {} (anything above the bench's own \
         ~1–2 means other work shared the cores, and the spreads show it)",
        load.0, load.1
    )?;
    writeln!(w, "\n## Method\n")?;
    writeln!(
        w,
        "Each figure is one child process timed from spawn to reap (wall, monotonic clock); CPU \
         (user+sys) and peak RSS come from `wait4`'s rusage, which includes the reaped children \
         (`cat`, `fake-codex`), and peak RSS is the largest single process of the tree. Rates are \
         lines of the stream per second of whole-process wall time, startup and teardown included. \
         Rounds interleave every row; each harness row is paired with the `typed` parse of the same \
         bytes run just before it, and its ratio is taken pair by pair (median, min–max of \
         the pairs). 1 warm-up run of `cat`, `typed` and `harness-disabled` precedes the rounds.\n"
    )?;
    writeln!(
        w,
        "The stream (`target/bench/codex_app-{}.jsonl`, made by `gen-stream codex-app {}`): one Codex \
         app-server turn — `turn/started`, `item/started`, {} `item/agentMessage/delta` notifications \
         (threadId, turnId, itemId, a 40-character delta with occasional escapes and non-ASCII, \
         `emittedAtMs`), `item/completed`, `turn/completed` — {} lines, {:.1} MB. The harness rows run \
         a `Harness` with `CodexProvider` spawning the release `fake-codex` through `LocalExec`; the \
         fake does the handshake, accepts the turn and copies the file to its stdout in 64 KiB \
         writes, as `cat` does (`stream_file`); one subscriber (subscribed to the session before the turn starts) counts \
         `message_delta` events until the turn's terminal event; every harness run reached \
         `turn_completed`. With a store a subscriber that falls behind catches up from the store, so \
         it gets all {} deltas; without one it lags by design (`Lagged`), and the driver resubscribes \
         from the session's buffer and counts what still arrives.\n",
        options.deltas,
        options.deltas,
        options.deltas,
        setup.lines,
        setup.bytes as f64 / 1e6,
        options.deltas
    )?;

    render_targets(w, setup, sdks, results)?;

    writeln!(w, "## Throughput (the same bytes for every row)\n")?;
    writeln!(
        w,
        "| consumer | wall s, median (min–max) | lines/s, median (min–max) | ratio to `typed`, paired, median (min–max) | peak RSS MiB (median) | CPU user+sys s (median) | deltas delivered to the subscriber (min–max) |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    let row = |w: &mut String, name: &str, runs: &[&Run], ratio: String| -> Result<()> {
        let wall = Spread::of(runs.iter().map(|r| r.wall));
        let per_second = Spread::of(runs.iter().map(|r| lines / r.wall));
        let rss = Spread::of(runs.iter().map(|r| mib(r.max_rss_kib)));
        let cpu = Spread::of(runs.iter().map(|r| r.cpu));
        let delivered = Spread::of(runs.iter().map(|r| r.field("deltas")));
        let delivered = if delivered.max == 0.0 {
            "—".to_owned()
        } else if delivered.min == delivered.max {
            format!("{:.0}", delivered.min)
        } else {
            format!("{:.0}–{:.0}", delivered.min, delivered.max)
        };
        writeln!(
            w,
            "| {name} | {} | {} | {ratio} | {:.1} | {:.2} | {delivered} |",
            wall.show(2),
            rates(per_second),
            rss.median,
            cpu.median
        )?;
        Ok(())
    };
    let cats: Vec<&Run> = results.cat.iter().collect();
    row(w, "`cat` → pipe → discard (64 KiB reads)", &cats, "—".into())?;
    let values: Vec<&Run> = results.value.iter().map(|(v, _)| v).collect();
    let value_ratio = Spread::of(results.value.iter().map(|(v, t)| v.wall / t.wall));
    row(w, "`serde_json::Value` per line", &values, value_ratio.show(2))?;
    let typed: Vec<&Run> =
        results.value.iter().map(|(_, t)| t).chain(results.harness.iter().flatten().map(|(t, _)| t)).collect();
    row(w, "**typed** (derive struct: method, params{threadId, turnId, itemId, delta})", &typed, "1".into())?;
    for (mode, pairs) in HARNESS_MODES.iter().zip(&results.harness) {
        let runs: Vec<&Run> = pairs.iter().map(|(_, h)| h).collect();
        let ratio = Spread::of(pairs.iter().map(|(t, h)| h.wall / t.wall));
        row(w, &format!("**{mode}**"), &runs, ratio.show(2))?;
    }
    writeln!(
        w,
        "\nThe driver's own peak RSS (`VmHWM`, without `cat`/`fake-codex`), median: {}.\n",
        std::iter::once(("typed", &typed))
            .map(|(name, runs)| format!(
                "{name} {:.1} MiB",
                Spread::of(runs.iter().map(|r| r.field("self_peak_rss_kib") / 1024.0)).median
            ))
            .chain(HARNESS_MODES.iter().zip(&results.harness).map(|(mode, pairs)| {
                format!(
                    "{mode} {:.1} MiB",
                    Spread::of(pairs.iter().map(|(_, h)| h.field("self_peak_rss_kib") / 1024.0)).median
                )
            }))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(
        w,
        "In-process rate of the harness rows (from `start_session` to the terminal event, excluding process \
         startup and teardown), median: {}.\n",
        HARNESS_MODES
            .iter()
            .zip(&results.harness)
            .map(|(mode, pairs)| format!(
                "{mode} {} deltas/s",
                rate(Spread::of(pairs.iter().map(|(_, h)| deltas / h.field("secs"))).median)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    )?;

    writeln!(w, "## SQLite: durable events/s through the Harness\n")?;
    let sqlite = &results.harness[2];
    let events = Spread::of(sqlite.iter().map(|(_, h)| h.field("events") / h.wall));
    let in_process = Spread::of(sqlite.iter().map(|(_, h)| h.field("events") / h.field("secs")));
    let durability: Vec<String> =
        sqlite.iter().map(|(_, h)| h.report["durability"].as_str().unwrap_or("?").to_owned()).collect();
    writeln!(
        w,
        "The `harness-sqlite` row: `SqliteStore::open` defaults (WAL, `synchronous = FULL`, group commit), so \
         every event a subscriber sees is committed first; the session reported durability `{}` at the end of \
         every run. Events (all kinds, {} per run) per second of whole-process wall time: **{}**; in-process \
         (start of session to terminal event): {}.\n",
        durability.first().map_or("?", String::as_str),
        sqlite.first().map_or(0.0, |(_, h)| h.field("events")),
        rates(events),
        rates(in_process)
    )?;

    writeln!(w, "## {} idle sessions\n", options.sessions)?;
    writeln!(
        w,
        "`idle-harness` starts {n} Codex sessions one after another (store disabled) on a `fake-codex` whose \
         script is only the handshake, and keeps them open; `idle-direct` spawns the same fake {n} times with \
         `std::process::Command` and does the app-server handshake (`initialize`, `initialized`, \
         `thread/start`, wait for `thread/started`) by hand. One session (one fake) is started before the \
         clock starts, so the provider's one-time version check is not counted. Memory is the driver's \
         `VmRSS` after minus before, per session (the fakes' own memory is not included).\n",
        n = options.sessions
    )?;
    writeln!(w, "| | start per session ms, median (min–max) | driver RSS per session KiB, median (min–max) |")?;
    writeln!(w, "|---|---|---|")?;
    for (name, runs) in [
        ("through the Harness", results.idle.iter().map(|(h, _)| h).collect::<Vec<_>>()),
        ("by hand (spawn + handshake)", results.idle.iter().map(|(_, d)| d).collect()),
    ] {
        let start = Spread::of(runs.iter().map(|r| r.field("start_ms_per_session")));
        let rss = Spread::of(runs.iter().map(|r| r.field("rss_kib_per_session")));
        writeln!(w, "| {name} | {} | {} |", start.show(3), rss.show(1))?;
    }
    let overhead =
        Spread::of(results.idle.iter().map(|(h, d)| h.field("start_ms_per_session") - d.field("start_ms_per_session")));
    writeln!(w, "\nHarness start overhead per session above doing it by hand, paired: {} ms.\n", overhead.show(3))?;

    writeln!(w, "## Latency: line written by the CLI → consumer, at {LATENCY_RATE} lines/s\n")?;
    writeln!(
        w,
        "`fake-codex` writes a {}-delta turn (`gen-stream codex-app {} --stamped`) one line at a time \
         on a fixed schedule of {LATENCY_RATE} lines/s; just before each write it puts the time \
         (`SystemTime`, ns) at the start of the delta's text. The consumer subtracts it from the time the \
         delta reached it. **By hand**: the driver spawns the fake, does the handshake and reads its \
         stdout with `read_line` and the typed parse, on a blocking thread (the plain reader, the floor \
         of the target) or in one task on a multi-threaded Tokio runtime (the pipe read through the \
         runtime's I/O driver: what any async reader pays). **Harness**: a session subscriber (memory store), \
         either on the thread that drives the runtime (`block_on`, as in the throughput rows: each \
         event crosses to another thread) or in a task spawned on the runtime (how a service consumes \
         events). Figures are medians over the rounds of each run's percentile (min–max over the \
         rounds), in µs. The last column is the CPU time the consumer's process (not the fake) spent \
         per line over the stream, from its threads' `schedstat`.\n",
        options.latency_deltas, options.latency_deltas
    )?;
    writeln!(w, "| consumer | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | consumer's CPU µs per line |")?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    for (name, runs) in [
        ("by hand (`read_line` + typed parse)", results.latency.iter().map(|r| &r.plain).collect::<Vec<_>>()),
        (
            "by hand in a Tokio task (the same, through the I/O driver)",
            results.latency.iter().map(|r| &r.tokio).collect(),
        ),
        ("**Harness subscriber, in a task**", results.latency.iter().map(|r| &r.task).collect()),
        ("**Harness subscriber, on the `block_on` thread**", results.latency.iter().map(|r| &r.thread).collect()),
    ] {
        let cell = |field: &str| Spread::of(runs.iter().map(|r| r.field(field))).show(1);
        writeln!(
            w,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            cell("p50_us"),
            cell("p90_us"),
            cell("p99_us"),
            cell("p999_us"),
            cell("max_us"),
            cell("cpu_us_per_line")
        )?;
    }
    // Paired per round: one consumer minus another.
    let added = |run: Pick, floor: Pick, field: &str| {
        Spread::of(results.latency.iter().map(|r| run(r).field(field) - floor(r).field(field))).show(1)
    };
    let (plain, tokio, thread, task): (Pick, Pick, Pick, Pick) =
        (|r| &r.plain, |r| &r.tokio, |r| &r.thread, |r| &r.task);
    writeln!(
        w,
        "\nAdded by the harness, paired per round: in a task p50 {} µs, p99 {} µs; on the `block_on` thread \
         p50 {} µs, p99 {} µs. Over the reader in a Tokio task, in a task: p50 {} µs, p99 {} µs (the reader in \
         a Tokio task itself adds p50 {} µs over the plain reader).\n",
        added(task, plain, "p50_us"),
        added(task, plain, "p99_us"),
        added(thread, plain, "p50_us"),
        added(thread, plain, "p99_us"),
        added(task, tokio, "p50_us"),
        added(task, tokio, "p99_us"),
        added(tokio, plain, "p50_us"),
    )?;

    render_claude(w, options, results)?;
    render_sdks(w, options, sdks, results)?;

    writeln!(w, "{}", include_str!("misses.md"))?;

    if sdks.is_empty() {
        writeln!(w, "## Not measured yet\n")?;
        writeln!(w, "- The TypeScript SDKs: this run skipped them (`--no-sdks`, or no Node.js/npm).")?;
    }
    Ok(md)
}

/// The targets of DESIGN.md §11 beside this run's figures (medians).
fn render_targets(w: &mut String, setup: &Setup, sdks: &[sdk::Sdk], results: &Results) -> Result<()> {
    let median = |values: Vec<f64>| Spread::of(values).median;
    let ratio = |index: usize| median(results.harness[index].iter().map(|(t, h)| h.wall / t.wall).collect());
    let rss = |index: usize| median(results.harness[index].iter().map(|(_, h)| mib(h.max_rss_kib)).collect());
    let memory_rate = median(results.harness[1].iter().map(|(_, h)| h.field("deltas") / h.field("secs")).collect());
    let sqlite_rate = median(results.harness[2].iter().map(|(_, h)| h.field("events") / h.wall).collect());
    // The memory store's share: the memory row's peak minus the store-less row's, per raw byte.
    let store_bytes = (rss(1) - rss(0)) * 1024.0 * 1024.0;
    let latency =
        |field: &str| median(results.latency.iter().map(|r| r.task.field(field) - r.plain.field(field)).collect());
    let latency_thread =
        |field: &str| median(results.latency.iter().map(|r| r.thread.field(field) - r.plain.field(field)).collect());
    let over_tokio = median(results.latency.iter().map(|r| r.task.field("p50_us") - r.tokio.field("p50_us")).collect());
    let harness_p99 = median(results.latency.iter().map(|r| r.task.field("p99_us")).collect());
    let idle_kib = median(results.idle.iter().map(|(h, _)| h.field("rss_kib_per_session")).collect());
    let idle_ms = median(
        results.idle.iter().map(|(h, d)| h.field("start_ms_per_session") - d.field("start_ms_per_session")).collect(),
    );
    let sdk_ratios: Vec<f64> =
        results.sdks.iter().map(|pairs| median(pairs.iter().map(|(t, s)| s.wall / t.wall).collect())).collect();
    // Each provider against the SDK of its own CLI, and the strictest reading: the harness-memory
    // row against whichever SDK came closest to its typed parse.
    let claude_ratio = median(results.claude.iter().map(|(t, h)| h.wall / t.wall).collect());
    let own: Vec<String> = sdks
        .iter()
        .zip(&sdk_ratios)
        .map(|(sdk, &sdk_ratio)| {
            let (row, harness) = if sdk.baseline == "typed-claude" {
                ("harness-claude", claude_ratio)
            } else {
                ("harness-memory", ratio(1))
            };
            format!("{:.2}× {} ({sdk_ratio:.2} ÷ {row}'s {harness:.2})", sdk_ratio / harness, sdk.name)
        })
        .collect();
    let sdk_row = match sdk_ratios.iter().copied().reduce(f64::min) {
        Some(fastest) => format!(
            "each provider against its CLI's SDK: {}; strictest, harness-memory against the SDK closest to its typed parse: {:.2}× ({fastest:.2} ÷ {:.2})",
            own.join(", "),
            fastest / ratio(1),
            ratio(1)
        ),
        None => "not run".to_owned(),
    };
    writeln!(w, "## Against the targets (DESIGN.md §11)\n")?;
    writeln!(w, "Medians of this run; the sections below have the spreads and the method.\n")?;
    writeln!(w, "| target | this run |")?;
    writeln!(w, "|---|---|")?;
    writeln!(
        w,
        "| event pipeline ≥ 1.2 M events/s on one core | harness-memory {} deltas/s in process (wall), {} per CPU-second of the whole process tree |",
        rate(memory_rate),
        rate(median(results.harness[1].iter().map(|(_, h)| h.field("deltas") / h.cpu).collect()))
    )?;
    writeln!(
        w,
        "| within 1.5× of the typed parse of the same bytes | harness-disabled {:.2}×, harness-memory {:.2}×, harness-sqlite {:.2}× |",
        ratio(0),
        ratio(1),
        ratio(2)
    )?;
    writeln!(w, "| ≥ 4× the TypeScript SDKs (paired ratios to a typed parse) | {sdk_row} |")?;
    // The Codex provider keeps a message's text until it completes, up to its default
    // `max_line_bytes`.
    const KEPT_MIB: f64 = 16.0;
    let text = (setup.lines - 4) as f64 * 40.5;
    writeln!(
        w,
        "| ≤ 32 MiB RSS for a 1 M-delta turn, store disabled or SQLite (plus the final text) | disabled {:.1} MiB, SQLite {:.1} MiB (the text kept of the message until it completes: {:.1} MiB of its {:.1} MB, the Codex provider's `max_line_bytes` being {KEPT_MIB} MiB) |",
        rss(0),
        rss(2),
        (text / (1024.0 * 1024.0)).min(KEPT_MIB),
        text / 1e6
    )?;
    writeln!(
        w,
        "| memory store ≤ 1.3× an event's raw size | ≈ {:.1}× (memory row's peak RSS minus the store-less row's, ÷ {:.0} MB of stream) |",
        store_bytes / setup.bytes as f64,
        setup.bytes as f64 / 1e6
    )?;
    writeln!(
        w,
        "| latency added over a plain reader ≤ 10 µs p50 | {:.1} µs, subscriber in a task ({:.1} µs on the `block_on` thread; {over_tokio:.1} µs over a reader in a Tokio task) |",
        latency("p50_us"),
        latency_thread("p50_us")
    )?;
    writeln!(
        w,
        "| p99 ≤ 100 µs at 10 k lines/s | {harness_p99:.1} µs in a task ({:+.1} µs over the plain reader; {:+.1} µs on the `block_on` thread) |",
        latency("p99_us"),
        latency_thread("p99_us")
    )?;
    writeln!(w, "| SQLite ≥ 150 k durable events/s through the Harness | {} events/s |", rate(sqlite_rate))?;
    writeln!(w, "| idle session ≤ 48 KiB of harness memory | {idle_kib:.1} KiB |")?;
    writeln!(w, "| start overhead ≤ 1 ms per session over spawn + handshake by hand | {idle_ms:.3} ms |")?;
    writeln!(w)?;
    Ok(())
}

/// The Claude provider row beside the typed parse of its stream.
fn render_claude(w: &mut String, options: &Options, results: &Results) -> Result<()> {
    if results.claude.is_empty() {
        return Ok(());
    }
    let n = options.deltas;
    writeln!(w, "## The Claude provider\n")?;
    writeln!(
        w,
        "`harness-claude`: a `Harness` with `ClaudeProvider` and a `MemoryStore` spawning the release \
         `fake-claude` through `LocalExec`; the fake answers `initialize`, takes the user message and copies the \
         Claude stream-json turn (`gen-stream claude {n}`: {n} `text_delta` stream events, 278 B per line) to \
         its stdout; one subscriber counts `message_delta` events up to `turn_completed` (every run got all {n}). \
         Each run is paired with `typed-claude`, the typed parse of the same bytes, run just before it.\n"
    )?;
    writeln!(
        w,
        "| consumer | wall s, median (min–max) | deltas/s, median (min–max) | ratio to `typed-claude`, paired | peak RSS MiB (median) | CPU user+sys s (median) |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let pairs = &results.claude;
    paired_rows(w, "`typed-claude`", "**harness-claude**", pairs, n as f64)?;
    let in_process = Spread::of(pairs.iter().map(|(_, h)| h.field("deltas") / h.field("secs")));
    writeln!(w, "\nIn-process rate (from `start_session` to the terminal event): {} deltas/s.\n", rates(in_process))?;
    Ok(())
}

/// Two table rows: the baseline runs of `pairs` (ratio 1) and the runs paired with them, with
/// their paired wall-time ratio; rates are `lines` per second of wall time.
fn paired_rows(w: &mut String, baseline: &str, paired: &str, pairs: &[(Run, Run)], lines: f64) -> Result<()> {
    for (name, runs, ratio) in [
        (baseline, pairs.iter().map(|(t, _)| t).collect::<Vec<_>>(), "1".to_owned()),
        (
            paired,
            pairs.iter().map(|(_, r)| r).collect(),
            Spread::of(pairs.iter().map(|(t, r)| r.wall / t.wall)).show(2),
        ),
    ] {
        let wall = Spread::of(runs.iter().map(|r| r.wall));
        let per_second = Spread::of(runs.iter().map(|r| lines / r.wall));
        let rss = Spread::of(runs.iter().map(|r| mib(r.max_rss_kib)));
        let cpu = Spread::of(runs.iter().map(|r| r.cpu));
        writeln!(
            w,
            "| {name} | {} | {} | {ratio} | {:.1} | {:.2} |",
            wall.show(2),
            rates(per_second),
            rss.median,
            cpu.median
        )?;
    }
    Ok(())
}

/// The TypeScript SDK section.
fn render_sdks(w: &mut String, options: &Options, sdks: &[sdk::Sdk], results: &Results) -> Result<()> {
    if sdks.is_empty() {
        return Ok(());
    }
    let node = Shell::new().and_then(|sh| cmd!(sh, "node --version").read()).unwrap_or_else(|_| "?".into());
    writeln!(w, "## TypeScript SDKs on the same machine\n")?;
    writeln!(
        w,
        "`{}` (`query()` with `includePartialMessages`, against `fake-claude`: initialize handshake, the \
         user message, then the prepared turn) reads the Claude stream-json turn (`gen-stream claude {n}`: \
         {n} `text_delta` stream events, 278 B per line); `{}` (`thread.runStreamed()`, which drives `codex \
         exec --experimental-json`; `fake-codex` copies the prepared events once stdin closes) reads the \
         `codex exec` turn (`gen-stream codex-exec {n}`: {n} `item.updated` events). Node {}, installed \
         under `target/bench/node`. Each SDK run is paired with the typed parse of the same bytes \
         (`typed-claude`, `typed-codex-exec`) run just before it; every run got all {n} deltas and a \
         successful end.\n",
        sdk::CLAUDE_SDK,
        sdk::CODEX_SDK,
        node.trim(),
        n = options.deltas
    )?;
    writeln!(
        w,
        "| consumer | wall s, median (min–max) | lines/s, median (min–max) | ratio to the typed parse of the same bytes, paired | peak RSS MiB (median) | CPU user+sys s (median) |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    for (sdk, pairs) in sdks.iter().zip(&results.sdks) {
        let baseline = format!("`{}` (typed parse)", sdk.baseline);
        paired_rows(w, &baseline, &format!("**{}**", sdk.name), pairs, sdk.lines as f64)?;
    }
    let harness = Spread::of(results.harness[1].iter().map(|(t, h)| h.wall / t.wall)).median;
    let claude = Spread::of(results.claude.iter().map(|(t, h)| h.wall / t.wall)).median;
    let sdk_ratios: Vec<String> = sdks
        .iter()
        .zip(&results.sdks)
        .map(|(sdk, pairs)| {
            format!("{} {:.2}", sdk.name, Spread::of(pairs.iter().map(|(t, s)| s.wall / t.wall)).median)
        })
        .collect();
    writeln!(
        w,
        "\nThe streams differ (the Codex provider has no `codex exec` mode), so the comparable figure is each \
         consumer's paired ratio to a typed parse of its own bytes: harness-memory {harness:.2} (Codex \
         app-server stream), harness-claude {claude:.2} (the Claude stream, the same bytes as the Claude SDK) \
         against {}.\n",
        sdk_ratios.join(", ")
    )?;
    Ok(())
}

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`).
pub(super) fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// CPU model, cores, memory and kernel, from `/proc`.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{model}, {cores} cores, {:.1} GiB RAM, Linux {}", memory_kib / 1024.0 / 1024.0, kernel.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_the_middle_value() {
        assert_eq!(Spread::of([3.0, 1.0, 2.0]), Spread { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(Spread::of([4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert!(Spread::of([]).median.is_nan());
    }

    #[test]
    fn rates_use_k_and_m() {
        assert_eq!(rate(1_234_567.0), "1.23 M");
        assert_eq!(rate(456_700.0), "457 k");
    }
}
