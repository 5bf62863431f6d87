//! `agent-harness run`: one session, one turn per prompt, every event printed as it comes.
//!
//! Order of work: every input is checked (config, flags, provider options, session options)
//! before the store is opened, and the store is opened before anything is spawned, so bad input
//! writes nothing and spawns nothing. The harness is shut down on every path after it was
//! built, so no provider process outlives the command.

use std::collections::VecDeque;
use std::io::{self, IsTerminal};
use std::sync::Arc;
use std::time::Duration;

use agent_harness::execs::local::LocalExec;
use agent_harness::time::deadline_after;
use agent_harness::{
    Conversation, ConversationSource, Error, ErrorKind, EventKind, Harness, Replay, Request, RequestStatus, Response,
    SessionOptions, SessionRef, Subscription, Turn, TurnInput, TurnOptions, TurnStatus,
};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use crate::args::RunArgs;
use crate::config;
use crate::exit::{Exit, Failure};
use crate::policy::{Decision, Policy};
use crate::prompt::Prompt;
use crate::render::Renderer;
use crate::store::StoreSpec;

/// How long a cancelled turn (Ctrl-C, `--timeout`) gets to reach its terminal event before the
/// session is stopped by force.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// How often the human view's spinner moves.
const SPINNER_TICK: Duration = Duration::from_millis(100);

/// How long the last events may take to arrive once the session was stopped.
const DRAIN: Duration = Duration::from_secs(10);

/// Runs `agent-harness run`.
pub(crate) async fn run(args: RunArgs) -> Result<Exit, Failure> {
    let (config, cwd_given) = config::session_config(&args)?;
    // Checked with the other input, before anything is opened or spawned.
    if let Some(n) = args.prompts.iter().position(|prompt| TurnInput::from(prompt.as_str()).is_empty()) {
        return Err(Failure::usage(format!("PROMPT {}: must not be empty", n + 1)));
    }
    let store = StoreSpec::parse(&args.store)?;
    let timeout = args.timeout.map(timeout).transpose()?;
    let provider_id = config.provider.clone();
    let provider = config::provider(provider_id.as_str(), &args)?;
    let mut options = config
        .apply_to(provider.as_ref(), SessionOptions::default())
        .map_err(|error| Failure::harness("invalid session", &error))?;
    options.validate().map_err(|error| Failure::harness("invalid session", &error))?;
    provider.validate(&options).map_err(|error| Failure::harness("invalid session", &error))?;
    let mut signals = Signals::new()?;
    // Ask at the terminal only when a person is there to answer and reads plain text: what the
    // flags leave open (approvals with `--approvals ask`, questions with no `--answer` left).
    let interactive = !args.json && io::stdin().is_terminal() && io::stdout().is_terminal();
    if interactive {
        crate::prompt::listen();
    }
    let new_file = store.new_file();
    let (store, hold) = store.open()?;
    // A resumed session's history goes on from its last event: print only what is new. That is
    // the last stored one, or the last one published when the store failed during the last run
    // (the resume goes on after it, leaving the events it could not store a gap).
    let after = match &options.conversation {
        Conversation::Resume(ConversationSource::Session(id)) => {
            let stored = store.latest_seq(id).await.ok().flatten().unwrap_or(0);
            let snapshot = store.fetch_session(id).await.ok().flatten();
            let published = snapshot.as_ref().and_then(|snapshot| snapshot.published_seq).unwrap_or(0);
            // A resume goes on where the session ran, unless told otherwise: run elsewhere,
            // its agent would work on another tree (and claude cannot find its conversation).
            if let Some(snapshot) = snapshot.filter(|_| !cwd_given) {
                options.cwd = Some(snapshot.cwd);
            }
            stored.max(published)
        }
        _ => 0,
    };
    let policy = Policy::new(args.approvals, args.answers.clone());
    let mut builder = Harness::builder().provider(provider).exec(LocalExec::new()).store(store);
    if !interactive {
        builder = builder.request_handler(Arc::clone(&policy).handler());
    }
    let harness = builder.build().map_err(|error| Failure::harness("cannot build the harness", &error))?;
    // What an earlier run killed with SIGKILL left behind (its CLIs' own children outlive it):
    // the processes stamped by a host that is gone. A failed scan of /proc only skips this.
    let _ = harness.reap_orphans().await;
    let deadline = timeout.map(|timeout| deadline_after(Instant::now(), timeout));
    let mut run = Run {
        harness: harness.clone(),
        renderer: Renderer::new(args.json, io::stdout().is_terminal()),
        signals: &mut signals,
        deadline,
        after,
        interactive: interactive.then_some(policy),
        started: false,
        give_up: deadline,
        interrupted: None,
    };
    let outcome = run.session(provider_id, options, &args.prompts).await;
    let (started, give_up, interrupted) = (run.started, run.give_up, run.interrupted);
    drop(run);
    harness.shutdown().await;
    drop(harness);
    let outcome = flush(outcome, &mut signals, give_up, interrupted).await;
    // The store is closed now; a file made for a session that never started goes again.
    if let (false, Some(file)) = (started, new_file) {
        file.undo(hold).await;
    } else {
        drop(hold);
    }
    outcome
}

