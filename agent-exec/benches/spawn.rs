//! Spawn cost in a host that holds a lot of memory, as a harness with a full memory store does.
//!
//! `LocalExec::spawn` of `/bin/true` (process group, parent-death signal, piped stdio, exit
//! watch) until its exit is observed, next to `std::process::Command` with the same pipes and
//! process group (which glibc runs through `posix_spawn`, without copying the host) as the floor.
//! The host first touches a ballast of `SPAWN_BENCH_BALLAST_MIB` (default 512) MiB.

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_core::exec::{Command, Exec};
use agent_exec::LocalExec;
use criterion::{Criterion, criterion_group, criterion_main};

fn ballast() -> Vec<u8> {
    let mib: usize = std::env::var("SPAWN_BENCH_BALLAST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
    let mut ballast = vec![0u8; mib << 20];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    ballast
}

fn spawn(c: &mut Criterion) {
    let ballast = ballast();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let exec = LocalExec::new();
    let mut group = c.benchmark_group("spawn");
    group.sample_size(30).measurement_time(Duration::from_secs(10));
    group.bench_function("local_exec", |b| {
        b.to_async(&runtime).iter_custom(|iterations| {
            let exec = exec.clone();
            async move {
                let start = Instant::now();
                for _ in 0..iterations {
                    let child = exec.spawn(Command::new("/bin/true")).await.expect("spawn");
                    child.handle.wait().await.expect("exit");
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("std_posix_spawn_floor", |b| {
        b.iter(|| {
            use std::os::unix::process::CommandExt;
            let mut child = std::process::Command::new("/bin/true")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("spawn");
            child.wait().expect("exit")
        })
    });
    group.finish();
    std::hint::black_box(&ballast);
}

criterion_group!(benches, spawn);
criterion_main!(benches);
