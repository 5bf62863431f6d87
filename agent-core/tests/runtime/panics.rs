//! Provider calls that panic in the method's body, before they return their future: the session
//! hears of the panic as of any provider panic (an uncertain outcome that retires it) instead of
//! waiting for an answer that never comes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_core::provider::{Admission, OpenContext, Opened, Provider, ProviderSession, TurnStart};
use agent_core::testing::ScriptedProvider;
use agent_core::*;
use agent_store_memory::MemoryStore;

use crate::common::*;

/// The call of the provider session that panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Panics {
    StartTurn,
    Respond,
    Cancel,
    Steer,
}

/// Opens the scripted provider's sessions, wrapped so that one call panics as it is made.
#[derive(Debug)]
struct EagerPanics {
    scripted: provider::DynProvider,
    panics: Panics,
}

#[async_trait::async_trait]
impl Provider for EagerPanics {
    fn id(&self) -> ProviderId {
        self.scripted.id()
    }

    fn capabilities(&self, options: &SessionOptions) -> Capabilities {
        self.scripted.capabilities(options)
    }

    async fn open(&self, ctx: OpenContext) -> Result<Opened> {
        let mut opened = self.scripted.open(ctx).await?;
        opened.session = Arc::new(EagerSession { inner: opened.session, panics: self.panics });
        Ok(opened)
    }
}

/// The scripted session, but for the call that panics before it returns a future.
#[derive(Debug)]
struct EagerSession {
    inner: Arc<dyn ProviderSession>,
    panics: Panics,
}

type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

impl EagerSession {
    fn check(&self, call: Panics) {
        assert!(self.panics != call, "the provider's {call:?} panics before returning its future");
    }
}

#[async_trait::async_trait]
impl ProviderSession for EagerSession {
    fn start_turn<'a, 'async_trait>(&'a self, turn: TurnStart) -> Call<'async_trait, Admission>
    where
        'a: 'async_trait,
        Self: 'async_trait,
    {
        self.check(Panics::StartTurn);
        self.inner.start_turn(turn)
    }

    fn respond<'a, 'b, 'c, 'async_trait>(
        &'a self,
        request: &'b Request,
        response: &'c Response,
    ) -> Call<'async_trait, ()>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        'c: 'async_trait,
        Self: 'async_trait,
    {
        self.check(Panics::Respond);
        self.inner.respond(request, response)
    }

    fn cancel<'a, 'b, 'async_trait>(&'a self, turn: &'b TurnId) -> Call<'async_trait, ()>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        Self: 'async_trait,
    {
        self.check(Panics::Cancel);
        self.inner.cancel(turn)
    }

    fn steer<'a, 'b, 'c, 'async_trait>(&'a self, turn: &'b TurnId, input: &'c TurnInput) -> Call<'async_trait, ()>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        'c: 'async_trait,
        Self: 'async_trait,
    {
        self.check(Panics::Steer);
        self.inner.steer(turn, input)
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

/// A harness whose provider session panics at `panics`, and a session of it.
async fn fixture(panics: Panics) -> (Fixture, SessionRef, testing::ScriptedSession) {
    let (scripted, control) = ScriptedProvider::new(PROVIDER);
    control.set_capabilities(ScriptedProvider::default_capabilities().with(Capability::Steer, Support::Native));
    let store = Arc::new(MemoryStore::new());
    let harness = Harness::builder()
        .provider(Arc::new(EagerPanics { scripted, panics }) as provider::DynProvider)
        .store(StoreChoice::Custom(store.clone()))
        .build()
        .expect("harness");
    let f = Fixture { harness, control, store };
    let (session, remote) = f.session(opts()).await;
    (f, session, remote)
}

/// Fails the test when `call` does not finish within a minute of the paused clock.
async fn finishes<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call).await.expect("the call finished")
}

fn retired_by_panic(reason: &ExitReason) -> bool {
    matches!(reason, ExitReason::Retired { reason } if reason.contains("panicked"))
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_delivery_panics_at_once_is_uncertain_and_retires_the_session() {
    let (f, session, remote) = fixture(Panics::Respond).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut events = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.request(&turn.id, request::RequestSpec::new(RequestKind::CommandApproval, "Run it?", "a1")).await;
    let request = request_of(&next_of(&mut events, "request_created").await);
    let monitor = f.harness.monitor(&session).await.unwrap();

    let err = finishes(f.harness.respond(&request, Response::approve())).await.unwrap_err();
    assert!(matches!(err, Error::ProviderPanicked { operation: "respond" }), "{err:?}");
    assert!(retired_by_panic(&finishes(monitor).await));
}

#[tokio::test(start_paused = true)]
async fn an_admission_that_panics_at_once_is_uncertain_and_retires_the_session() {
    let (f, session, _) = fixture(Panics::StartTurn).await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    let turn = f.harness.start_turn(&session, "go", TurnOptions::new()).await.unwrap();

    assert!(retired_by_panic(&finishes(monitor).await));
    let outcome = finishes(f.harness.await_turn(&turn, None)).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_that_panics_at_once_is_uncertain_and_retires_the_session() {
    let (f, session, _) = fixture(Panics::Cancel).await;
    let turn = f.admitted_turn(&session, "work").await;
    let monitor = f.harness.monitor(&session).await.unwrap();
    f.harness.cancel(&turn).await.unwrap();

    assert!(retired_by_panic(&finishes(monitor).await));
    let outcome = finishes(f.harness.await_turn(&turn, None)).await.unwrap_err();
    assert!(matches!(outcome, AwaitError::Ended(ref o) if o.status == TurnStatus::Failed), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_steer_that_panics_at_once_is_uncertain_and_retires_the_session() {
    let (f, session, _) = fixture(Panics::Steer).await;
    let turn = f.admitted_turn(&session, "work").await;
    let monitor = f.harness.monitor(&session).await.unwrap();

    let err = finishes(f.harness.steer(&turn, "also this")).await.unwrap_err();
    assert!(matches!(err, Error::ProviderPanicked { operation: "steer" }), "{err:?}");
    assert!(retired_by_panic(&finishes(monitor).await));
}
