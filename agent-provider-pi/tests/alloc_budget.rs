//! The allocation budget of the Pi event path: a streamed `message_update` text delta from pi's
//! stdout to a subscriber costs at most [`BUDGET`] heap allocations, all threads counted, with
//! the memory store.
//!
//! Where they go: the delta's text (copied: pi's delta lines carry the reply so far, so a slice
//! would keep their reads alive), its raw JSON (the delta alone, written directly) and the
//! event's `Arc` — the line is read by the kit's scanner without building anything, an event ID
//! made in sequence is written only when asked for, the reader hands a read's events over in
//! one batch and the memory store writes at once — plus a fraction per read or batch.
//!
//! Its own test binary, because it installs a counting global allocator. `fake-pi` plays the
//! CLI in its own process, so only the harness's allocations are counted. Needs
//! `cargo build -p agent-testkit --bins`.

use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{Harness, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
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
    let env = FakeCliEnv::new(FakeCli::Pi, &script).unwrap_or_else(|e| panic!("{e}"));
    let harness = Harness::builder()
        .provider(PiProvider::new())
        .exec(Arc::new(LocalExec::new()) as Arc<dyn Exec>)
        .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
        .build()
        .expect("harness");
    let options = env.session_options().provider_option(PiOptions::new().binary(env.program()));
    let per_delta = per_streamed_delta(&harness, "pi", options, DELTAS, WARM_UP).await;
    println!("{per_delta:.2} allocations per streamed delta");
    assert!(per_delta <= BUDGET, "{per_delta:.2} allocations per streamed delta; the budget is {BUDGET}");
}
