//! Reading a turn's events in provider tests: a [`Watched`] turn read event by event with an
//! idle deadline, and the checks the suites share ([`names`], [`count`], [`terminal`], [`sole_terminal`]).

use std::sync::Arc;
use std::time::Duration;

use agent_core::{Event, EventKind, Subscription, Turn, TurnEnd};

/// A turn and a subscription to its session taken before the turn started: none of its events
/// can be missed, even when the session ends right after the turn.
#[derive(Debug)]
pub struct Watched {
    turn: Turn,
    events: Subscription,
    seen: Vec<Arc<Event>>,
    idle: Duration,
}

impl Watched {
    /// Watches `turn` through `events`, a subscription taken before the turn started. Each read
    /// panics when no event comes within `idle`.
    pub fn new(turn: Turn, events: Subscription, idle: Duration) -> Self {
        Watched { turn, events, seen: Vec::new(), idle }
    }

    /// The turn watched.
    pub fn turn(&self) -> &Turn {
        &self.turn
    }

    /// Reads the turn's events (others of the session are skipped) up to the first one `stop`
    /// takes, which it returns. Panics when the turn ends before, the events end, or no event
    /// comes within the idle deadline; the message names the events seen.
    pub async fn until(&mut self, stop: impl Fn(&Event) -> bool) -> Arc<Event> {
        let idle = self.idle;
        loop {
            let next = tokio::time::timeout(idle, self.events.next()).await;
            let next = next.unwrap_or_else(|_| panic!("no event within {idle:?}; events: {}", names(&self.seen)));
            let event = match next {
                Some(Ok(event)) => event,
                other => panic!("the session's events ended ({other:?}); events: {}", names(&self.seen)),
            };
            if event.turn_id.as_ref() != Some(&self.turn.id) {
                continue;
            }
            self.seen.push(Arc::clone(&event));
            if stop(&event) {
                return event;
            }
            assert!(!event.is_terminal(), "the turn ended early: {}", names(&self.seen));
        }
    }

    /// The turn's events up to its terminal event.
    pub async fn into_events(mut self) -> Vec<Arc<Event>> {
        self.until(Event::is_terminal).await;
        self.seen
    }
}

/// The events' type names, space-separated, for assertion messages.
pub fn names(events: &[Arc<Event>]) -> String {
    events.iter().map(|e| e.type_name()).collect::<Vec<_>>().join(" ")
}

/// How the turn ended: the last event's end. Panics (naming the events) when the last event is
/// not terminal.
#[track_caller]
pub fn terminal(events: &[Arc<Event>]) -> &TurnEnd {
    events.last().and_then(|e| e.kind.terminal_end()).unwrap_or_else(|| panic!("no terminal event: {}", names(events)))
}

/// The turn's terminal event, checking that it is the only one and the last.
#[track_caller]
pub fn sole_terminal(events: &[Arc<Event>]) -> &TurnEnd {
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "exactly one terminal event: {}", names(events));
    events.last().and_then(|e| e.kind.terminal_end()).unwrap_or_else(|| panic!("not terminal: {}", names(events)))
}

/// How many of the events are of the type named `name` (see `Event::type_name`).
pub fn count(events: &[Arc<Event>], name: &str) -> usize {
    events.iter().filter(|e| e.type_name() == name).count()
}

/// The texts of the `message_delta` events, in order.
pub fn delta_texts(events: &[Arc<Event>]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MessageDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
