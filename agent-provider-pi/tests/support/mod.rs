//! What the pi test binaries share: one world per test with the pinned CLI, a fake model
//! server, an offline environment and a harness.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use agent_core::exec::Exec;
use agent_core::{
    Event, EventKind, Harness, Replay, Request, Response, SessionOptions, SessionRef, StoreChoice, Turn, TurnOptions,
};
use agent_exec::LocalExec;
use agent_provider_pi::{PiOptions, PiProvider};
use agent_store_memory::MemoryStore;
use agent_testkit::events::names;
use agent_testkit::recording::RecordingExec;
use agent_testkit::{Cli, FakeModel, OfflineEnv, Provider, Scenario};

/// Longest wait for any one event of a turn.
pub const IDLE: Duration = Duration::from_secs(30);

/// Every pinned pi version, newest first: 1.6.0 (Node 22), 0.79.10 (Node 22; it marks
/// `agent_end` but sends no `agent_settled`) and 0.73.1 (Node 20).
pub fn clis() -> Vec<Cli> {
    Cli::pinned(Provider::Pi).unwrap_or_else(|e| panic!("{e}\nrun `cargo xtask clis`"))
}

/// The `PiOptions` that run `cli` in `env`.
pub fn pi_options(cli: &Cli, env: &OfflineEnv) -> PiOptions {
    let options = PiOptions::new().binary(cli.program()).args(env.args().iter().cloned());
    cli.leading_args().iter().fold(options, |options, arg| options.binary_arg(arg))
}

/// One test's world.
pub struct Pi {
    pub cli: Cli,
    pub server: FakeModel,
    pub env: OfflineEnv,
    pub exec: Arc<RecordingExec>,
    pub harness: Harness,
}

impl Pi {
    pub async fn start(cli: Cli, scenario: Scenario) -> Pi {
        let server = FakeModel::start(scenario).await.expect("fake model server");
        let env = OfflineEnv::new(&cli, &server).expect("offline environment");
        let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
        let harness = Harness::builder()
            .provider(PiProvider::new())
            .exec(Arc::clone(&exec) as Arc<dyn Exec>)
            .store(StoreChoice::Custom(Arc::new(MemoryStore::new())))
            .build()
            .expect("harness");
        Pi { cli, server, env, exec, harness }
    }

    pub fn version(&self) -> &str {
        self.cli.version()
    }

    pub fn options(&self) -> SessionOptions {
        self.env.session_options().provider_option(pi_options(&self.cli, &self.env))
    }

    pub async fn session(&self, options: SessionOptions) -> SessionRef {
        let version = self.version().to_owned();
        self.harness.start_session("pi", options).await.unwrap_or_else(|e| panic!("pi {version}: session starts: {e}"))
    }

    /// Starts a turn and collects its events up to the terminal one, answering requests with
    /// `answer` (`None`: leave it pending).
    pub async fn run(
        &self,
        session: &SessionRef,
        prompt: &str,
        answer: impl FnMut(&Request) -> Option<Response>,
    ) -> (Turn, Vec<Arc<Event>>) {
        let turn = self.harness.start_turn(session, prompt, TurnOptions::new()).await.expect("turn recorded");
        let events = self.collect(&turn, answer).await;
        (turn, events)
    }

    pub async fn collect(&self, turn: &Turn, mut answer: impl FnMut(&Request) -> Option<Response>) -> Vec<Arc<Event>> {
        let mut stream = self.harness.stream(turn, Replay::Start, Some(IDLE)).await.expect("turn stream");
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| {
                panic!("pi {}: turn stream ended early: {e}; events: {}", self.version(), names(&events))
            });
            if let EventKind::RequestCreated(request) = &event.kind
                && let Some(response) = answer(request)
            {
                self.harness.respond(request, response).await.expect("response delivered");
            }
            let terminal = event.is_terminal();
            events.push(event);
            if terminal {
                break;
            }
        }
        events
    }

    /// Stops every session and checks that no pi process is left and nothing left 127.0.0.1.
    pub async fn finish(self) {
        for session in self.harness.list_sessions() {
            self.harness.stop_session(&session, true).await.expect("stop");
        }
        for child in self.exec.children() {
            let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            assert!(matches!(status, Ok(Ok(_))), "a pi process outlived its session");
        }
        assert!(self.server.proxy().attempts().is_empty(), "pi tried to reach outside 127.0.0.1");
    }
}

pub fn deltas(events: &[Arc<Event>]) -> String {
    agent_testkit::events::delta_texts(events).concat()
}

pub fn requests(events: &[Arc<Event>]) -> Vec<Request> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RequestCreated(request) => Some((**request).clone()),
            _ => None,
        })
        .collect()
}
