//! `sessions`, `events` and `purge`: what a SQLite store holds, read without running anything.

use agent_harness::store::{EventPager, EventQuery};
use agent_harness::{DynStore, Harness, ProviderId, SessionRef, StoreError};
use futures::FutureExt;

use crate::args::{EventsArgs, PurgeArgs, SessionsArgs};
use crate::config::session_id;
use crate::exit::{Exit, Failure};
use crate::render::Renderer;
use crate::store::{StoreSpec, open_sqlite};

/// Opens the existing SQLite store `spec` names and a harness with nothing registered to read it.
fn open(spec: &str) -> Result<(DynStore, Harness), Failure> {
    let path = StoreSpec::existing_sqlite(spec)?;
    // Read as it is: a database without a store is refused, not made one.
    let store = open_sqlite(&path, false)?;
    let harness = Harness::builder()
        .store(store.clone())
        .build()
        .map_err(|error| Failure::harness("cannot build the harness", &error))?;
    Ok((store, harness))
}

/// `agent-harness sessions`: one line per stored session.
pub(crate) async fn sessions(args: SessionsArgs) -> Result<Exit, Failure> {
    let (_, harness) = open(&args.store)?;
    let sessions =
        harness.list_stored_sessions().await.map_err(|error| Failure::harness("cannot list sessions", &error))?;
    for stored in sessions {
        let snapshot = &stored.snapshot;
        if args.json {
            let line = serde_json::to_string(snapshot)
                .map_err(|error| Failure::failed(format!("cannot serialize session {}: {error}", snapshot.id)))?;
            crate::exit::print(&format!("{line}\n"))?;
        } else {
            let status = serde_json::to_value(snapshot.status).ok();
            let status = status.as_ref().and_then(|s| s.as_str()).unwrap_or("?");
            // A working directory may hold any byte but `/` and NUL: one row, nothing acted on.
            let cwd = snapshot.cwd.display().to_string();
            let cwd = crate::render::visible_field(&cwd);
            let row = format!("{}\t{}\t{status}\t{}\t{cwd}\n", snapshot.id, snapshot.provider, snapshot.updated_at);
            crate::exit::print(&row)?;
        }
    }
    Ok(Exit::Completed)
}

/// `agent-harness events`: a stored session's events in seq order; with `--follow`, new ones as
/// another process stores them, until the session ends.
pub(crate) async fn events(args: EventsArgs) -> Result<Exit, Failure> {
    let id = session_id("SESSION", &args.session)?;
    let (store, harness) = open(&args.store)?;
    let mut renderer = Renderer::new(args.json, false);
    // As the harness reads it back: a session whose process is gone is abandoned, not running.
    let running = async || -> Result<bool, Failure> {
        match harness.stored_session_in(&store, &id).await {
            Ok(Some(stored)) => Ok(stored.snapshot.status.is_live()),
            Ok(None) => Err(Failure::failed(format!("no session `{id}` in the store"))),
            Err(e) => Err(Failure::failed(format!("cannot read the store: {e}"))),
        }
    };
    let live = running().await?;
    // One listener for the whole follow, looked at between pages and while waiting: a Ctrl-C
    // pressed while a page is read or printed ends the follow after that page (a listener made
    // per wait missed what came before it).
    let mut interrupt = match args.follow {
        true => Some(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| Failure::failed(format!("cannot watch for Ctrl-C: {e}")))?,
        ),
        false => None,
    };
    let printed = print_events(&store, &id, args.after, live, &mut interrupt, running, &mut renderer).await;
    // What waits to be written is written before the command ends. Ctrl-C still ends a follow;
    // after one, what the reader does not take within a moment is given up.
    // What was printed before a failure is written too.
    let written = match (&printed, interrupt.as_mut()) {
        (Ok(Printed::Interrupted), _) => {
            tokio::time::timeout(crate::output::STALLED, crate::output::flushed()).await.unwrap_or(Ok(()))
        }
        (_, Some(interrupt)) => tokio::select! {
            written = crate::output::flushed() => written,
            _ = interrupt.recv() => Ok(()),
        },
        (_, None) => crate::output::flushed().await,
    };
    printed?;
    written.map_err(|e| Failure::failed(format!("cannot write events: {e}")))?;
    Ok(Exit::Completed)
}

