//! The CLI path checks, with real processes (`LocalExec`): a CLI path that cannot run is named
//! with what is wrong with it before anything is spawned.

use std::path::Path;
use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{AuthMode, Error, Harness, SessionOptions, StoreChoice};
use agent_exec::LocalExec;
use agent_provider_codex::{CodexOptions, CodexProvider};
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;

/// Test programs, and a harness spawning through a recording `LocalExec`.
struct Probe {
    programs: ProgramDir,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Probe {
    fn new(label: &str) -> Probe {
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(CodexProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Disabled)
            .build()
            .expect("harness");
        Probe { programs: ProgramDir::new(label), exec, harness }
    }

    fn options(&self, binary: impl AsRef<Path>) -> SessionOptions {
        SessionOptions::new(self.programs.path())
            .auth(AuthMode::Inherit)
            .provider_option(CodexOptions::new().binary(binary.as_ref()))
    }

    /// Starts a session that must fail with `ProviderUnavailable`; returns its reason.
    async fn unavailable(&self, options: SessionOptions) -> String {
        match self.harness.start_session("codex", options).await {
            Err(Error::ProviderUnavailable { reason, .. }) => reason,
            other => panic!("expected ProviderUnavailable, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_path_that_cannot_run_says_why_and_nothing_is_spawned() {
    let probe = Probe::new("paths");
    let directory = probe.programs.dir("codex-dir");
    let plain = probe.programs.file("codex-plain", 0o644);
    let dangling = probe.programs.symlink("codex-link", probe.programs.path().join("missing-codex"));
    let on_path = probe.programs.dir("bin");
    std::fs::write(on_path.join("codex"), "").expect("write");
    let search = on_path.to_str().expect("a UTF-8 temp dir");
    let cases: [(SessionOptions, &Path, &[&str]); 4] = [
        (probe.options(&directory), &directory, &["is a directory"]),
        (probe.options(&plain), &plain, &["is not executable (mode 0644)"]),
        (probe.options(&dangling), &dangling, &["is a symbolic link to", "missing-codex", "which does not exist"]),
        (probe.options("codex").env("PATH", search), &on_path.join("codex"), &["is not executable (mode 0644)"]),
    ];
    for (options, path, problems) in cases {
        let reason = probe.unavailable(options).await;
        assert!(reason.contains(&*path.to_string_lossy()), "the reason names {}: {reason}", path.display());
        for problem in problems {
            assert!(reason.contains(problem), "the reason says `{problem}`: {reason}");
        }
        assert!(!reason.contains("not found"), "the path exists: {reason}");
    }
    assert!(probe.exec.children().is_empty(), "nothing was spawned");
}
