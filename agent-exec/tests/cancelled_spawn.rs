//! A spawn whose caller stops waiting leaves nothing behind, also when the child had started
//! and its reply was on the way. In its own binary, so no other test's children are around.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use agent_testkit::programs::ProgramDir;

/// Whether `pid` is still a process of this host (running, or a zombie nobody reaped).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_started_for_a_caller_that_stopped_waiting_is_killed_and_reaped() {
    let exec = LocalExec::new();
    let dir = ProgramDir::new("cancelled-spawn");
    let (mut round, mut tries) = (0, 0);
    while round < 5 {
        tries += 1;
        assert!(tries < 50, "the spawner thread answered the first poll {tries} times");
        let pid_file = dir.path().join(format!("pid-{tries}"));
        let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
        let mut spawn = Box::pin(exec.spawn(Command::new("sh").arg("-c").arg(script)));
        // One poll queues the spawn; the caller then looks away until the child runs.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(started) = spawn.as_mut().poll(&mut cx) {
            // The child was there before the poll ended: not the case under test.
            started.expect("spawns").handle.kill().expect("kill");
            continue;
        }
        round += 1;
        let mut waited = Duration::ZERO;
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
                break pid;
            }
            assert!(waited < Duration::from_secs(10), "round {round}: the child never ran");
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        };
        drop(spawn);
        let mut waited = Duration::ZERO;
        while exists(pid) {
            assert!(waited < Duration::from_secs(10), "round {round}: child {pid} outlived its cancelled spawn");
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += Duration::from_millis(10);
        }
    }
}
