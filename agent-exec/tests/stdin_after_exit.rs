//! A write to a child's stdin that waits for room in the pipe fails once the child is reaped,
//! even while a process it left behind holds the pipe's read end and never reads. In its own
//! binary, so no other test's children are around.

use std::time::Duration;

use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_pending_when_the_child_is_reaped_fails() {
    // The child leaves a process of its own session holding stdin (it ends by itself), then
    // exits without reading.
    let script = "exec 3<&0; setsid sleep 20 <&3 3<&- & sleep 1; exit 0";
    let mut child = LocalExec::new().spawn(Command::new("sh").arg("-c").arg(script)).await.expect("spawns");
    let mut stdin = child.stdin.take().expect("stdin");
    let write = tokio::spawn(async move { stdin.write_all(&vec![b'x'; 1 << 20]).await });
    child.handle.wait().await.expect("exits");
    let written = tokio::time::timeout(Duration::from_secs(5), write).await.expect("the write ended").expect("task");
    let error = written.expect_err("no process read the megabyte");
    assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
}
