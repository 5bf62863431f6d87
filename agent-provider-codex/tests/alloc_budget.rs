//! The allocation budget of the event path: a streamed `item/agentMessage/delta` line from
//! codex's stdout to a subscriber costs at most [`BUDGET`] heap allocations, all threads
//! counted, with the memory store.
//!
//! Where they go (about 2.2 per delta, down from 14): the delta's text and the event's `Arc` —
//! the line is kept as the event's raw JSON as a slice of the read it came in, the item's ID is
//! shared by its deltas, an event ID made in sequence is written only when asked for, the
//! reader hands a read's events over in one batch and the memory store writes at once (no task,
//! no boxed future) — plus a fraction per read or batch: the read buffer, the live batch sent
//! to subscribers, the store's chunks.
//!
//! Its own test binary, because it installs a counting global allocator. `fake-codex` plays the
//! CLI in its own process, so only the harness's allocations are counted. Needs
//! `cargo build -p agent-testkit --bins`.

use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{Harness, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_codex::{CodexOptions, CodexProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::alloc::{Counting, per_streamed_delta};
use agent_testkit::fake_cli::{FakeCli, FakeCliEnv, FakeScript};

/// Allocations per streamed delta, line to subscriber.
const BUDGET: f64 = 4.0;
/// Deltas in the measured turn, and how many of them warm the path up before counting starts.
const DELTAS: u64 = 20_000;
const WARM_UP: u64 = 2_000;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_delta_costs_at_most_the_budgeted_allocations() {
    // 40-character deltas, as in the reference stream.
    let deltas = (0..DELTAS).map(|i| format!("{i:08} the quick brown fox jumps ov"));
    let script = FakeScript::new().handshake().turn_start().deltas(deltas).complete();
    let env = FakeCliEnv::new(FakeCli::Codex, &script).unwrap_or_else(|e| panic!("{e}"));
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(Arc::new(LocalExec::new()) as Arc<dyn Exec>)
        .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
        .build()
        .expect("harness");
    let options = env.session_options().provider_option(CodexOptions::new().binary(env.program()));
    let per_delta = per_streamed_delta(&harness, "codex", options, DELTAS, WARM_UP).await;
    println!("{per_delta:.2} allocations per streamed delta");
    assert!(per_delta <= BUDGET, "{per_delta:.2} allocations per streamed delta; the budget is {BUDGET}");
}
