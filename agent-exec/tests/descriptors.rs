//! What a child of LocalExec holds of the host's descriptor table: its three stdio descriptors
//! and nothing else, whether the host's other descriptors are close-on-exec or not, opened
//! before the first spawn or after it. In its own binary, so no other test opens descriptors
//! meanwhile.

#![cfg(target_os = "linux")]

use std::fs::File;
use std::os::fd::OwnedFd;

use agent_core::exec::{Child, Command, Exec};
use agent_exec::LocalExec;
use rustix::io::FdFlags;
use rustix::pipe::PipeFlags;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A pipe whose ends a child would inherit under `fork` + `exec`: not close-on-exec.
fn inheritable_pipe() -> (OwnedFd, OwnedFd) {
    let (read, write) = rustix::pipe::pipe_with(PipeFlags::empty()).expect("pipe");
    assert!(!rustix::io::fcntl_getfd(&read).expect("getfd").contains(FdFlags::CLOEXEC), "control: inheritable");
    (read, write)
}

/// The descriptor numbers `/proc/<pid>/fd` lists for a running `cat` child, once it has echoed
/// a line (so it is past its startup and waiting on stdin).
async fn descriptors_of(child: &mut Child) -> Vec<u32> {
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(b"ready\n").await.expect("write");
    stdin.flush().await.expect("flush");
    let mut echoed = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut echoed).await.expect("read");
    assert_eq!(echoed, "ready\n");
    let pid = child.handle.id().expect("pid");
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the child's descriptors")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().parse().expect("a number"))
        .collect();
    fds.sort_unstable();
    fds
}

#[tokio::test]
async fn a_child_holds_its_stdio_and_none_of_the_hosts_descriptors() {
    let exec = LocalExec::new();
    let _before = inheritable_pipe();
    let mut first = exec.spawn(Command::new("cat")).await.expect("spawn cat");
    // After the first spawn (which started the spawner thread): inheritable pipes, and a few
    // hundred close-on-exec descriptors like a host with many sessions holds.
    let _after: Vec<_> = (0..50).map(|_| inheritable_pipe()).collect();
    let _files: Vec<File> = (0..300).map(|_| File::open("/dev/null").expect("open")).collect();
    let mut second = exec.spawn(Command::new("cat")).await.expect("spawn cat");

    assert_eq!(descriptors_of(&mut first).await, [0, 1, 2], "the child spawned first");
    assert_eq!(descriptors_of(&mut second).await, [0, 1, 2], "the child spawned among 400 more");

    // Control: the host does hold all of them.
    let host = std::fs::read_dir("/proc/self/fd").expect("own descriptors").count();
    assert!(host > 400, "the host holds {host} descriptors");
    for child in [first, second] {
        child.handle.kill().expect("kill");
        child.handle.wait().await.expect("wait");
    }
}
