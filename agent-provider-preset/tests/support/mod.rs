//! What the preset test binaries share: a world per test with a harness running one preset
//! provider through a recording exec, and the helpers that read a turn.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::Exec;
use agent_core::{
    DynStore, Event, EventKind, Harness, Replay, Request, Response, SessionOptions, SessionRef, StoreChoice, Turn,
    TurnOptions,
};
use agent_exec::LocalExec;
use agent_provider_preset::{AllowList, PresetCatalog, PresetOptions, PresetResult};
use agent_store_memory::MemoryStore;
use agent_testkit::events::names;
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};
use serde_json::Value;

/// Longest wait for any one event of a turn.
pub const IDLE: Duration = Duration::from_secs(60);

/// The pinned CLI of `provider` (`latest_validated`), or a failure naming the install command.
pub fn cli(provider: Provider) -> Cli {
    Cli::latest(provider).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"))
}

/// The allow-list that lets the presets run `cli`'s program.
pub fn allow(cli: &Cli) -> AllowList {
    AllowList::shipped().allow(cli.program())
}

/// `PresetOptions` running `cli` in `env`: its program (and entry script), and the environment's
/// offline arguments as extra arguments.
pub fn preset_options(cli: &Cli, env: &OfflineEnv) -> PresetOptions {
    let options = PresetOptions::new().binary(cli.program()).args(env.args().iter().cloned());
    cli.leading_args().iter().fold(options, |options, arg| options.binary_arg(arg.to_string_lossy()))
}

/// A harness with the providers of `catalog`, spawning through `exec`, storing in `store`.
pub fn harness(catalog: &PresetCatalog, exec: &Arc<RecordingExec>, store: DynStore) -> Harness {
    let builder = catalog.providers().into_iter().fold(Harness::builder(), |builder, p| builder.provider(p));
    builder.exec(Arc::clone(exec) as Arc<dyn Exec>).store(StoreChoice::Custom(store)).build().expect("harness")
}

/// One test's world with a real CLI offline.
pub struct World {
    pub cli: Cli,
    pub server: FakeModel,
    pub env: OfflineEnv,
    pub exec: Arc<RecordingExec>,
    pub harness: Harness,
    pub provider: String,
}

impl World {
    /// `preset` run on the pinned CLI of `provider` against a fake model playing `scenario`.
    pub async fn start(provider: Provider, preset: &str, scenario: Scenario) -> World {
        World::start_with_store(provider, preset, scenario, Arc::new(MemoryStore::new())).await
    }

    pub async fn start_with_store(provider: Provider, preset: &str, scenario: Scenario, store: DynStore) -> World {
        World::on(cli(provider), preset, scenario, store).await
    }

    /// `preset` run on `cli` (one of its provider's pinned versions).
    pub async fn on(cli: Cli, preset: &str, scenario: Scenario, store: DynStore) -> World {
        let server = FakeModel::start(scenario).await.expect("fake model server");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let catalog = PresetCatalog::builder(allow(&cli)).load();
        assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
        let harness = harness(&catalog, &exec, store);
        World { cli, server, env, exec, harness, provider: format!("preset:{preset}") }
    }

    /// Session options for the world's CLI.
    pub fn options(&self) -> SessionOptions {
        self.options_with(PresetOptions::new())
    }

    /// Session options with `extra` laid over the world's binary and offline arguments.
    pub fn options_with(&self, extra: PresetOptions) -> SessionOptions {
        let base = preset_options(&self.cli, &self.env);
        let mut options = extra;
        options.binary = base.binary;
        options.binary_args = base.binary_args;
        options.args = base.args.into_iter().chain(options.args).collect();
        self.env.session_options().provider_option(options)
    }

    pub async fn session(&self, options: SessionOptions) -> SessionRef {
        self.harness.start_session(self.provider.as_str(), options).await.expect("session starts")
    }

