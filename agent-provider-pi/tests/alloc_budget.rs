//! The allocation budget of the Pi event path: a streamed `message_update` text delta from pi's
//! stdout to a subscriber costs at most `DELTA_BUDGET` (4) heap allocations, all threads counted, with
//! the memory store.
//!
//! Where they go (about 2.1 per delta): its raw JSON (the delta alone, written directly) and
//! the event's `Arc` — the delta's text is copied (pi's delta lines carry the reply so far, so a
//! slice would keep their reads alive), but into the normalizer's `TextArena`, not a buffer of
//! its own; the line is read by the kit's scanner without building anything, an event ID
//! made in sequence is written only when asked for, the reader hands a read's events over in
//! one batch and the memory store writes at once — plus a fraction per read or batch.
//!
//! Its own test binary, because it installs a counting global allocator. `fake-pi` plays the
//! CLI in its own process, so only the harness's allocations are counted. Needs
//! `cargo build -p agent-testkit --bins`.

use std::sync::Arc;

use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::alloc::{Counting, assert_delta_budget};
use agent_testkit::fake_cli::FakeCli;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_delta_costs_at_most_the_budgeted_allocations() {
    let (provider, exec, store) =
        (Arc::new(PiProvider::new()), Arc::new(LocalExec::new()), Arc::new(MemoryStore::new()));
    assert_delta_budget(provider, exec, store, FakeCli::Pi, |env, options| {
        options.provider_option(PiOptions::new().binary(env.program()))
    })
    .await;
}
