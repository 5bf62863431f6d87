//! Idle sessions: N fakes that only do their handshake, started through the harness or by hand.

use std::path::Path;
use std::time::Instant;

use agent_harness::StoreChoice;
use agent_testkit::fake_cli::FakeScript;
use serde_json::{Value, json};

use crate::direct::Fake;
use crate::harness::{codex_harness, fake_options, write_script};
use crate::self_status_kib;

/// Starts `n` sessions one after another and keeps them open; reports time and memory.
pub(crate) async fn harness(n: usize, fake: &Path, work: &Path) -> Result<Value, String> {
    let script = write_script(work, "idle", &FakeScript::new().handshake())?;
    let harness = codex_harness(StoreChoice::Disabled)?;
    // One session first: the provider's one-time work (the version check of the binary) and
    // the runtime's threads are not per-session costs.
    let warm = harness.start_session("codex", fake_options(fake, &script, work)).await.map_err(|e| format!("{e}"))?;
    let rss_before = self_status_kib("VmRSS");
    let started = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    for i in 0..n {
        let session = harness
            .start_session("codex", fake_options(fake, &script, work))
            .await
            .map_err(|e| format!("session {i}: {e}"))?;
        sessions.push(session);
    }
    let secs = started.elapsed().as_secs_f64();
    let rss_after = self_status_kib("VmRSS");
    let live = harness.list_sessions().len();
    for session in sessions.iter().chain([&warm]) {
        let _ = harness.stop_session(session, true).await;
    }
    harness.shutdown().await;
    let _ = std::fs::remove_file(&script);
    Ok(report("idle-harness", n, live, secs, rss_before, rss_after))
}

/// Spawns the fake `n` times and does the Codex handshake on each by hand, keeping them open.
pub(crate) fn direct(n: usize, fake: &Path, work: &Path) -> Result<Value, String> {
    let script = write_script(work, "idle-direct", &FakeScript::new().handshake())?;
    let mut warm = Fake::start(fake, &script, work)?;
    warm.handshake(work)?;
    let rss_before = self_status_kib("VmRSS");
    let started = Instant::now();
    let mut fakes = Vec::with_capacity(n);
    for _ in 0..n {
        let mut fake = Fake::start(fake, &script, work)?;
        fake.handshake(work)?;
        fakes.push(fake);
    }
    let secs = started.elapsed().as_secs_f64();
    let rss_after = self_status_kib("VmRSS");
    let live = fakes.len();
    for fake in fakes.iter_mut().chain([&mut warm]) {
        fake.stop();
    }
    let _ = std::fs::remove_file(&script);
    Ok(report("idle-direct", n, live, secs, rss_before, rss_after))
}

fn report(consumer: &str, n: usize, live: usize, secs: f64, rss_before: u64, rss_after: u64) -> Value {
    let per_session_kib = rss_after.saturating_sub(rss_before) as f64 / n.max(1) as f64;
    json!({
        "consumer": consumer, "sessions": n, "live": live, "secs": secs,
        "start_ms_per_session": secs * 1000.0 / n.max(1) as f64,
        "rss_before_kib": rss_before, "rss_after_kib": rss_after, "rss_kib_per_session": per_session_kib,
    })
}
