//! A host running under Valgrind still starts children: Valgrind runs a clone only as a thread
//! or as a fork, and stops the whole program at the clone that shares the descriptor table
//! (how LocalExec starts children elsewhere), so under it LocalExec copies the table instead.
//! Valgrind is how the project counts instructions (`valgrind --tool=callgrind`).

#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{alive, pids};

#[test]
fn a_host_under_valgrind_starts_its_child() {
    let mut host = match std::process::Command::new("valgrind")
        // No gdbserver: its FIFOs in /tmp would outlive the SIGKILLed host.
        .args(["--tool=none", "--quiet", "--vgdb=no", env!("CARGO_BIN_EXE_exec-host-helper"), "child"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(host) => host,
        Err(error) => panic!("cannot run valgrind ({error}); install it with `apt-get install valgrind`"),
    };
    let mut line = String::new();
    BufReader::new(host.stdout.take().expect("stdout")).read_line(&mut line).expect("read the child's pid");
    let stderr = host.stderr.take().expect("stderr");
    let child = pids(&line);
    let started = child.len() == 1 && alive(child[0]);
    host.kill().expect("SIGKILL the host");
    host.wait().expect("reap the host");
    // It dies with the host (its parent-death signal); ended here too in case it did not.
    for pid in child {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status();
    }
    let mut said = String::new();
    std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut said).expect("stderr");
    assert!(started, "the host under valgrind started no child: stdout {line:?}, stderr {said}");
}
