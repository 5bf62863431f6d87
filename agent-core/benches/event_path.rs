//! The event path: provider frame → sequenced → memory store → one subscriber.
//!
//! Each measured iteration pushes a burst of `message_delta` frames through a session's sink and
//! stops the clock when the subscriber has received the last one, on a single-threaded Tokio
//! runtime (one core). A fresh session per iteration keeps the memory store from growing across
//! samples.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::testing::{ScriptedControl, ScriptedProvider};
use agent_core::{EventKind, Harness, Replay, SessionOptions, StoreChoice, TurnOptions};
use agent_store_memory::MemoryStore;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const BURST: u64 = 20_000;

async fn burst(harness: &Harness, control: &ScriptedControl) -> Duration {
    let options = SessionOptions::new(std::env::temp_dir()).event_buffer_size(4096);
    let session = harness.start_session("bench", options).await.expect("session");
    let remote = control.session(&session.id).await;
    let mut admitted = harness.subscribe(&session, Replay::Latest).await.expect("subscribe");
    let turn = harness.start_turn(&session, "bench", TurnOptions::new()).await.expect("turn");
    while admitted.next().await.expect("turn_started").expect("no lag").type_name() != "turn_started" {}
    drop(admitted);
    let mut events = harness.subscribe(&turn, Replay::Latest).await.expect("subscribe");

    let start = Instant::now();
    let sink = remote.sink().clone();
    let turn_id = turn.id.clone();
    let producer = tokio::spawn(async move {
        for _ in 0..BURST {
            let kind = EventKind::MessageDelta { item_id: None, text: "token ".into() };
            sink.emit(Some(&turn_id), kind, None).await.expect("sink open");
        }
    });
    let mut received = 0;
    while received < BURST {
        events.next().await.expect("event").expect("the subscriber keeps up");
        received += 1;
    }
    let elapsed = start.elapsed();
    producer.await.expect("producer");

    remote.complete(&turn.id, "done").await;
    harness.await_turn(&turn, None).await.expect("completed");
    harness.stop_session(&session, false).await.expect("stop");
    harness.purge_session(&session).await.expect("purge");
    elapsed
}

fn event_path(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (provider, control) = ScriptedProvider::new("bench");
    let harness = Harness::builder()
        .provider(provider)
        .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
        .build()
        .expect("harness");
    let mut group = c.benchmark_group("event_path");
    group.throughput(Throughput::Elements(BURST));
    group.sample_size(20);
    group.bench_function("frame_to_memory_store_to_subscriber", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += burst(&harness, &control).await;
                }
                total
            })
        })
    });
    group.finish();
}

criterion_group!(benches, event_path);
criterion_main!(benches);
