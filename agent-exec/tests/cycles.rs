//! 200 spawn/kill cycles leave no zombie and no open file descriptor behind.

mod common;

use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use common::{open_fds, zombie_children};

async fn cycle(exec: &LocalExec) {
    let child = exec.spawn(Command::new("sleep").arg("30")).await.expect("spawn");
    child.handle.kill().expect("kill");
    let status = child.handle.wait().await.expect("wait");
    assert_eq!(status.signal, Some(9), "{status}");
}

#[tokio::test]
async fn spawn_kill_cycles_leak_nothing() {
    let exec = LocalExec::new();
    // The first spawn starts the spawner thread and the runtime's lazily opened resources.
    cycle(&exec).await;
    let fds_before = open_fds();

    for _ in 0..200 {
        cycle(&exec).await;
    }

    assert_eq!(open_fds(), fds_before, "file descriptors leaked");
    assert_eq!(zombie_children(), Vec::<u32>::new(), "zombie children left behind");
}
