//! Durable events per second through `SqliteStore`, many sessions writing concurrently: with
//! group commit, and with one transaction (and one `fsync`) per event, in the same run.
//!
//! Every write returns only after its `COMMIT`, so each counted event is durable. Events are
//! built before the clock starts; the clock covers the concurrent writes only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{Store, WriteBatch};
use agent_core::{Event, EventId, SessionId, SessionSnapshot, Timestamp, TurnStatus};
use agent_store_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use agent_testkit::conformance::store::turn;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;

/// Sessions writing concurrently.
const SESSIONS: usize = 64;
/// The text of every `message_delta` (its `raw` carries it again).
const TEXT: &str = "a token or two of streamed assistant text, as a CLI sends it";

fn snapshot(id: &SessionId) -> SessionSnapshot {
    let json = serde_json::json!({
        "id": id, "provider": "bench", "status": "running", "cwd": "/tmp", "config_fingerprint": "f",
        "created_at": Timestamp::now(), "updated_at": Timestamp::now(),
    });
    serde_json::from_value(json).expect("snapshot json")
}

/// A `message_delta` as the runtime records it, with the provider's frame as `raw`.
fn event(session: &SessionId, seq: u64) -> Arc<Event> {
    let json = serde_json::json!({
        "schema_version": 1, "id": EventId::generate(), "seq": seq, "session_id": session, "turn_id": "turn-1",
        "provider": "bench", "at": Timestamp::now(), "type": "message_delta", "data": {"text": TEXT},
        "raw": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT}},
    });
    Arc::new(serde_json::from_value(json).expect("event json"))
}

/// One benchmark's sessions on its own database file.
struct Workload {
    store: Arc<SqliteStore>,
    sessions: Vec<SessionId>,
    next_seq: u64,
    writes_per_session: u64,
    events_per_write: u64,
}

impl Workload {
    fn new(
        runtime: &Runtime,
        name: &str,
        options: SqliteOptions,
        writes_per_session: u64,
        events_per_write: u64,
    ) -> Self {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-store-sqlite-bench");
        std::fs::create_dir_all(&dir).expect("bench dir");
        let path = dir.join(format!("{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let store = Arc::new(SqliteStore::open_with(&path, options).expect("open"));
        let sessions: Vec<SessionId> =
            (0..SESSIONS).map(|n| SessionId::new(format!("bench-{n:03}")).expect("id")).collect();
        runtime.block_on(async {
            for id in &sessions {
                store.save_session(&snapshot(id)).await.expect("snapshot");
                store.save_turn(&turn(id, "turn-1", TurnStatus::Running)).await.expect("turn");
            }
        });
        Workload { store, sessions, next_seq: 1, writes_per_session, events_per_write }
    }

    fn events_per_iteration(&self) -> u64 {
        SESSIONS as u64 * self.writes_per_session * self.events_per_write
    }

    /// The next iteration's writes, per session. Events are made in the order their writes are
    /// committed (write `w` of every session, then write `w + 1`), as the runtime makes an event
    /// — and its ID, which starts with its creation time — when it sequences it; the store's
    /// event-ID index then sees IDs arrive in about that order, as it does under a harness.
    fn batches(&mut self) -> Vec<Vec<WriteBatch>> {
        let first = self.next_seq;
        self.next_seq += self.writes_per_session * self.events_per_write;
        let mut batches: Vec<Vec<WriteBatch>> = self.sessions.iter().map(|_| Vec::new()).collect();
        for w in 0..self.writes_per_session {
            let start = first + w * self.events_per_write;
            for (id, writes) in self.sessions.iter().zip(&mut batches) {
                let mut batch = WriteBatch::new(id.clone());
                batch.events = (start..start + self.events_per_write).map(|seq| event(id, seq)).collect();
                writes.push(batch);
            }
        }
        batches
    }

    /// Time spent committing `iterations` rounds of writes.
    fn run(&mut self, runtime: &Runtime, iterations: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iterations {
            let batches = self.batches();
            let store = Arc::clone(&self.store);
            total += runtime.block_on(async move {
                let started = Instant::now();
                let mut tasks = tokio::task::JoinSet::new();
                for session in batches {
                    let store = Arc::clone(&store);
                    tasks.spawn(async move {
                        for batch in &session {
                            store.write(batch).await.expect("durable write");
                        }
                    });
                }
                while let Some(done) = tasks.join_next().await {
                    done.expect("writer task");
                }
                started.elapsed()
            });
        }
        total
    }
}

fn durable_appends(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let cases = [
        ("group_commit/16_events_per_write", SqliteOptions::new(), 8, 16),
        ("group_commit/1_event_per_write", SqliteOptions::new(), 16, 1),
        (
            "group_commit/16_events_per_write/synchronous_normal",
            SqliteOptions::new().synchronous(Synchronous::Normal),
            8,
            16,
        ),
        ("transaction_per_event", SqliteOptions::new().group_commit(false), 2, 1),
    ];
    let mut group = c.benchmark_group("durable_events_64_sessions");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    for (name, options, writes, events) in cases {
        let mut workload = Workload::new(&runtime, &name.replace('/', "-"), options, writes, events);
        group.throughput(Throughput::Elements(workload.events_per_iteration()));
        group.bench_function(name, |b| b.iter_custom(|iterations| workload.run(&runtime, iterations)));
    }
    group.finish();
}

criterion_group!(benches, durable_appends);
criterion_main!(benches);
