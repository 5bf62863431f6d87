//! Resume and fork as core options: a stopped session resumed under its own ID continues its
//! provider conversation and its stored history; a conversation that cannot be continued fails
//! the start and is recorded — never a silently fresh conversation.

use agent_core::provider::OpenConversation;
use agent_core::request::RequestSpec;
use agent_core::testing::{Frame, OpenBehavior};
use agent_core::*;
use futures::StreamExt;

use crate::common::*;

/// A session that ran one turn and stopped.
async fn stopped_session(f: &Fixture, id: &str) -> (SessionRef, Turn) {
    let (session, _) = f.session(opts().id(id)).await;
    f.control.push_script([Frame::delta("one"), Frame::complete("first")]);
    let turn = f.harness.start_turn(&session, "1", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&turn, None).await.unwrap();
    f.harness.stop_session(&session, false).await.unwrap();
    (session, turn)
}

#[tokio::test]
async fn resuming_a_stopped_session_continues_its_conversation_and_history() {
    let f = Fixture::new();
    let (session, first) = stopped_session(&f, "long-job").await;
    let before = f.dyn_store().latest_seq(&session.id).await.unwrap().unwrap();

    let resumed = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(resumed, session, "the same session, under its own ID");
    let (_, asked) = f.control.conversations().pop().unwrap();
    let provider_session_id = format!("scripted-{}", session.id);
    assert_eq!(asked, OpenConversation::Resume { provider_session_id: provider_session_id.clone() });
    let status = f.harness.status(&resumed).await.unwrap();
    assert_eq!(status.provider_session_id.as_deref(), Some(provider_session_id.as_str()));

    f.control.push_script([Frame::complete("second")]);
    let second = f.harness.start_turn(&resumed, "2", TurnOptions::new()).await.unwrap();
    f.harness.await_turn(&second, None).await.unwrap();
    let outcome = f.harness.await_turn(&first, None).await.unwrap();
    assert_eq!(outcome.result.text.as_deref(), Some("first"), "the first run's turn is still there");

    let last = f.harness.status(&resumed).await.unwrap().last_seq as usize;
    let events: Vec<_> = f.harness.subscribe(&resumed, Replay::Start).await.unwrap().take(last).collect().await;
    let events: Vec<_> = events.into_iter().map(|e| e.unwrap()).collect();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "one seq order across both runs");
    let after_stop: Vec<_> = events[before as usize..].iter().map(|e| e.type_name()).collect();
    assert_eq!(after_stop[..2], ["session_ready", "conversation_resumed"]);
    assert!(matches!(
        &events[before as usize + 1].kind,
        EventKind::ConversationResumed { provider_session_id: id } if *id == provider_session_id
    ));
    assert_eq!(events[before as usize - 1].type_name(), "session_closed", "the first run's history stays");
}

/// A resume runs with the options given to it: one that changes the session's settings (a
/// system prompt left out, another model) is said so in a warning after
/// `conversation_resumed`; one with the same settings has none.
#[tokio::test]
async fn a_resume_with_other_settings_than_the_last_run_warns() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("settings").model("m1").system_prompt("Be brief.")).await;
    let warnings_after = |before: u64| {
        let (f, id) = (&f, session.id.clone());
        async move {
            let events = f.dyn_store().read_events(&id, &Default::default()).await.unwrap();
            let after: Vec<_> = events.iter().filter(|e| e.seq > before).map(|e| e.kind.clone()).collect();
            assert!(matches!(after[1], EventKind::ConversationResumed { .. }), "{after:?}");
            after
                .into_iter()
                .filter_map(|kind| match kind {
                    EventKind::Warning { message } => Some(message),
                    _ => None,
                })
                .collect::<Vec<_>>()
        }
    };
    let resume = |options: SessionOptions| {
        let (f, session) = (&f, session.clone());
        async move {
            f.harness.stop_session(&session, false).await.unwrap();
            let before = f.dyn_store().latest_seq(&session.id).await.unwrap().unwrap();
            f.harness.start_session(PROVIDER, options.resume_session(session.id.clone())).await.unwrap();
            before
        }
    };

    let before = resume(opts().model("m1")).await;
    let warnings = warnings_after(before).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("system prompt") && !warnings[0].contains("model"), "{}", warnings[0]);

    let before = resume(opts().model("m2")).await;
    let warnings = warnings_after(before).await;
    assert!(warnings.len() == 1 && warnings[0].contains("model `m1` → `m2`"), "{warnings:?}");

    let before = resume(opts().model("m2")).await;
    assert_eq!(warnings_after(before).await, Vec::<String>::new(), "the same settings as the last run");
}

