#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod log;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use agent_core::store::{EventQuery, RequestQuery, Store, StoreError, WriteBatch};
use agent_core::{Event, EventId, Request, RequestId, SessionId, SessionSnapshot, SessionState, Turn, TurnId};
use async_trait::async_trait;

use crate::log::EventLog;

/// Retention bounds of a [`MemoryStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryLimits {
    /// How many sessions are retained; unlimited when `None`.
    pub max_sessions: Option<usize>,
}

impl MemoryLimits {
    /// Limits retention to `limit` sessions.
    pub fn max_sessions(limit: usize) -> Self {
        MemoryLimits { max_sessions: Some(limit) }
    }
}

/// The in-memory store. See the crate docs.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<BTreeMap<SessionId, Aggregate>>,
    limits: MemoryLimits,
}

#[derive(Debug)]
struct Aggregate {
    snapshot: SessionSnapshot,
    turns: Vec<Turn>,
    turn_index: HashMap<TurnId, usize>,
    requests: Vec<Request>,
    request_index: HashMap<RequestId, usize>,
    events: EventLog,
}

impl Aggregate {
    fn new(snapshot: SessionSnapshot) -> Self {
        let events = EventLog::new(snapshot.id.clone());
        Aggregate {
            snapshot,
            turns: Vec::new(),
            turn_index: HashMap::new(),
            requests: Vec::new(),
            request_index: HashMap::new(),
            events,
        }
    }

    /// Whether a record of `turn` is stored. Events name the turn saved last nearly always, and
    /// comparing with it (shared text first) costs less than hashing the ID.
    fn knows_turn(&self, turn: &TurnId) -> bool {
        self.turns.last().is_some_and(|last| last.id == *turn) || self.turn_index.contains_key(turn)
    }

    fn save_turn(&mut self, turn: &Turn) {
        match self.turn_index.get(&turn.id) {
            Some(&i) => self.turns[i] = turn.clone(),
            None => {
                self.turn_index.insert(turn.id.clone(), self.turns.len());
                self.turns.push(turn.clone());
            }
        }
    }

    fn save_request(&mut self, request: &Request) {
        match self.request_index.get(&request.id) {
            Some(&i) => self.requests[i] = request.clone(),
            None => {
                self.request_index.insert(request.id.clone(), self.requests.len());
                self.requests.push(request.clone());
            }
        }
    }

    /// Applies the records of a checked write: its turns, requests and new events.
    fn apply(&mut self, batch: &WriteBatch) {
        for turn in &batch.turns {
            self.save_turn(turn);
        }
        for request in &batch.requests {
            self.save_request(request);
        }
        self.append(&batch.events);
        if batch.snapshot.as_ref().is_some_and(|s| s.status == SessionState::Closed) {
            // Its last writes: room kept for more events would stay unused.
            self.events.shrink();
        }
    }

    /// Appends the new events of a checked write (those above the latest seq; the others are
    /// identical retries, checked before).
    fn append(&mut self, events: &[Arc<Event>]) {
        let last = self.events.last_seq().unwrap_or(0);
        for event in events.iter().filter(|e| e.seq > last) {
            self.events.push(event);
        }
    }

