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

/// A child whose reply was on the way when its caller stopped waiting is killed at once, not
/// after the spawns queued ahead of its reaping: meanwhile it could start what leaves its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_nobody_took_is_killed_before_the_spawns_queued_behind_it() {
    let exec = LocalExec::new();
    let dir = ProgramDir::new("unclaimed-spawn");
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let (pid, unclaimed) = loop {
        let pid_file = dir.path().join("pid");
        let _ = std::fs::remove_file(&pid_file);
        let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
        let mut spawn = Box::pin(exec.spawn(Command::new("sh").arg("-c").arg(script)));
        if let std::task::Poll::Ready(started) = spawn.as_mut().poll(&mut cx) {
            started.expect("spawns").handle.kill().expect("kill");
            continue;
        }
        let mut waited = Duration::ZERO;
        while !pid_file.exists() || std::fs::read_to_string(&pid_file).unwrap_or_default().trim().is_empty() {
            assert!(waited < Duration::from_secs(10), "the child never ran");
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().expect("a pid");
        break (pid, spawn);
    };
    // Spawns queued on the spawner thread ahead of anything the drop below asks of it.
    let mut queued: Vec<_> = (0..200).map(|_| Box::pin(exec.spawn(Command::new("true")))).collect();
    // One this thread was descheduled after asking for may have started by its first poll:
    // done, it must not be polled again.
    let mut started = Vec::new();
    queued.retain_mut(|spawn| match spawn.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(child) => {
            started.push(child.expect("spawns"));
            false
        }
        std::task::Poll::Pending => true,
    });
    drop(unclaimed);
    let killed = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    };
    let mut waited = Duration::ZERO;
    while !killed(pid) {
        assert!(waited < Duration::from_secs(10), "child {pid} outlived its dropped spawn");
        std::thread::sleep(Duration::from_millis(1));
        waited += Duration::from_millis(1);
    }
    let last = queued.last_mut().expect("the last of 200 spawns was still queued when the child was dropped");
    assert!(last.as_mut().poll(&mut cx).is_pending(), "child {pid} was killed only after the queue ahead ran");
    for spawn in queued {
        started.push(spawn.await.expect("spawns"));
    }
    for child in started {
        child.handle.wait().await.expect("`true` exits");
    }
    let mut waited = Duration::ZERO;
    while exists(pid) {
        assert!(waited < Duration::from_secs(10), "child {pid} was never reaped");
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
}