/// The conversation option alone (as a `SessionConfig` gives it), without the session's ID:
/// the stored session resumes under its own ID all the same.
#[tokio::test]
async fn a_resume_named_by_the_conversation_alone_takes_the_sessions_own_id() {
    let f = Fixture::new();
    let (session, _) = stopped_session(&f, "named-by-source").await;
    let options = opts().conversation(Conversation::Resume(ConversationSource::Session(session.id.clone())));
    let resumed = f.harness.start_session(PROVIDER, options).await.expect("resumes");
    assert_eq!(resumed, session, "the same session, under its own ID");
    let status = f.harness.status(&resumed).await.unwrap();
    assert_eq!(status.provider_session_id, Some(format!("scripted-{}", session.id)));
}

#[tokio::test]
async fn a_failed_resume_is_an_error_and_is_recorded_in_the_stored_history() {
    let f = Fixture::new();
    let (session, _) = stopped_session(&f, "cannot-resume").await;
    let before = f.dyn_store().latest_seq(&session.id).await.unwrap().unwrap();
    f.control.set_open(OpenBehavior::Fail("the thread was deleted".into()));
    let err = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    assert!(matches!(err, Error::ProviderUnavailable { ref reason, .. } if reason.contains("deleted")), "{err:?}");
    let stored = f.dyn_store().read_events(&session.id, &Default::default()).await.unwrap();
    let last = stored.last().unwrap();
    assert_eq!(last.seq, before + 1);
    match &last.kind {
        EventKind::ConversationFailed { mode: ConversationMode::Resume, provider_session_id, reason } => {
            assert_eq!(provider_session_id.as_deref(), Some(format!("scripted-{}", session.id).as_str()));
            assert!(reason.contains("deleted"), "{reason}");
        }
        other => panic!("expected conversation_failed, got {other:?}"),
    }
    let snapshot = f.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(snapshot.status, SessionState::Closed, "the stored session is left as it was");
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test]
async fn a_provider_that_opens_a_fresh_conversation_instead_fails_the_resume() {
    let f = Fixture::new();
    let (session, _) = stopped_session(&f, "silently-fresh").await;
    f.control.set_open(OpenBehavior::IgnoreConversation);
    let err = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    assert!(matches!(err, Error::ResumeFailed { mode: ConversationMode::Resume, .. }), "{err:?}");
    let remote = f.control.session(&session.id).await;
    assert!(remote.is_closed(), "the fresh provider session was closed");
    assert!(f.harness.list_sessions().is_empty());
}

#[tokio::test]
async fn a_resume_that_cannot_be_planned_is_refused_before_anything_opens() {
    let f = Fixture::new();
    let unknown = SessionId::new("never-ran").unwrap();
    let err = f.harness.start_session(PROVIDER, opts().resume_session(unknown)).await.unwrap_err();
    assert!(matches!(err, Error::ResumeFailed { ref reason, .. } if reason.contains("never-ran")), "{err:?}");

    let (session, _) = stopped_session(&f, "other-id").await;
    let err = f
        .harness
        .start_session(
            PROVIDER,
            opts().conversation(Conversation::Resume(ConversationSource::Session(session.id.clone()))).id("x"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "conversation", .. }), "{err:?}");
    let err = f
        .harness
        .start_session(PROVIDER, opts().resume_session(session.id.clone()).store(StoreChoice::Disabled))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "conversation", .. }), "{err:?}");
    let err = f.harness.start_session(PROVIDER, opts().resume_provider_session(" ")).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "conversation", .. }), "{err:?}");

    f.control.set_capabilities(
        agent_core::testing::ScriptedProvider::default_capabilities().with(Capability::Resume, Support::Unsupported),
    );
    let err = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { capability: Capability::Resume, .. }), "{err:?}");
    assert_eq!(f.control.conversations().len(), 1, "only the first session was ever opened");
}

#[tokio::test]
async fn a_live_session_cannot_be_resumed() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().id("busy")).await;
    let err = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    assert!(matches!(err, Error::SessionAlreadyExists { .. }), "{err:?}");
}