    /// Checks that the new events of a write bring IDs the session has not used — neither
    /// stored nor earlier in the same write.
    fn check_ids(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError> {
        let last = self.events.last_seq().unwrap_or(0);
        let new = || events.iter().map(|e| &**e).filter(move |e| e.seq > last);
        // IDs of this write not made in sequence (`<prefix>.<seq>`), with their seqs.
        let mut custom: HashMap<&EventId, u64> = HashMap::new();
        for event in new() {
            let made = EventLog::made_prefix(event).is_some();
            // An ID made for this (new) seq can only be stored as another event's custom ID.
            let stored =
                if made && !self.events.has_dotted_custom_ids() { None } else { self.events.seq_of_id(&event.id) };
            if let Some(stored) = stored {
                return Err(StoreError::Conflict(format!(
                    "event ID `{}` of seq {} is already stored at seq {stored} in session `{session}`",
                    event.id, event.seq
                )));
            }
            let twice = if made {
                // Seqs differ, so only a custom ID can repeat one made in sequence.
                custom.contains_key(&event.id)
            } else {
                // A custom ID, or one made in sequence for another event of this write.
                let made_for = event.id.as_str().rsplit_once('.').and_then(|(_, seq)| seq.parse::<u64>().ok());
                let repeats_made = made_for
                    .and_then(|seq| new().take_while(|e| e.seq <= seq).find(|e| e.seq == seq))
                    .is_some_and(|made| made.id == event.id);
                custom.insert(&event.id, event.seq).is_some() || repeats_made
            };
            if twice {
                return Err(StoreError::Conflict(format!(
                    "event ID `{}` appears twice in one write to session `{session}`",
                    event.id
                )));
            }
        }
        Ok(())
    }

    fn read(&self, query: &EventQuery) -> Vec<Arc<Event>> {
        let start = self.events.position_after(query.after.unwrap_or(0));
        let limit = query.limit.unwrap_or(usize::MAX);
        let read = |pos| Arc::new(self.events.get(pos));
        match &query.turn {
            None => (start..self.events.len()).take(limit).map(read).collect(),
            Some(turn) => self.events.turn_positions(turn).filter(|&pos| pos >= start).take(limit).map(read).collect(),
        }
    }
}

impl MemoryStore {
    /// An unbounded memory store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A memory store with retention bounds.
    pub fn with_limits(limits: MemoryLimits) -> Self {
        MemoryStore { inner: Mutex::default(), limits }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<SessionId, Aggregate>> {
        // Every critical section leaves the map consistent, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for one more session, evicting the least recently updated closed one.
    fn make_room(&self, map: &mut BTreeMap<SessionId, Aggregate>) -> Result<(), StoreError> {
        let Some(limit) = self.limits.max_sessions else { return Ok(()) };
        while map.len() >= limit {
            let victim = map
                .values()
                .filter(|a| a.snapshot.status == SessionState::Closed)
                .min_by_key(|a| a.snapshot.updated_at)
                .map(|a| a.snapshot.id.clone());
            match victim {
                Some(id) => {
                    map.remove(&id);
                }
                None => {
                    return Err(StoreError::WriteRefused(format!(
                        "memory store holds {limit} sessions and none is closed"
                    )));
                }
            }
        }
        Ok(())
    }

    fn upsert(&self, map: &mut BTreeMap<SessionId, Aggregate>, snapshot: &SessionSnapshot) -> Result<(), StoreError> {
        if let Some(aggregate) = map.get_mut(&snapshot.id) {
            aggregate.snapshot = snapshot.clone();
            return Ok(());
        }
        self.make_room(map)?;
        map.insert(snapshot.id.clone(), Aggregate::new(snapshot.clone()));
        Ok(())
    }

    /// Applies the whole batch under one lock, after checking it: either all of it lands or
    /// none of it does.
    fn write_batch(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let Some(session) = &batch.session_id else { return Ok(()) };
        let mut map = self.lock();
        if let Some(expect) = &batch.expect {
            expect.check(session, map.get(session).map(|aggregate| &aggregate.snapshot))?;
        }
        // The common case, records added to a stored session: one lookup, the same checks in the
        // same order as below, all before anything changes.
        if !batch.delete_first
            && let Some(aggregate) = map.get_mut(session)
        {
            check_turns(Some(aggregate), session, &batch.turns, &batch.requests, &batch.events)?;
            check_events(Some(aggregate), session, &batch.events)?;
            aggregate.check_ids(session, &batch.events)?;
            if let Some(snapshot) = &batch.snapshot {
                aggregate.snapshot = snapshot.clone();
            }
            aggregate.apply(batch);
            return Ok(());
        }
        // A new session, or one the batch replaces: nothing stored for the records to land on.
        let Some(snapshot) = &batch.snapshot else {
            let has_children = !(batch.turns.is_empty() && batch.requests.is_empty() && batch.events.is_empty());
            if has_children {
                return Err(StoreError::UnknownSession(session.clone()));
            }
            // No records: at most a delete.
            if batch.delete_first {
                map.remove(session);
            }
            return Ok(());
        };
        check_turns(None, session, &batch.turns, &batch.requests, &batch.events)?;
        check_events(None, session, &batch.events)?;
        // The new aggregate is built aside, so a refused write leaves the map alone.
        let mut fresh = Aggregate::new(snapshot.clone());
        fresh.check_ids(session, &batch.events)?;
        // A replaced session frees its own place.
        if !map.contains_key(session) {
            self.make_room(&mut map)?;
        }
        fresh.apply(batch);
        map.insert(session.clone(), fresh);
        Ok(())
    }
}

/// Checks that every request and turn-tagged event names a turn the session has a record of:
/// stored in `stored`, or among the `turns` written with them.
fn check_turns(
    stored: Option<&Aggregate>,
    session: &SessionId,
    turns: &[Turn],
    requests: &[Request],
    events: &[Arc<Event>],
) -> Result<(), StoreError> {
    let known = |turn: &TurnId| turns.iter().any(|t| t.id == *turn) || stored.is_some_and(|a| a.knows_turn(turn));
    let named = requests.iter().map(|r| &r.turn_id).chain(events.iter().filter_map(|e| e.turn_id.as_ref()));
    // Consecutive events almost always name the same turn: look it up once.
    let mut checked: Option<&TurnId> = None;
    for turn in named {
        if checked == Some(turn) {
            continue;
        }
        if !known(turn) {
            return Err(StoreError::UnknownTurn { session: session.clone(), turn: turn.clone() });
        }
        checked = Some(turn);
    }
    Ok(())
}

/// Checks the seqs of events appended to `stored` (`None`: a session stored empty, or replaced
/// by the same write): each is above the latest seq, or an identical retry of a stored event. An
/// identical retry must not appear twice in one write. Event IDs are checked afterwards
/// ([`Aggregate::check_ids`]), as the last check before anything changes.
fn check_events(stored: Option<&Aggregate>, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError> {
    let journal = stored.map(|a| &a.events);
    let stored_last = journal.and_then(EventLog::last_seq).unwrap_or(0);
    let mut last = stored_last;
    let mut retried = None;
    for event in events {
        if event.seq > last {
            last = event.seq;
            continue;
        }
        if event.seq <= stored_last && retried.is_some_and(|seq| event.seq <= seq) {
            return Err(StoreError::Conflict(format!(
                "event ID `{}` appears twice in one write to session `{session}`",
                event.id
            )));
        }
        retried = Some(event.seq);
        match journal.and_then(|j| j.position(event.seq).map(|pos| j.get(pos))) {
            Some(stored) if stored == **event => {}
            Some(_) => {
                return Err(StoreError::Conflict(format!("seq {} holds a different event", event.seq)));
            }
            None => {
                return Err(StoreError::Conflict(format!(
                    "seq {} is not above the latest stored seq {last}",
                    event.seq
                )));
            }
        }
    }
    Ok(())
}

fn aggregate<'a>(map: &'a mut BTreeMap<SessionId, Aggregate>, id: &SessionId) -> Result<&'a mut Aggregate, StoreError> {
    map.get_mut(id).ok_or_else(|| StoreError::UnknownSession(id.clone()))
}

#[async_trait]
impl Store for MemoryStore {
    async fn save_session(&self, snapshot: &SessionSnapshot) -> Result<(), StoreError> {
        let mut map = self.lock();
        self.upsert(&mut map, snapshot)
    }

