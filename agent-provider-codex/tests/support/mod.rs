//! What several codex test binaries share.

use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{Harness, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_codex::CodexProvider;
use agent_testkit::recording::RecordingExec;

/// A store-less harness with the codex provider, spawning real processes through a recording
/// `LocalExec`.
pub(crate) fn recording_harness() -> (Harness, Arc<RecordingExec>) {
    let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let harness = Harness::builder()
        .provider(CodexProvider::new())
        .exec(Arc::clone(&exec) as Arc<dyn Exec>)
        .store(StoreChoice::Disabled)
        .build()
        .expect("harness");
    (harness, exec)
}
