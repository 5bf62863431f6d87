//! The allocation budget of the Claude event path: a streamed `stream_event` text delta from
//! claude's stdout to a subscriber costs at most `DELTA_BUDGET` (4) heap allocations, all threads
//! counted, with the memory store.
//!
//! Where they go (about 1.2 per delta): the event's `Arc` — the line is kept as the event's raw
//! JSON and the delta's text as slices of the read they came in, the API message ID is shared
//! by the message's deltas, an event ID made in sequence is written only when asked for, the
//! reader hands a read's events over in one batch and the memory store writes at once — plus a
//! fraction per read or batch.
//!
//! Its own test binary, because it installs a counting global allocator. `fake-claude` plays
//! the CLI in its own process, so only the harness's allocations are counted. Needs
//! `cargo build -p agent-testkit --bins`.

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_claude::{ClaudeOptions, ClaudeProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::alloc::{Counting, assert_delta_budget};
use agent_testkit::fake_cli::FakeCli;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_delta_costs_at_most_the_budgeted_allocations() {
    let (provider, exec, store) =
        (Arc::new(ClaudeProvider::new()), Arc::new(LocalExec::new()), Arc::new(MemoryStore::new()));
    assert_delta_budget(provider, exec, store, FakeCli::Claude, |env, options| {
        options.provider_option(ClaudeOptions::new().binary(env.program()))
    })
    .await;
}