    async fn fetch_session(&self, id: &SessionId) -> Result<Option<SessionSnapshot>, StoreError> {
        Ok(self.lock().get(id).map(|a| a.snapshot.clone()))
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSnapshot>, StoreError> {
        Ok(self.lock().values().map(|a| a.snapshot.clone()).collect())
    }

    /// Refuses an open snapshot ([`SessionSnapshot::is_open`]) with [`StoreError::SessionLive`].
    async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        let mut map = self.lock();
        if map.get(id).is_some_and(|a| a.snapshot.is_open()) {
            return Err(StoreError::SessionLive(id.clone()));
        }
        map.remove(id);
        Ok(())
    }

    async fn save_turn(&self, turn: &Turn) -> Result<(), StoreError> {
        aggregate(&mut self.lock(), &turn.session_id)?.save_turn(turn);
        Ok(())
    }

    async fn fetch_turn(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Turn>, StoreError> {
        let map = self.lock();
        Ok(map.get(session).and_then(|a| a.turn_index.get(turn).map(|&i| a.turns[i].clone())))
    }

    async fn list_turns(&self, session: &SessionId) -> Result<Vec<Turn>, StoreError> {
        Ok(self.lock().get(session).map(|a| a.turns.clone()).unwrap_or_default())
    }

    async fn save_request(&self, request: &Request) -> Result<(), StoreError> {
        let mut map = self.lock();
        let aggregate = aggregate(&mut map, &request.session_id)?;
        check_turns(Some(aggregate), &request.session_id, &[], std::slice::from_ref(request), &[])?;
        aggregate.save_request(request);
        Ok(())
    }

    async fn fetch_request(&self, session: &SessionId, request: &RequestId) -> Result<Option<Request>, StoreError> {
        let map = self.lock();
        Ok(map.get(session).and_then(|a| a.request_index.get(request).map(|&i| a.requests[i].clone())))
    }

    async fn list_requests(&self, session: &SessionId) -> Result<Vec<Request>, StoreError> {
        Ok(self.lock().get(session).map(|a| a.requests.clone()).unwrap_or_default())
    }

    /// Filters under the lock, cloning only the matching records.
    async fn read_requests(&self, session: &SessionId, query: &RequestQuery) -> Result<Vec<Request>, StoreError> {
        let map = self.lock();
        let Some(aggregate) = map.get(session) else { return Ok(Vec::new()) };
        Ok(aggregate.requests.iter().filter(|r| query.matches(r)).cloned().collect())
    }

    async fn append_events(&self, session: &SessionId, events: &[Arc<Event>]) -> Result<(), StoreError> {
        let mut map = self.lock();
        let aggregate = aggregate(&mut map, session)?;
        check_turns(Some(aggregate), session, &[], &[], events)?;
        check_events(Some(aggregate), session, events)?;
        aggregate.check_ids(session, events)?;
        aggregate.append(events);
        Ok(())
    }

    async fn read_events(&self, session: &SessionId, query: &EventQuery) -> Result<Vec<Arc<Event>>, StoreError> {
        Ok(self.lock().get(session).map(|a| a.read(query)).unwrap_or_default())
    }

    async fn latest_seq(&self, session: &SessionId) -> Result<Option<u64>, StoreError> {
        Ok(self.lock().get(session).and_then(|a| a.events.last_seq()))
    }

    async fn last_turn_event(&self, session: &SessionId, turn: &TurnId) -> Result<Option<Arc<Event>>, StoreError> {
        let map = self.lock();
        let last =
            map.get(session).and_then(|a| a.events.turn_positions(turn).next_back().map(|pos| a.events.get(pos)));
        Ok(last.map(Arc::new))
    }

    /// Applies the whole batch under one lock, after checking it: either all of it lands or
    /// none of it does.
    async fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.write_batch(batch)
    }

    /// The same write as [`Store::write`]: it never waits.
    fn write_now(&self, batch: &WriteBatch) -> Option<Result<(), StoreError>> {
        Some(self.write_batch(batch))
    }
}

#[cfg(test)]
mod tests {
    use agent_testkit::conformance::store::{event, snapshot};

    use super::*;

    /// A session's last write (its snapshot closed) gives back the room its log kept for more.
    #[test]
    fn a_closed_session_keeps_no_room_for_more_events() {
        let store = MemoryStore::new();
        let id = SessionId::new("closing").unwrap();
        let mut first = WriteBatch::new(id.clone());
        first.snapshot = Some(snapshot(&id, SessionState::Idle));
        first.events = vec![event(&id, 1, None, "ready")];
        store.write_batch(&first).unwrap();
        let spare = || store.lock().get(&id).unwrap().events.spare();
        assert!(spare() > 0, "room for the events to come");
        let mut last = WriteBatch::new(id.clone());
        last.snapshot = Some(snapshot(&id, SessionState::Closed));
        last.events = vec![event(&id, 2, None, "closed")];
        store.write_batch(&last).unwrap();
        assert_eq!(spare(), 0);
    }
}
