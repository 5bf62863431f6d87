//! The `codex --version` probe and the CLI path checks, with real processes (`LocalExec`) and
//! shell scripts standing in for `codex`: what a failing probe reports, that a probe never ends
//! up killed by its own closed pipes, that nothing it started is left running, and that a CLI
//! path that cannot run is named with what is wrong with it before anything is spawned.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::ChildHandle;
use agent_core::{AuthMode, Error, Harness, SessionOptions};
use agent_provider_codex::CodexOptions;
use agent_testkit::fake_cli::{FakeCli, FakeCliEnv, FakeScript};
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;

/// A shell loop writing about 140 KiB to stderr: more than a pipe buffer holds.
const STDERR_FLOOD: &str = r#"i=0
while [ $i -lt 2000 ]; do
  echo "WARNING: proceeding, even though we could not create PATH aliases ($i)" >&2
  i=$((i + 1))
done"#;

/// Test programs, and a harness spawning through a recording `LocalExec`.
struct Probe {
    programs: ProgramDir,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Probe {
    fn new(label: &str) -> Probe {
        let (harness, exec) = support::recording_harness();
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

    /// The handles of every process started, each checked to have exited and been reaped.
    fn assert_all_reaped(&self) -> Vec<Arc<dyn ChildHandle>> {
        let children = self.exec.children();
        for child in &children {
            assert!(child.try_status().is_some(), "process {:?} was left running or unreaped", child.id());
        }
        children
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_probe_that_floods_stderr_still_reports_its_version() {
    let probe = Probe::new("flood");
    let env = FakeCliEnv::new(FakeCli::Codex, &FakeScript::new().handshake()).unwrap_or_else(|e| panic!("{e}"));
    // `--version` warns at length on stderr, like codex with CODEX_HOME under the temp dir;
    // everything else is the fake app-server.
    let body = format!(
        "if [ \"$1\" = --version ]; then\n{STDERR_FLOOD}\n  echo 'codex-cli 0.171.0'\n  exit 0\nfi\nexec '{}' \"$@\"",
        env.program().display()
    );
    let codex = probe.programs.script("codex", &body);
    let options = env.session_options().auth(AuthMode::Inherit).provider_option(CodexOptions::new().binary(&codex));
    let session = probe.harness.start_session("codex", options).await.expect("the session starts");
    probe.harness.stop_session(&session, false).await.expect("stop");
    let version = &probe.exec.children()[0];
    assert_eq!(version.try_status().and_then(|s| s.code), Some(0), "the probe ran to its end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_version_probe_reports_its_exit_status_and_stderr() {
    let probe = Probe::new("exit1");
    let codex = probe.programs.script("codex", "echo 'error: unexpected argument --version' >&2\nexit 1");
    let reason = probe.unavailable(probe.options(&codex)).await;
    assert!(reason.contains("exit code 1"), "{reason}");
    assert!(reason.contains("error: unexpected argument --version"), "the stderr tail is reported: {reason}");
    let [child] = probe.assert_all_reaped().try_into().expect("only the probe ran");
    assert_eq!(child.try_status().and_then(|s| s.code), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_binary_report_carries_its_stderr() {
    let probe = Probe::new("foreign");
    let codex = probe.programs.script("codex", "echo 'usage: codex-lookalike' >&2\necho hello");
    let reason = probe.unavailable(probe.options(&codex)).await;
    assert!(reason.contains("did not print a codex version"), "{reason}");
    assert!(reason.contains("usage: codex-lookalike"), "the stderr tail is reported: {reason}");
    assert_eq!(probe.assert_all_reaped().len(), 1, "only the probe ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_version_probe_times_out_and_is_killed_and_reaped() {
    let probe = Probe::new("hang");
    let codex = probe.programs.script("codex", "echo 'waiting for the keyring' >&2\nexec sleep 60");
    let options = probe.options(&codex).startup_timeout(Duration::from_secs(1));
    let reason = probe.unavailable(options).await;
    assert!(reason.contains("did not answer"), "{reason}");
    assert!(reason.contains("waiting for the keyring"), "the stderr tail is reported: {reason}");
    let [child] = probe.assert_all_reaped().try_into().expect("only the probe ran");
    assert_eq!(child.try_status().and_then(|s| s.signal), Some(9), "the probe was killed");
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