/// How printing a session's events ended.
enum Printed {
    /// Every event was handed to the output (to the session's end, with `--follow`).
    All,
    /// Ctrl-C ended a follow.
    Interrupted,
}

/// Prints the session's events after `after`, page by page; with `interrupt` (`--follow`), the
/// new ones as they are stored while the session is `live`, as `running` tells again after each
/// wait.
async fn print_events(
    store: &DynStore,
    id: &agent_harness::SessionId,
    mut after: Option<u64>,
    mut live: bool,
    interrupt: &mut Option<tokio::signal::unix::Signal>,
    running: impl AsyncFn() -> Result<bool, Failure>,
    renderer: &mut Renderer,
) -> Result<Printed, Failure> {
    // Pages sized by the events' bytes: a session's whole history may be gigabytes.
    let mut pager = EventPager::new();
    loop {
        loop {
            let query = EventQuery::after(after.unwrap_or(0)).limit(pager.limit());
            let events =
                store.read_events(id, &query).await.map_err(|e| Failure::failed(format!("cannot read events: {e}")))?;
            for event in &events {
                // Output that waits to be written holds up the reads; Ctrl-C still ends a follow.
                if crate::output::full() {
                    match interrupt.as_mut() {
                        Some(interrupt) => tokio::select! {
                            () = crate::output::room() => {}
                            _ = interrupt.recv() => return Ok(Printed::Interrupted),
                        },
                        None => crate::output::room().await,
                    }
                }
                renderer.event(event).map_err(|e| Failure::failed(format!("cannot write events: {e}")))?;
                after = Some(event.seq);
            }
            let full = events.len() == pager.limit();
            pager.after(&events);
            if interrupt.as_mut().is_some_and(|interrupt| interrupt.recv().now_or_never().is_some()) {
                return Ok(Printed::Interrupted);
            }
            if !full {
                break;
            }
        }
        // A session seen ended was read to its end above: its last events precede its last snapshot.
        let Some(interrupt) = interrupt.as_mut().filter(|_| live) else { return Ok(Printed::All) };
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = interrupt.recv() => return Ok(Printed::Interrupted),
        }
        live = running().await?;
    }
}

/// How often `events --follow` looks for new events.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// `agent-harness purge`: deletes a stopped session's history.
pub(crate) async fn purge(args: PurgeArgs) -> Result<Exit, Failure> {
    let id = session_id("SESSION", &args.session)?;
    let (store, harness) = open(&args.store)?;
    let provider = match store.fetch_session(&id).await {
        // A snapshot that says a runtime holds the session names that runtime's process: the
        // harness tells a live one (refused, --force or not) from a killed host (purged). One
        // written without an owner (an older build) cannot be told apart, so it takes --force.
        Ok(Some(stored)) if stored.status.is_live() && stored.owner.is_none() && !args.force => {
            return Err(Failure::failed(format!(
                "session `{id}` is running in another process, or its host was killed: pass --force to purge it anyway"
            )));
        }
        Ok(Some(stored)) => stored.provider,
        Ok(None) => return Err(Failure::failed(format!("no session `{id}` in the store"))),
        // Damaged, or written by a newer release: it cannot say whether a process runs it.
        Err(StoreError::Corrupt(reason)) if !args.force => {
            return Err(Failure::failed(format!(
                "session `{id}` cannot be read ({reason}), so whether another process runs it is unknown: \
                 pass --force to purge it anyway"
            )));
        }
        // A purge goes by the session's ID alone; its provider is not read.
        Err(StoreError::Corrupt(_)) => ProviderId::new("unknown"),
        Err(error) => return Err(Failure::failed(format!("cannot read the store: {error}"))),
    };
    let session = SessionRef { provider, id };
    harness.purge_session_in(&store, &session).await.map_err(|error| Failure::harness("cannot purge", &error))?;
    Ok(Exit::Completed)
}