fn timeout(secs: f64) -> Result<Duration, Failure> {
    let why = match Duration::try_from_secs_f64(secs) {
        Ok(duration) if !duration.is_zero() => return Ok(duration),
        Ok(_) if secs > 0.0 => "shorter than a nanosecond",
        Err(_) if secs > 1.0 => "longer than a duration can be",
        _ => "expected a positive number of seconds",
    };
    // 1e300 is not written out in 300 digits.
    let given = Some(secs.to_string()).filter(|s| s.len() <= 24).unwrap_or_else(|| format!("{secs:e}"));
    Err(Failure::usage(format!("--timeout {given}: {why}")))
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal or a lost ssh session), merged: each is
/// handled, so none ends the process before the harness shut its CLIs down.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> Result<Signals, Failure> {
        let listen = |kind| signal(kind).map_err(|e| Failure::failed(format!("cannot listen for signals: {e}")));
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// The next signal's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

/// Why output that waits to be written was given up.
enum GaveUp {
    /// A signal came, named.
    Signal(&'static str),
    /// The time to give up passed.
    Deadline,
}

/// `written` (room for output, or all of it written), unless a signal comes or `give_up`
/// passes while it waits: output that is written at once is never given up.
async fn unless_given_up<T>(
    written: impl Future<Output = T>,
    signals: &mut Signals,
    give_up: Option<Instant>,
) -> Result<T, GaveUp> {
    tokio::select! {
        biased;
        done = written => Ok(done),
        signal = signals.recv() => Err(GaveUp::Signal(signal)),
        () = until(give_up) => Err(GaveUp::Deadline),
    }
}

/// Waits for the output that waits to be written, once the harness is shut down. A run that
/// completed waits for all of it, unless a signal comes or `--timeout` runs out; one that ended
/// otherwise gives up on it [`STALLED`](crate::output::STALLED) after it ended. A completed run whose output was given
/// up, or could not be written, did not complete for its reader.
///
/// `interrupted` names the signal that already gave up output while the session stopped: what
/// is left is given up at once (a second signal is not needed).
async fn flush(
    outcome: Result<Exit, Failure>,
    signals: &mut Signals,
    give_up: Option<Instant>,
    interrupted: Option<&'static str>,
) -> Result<Exit, Failure> {
    let give_up = if interrupted.is_some() { Some(Instant::now()) } else { give_up };
    let written = match unless_given_up(crate::output::flushed(), signals, give_up).await {
        Err(GaveUp::Deadline) if let Some(signal) = interrupted => Err(GaveUp::Signal(signal)),
        written => written,
    };
    match (outcome, written) {
        (Ok(Exit::Completed), Ok(Err(error))) => Err(Failure::failed(format!("cannot write events: {error}"))),
        (Ok(Exit::Completed), Err(GaveUp::Signal(signal))) => {
            let message = format!("interrupted ({signal}) before every event was written");
            Err(Failure { exit: Exit::Cancelled, message })
        }
        (Ok(Exit::Completed), Err(GaveUp::Deadline)) => {
            let message = "--timeout ran out before every event was written".to_owned();
            Err(Failure { exit: Exit::TimedOut, message })
        }
        (outcome, _) => outcome,
    }
}

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// One run's harness, output and interruptions.
struct Run<'a> {
    harness: Harness,
    renderer: Renderer,
    signals: &'a mut Signals,
    deadline: Option<Instant>,
    /// The seq after which the session's events are new to this run.
    after: u64,
    /// Requests are answered here, those the flags leave open asked at the terminal (else the
    /// harness's request handler answers them).
    interactive: Option<Arc<Policy>>,
    /// Whether the session started.
    started: bool,
    /// When output that waits to be written is given up (see [`flush`]).
    give_up: Option<Instant>,
    /// The signal that gave up output while the session stopped.
    interrupted: Option<&'static str>,
}

/// Why a turn loop stopped.
enum Ended {
    /// The turn reached its terminal event with this status.
    Turn(TurnStatus),
    /// Interrupted (signals); the session must stop.
    Interrupted { forced: bool },
    /// `--timeout` ran out; the session must stop.
    TimedOut { forced: bool },
    /// Events stopped coming: the session went down or stdout closed.
    Lost(Failure),
}

