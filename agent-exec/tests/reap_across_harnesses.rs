//! A harness's orphan reaper in a process with another harness: in a file of its own, since
//! it ends every stamped process of this test process whose session no harness runs, which
//! other tests' processes would be.

mod common;

use agent_core::SessionId;
use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use common::alive;

/// A harness's reaper spares the processes of a session another harness of this process runs,
/// and ends those of a session no harness runs.
#[tokio::test]
async fn a_harness_reaps_no_process_of_another_harness_live_session() {
    use agent_core::testing::ScriptedProvider;
    use agent_core::{Harness, SessionOptions};
    let build = || {
        let (provider, _control) = ScriptedProvider::new("scripted");
        let builder = Harness::builder().provider(provider).exec(LocalExec::new());
        builder.store(agent_core::StoreChoice::Disabled).build().expect("harness")
    };
    let (reaper, other) = (build(), build());
    let live = SessionId::new(format!("reap-other-live-{}", std::process::id())).expect("id");
    let gone = SessionId::new(format!("reap-other-gone-{}", std::process::id())).expect("id");
    let _session = other.start_session("scripted", SessionOptions::new("/tmp").id(live.as_str())).await.expect("live");
    let exec = LocalExec::new();
    let kept = exec.spawn(Command::new("sleep").arg("30").session(live.clone())).await.expect("spawn");
    let ended = exec.spawn(Command::new("sleep").arg("30").session(gone.clone())).await.expect("spawn");

    reaper.reap_orphans().await.expect("reap");
    assert_eq!(ended.handle.wait().await.expect("wait").signal, Some(9), "no harness runs its session");
    assert!(kept.handle.try_status().is_none(), "the other harness's session keeps its process");
    assert!(alive(kept.handle.id().expect("pid")));
    other.shutdown().await;
}
