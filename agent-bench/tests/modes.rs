//! The driver's harness modes on small streams. Benchmarks are not run in CI, so without this a
//! change that breaks a row (a turn that no longer completes, a session that no longer starts)
//! would be found by the next `cargo xtask bench`, not by the commit that made it.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent_testkit::fake_cli::{CLAUDE_SESSION_ID, FakeCli};
use agent_testkit::streams::{CodexIds, write_claude, write_codex_app, write_codex_app_stamped};
use serde_json::Value;

const DELTAS: u64 = 2_000;

/// A scratch directory of this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("agent-bench-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    fn stream(&self, name: &str, write: impl FnOnce(&mut std::fs::File) -> std::io::Result<u64>) -> PathBuf {
        let path = self.0.join(name);
        let mut file = std::fs::File::create(&path).expect("stream file");
        write(&mut file).expect("stream written");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `agent-bench MODE SUBJECT --fake FAKE --work WORK`, which must succeed; its JSON report.
fn bench(mode: &str, subject: &str, fake: &Path, work: &Path) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_agent-bench"))
        .args([mode, subject, "--fake"])
        .arg(fake)
        .arg("--work")
        .arg(work)
        .output()
        .expect("agent-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "agent-bench {mode}: {}\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("agent-bench {mode}: {e}\n{stderr}"))
}

fn fake(cli: FakeCli) -> PathBuf {
    cli.binary().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_harness_row_streams_its_turn_to_the_end() {
    let scratch = Scratch::new("rows");
    let codex = scratch.stream("codex.jsonl", |f| write_codex_app(f, DELTAS, &CodexIds::default()));
    let claude = scratch.stream("claude.jsonl", |f| write_claude(f, DELTAS, CLAUDE_SESSION_ID));
    let subject = |path: &Path| path.display().to_string();

    for mode in ["harness-memory", "harness-sqlite", "harness-disabled"] {
        let report = bench(mode, &subject(&codex), &fake(FakeCli::Codex), &scratch.0);
        assert_eq!(report["terminal"], "turn_completed", "{mode}: {report}");
        if mode != "harness-disabled" {
            // Without a store a subscriber that falls behind loses deltas by design.
            assert_eq!(report["deltas"], DELTAS, "{mode}: {report}");
        }
    }
    let report = bench("harness-claude", &subject(&claude), &fake(FakeCli::Claude), &scratch.0);
    assert_eq!((&report["terminal"], &report["deltas"]), (&"turn_completed".into(), &DELTAS.into()), "{report}");
}

#[test]
fn the_latency_and_idle_rows_report_their_figures() {
    let scratch = Scratch::new("latency-idle");
    let stamped = scratch.stream("stamped.jsonl", |f| write_codex_app_stamped(f, 200, &CodexIds::default()));
    let codex = fake(FakeCli::Codex);
    let report = bench("latency-harness-task", &stamped.display().to_string(), &codex, &scratch.0);
    assert_eq!(report["deltas"], 200, "{report}");
    assert!(report["p50_us"].as_f64().is_some_and(|p50| p50 > 0.0), "{report}");
    let report = bench("idle-harness", "3", &codex, &scratch.0);
    assert_eq!(report["sessions"], 3, "{report}");
    assert!(report["rss_kib_per_session"].is_number() && report["start_ms_per_session"].is_number(), "{report}");
}
