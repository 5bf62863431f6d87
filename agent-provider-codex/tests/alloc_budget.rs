//! The allocation budget of the event path: a streamed `item/agentMessage/delta` line from
//! codex's stdout to a subscriber costs at most `DELTA_BUDGET` (4) heap allocations, all threads
//! counted, with the memory store.
//!
//! Where they go (about 1.2 per delta, down from 14): the event's `Arc` — the line is kept as
//! the event's raw JSON and the delta's text as slices of the read they came in, the item's ID is
//! shared by its deltas, an event ID made in sequence is written only when asked for, the
//! reader hands a read's events over in one batch and the memory store writes at once (no task,
//! no boxed future) — plus a fraction per read or batch: the read buffer, the live batch sent
//! to subscribers, the store's chunks.
//!
//! Its own test binary, because it installs a counting global allocator. `fake-codex` plays the
//! CLI in its own process, so only the harness's allocations are counted. Needs
//! `cargo build -p agent-testkit --bins`.

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_codex::{CodexOptions, CodexProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::alloc::{Counting, assert_delta_budget};
use agent_testkit::fake_cli::FakeCli;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_delta_costs_at_most_the_budgeted_allocations() {
    let (provider, exec, store) =
        (Arc::new(CodexProvider::new()), Arc::new(LocalExec::new()), Arc::new(MemoryStore::new()));
    assert_delta_budget(provider, exec, store, FakeCli::Codex, |env, options| {
        options.provider_option(CodexOptions::new().binary(env.program()))
    })
    .await;
}