    pub fn workspace(&self) -> &Path {
        self.env.workspace()
    }

    /// Starts a turn and reads it to its terminal event, answering requests with `answer`.
    pub async fn run(
        &self,
        session: &SessionRef,
        prompt: &str,
        answer: impl FnMut(&Request) -> Option<Response>,
    ) -> (Turn, Vec<Arc<Event>>) {
        run(&self.harness, session, prompt, answer).await
    }

    /// Stops every session; checks no process outlived it and nothing left 127.0.0.1.
    pub async fn finish(self) {
        finish(&self.harness, &self.exec).await;
        assert!(self.server.proxy().attempts().is_empty(), "the CLI tried to reach outside 127.0.0.1");
    }
}

/// Starts a turn on `harness` and reads it to its terminal event, answering requests with
/// `answer` (`None`: leave it pending).
pub async fn run(
    harness: &Harness,
    session: &SessionRef,
    prompt: &str,
    mut answer: impl FnMut(&Request) -> Option<Response>,
) -> (Turn, Vec<Arc<Event>>) {
    let turn = harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
    let mut stream = harness.stream(&turn, Replay::Start, Some(IDLE)).await.expect("turn stream");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap_or_else(|e| panic!("turn stream ended early: {e}; events: {}", names(&events)));
        if let EventKind::RequestCreated(request) = &event.kind
            && let Some(response) = answer(request)
        {
            harness.respond(request, response).await.expect("response delivered");
        }
        let terminal = event.is_terminal();
        events.push(event);
        if terminal {
            break;
        }
    }
    (turn, events)
}

/// Stops every session of `harness` and checks that every process `exec` started has exited.
pub async fn finish(harness: &Harness, exec: &RecordingExec) {
    for session in harness.list_sessions() {
        harness.stop_session(&session, true).await.expect("stop");
    }
    for child in exec.children() {
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        assert!(matches!(status, Ok(Ok(_))), "a CLI process outlived its session");
    }
}

/// The preset payload of a turn's terminal event.
#[track_caller]
pub fn payload(events: &[Arc<Event>]) -> PresetResult {
    let end = agent_testkit::events::terminal(events);
    PresetResult::from_result(&end.result).unwrap_or_else(|| panic!("no preset payload: {:?}", end.result))
}

/// The requests of a turn.
pub fn requests(events: &[Arc<Event>]) -> Vec<Request> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RequestCreated(request) => Some((**request).clone()),
            _ => None,
        })
        .collect()
}

/// The streamed text of a turn.
pub fn deltas(events: &[Arc<Event>]) -> String {
    agent_testkit::events::delta_texts(events).concat()
}

/// The JSON text of the conversation the model request at `index` carried.
pub fn model_history(server: &FakeModel, index: usize) -> String {
    let requests = server.model_requests();
    let body: &Value = requests.get(index).and_then(|r| r.body.as_ref()).expect("a JSON request body");
    ["messages", "input"].iter().filter_map(|key| body.get(*key)).map(Value::to_string).collect::<Vec<_>>().join("\n")
}

/// A catalog of `preset` (its `id` names its file) from a presets directory in `programs`,
/// allowed to run `script`; it must load.
pub fn catalog_of(programs: &ProgramDir, script: &Path, preset: &Value) -> PresetCatalog {
    let presets = programs.dir("presets");
    let file = presets.join(format!("{}.json", preset["id"].as_str().expect("an id")));
    std::fs::write(file, preset.to_string()).expect("preset written");
    let catalog = PresetCatalog::builder(AllowList::shipped().allow(script)).dir(&presets).load();
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    catalog
}

/// A harness running `catalog`'s presets through a recording local exec, on a memory store.
pub fn harness_of(catalog: &PresetCatalog) -> (Arc<RecordingExec>, Harness) {
    let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let harness = harness(catalog, &exec, Arc::new(MemoryStore::new()));
    (exec, harness)
}
