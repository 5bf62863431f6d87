//! `cargo xtask demo` in CI: the demo's sessions (`agent_testkit::demo`) run through this
//! package's `agent-harness` binary against the real pinned codex, claude and pi, offline, so
//! the README's first command cannot rot. The xtask adds only the install and the build.

use agent_testkit::demo::{self, AFTER_TOOL, PROVIDERS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_a_text_turn_and_an_approved_command_with_each_provider() {
    let dir = std::env::temp_dir().join(format!("agent-harness-demo-test-{}", std::process::id()));
    let mut shown = Vec::new();
    let report = demo::run(env!("CARGO_BIN_EXE_agent-harness").as_ref(), &dir, &mut shown)
        .await
        .unwrap_or_else(|e| panic!("the demo did not run: {e}"));
    let shown = String::from_utf8(shown).expect("utf-8");
    assert_eq!(report.runs.len(), PROVIDERS.len(), "{shown}");
    for run in &report.runs {
        let provider = run.provider;
        assert_eq!(run.code, Some(0), "{provider}:\n{}", run.output);
        assert!(run.command_ran, "{provider}: the approved command did not run:\n{}", run.output);
        let expected = [demo::greeting(provider), "↳ approved".into(), AFTER_TOOL.to_owned()];
        for text in expected.iter().map(String::as_str).chain(["hello-from-the-demo", "── turn completed"]) {
            assert!(run.output.contains(text), "{provider}: {text:?} not shown:\n{}", run.output);
        }
        assert_eq!(run.output.matches("── turn completed").count(), 2, "{provider}:\n{}", run.output);
        assert!(shown.contains(&run.output), "{provider}: the run was not streamed to the output");
    }
    let (code, sessions) = &report.sessions;
    assert_eq!(*code, Some(0), "{sessions}");
    assert_eq!(sessions.lines().count(), PROVIDERS.len(), "{sessions}");
    for provider in PROVIDERS {
        assert!(sessions.contains(&demo::session_id(provider)), "{sessions}");
    }
    for ((id, code, events), run) in report.events.iter().zip(&report.runs) {
        assert_eq!(*code, Some(0), "{id}: {events}");
        assert!(events.contains(&demo::greeting(run.provider)) && events.contains("↳ approved"), "{id}: {events}");
        assert!(shown.contains(events.as_str()), "{id}: events were not shown");
    }
    assert!(report.db.is_file());
    std::fs::remove_dir_all(&dir).expect("the demo's directory is removed");
}
