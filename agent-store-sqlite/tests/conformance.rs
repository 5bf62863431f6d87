//! The store conformance suite against the SQLite store, on a fresh file and after reopening it.

mod common;

use std::sync::Arc;

use agent_store_sqlite::SqliteStore;
use agent_testkit::conformance::store as suite;
use common::TempDir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_passes_the_store_conformance_suite() {
    let dir = TempDir::new("conformance");
    let store = SqliteStore::open(dir.path().join("store.db")).expect("open");
    suite::run_all(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_passes_the_suite_again_on_a_reopened_file() {
    let dir = TempDir::new("conformance-reopen");
    let path = dir.path().join("store.db");
    suite::run_all(Arc::new(SqliteStore::open(&path).expect("first open"))).await;
    suite::run_all(Arc::new(SqliteStore::open(&path).expect("second open"))).await;
}