#[tokio::test]
async fn forking_a_stored_session_starts_a_new_session_on_a_branch_of_its_conversation() {
    let f = Fixture::new();
    f.control.set_capabilities(
        agent_core::testing::ScriptedProvider::default_capabilities().with(Capability::Fork, Support::Native),
    );
    let (source, _) = stopped_session(&f, "trunk").await;
    let (fork, _) = f.session(opts().id("branch").fork_session(source.id.clone())).await;
    let (_, asked) = f.control.conversations().pop().unwrap();
    let trunk = format!("scripted-{}", source.id);
    assert_eq!(asked, OpenConversation::Fork { provider_session_id: trunk.clone() });
    let types: Vec<_> = f.harness.subscribe(&fork, Replay::Start).await.unwrap().take(2).collect().await;
    let forked = types[1].as_ref().unwrap();
    assert!(
        matches!(&forked.kind, EventKind::ConversationForked { from_provider_session_id, from_session: Some(from) }
            if *from_provider_session_id == trunk && *from == source.id),
        "{forked:?}"
    );
    assert_eq!(forked.seq, 2, "a fork is a new history");
}

#[tokio::test]
async fn a_provider_conversation_can_be_resumed_into_a_new_session() {
    let f = Fixture::new();
    let (session, _) = f.session(opts().resume_provider_session("thread-42")).await;
    assert_eq!(f.harness.status(&session).await.unwrap().provider_session_id.as_deref(), Some("thread-42"));
    let events: Vec<_> = f.harness.subscribe(&session, Replay::Start).await.unwrap().take(2).collect().await;
    assert!(matches!(
        &events[1].as_ref().unwrap().kind,
        EventKind::ConversationResumed { provider_session_id } if provider_session_id == "thread-42"
    ));
}

/// What a killed host leaves, copied into the store of a new harness: a session awaiting the
/// answer to a request in a running turn that delivered a delta. Returns the new harness's
/// fixture, the session, its turn and the request.
async fn abandoned_awaiting_input(id: &str) -> (Fixture, SessionRef, Turn, Request) {
    abandoned_awaiting_input_in(id, Fixture::new()).await
}

/// [`abandoned_awaiting_input`], copied into the store of `f2`.
async fn abandoned_awaiting_input_in(id: &str, f2: Fixture) -> (Fixture, SessionRef, Turn, Request) {
    let f = Fixture::new();
    let (session, remote) = f.session(opts().id(id)).await;
    let turn = f.admitted_turn(&session, "work").await;
    let mut watched = f.harness.subscribe(&turn, Replay::Latest).await.unwrap();
    remote.delta(&turn.id, "partial").await;
    remote.request(&turn.id, RequestSpec::new(RequestKind::CommandApproval, "Run?", "r1")).await;
    let request = request_of(&next_of(&mut watched, "request_created").await);
    // A killed host: the runtime vanishes and its store keeps what was committed — a snapshot,
    // a turn that say `running`, a request nobody answered. Copy that state into the store of a
    // new harness.
    let store = f.dyn_store();
    let snapshot = store.fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(snapshot.status, SessionState::AwaitingInput);
    let running = store.fetch_turn(&session.id, &turn.id).await.unwrap().unwrap();
    let requests = store.read_requests(&session.id, &Default::default()).await.unwrap();
    assert_eq!(requests.iter().map(|r| r.status).collect::<Vec<_>>(), [RequestStatus::Pending]);
    let events = store.read_events(&session.id, &Default::default()).await.unwrap();
    let mut batch = agent_core::store::WriteBatch::new(session.id.clone());
    batch.snapshot = Some(snapshot);
    batch.turns = vec![running];
    batch.requests = requests;
    batch.events = events;
    f2.dyn_store().write(&batch).await.unwrap();
    // The snapshot names its harness, which must be gone for the session to be abandoned.
    drop((remote, f));
    (f2, session, turn, request)
}