impl Run<'_> {
    async fn session(
        &mut self,
        provider: agent_harness::ProviderId,
        options: SessionOptions,
        prompts: &[String],
    ) -> Result<Exit, Failure> {
        let session = tokio::select! {
            started = self.harness.start_session(provider, options) => started.map_err(|error| {
                let mut failure = Failure::harness("the session did not start", &error);
                // A CLI whose handshake timed out, or whose pipes broke, cannot be brought up.
                if matches!(error.kind(), ErrorKind::Timeout | ErrorKind::Transport) {
                    failure.exit = Exit::Unavailable;
                }
                failure
            })?,
            signal = self.signals.recv() => {
                let message = format!("interrupted ({signal}) while the session started");
                return Err(Failure { exit: Exit::Cancelled, message });
            }
            () = until(self.deadline) => {
                let message = "--timeout ran out while the session started".to_owned();
                return Err(Failure { exit: Exit::TimedOut, message });
            }
        };
        self.started = true;
        let mut events = match self.harness.subscribe(&session, Replay::After(self.after)).await {
            Ok(events) => events,
            Err(error) => {
                let _ = self.harness.stop_session(&session, true).await;
                return Err(Failure::harness("cannot follow the session", &error));
            }
        };
        let mut exit = Ok(Exit::Completed);
        let mut force = false;
        for prompt in prompts {
            let turn = match self.harness.start_turn(&session, prompt.as_str(), TurnOptions::new()).await {
                Ok(turn) => turn,
                Err(error) => {
                    exit = Err(Failure::harness("the turn did not start", &error));
                    break;
                }
            };
            match self.turn(&session, &turn, &mut events).await {
                Ended::Turn(TurnStatus::Completed) => continue,
                Ended::Turn(status) => exit = Ok(Exit::of_turn(status)),
                Ended::Interrupted { forced } => (exit, force) = (Ok(Exit::Cancelled), forced),
                Ended::TimedOut { forced } => (exit, force) = (Ok(Exit::TimedOut), forced),
                Ended::Lost(failure) => (exit, force) = (Err(failure), true),
            }
            break;
        }
        if !matches!(exit, Ok(Exit::Completed | Exit::Failed)) {
            // Ended by a signal, the timeout or a lost session: what cannot be written soon is
            // not waited for.
            let soon = Instant::now() + crate::output::STALLED;
            self.give_up = Some(self.give_up.map_or(soon, |give_up| give_up.min(soon)));
        }
        self.stop(&session, events, force).await;
        exit
    }

    /// Follows `turn` to its terminal event, printing every event of the session on the way.
    async fn turn(&mut self, session: &SessionRef, turn: &Turn, events: &mut Subscription) -> Ended {
        // Set once the turn was cancelled: (why, when to give up waiting for its end).
        let mut cancelled: Option<(Ended, Instant)> = None;
        // The request being asked about at the terminal, one at a time.
        let mut prompts: VecDeque<Request> = VecDeque::new();
        let mut asking: Option<Prompt> = None;
        let started = Instant::now();
        let mut ticks = tokio::time::interval(SPINNER_TICK);
        loop {
            let grace = cancelled.as_ref().map(|(_, at)| *at);
            if asking.is_none() && cancelled.is_none() && !prompts.is_empty() {
                let _ = self.renderer.clear();
                asking = prompts.pop_front().map(Prompt::ask);
            }
            tokio::select! {
                _ = ticks.tick(), if asking.is_none() => {
                    let _ = self.renderer.tick(started.elapsed());
                }
                typed = async { (&mut asking.as_mut().expect("asking").lines).await }, if asking.is_some() => {
                    let prompt = asking.take().expect("asking");
                    let response = prompt.response(typed.unwrap_or_default());
                    self.answer(&prompt.request, response, &mut prompts).await;
                }
                // Output that waits to be written holds up the events, never this loop.
                () = crate::output::room(), if crate::output::full() => {}
                next = events.next(), if !crate::output::full() => match next {
                    Some(Ok(event)) => {
                        if let Err(error) = self.renderer.event(&event) {
                            let _ = self.harness.cancel(turn).await;
                            return Ended::Lost(Failure::failed(format!("cannot write events: {error}")));
                        }
                        // A request that ended meanwhile is asked about no more.
                        if let EventKind::RequestExpired { request_id, .. } | EventKind::RequestResolved { request_id, .. } =
                            &event.kind
                        {
                            prompts.retain(|queued| queued.id != *request_id);
                            if asking.as_ref().is_some_and(|prompt| prompt.request.id == *request_id) {
                                asking = None;
                                let _ = self.renderer.line_break();
                            }
                        }
                        if let (Some(policy), EventKind::RequestCreated(request)) = (&self.interactive, &event.kind)
                            && request.status == RequestStatus::Pending
                        {
                            match policy.decide(request) {
                                Decision::Answer(response) => self.answer(request, response, &mut prompts).await,
                                Decision::Ask(_) => prompts.push_back((**request).clone()),
                            }
                        }
                        if event.turn_id.as_ref() == Some(&turn.id) && let Some(end) = event.kind.terminal_end() {
                            return match cancelled {
                                Some((why, _)) => why,
                                None => Ended::Turn(end.status),
                            };
                        }
                    }
                    Some(Err(error)) => return Ended::Lost(Failure::failed(format!("lost the session's events: {error}"))),
                    None => return Ended::Lost(Failure::failed(format!("session {} ended during the turn", session.id))),
                },
                signal = self.signals.recv() => match cancelled {
                    None => {
                        let _ = self.harness.cancel_with_reason(turn, Some(format!("interrupted ({signal})"))).await;
                        cancelled = Some((Ended::Interrupted { forced: false }, Instant::now() + CANCEL_GRACE));
                    }
                    // A second signal: stop now.
                    Some(_) => return Ended::Interrupted { forced: true },
                },
                () = until(self.deadline), if cancelled.is_none() => {
                    let _ = self.harness.cancel_with_reason(turn, Some("--timeout ran out".into())).await;
                    cancelled = Some((Ended::TimedOut { forced: false }, Instant::now() + CANCEL_GRACE));
                }
                // A cancelled turn's end waits behind output nobody writes: the harness says it.
                _ = self.harness.await_turn(turn, None), if cancelled.is_some() && crate::output::full() => {
                    return cancelled.map(|(why, _)| why).expect("cancelled");
                }
                () = until(grace) => {
                    return match cancelled {
                        Some((Ended::Interrupted { .. }, _)) => Ended::Interrupted { forced: true },
                        _ => Ended::TimedOut { forced: true },
                    };
                }
            }
        }
    }

    /// Sends `response`. One the request does not take (a question's answer that is not one of
    /// its choices) is said so, and the request is asked about at the terminal again; a request
    /// that expired or was answered meanwhile keeps its answer.
    async fn answer(&mut self, request: &Request, response: Response, prompts: &mut VecDeque<Request>) {
        if let Err(error @ (Error::InvalidResponse { .. } | Error::ResponseKindMismatch { .. })) =
            self.harness.respond(request, response).await
        {
            let _ = self.renderer.note(&format!("not taken: {}", crate::exit::one_line(&error.to_string())));
            prompts.push_front(request.clone());
        }
    }

    /// Stops the session and prints the events it publishes on the way out: those that come
    /// within [`DRAIN`], unless the output is given up first.
    async fn stop(&mut self, session: &SessionRef, mut events: Subscription, force: bool) {
        let _ = self.renderer.clear();
        let Run { harness, renderer, signals, give_up, interrupted, .. } = self;
        let stop = async {
            // An active turn (one that never ended) is interrupted by force.
            if harness.stop_session(session, force).await.is_err() {
                let _ = harness.stop_session(session, true).await;
            }
        };
        let drain = async {
            let drained = Instant::now() + DRAIN;
            loop {
                match unless_given_up(crate::output::room(), signals, *give_up).await {
                    Ok(()) => {}
                    Err(GaveUp::Signal(signal)) => {
                        *interrupted = Some(signal);
                        break;
                    }
                    Err(GaveUp::Deadline) => break,
                }
                match tokio::time::timeout_at(drained, events.next()).await {
                    Ok(Some(Ok(event))) if renderer.event(&event).is_ok() => {}
                    _ => break,
                }
            }
        };
        let _ = tokio::join!(tokio::time::timeout(DRAIN, stop), drain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_that_no_duration_holds_says_why() {
        assert_eq!(timeout(1.5).unwrap(), Duration::from_millis(1500));
        for (secs, says) in [
            (0.0, "--timeout 0: expected a positive number"),
            (-2.0, "--timeout -2: expected a positive number"),
            (f64::NAN, "--timeout NaN: expected a positive number"),
            (1e-12, "--timeout 0.000000000001: shorter than a nanosecond"),
            (1e300, "--timeout 1e300: longer than a duration can be"),
        ] {
            let failure = timeout(secs).unwrap_err();
            assert_eq!(failure.exit, Exit::Usage);
            assert!(failure.message.starts_with(says), "{}", failure.message);
        }
    }
}
