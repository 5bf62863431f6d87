//! Helpers the process tests share: watching PIDs through `/proc` and pidfds.
// Each test file uses a subset of these helpers.
#![allow(dead_code)]

use std::time::Duration;

use agent_core::exec::ChildOutput;
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags};
use tokio::io::AsyncReadExt;
use tokio::io::unix::AsyncFd;

/// How long a killed process may take to disappear.
pub(crate) const GONE_WITHIN: Duration = Duration::from_secs(1);

/// Whether `pid` is a running (not zombie) process, per `/proc/<pid>/stat`.
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rfind(')').and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// Waits until `pid` has exited (zombie or gone), using a pidfd so no polling is needed.
/// Panics if it is still running after `within`, and re-checks the verdict through `/proc`.
pub(crate) async fn assert_gone_within(pid: u32, within: Duration) {
    assert!(gone_within(pid, within).await, "process {pid} still runs after {within:?}");
}

/// Whether `pid` has exited (zombie or gone) within `within`, waiting on a pidfd; the verdict is
/// re-checked through `/proc`.
pub(crate) async fn gone_within(pid: u32, within: Duration) -> bool {
    let raw = Pid::from_raw(pid as i32).expect("a PID is not 0");
    match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => {
            // SAFETY: `fd` is a valid pidfd owned by the AsyncFd until it is dropped.
            let fd =
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.expect("register pidfd");
            if tokio::time::timeout(within, fd.readable()).await.is_err() {
                return false;
            }
        }
        Err(error) => assert_eq!(error, Errno::SRCH, "pidfd_open({pid})"),
    }
    !alive(pid)
}

/// Reads one line of a child's output, byte by byte so nothing after it is consumed.
pub(crate) async fn read_line(output: &mut ChildOutput) -> String {
    let mut line = Vec::new();
    loop {
        match output.read_u8().await.expect("read a line") {
            b'\n' => return String::from_utf8(line).expect("utf-8 line"),
            byte => line.push(byte),
        }
    }
}

/// Parses whitespace-separated PIDs.
pub(crate) fn pids(line: &str) -> Vec<u32> {
    line.split_whitespace().map(|pid| pid.parse().unwrap_or_else(|_| panic!("not a pid: {line:?}"))).collect()
}

/// Zombie children of this process.
pub(crate) fn zombie_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(end) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str()) {
            zombies.push(pid);
        }
    }
    zombies
}

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}