#[tokio::test]
async fn resuming_a_session_its_host_abandoned_closes_the_turn_it_left_running() {
    let (f2, session, turn, request) = abandoned_awaiting_input("crashed").await;
    let resumed = f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let outcome = f2.harness.await_turn(&turn, None).await.unwrap_err();
    match outcome {
        AwaitError::Ended(outcome) => assert_eq!(outcome.status, TurnStatus::Interrupted),
        other => panic!("expected an interrupted turn, got {other:?}"),
    }
    assert_eq!(f2.harness.status(&resumed).await.unwrap().status, SessionState::Idle);
    // Its request expired with it, first, in the store as in the journal.
    let stored = f2.dyn_store().read_requests(&session.id, &Default::default()).await.unwrap();
    assert_eq!(stored.iter().map(|r| r.status).collect::<Vec<_>>(), [RequestStatus::Expired]);
    let events = f2.dyn_store().read_events(&session.id, &Default::default()).await.unwrap();
    let ends: Vec<_> = events.iter().map(|e| e.type_name()).skip_while(|name| *name != "request_created").collect();
    assert_eq!(ends[..3], ["request_created", "request_expired", "turn_interrupted"], "{ends:?}");
    let expired = events.iter().find_map(|e| match &e.kind {
        EventKind::RequestExpired { request_id, reason } => Some((request_id.clone(), *reason)),
        _ => None,
    });
    assert_eq!(expired, Some((request.id.clone(), ExpiryReason::SessionClosed)));
    let answered = f2.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(answered, Error::RequestExpired { .. }), "{answered:?}");
}

/// An exec that runs nothing and records the runs it was asked to end a dead host's processes
/// of: session, owner PID, harness number.
#[derive(Debug, Default)]
struct LeftBehind(std::sync::Mutex<Vec<(String, u32, u64)>>);

#[async_trait::async_trait]
impl agent_core::exec::Exec for LeftBehind {
    async fn spawn(
        &self,
        _: agent_core::exec::Command,
    ) -> Result<agent_core::exec::Child, agent_core::exec::ExecError> {
        Err(agent_core::exec::ExecError::Backend("runs nothing".into()))
    }

