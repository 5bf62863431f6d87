//! The auth guard under `AuthMode::Subscription`, through the public `Harness` with real
//! processes: each way around it that was found is refused before anything is spawned, and the
//! refusal names the variable, key or file and setting — never a value.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_core::exec::Exec;
use agent_core::{Error, Harness, SessionOptions};
use agent_exec::LocalExec;
use agent_provider_codex::CodexOptions;
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;

const SECRET: &str = "sk-sekrit-planted-4242";

struct Guarded {
    dir: ProgramDir,
    exec: Arc<RecordingExec>,
    harness: Harness,
}

impl Guarded {
    fn new(label: &str) -> Guarded {
        let (harness, exec) = support::recording_harness();
        Guarded { dir: ProgramDir::new(label), exec, harness }
    }

    /// A `CODEX_HOME` of this test's own holding `files`.
    fn codex_home(&self, files: &[(&str, &str)]) -> PathBuf {
        let home = self.dir.dir("codex-home");
        for (name, text) in files {
            std::fs::write(home.join(name), text).unwrap();
        }
        home
    }

    /// Subscription options (the default) with a hermetic `CODEX_HOME`.
    fn options(&self, home: &Path) -> SessionOptions {
        SessionOptions::new(self.dir.path())
            .env("CODEX_HOME", home.to_string_lossy())
            .provider_option(CodexOptions::new().binary("/nonexistent/codex"))
    }

    /// Starts a session that the guard must refuse; returns the refusal, checked to name each of
    /// `names`, to point at the opt-in, to hold no secret, and to have spawned nothing.
    async fn refused(&self, options: SessionOptions, names: &[&str]) -> String {
        let reason = match self.harness.start_session("codex", options).await {
            Err(Error::AuthGuard { reason }) => reason,
            other => panic!("expected the auth guard to refuse, got {other:?}"),
        };
        for name in names {
            assert!(reason.contains(name), "the refusal names {name}: {reason}");
        }
        assert!(reason.contains("AuthMode::Inherit"), "{reason}");
        assert!(!reason.contains("sekrit"), "{reason}");
        assert!(self.exec.commands().is_empty(), "nothing was spawned");
        reason
    }
}

#[tokio::test]
async fn whitespace_and_case_variants_of_refused_keys_and_names_are_refused() {
    let g = Guarded::new("auth-variants");
    let home = g.codex_home(&[]);
    for key in ["\tmodel_provider", "\tmodel_providers.x.base_url", "\"model_providers\".x.base_url", "Profile"] {
        let options = g
            .options(&home)
            .provider_option(CodexOptions::new().binary("/nonexistent/codex").config(key, format!("\"{SECRET}\"")));
        g.refused(options, &[&key.escape_debug().to_string()]).await;
    }
    for name in [" OPENAI_API_KEY", "openai_api_key", "AZURE_OPENAI_API_KEY\t", "Anthropic_Base_Url"] {
        g.refused(g.options(&home).env(name, SECRET), &[name.trim()]).await;
    }
}

#[tokio::test]
async fn a_codex_home_whose_config_selects_another_provider_is_refused() {
    let g = Guarded::new("auth-config");
    let config = "model_provider = \"mock\"\n[model_providers.mock]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let home = g.codex_home(&[("config.toml", config)]);
    let config_path = home.join("config.toml").display().to_string();
    g.refused(g.options(&home), &[&config_path, "model_provider"]).await;

    let profile = "profile = \"work\"\n[profiles.work]\nopenai_base_url = \"http://127.0.0.1:9\"\n";
    std::fs::write(home.join("config.toml"), profile).unwrap();
    g.refused(g.options(&home), &[&config_path, "profiles.work.openai_base_url"]).await;

    // A project's own `.codex/config.toml` is a layer codex loads too.
    std::fs::write(home.join("config.toml"), "model = \"gpt-5\"\n").unwrap();
    let project = g.dir.dir("project");
    std::fs::create_dir_all(project.join(".codex")).unwrap();
    std::fs::write(project.join(".codex/config.toml"), "chatgpt_base_url = \"http://127.0.0.1:9\"\n").unwrap();
    let in_project = g.options(&home).cwd(&project);
    g.refused(in_project, &[".codex/config.toml", "chatgpt_base_url"]).await;
}

#[tokio::test]
async fn a_codex_home_holding_an_api_key_login_is_refused() {
    let g = Guarded::new("auth-login");
    let login = format!(r#"{{"OPENAI_API_KEY": "{SECRET}", "tokens": null}}"#);
    let home = g.codex_home(&[("auth.json", &login)]);
    let auth_path = home.join("auth.json").display().to_string();
    g.refused(g.options(&home), &[&auth_path, "OPENAI_API_KEY"]).await;
    std::fs::write(home.join("auth.json"), r#"{"auth_mode": "apikey"}"#).unwrap();
    g.refused(g.options(&home), &[&auth_path, "auth_mode"]).await;
}

#[tokio::test]
async fn an_exec_that_is_not_local_is_refused_under_subscription() {
    #[derive(Debug)]
    struct Remote(LocalExec);
    #[async_trait::async_trait]
    impl Exec for Remote {
        async fn spawn(
            &self,
            command: agent_core::exec::Command,
        ) -> Result<agent_core::exec::Child, agent_core::exec::ExecError> {
            self.0.spawn(command).await
        }
    }
    let g = Guarded::new("auth-remote");
    let home = g.codex_home(&[]);
    let remote: Arc<dyn Exec> = Arc::new(Remote(LocalExec::new()));
    let options = g.options(&home).exec(remote);
    let reason = match g.harness.start_session("codex", options).await {
        Err(Error::AuthGuard { reason }) => reason,
        other => panic!("expected the auth guard to refuse, got {other:?}"),
    };
    assert!(reason.contains("not local") && reason.contains("AuthMode::Inherit"), "{reason}");
}

#[tokio::test]
async fn a_clean_codex_home_passes_the_guard() {
    let g = Guarded::new("auth-clean");
    let home = g.codex_home(&[
        ("config.toml", "model = \"gpt-5\"\nmodel_provider = \"openai\"\n[model_providers.mock]\nname = \"unused\"\n"),
        ("auth.json", r#"{"OPENAI_API_KEY": null, "tokens": {"id_token": "x"}}"#),
    ]);
    // The guard lets it through; the (missing) binary is what fails.
    match g.harness.start_session("codex", g.options(&home)).await {
        Err(Error::ProviderUnavailable { reason, .. }) => assert!(reason.contains("/nonexistent/codex"), "{reason}"),
        other => panic!("expected the missing binary to be reported, got {other:?}"),
    }
}