    async fn end_abandoned_processes(
        &self,
        session: &str,
        owner: u32,
        harness: u64,
    ) -> Result<usize, agent_core::exec::ExecError> {
        self.0.lock().unwrap().push((session.to_owned(), owner, harness));
        Ok(1)
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// A PID no process has (above any `pid_max`).
const DEAD_HOST: u32 = 0x7fff_fff0;

/// [`abandoned_awaiting_input_in`], its stored run's host made another process, now dead.
/// Returns the run's harness number too.
async fn abandoned_by_a_dead_host(id: &str, f2: Fixture) -> (Fixture, SessionRef, u64) {
    let (f2, session, _, _) = abandoned_awaiting_input_in(id, f2).await;
    let mut snapshot = f2.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    let owner = snapshot.owner.as_mut().expect("the run's owner is recorded");
    owner.pid = DEAD_HOST;
    let harness = owner.harness;
    f2.dyn_store().save_session(&snapshot).await.unwrap();
    (f2, session, harness)
}

/// Resuming or replacing a session another process ran first ends what that host's run left
/// running for it, if the host is gone (a killed host's CLI dies with it, what the CLI started
/// in a session of its own does not), named by the run's owner — even a run stored closed (a
/// host killed while it closed the session) —; a run of this process is not looked for.
#[tokio::test]
async fn resuming_or_replacing_an_abandoned_session_ends_what_its_dead_host_left_running() {
    let exec = std::sync::Arc::new(LeftBehind::default());
    let f2 = Fixture::with(|b| b.exec(std::sync::Arc::clone(&exec)));
    let (f2, session, harness) = abandoned_by_a_dead_host("left-running", f2).await;
    assert!(exec.0.lock().unwrap().is_empty());
    let resumed = f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(*exec.0.lock().unwrap(), [("left-running".to_owned(), DEAD_HOST, harness)]);
    f2.harness.stop_session(&resumed, false).await.unwrap();
    let again = f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(exec.0.lock().unwrap().len(), 1, "this process's run ended its processes with it");
    f2.harness.stop_session(&again, false).await.unwrap();
    let mut closed = f2.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    assert_eq!(closed.status, SessionState::Closed);
    closed.owner.as_mut().expect("owner").pid = DEAD_HOST;
    f2.dyn_store().save_session(&closed).await.unwrap();
    let third = f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let looked = exec.0.lock().unwrap().clone();
    assert_eq!(looked.len(), 2, "a run stored closed by a host now gone is looked for: {looked:?}");
    assert_eq!((looked[1].0.as_str(), looked[1].1), ("left-running", DEAD_HOST));
    f2.harness.stop_session(&third, false).await.unwrap();
    // A run stored closed by another process that still runs (PID 1, started when it did):
    // nothing of it is abandoned, and it is not looked for.
    let mut closed = f2.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    let owner = closed.owner.as_mut().expect("owner");
    let stat = std::fs::read_to_string("/proc/1/stat").expect("/proc/1/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("name") + 1..].split_whitespace().collect();
    (owner.pid, owner.started) = (1, fields[19].parse().expect("start time"));
    f2.dyn_store().save_session(&closed).await.unwrap();
    let fourth = f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert_eq!(exec.0.lock().unwrap().len(), 2, "a live owner's run is not looked for");
    f2.harness.stop_session(&fourth, false).await.unwrap();

    let exec = std::sync::Arc::new(LeftBehind::default());
    let f3 = Fixture::with(|b| b.exec(std::sync::Arc::clone(&exec)));
    let (f3, session, harness) = abandoned_by_a_dead_host("left-replaced", f3).await;
    let replaced = f3.harness.start_session(PROVIDER, opts().id("left-replaced").reuse(Reuse::Replace)).await.unwrap();
    assert_eq!(*exec.0.lock().unwrap(), [("left-replaced".to_owned(), DEAD_HOST, harness)]);
    f3.harness.stop_session(&replaced, false).await.unwrap();
    assert_eq!(replaced.id, session.id);

    // A run of this process, abandoned here: its processes end with its session.
    let exec = std::sync::Arc::new(LeftBehind::default());
    let f4 = Fixture::with(|b| b.exec(std::sync::Arc::clone(&exec)));
    let (f4, session, _, _) = abandoned_awaiting_input_in("left-here", f4).await;
    let resumed = f4.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    assert!(exec.0.lock().unwrap().is_empty());
    f4.harness.stop_session(&resumed, false).await.unwrap();
}

/// A resume that fails still ends what the killed host left open — the run is over whether the
/// conversation opens or not — so no turn stays `running` nor request `pending` in the store;
/// a later resume that opens finds nothing left to close.
#[tokio::test]
async fn a_failed_resume_of_an_abandoned_session_still_closes_what_its_host_left_open() {
    let (f2, session, turn, request) = abandoned_awaiting_input("crashed-twice").await;
    f2.control.set_open(OpenBehavior::Fail("the thread was deleted".into()));
    f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    let store = f2.dyn_store();
    let stored = store.read_requests(&session.id, &Default::default()).await.unwrap();
    assert_eq!(stored.iter().map(|r| r.status).collect::<Vec<_>>(), [RequestStatus::Expired]);
    let stored_turn = store.fetch_turn(&session.id, &turn.id).await.unwrap().unwrap();
    assert_eq!(stored_turn.status, TurnStatus::Interrupted);
    let events = store.read_events(&session.id, &Default::default()).await.unwrap();
    let ends: Vec<_> = events.iter().map(|e| e.type_name()).skip_while(|name| *name != "request_created").collect();
    assert_eq!(ends, ["request_created", "request_expired", "turn_interrupted", "conversation_failed"], "{ends:?}");
    match f2.harness.await_turn(&turn, None).await.unwrap_err() {
        AwaitError::Ended(outcome) => assert_eq!(outcome.status, TurnStatus::Interrupted),
        other => panic!("expected the interrupted turn, got {other:?}"),
    }
    let answered = f2.harness.respond(&request, Response::approve()).await.unwrap_err();
    assert!(matches!(answered, Error::RequestExpired { .. }), "{answered:?}");

    f2.control.set_open(OpenBehavior::Succeed);
    f2.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap();
    let events = store.read_events(&session.id, &Default::default()).await.unwrap();
    let ended = events.iter().filter(|e| e.type_name() == "turn_interrupted").count();
    assert_eq!(ended, 1, "the turn ended once");
}

#[tokio::test]
async fn a_stored_conversation_id_that_would_pass_as_an_option_is_not_resumed() {
    let f = Fixture::new();
    let (session, _) = stopped_session(&f, "odd-id").await;
    let mut snapshot = f.dyn_store().fetch_session(&session.id).await.unwrap().unwrap();
    snapshot.provider_session_id = Some("--help".into());
    f.dyn_store().save_session(&snapshot).await.unwrap();
    let opened = f.control.conversations().len();

    let err = f.harness.start_session(PROVIDER, opts().resume_session(session.id.clone())).await.unwrap_err();
    assert!(
        matches!(err, Error::ResumeFailed { ref reason, .. } if reason.contains("must not start with `-`")),
        "{err:?}"
    );
    assert_eq!(f.control.conversations().len(), opened, "nothing was opened");
}
