//! A session's event journal, packed: each event is encoded into large shared byte chunks, so
//! a held event costs its raw frame, its text and a few bytes — not a struct, an `Arc` and five
//! separate heap strings. Reads decode events back (reads are replays and catch-ups, rare next
//! to writes).
//!
//! What makes it small: the session ID is the journal's own, a runtime-made event ID
//! (`<prefix>.<seq>`, one prefix per run of the session) is rebuilt from its seq and prefix, seqs are kept as runs of consecutive numbers,
//! timestamps as an offset from the first event's, and turn, provider and item IDs as indexes
//! into per-journal tables. Streamed deltas (`message_delta`, `reasoning_delta`,
//! `command_output_delta`) are encoded field by field; any other kind — a few per turn — is kept
//! whole in a side table.

use std::collections::HashMap;

use agent_core::event::{RawJson, SCHEMA_VERSION, SharedStr};
use agent_core::{Event, EventId, EventKind, ItemId, ProviderId, SessionId, Timestamp, TurnId};

/// Size of a chunk of encoded events; an event larger than this gets a chunk of its own size.
const CHUNK: usize = 64 << 10;

/// `flags` bits of an encoded event.
const ID_IN_SEQUENCE: u8 = 1;
const HAS_TURN: u8 = 1 << 1;
const OTHER_SESSION: u8 = 1 << 2;
const OTHER_SCHEMA: u8 = 1 << 3;
const HAS_RAW: u8 = 1 << 4;

/// Kind tags.
const MESSAGE_DELTA: u8 = 0;
const REASONING_DELTA: u8 = 1;
const COMMAND_OUTPUT_DELTA: u8 = 2;
const OTHER_KIND: u8 = 3;

/// Values stored once and named by index.
#[derive(Debug)]
struct Table<T> {
    values: Vec<T>,
    index: HashMap<T, u32>,
    /// The last value looked up: consecutive events almost always repeat it.
    last: Option<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { values: Vec::new(), index: HashMap::new(), last: None }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Table<T> {
    fn intern<Q>(&mut self, value: &Q, make: impl FnOnce(&Q) -> T) -> u32
    where
        T: std::borrow::Borrow<Q>,
        Q: ?Sized + Eq + std::hash::Hash,
    {
        if let Some(last) = self.last
            && self.values[last as usize].borrow() == value
        {
            return last;
        }
        let i = match self.index.get(value) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.values.len()).expect("fewer than 2^32 distinct IDs in a session");
                let value = make(value);
                self.values.push(value.clone());
                self.index.insert(value, i);
                i
            }
        };
        self.last = Some(i);
        i
    }

    fn get(&self, i: u64) -> &T {
        &self.values[i as usize]
    }
}

/// A session's events in seq order.
#[derive(Debug)]
pub(crate) struct EventLog {
    session: SessionId,
    chunks: Vec<Vec<u8>>,
    /// Where each event starts: chunk index in the high 32 bits, offset in the low 32.
    starts: Vec<u64>,
    /// Runs of consecutive seqs: `(first position, first seq)`, ascending in both.
    runs: Vec<(usize, u64)>,
    /// `at` of the first event; the others are stored as an offset from it.
    base_at: i64,
    /// Prefixes of event IDs made in sequence (`<prefix>.<seq>`): the runtime uses one per run
    /// of the session.
    prefixes: Table<Box<str>>,
    turns: Table<TurnId>,
    providers: Table<ProviderId>,
    items: Table<ItemId>,
    /// Kinds other than streamed deltas, whole.
    others: Vec<EventKind>,
    /// Positions of each turn's events, as `[start, end)` ranges (a turn's events are nearly
    /// always consecutive), but for the range being appended to, in `open_range`.
    by_turn: HashMap<u32, Vec<(usize, usize)>>,
    /// The turn of the last event with one and its range so far: extended without a lookup.
    open_range: Option<(u32, usize, usize)>,
    /// Event IDs not of the `<prefix>.<seq>` form, with their seqs.
    custom_ids: HashMap<EventId, u64>,
    /// Whether one of `custom_ids` has a dot (and so could look like a runtime-made ID).
    custom_dotted: bool,
    scratch: Vec<u8>,
}

impl EventLog {
    pub(crate) fn new(session: SessionId) -> Self {
        EventLog {
            session,
            chunks: Vec::new(),
            starts: Vec::new(),
            runs: Vec::new(),
            base_at: 0,
            prefixes: Table::default(),
            turns: Table::default(),
            providers: Table::default(),
            items: Table::default(),
            others: Vec::new(),
            by_turn: HashMap::new(),
            open_range: None,
            custom_ids: HashMap::new(),
            custom_dotted: false,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.len().checked_sub(1).map(|last| self.seq_at(last))
    }

    /// The seq of the event at `pos` (`pos < len`).
    pub(crate) fn seq_at(&self, pos: usize) -> u64 {
        let run = self.runs.partition_point(|&(first, _)| first <= pos) - 1;
        let (first, seq) = self.runs[run];
        seq + (pos - first) as u64
    }

    /// The end of the run that starts at `runs[run]`.
    fn run_end(&self, run: usize) -> usize {
        self.runs.get(run + 1).map_or(self.len(), |&(first, _)| first)
    }

    /// The position of the event with `seq`, if stored.
    pub(crate) fn position(&self, seq: u64) -> Option<usize> {
        let run = self.runs.partition_point(|&(_, first)| first <= seq).checked_sub(1)?;
        let (first, first_seq) = self.runs[run];
        let pos = first + usize::try_from(seq - first_seq).ok()?;
        (pos < self.run_end(run)).then_some(pos)
    }

    /// The position of the first event with a seq above `seq`.
    pub(crate) fn position_after(&self, seq: u64) -> usize {
        let Some(run) = self.runs.partition_point(|&(_, first)| first <= seq).checked_sub(1) else { return 0 };
        let (first, first_seq) = self.runs[run];
        let end = self.run_end(run);
        usize::try_from(seq - first_seq).map_or(end, |offset| (first + offset + 1).min(end))
    }

    /// The prefix of `event`'s ID if it is made in sequence for its seq: `<prefix>.<seq>`. An
    /// ID the runtime made has its parts at hand; any other is parsed.
    pub(crate) fn made_prefix(event: &Event) -> Option<&str> {
        match event.id.sequence() {
            Some((prefix, seq)) if seq == event.seq => Some(prefix),
            _ => Self::prefix_of(event.id.as_str(), event.seq),
        }
    }

    /// The prefix of `id` if it is made in sequence for `seq`: `<prefix>.<seq>`.
    pub(crate) fn prefix_of(id: &str, seq: u64) -> Option<&str> {
        let (prefix, digits) = id.rsplit_once('.')?;
        (parse_seq(digits) == Some(seq)).then_some(prefix)
    }

    /// The seq of the stored event whose ID is `id`.
    pub(crate) fn seq_of_id(&self, id: &EventId) -> Option<u64> {
        let dotted = id.as_str().rsplit_once('.');
        // Runtime-made IDs are dotted, generated ones are not: the custom IDs need looking at
        // only when one of them could be this one.
        if (dotted.is_none() || self.custom_dotted)
            && let Some(&seq) = self.custom_ids.get(id)
        {
            return Some(seq);
        }
        // The seq first: a new event's own ID names a seq not stored yet, found without hashing.
        let (prefix, digits) = dotted?;
        let pos = self.position(parse_seq(digits)?)?;
        let seq = self.seq_at(pos);
        let prefix = *self.prefixes.index.get(prefix)?;
        let mut r = self.reader(pos);
        (r.byte() & ID_IN_SEQUENCE != 0 && r.varint() == u64::from(prefix)).then_some(seq)
    }

    /// Whether some custom event ID has a dot, and so could look like one made in sequence.
    pub(crate) fn has_dotted_custom_ids(&self) -> bool {
        self.custom_dotted
    }

    fn reader(&self, pos: usize) -> Reader<'_> {
        let (chunk, offset) = split(self.starts[pos]);
        Reader { bytes: &self.chunks[chunk][offset..] }
    }

    /// Appends `event`, whose seq is above the last one.
    pub(crate) fn push(&mut self, event: &Event) {
        let pos = self.len();
        if pos == 0 {
            self.base_at = event.at.unix_micros();
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut flags = 0;
        let prefix = match Self::made_prefix(event) {
            Some(prefix) => Some(self.prefixes.intern(prefix, |prefix: &str| Box::from(prefix))),
            None => {
                self.custom_dotted |= event.id.as_str().contains('.');
                self.custom_ids.insert(event.id.clone(), event.seq);
                None
            }
        };
        if prefix.is_some() {
            flags |= ID_IN_SEQUENCE;
        }
        let turn = event.turn_id.as_ref().map(|turn| self.turns.intern(turn, TurnId::clone));
        if turn.is_some() {
            flags |= HAS_TURN;
        }
        if event.session_id != self.session {
            flags |= OTHER_SESSION;
        }
        if event.schema_version != SCHEMA_VERSION {
            flags |= OTHER_SCHEMA;
        }
        if event.raw.is_some() {
            flags |= HAS_RAW;
        }
        out.push(flags);
        if let Some(prefix) = prefix {
            put_varint(&mut out, u64::from(prefix));
        }
        put_varint(&mut out, zigzag(event.at.unix_micros().wrapping_sub(self.base_at)));
        put_varint(&mut out, u64::from(self.providers.intern(&event.provider, ProviderId::clone)));
        if let Some(turn) = turn {
            put_varint(&mut out, u64::from(turn));
        }
        if prefix.is_none() {
            put_str(&mut out, event.id.as_str());
        }
        if flags & OTHER_SESSION != 0 {
            put_str(&mut out, event.session_id.as_str());
        }
        if flags & OTHER_SCHEMA != 0 {
            put_varint(&mut out, u64::from(event.schema_version));
        }
        let raw = event.raw.as_ref().map(RawJson::get);
        if let Some(raw) = raw {
            put_str(&mut out, raw);
        }
        self.put_kind(&mut out, &event.kind, raw.unwrap_or(""));
        self.place(&out);
        self.scratch = out;

        match self.runs.last() {
            Some(&(first, seq)) if seq + (pos - first) as u64 + 1 == event.seq => {}
            _ => self.runs.push((pos, event.seq)),
        }
        if let Some(turn) = turn {
            match &mut self.open_range {
                Some((open, _, end)) if *open == turn && *end == pos => *end = pos + 1,
                open => {
                    if let Some((closed, start, end)) = open.replace((turn, pos, pos + 1)) {
                        self.by_turn.entry(closed).or_default().push((start, end));
                    }
                }
            }
        }
    }

    fn put_kind(&mut self, out: &mut Vec<u8>, kind: &EventKind, raw: &str) {
        fn item(out: &mut Vec<u8>, items: &mut Table<ItemId>, id: Option<&ItemId>) {
            let index = id.map_or(0, |id| u64::from(items.intern(id, ItemId::clone)) + 1);
            put_varint(out, index);
        }
        match kind {
            EventKind::MessageDelta { item_id, text } => {
                out.push(MESSAGE_DELTA);
                item(out, &mut self.items, item_id.as_ref());
                put_text(out, text, raw);
            }
            EventKind::ReasoningDelta { item_id, text } => {
                out.push(REASONING_DELTA);
                item(out, &mut self.items, item_id.as_ref());
                put_text(out, text, raw);
            }
            EventKind::CommandOutputDelta { item_id, text } => {
                out.push(COMMAND_OUTPUT_DELTA);
                item(out, &mut self.items, Some(item_id));
                put_text(out, text, raw);
            }
            other => {
                out.push(OTHER_KIND);
                put_varint(out, self.others.len() as u64);
                self.others.push(other.clone());
            }
        }
    }

    /// Copies an encoded event into the current chunk, or a new one.
    fn place(&mut self, record: &[u8]) {
        let fits = self.chunks.last().is_some_and(|chunk| chunk.capacity() - chunk.len() >= record.len());
        if !fits {
            self.chunks.push(Vec::with_capacity(CHUNK.max(record.len())));
        }
        let index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[index];
        let offset = chunk.len();
        chunk.extend_from_slice(record);
        let index = u32::try_from(index).expect("fewer than 2^32 chunks");
        let offset = u32::try_from(offset).expect("chunks under 4 GiB");
        self.starts.push(u64::from(index) << 32 | u64::from(offset));
    }

    /// The event at `pos` (`pos < len`).
    pub(crate) fn get(&self, pos: usize) -> Event {
        let mut r = self.reader(pos);
        let seq = self.seq_at(pos);
        let flags = r.byte();
        let prefix = (flags & ID_IN_SEQUENCE != 0).then(|| self.prefixes.get(r.varint()));
        let at = Timestamp::from_unix_micros(self.base_at.wrapping_add(unzigzag(r.varint())));
        let provider = self.providers.get(r.varint()).clone();
        let turn_id = (flags & HAS_TURN != 0).then(|| self.turns.get(r.varint()).clone());
        let id = if let Some(prefix) = prefix {
            EventId::from_string(format!("{prefix}.{seq}"))
        } else {
            EventId::from_string(r.str())
        };
        let session_id =
            if flags & OTHER_SESSION != 0 { SessionId::from_stored(r.str()) } else { self.session.clone() };
        let schema_version = if flags & OTHER_SCHEMA != 0 {
            u32::try_from(r.varint()).expect("encoded from a u32")
        } else {
            SCHEMA_VERSION
        };
        let raw = (flags & HAS_RAW != 0).then(|| r.str());
        let item = |r: &mut Reader<'_>| match r.varint() {
            0 => None,
            i => Some(self.items.get(i - 1).clone()),
        };
        let raw = raw.map(|raw| RawJson::parsed(raw.to_owned()));
        // A text kept as a place in the frame becomes a slice of the rebuilt frame.
        let text = |r: &mut Reader<'_>| match (r.text(), &raw) {
            (Text::InFrame(range), Some(raw)) => raw.share(&raw.get()[range]),
            (Text::InFrame(_), None) => unreachable!("a text is kept as a place in a frame only with one"),
            (Text::Kept(text), _) => SharedStr::from(text),
        };
        let kind = match r.byte() {
            MESSAGE_DELTA => EventKind::MessageDelta { item_id: item(&mut r), text: text(&mut r) },
            REASONING_DELTA => EventKind::ReasoningDelta { item_id: item(&mut r), text: text(&mut r) },
            COMMAND_OUTPUT_DELTA => EventKind::CommandOutputDelta {
                item_id: item(&mut r).expect("a command output delta has an item"),
                text: text(&mut r),
            },
            _ => self.others[r.varint() as usize].clone(),
        };
        let mut event = Event::from_parts(id, seq, session_id, turn_id, provider, at, kind, raw);
        event.schema_version = schema_version;
        event
    }

    /// Positions of `turn`'s events, ascending.
    pub(crate) fn turn_positions(&self, turn: &TurnId) -> impl Iterator<Item = usize> + '_ {
        let index = self.turns.index.get(turn).copied();
        let ranges = index.and_then(|i| self.by_turn.get(&i)).into_iter().flatten().copied();
        let open = self.open_range.filter(|&(open, _, _)| Some(open) == index).map(|(_, start, end)| (start, end));
        ranges.chain(open).flat_map(|(start, end)| start..end)
    }
}

fn split(start: u64) -> (usize, usize) {
    ((start >> 32) as usize, (start & u64::from(u32::MAX)) as usize)
}

/// A seq written in decimal without leading zeros, as `EventId`s made in sequence have it.
fn parse_seq(digits: &str) -> Option<u64> {
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    digits.parse().ok()
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// How many places starting with its first byte are tried when looking for a text in a frame.
const MAX_CANDIDATES: usize = 16;

/// The last place `text` starts in `raw`, looking at no more than [`MAX_CANDIDATES`] places that
/// start with its first byte (a general substring search costs more to set up than a short
/// delta is worth; a text not found is simply kept).
fn find_last(raw: &[u8], text: &[u8]) -> Option<usize> {
    let (&first, _) = text.split_first()?;
    let mut end = (raw.len() + 1).checked_sub(text.len())?;
    for _ in 0..MAX_CANDIDATES {
        let start = memchr::memrchr(first, &raw[..end])?;
        if raw[start..].starts_with(text) {
            return Some(start);
        }
        end = start;
    }
    None
}

/// A delta's text: where it is in the raw frame when the frame holds it verbatim (a delta
/// without escapes, the common case), so it is not kept twice; else the text itself.
fn put_text(out: &mut Vec<u8>, text: &SharedStr, raw: &str) {
    let place = if text.lies_in(raw.as_bytes()) {
        // A slice of the frame, as providers make them: where is a subtraction.
        Some(text.as_ptr() as usize - raw.as_ptr() as usize)
    } else {
        // The text is near the end of a frame more often than not.
        find_last(raw.as_bytes(), text.as_bytes())
    };
    match place {
        Some(offset) => {
            put_varint(out, (text.len() as u64) << 1 | 1);
            put_varint(out, offset as u64);
        }
        None => {
            put_varint(out, (text.len() as u64) << 1);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// A delta's text as [`put_text`] wrote it.
enum Text<'a> {
    /// Where it is in the event's frame.
    InFrame(std::ops::Range<usize>),
    /// The text itself.
    Kept(&'a str),
}

/// Reads back what `EventLog::push` wrote (the journal's own bytes, so never malformed).
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.bytes.split_first().expect("an encoded event is complete");
        self.bytes = rest;
        b
    }

    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte();
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    /// What [`put_text`] wrote.
    fn text(&mut self) -> Text<'a> {
        let tagged = self.varint();
        let len = usize::try_from(tagged >> 1).expect("a length that fit in memory");
        if tagged & 1 == 1 {
            let offset = usize::try_from(self.varint()).expect("an offset that fit in memory");
            return Text::InFrame(offset..offset + len);
        }
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Text::Kept(std::str::from_utf8(s).expect("encoded from a str"))
    }

    fn str(&mut self) -> &'a str {
        let len = usize::try_from(self.varint()).expect("a length that fit in memory");
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        std::str::from_utf8(s).expect("encoded from a str")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session: &SessionId, seq: u64, id: &str, kind: EventKind) -> Event {
        Event::from_parts(
            EventId::from_string(id),
            seq,
            session.clone(),
            Some(TurnId::from_string("turn-1")),
            ProviderId::new("codex"),
            Timestamp::now(),
            kind,
            Some(RawJson::parsed(format!("{{\"n\":{seq}}}"))),
        )
    }

    #[test]
    fn events_read_back_exactly_as_written() {
        let session = SessionId::new("s").unwrap();
        let mut log = EventLog::new(session.clone());
        let delta = |text: &str| EventKind::MessageDelta { item_id: Some("item-1".into()), text: text.into() };
        let mut written = vec![
            event(&session, 1, "evt_x.1", delta("héllo \"quoted\"")),
            event(&session, 2, "evt_x.2", EventKind::ReasoningDelta { item_id: None, text: String::new().into() }),
            event(&session, 3, "custom-id", delta("b")),
            event(&session, 7, "evt_x.7", EventKind::Warning { message: "gap".into() }),
            event(&session, 8, "evt_x.8", EventKind::CommandOutputDelta { item_id: "cmd".into(), text: "out".into() }),
            // The next run of the session: a prefix of its own.
            event(&session, 9, "evt_y.9", delta("{\"n\":9}")),
            // Dotted, but not this event's seq: a custom ID.
            event(&session, 10, "evt_x.4", delta("c")),
        ];
        written[1].turn_id = None;
        written[1].raw = None;
        written[2].session_id = SessionId::new("other").unwrap();
        written[2].schema_version = 9;
        written[3].at = Timestamp::from_unix_micros(written[0].at.unix_micros() - 5_000_000);
        for event in &written {
            log.push(event);
        }
        let read: Vec<Event> = (0..log.len()).map(|pos| log.get(pos)).collect();
        assert_eq!(read, written);
        assert_eq!(log.last_seq(), Some(10));
        assert_eq!(log.position(7), Some(3));
        assert_eq!(log.position(4), None);
        assert_eq!(log.position_after(3), 3);
        assert_eq!(log.position_after(0), 0);
        assert_eq!(log.position_after(8), 5);
        assert_eq!(log.position_after(9), 6);
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.4")), Some(10));
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_y.9")), Some(9));
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_y.8")), None, "seq 8 has another prefix");
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.7")), Some(7));
        assert_eq!(log.seq_of_id(&EventId::from_string("custom-id")), Some(3));
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.3")), None, "seq 3 has a custom ID");
        assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.07")), None);
        let turn: Vec<u64> = log.turn_positions(&TurnId::from_string("turn-1")).map(|p| log.seq_at(p)).collect();
        assert_eq!(turn, [1, 3, 7, 8, 9, 10]);
    }

    #[test]
    fn a_text_cut_from_its_frame_is_kept_as_its_place_and_read_back_as_a_slice() {
        let session = SessionId::new("s").unwrap();
        let mut log = EventLog::new(session.clone());
        // The text "ab" twice in the frame: the place it was cut from is the first.
        let raw = RawJson::parsed(r#"{"delta":"ab","again":"ab"}"#.to_owned());
        let text = raw.share(&raw.get()[10..12]);
        assert!(text.lies_in(raw.get().as_bytes()));
        let mut written = event(&session, 1, "evt_x.1", EventKind::MessageDelta { item_id: None, text });
        written.raw = Some(raw);
        log.push(&written);
        let start = log.chunks[0].len();
        let read = log.get(0);
        assert_eq!(read, written);
        let EventKind::MessageDelta { text, .. } = &read.kind else { panic!("{:?}", read.kind) };
        let frame = read.raw.as_ref().unwrap().get();
        assert!(text.lies_in(frame.as_bytes()), "read back as a slice of the frame");
        assert_eq!(text.as_ptr() as usize - frame.as_ptr() as usize, 10, "at the place it was cut from");
        assert!(start < 2 * frame.len(), "the text is not kept beside the frame ({start} bytes)");
    }

    #[test]
    fn a_text_is_found_at_its_last_place_or_kept() {
        assert_eq!(find_last(b"{\"a\":\"xy\",\"b\":\"xy\"}", b"xy"), Some(15));
        assert_eq!(find_last(b"xy", b"xy"), Some(0));
        assert_eq!(find_last(b"x", b"xy"), None);
        assert_eq!(find_last(b"abc", b""), None, "an empty text is kept, not pointed at");
        assert_eq!(find_last(b"say \"hi\"", b"say \"hi\""), Some(0));
        // Past MAX_CANDIDATES places that start like the text, it is kept instead.
        let many = [b"a".repeat(100), b"ab".to_vec()].concat();
        assert_eq!(find_last(&many, b"ab"), Some(100));
        let trap = [b"ab".to_vec(), b"a".repeat(100)].concat();
        assert_eq!(find_last(&trap, b"ab"), None);
    }

    #[test]
    fn varints_and_zigzag_round_trip_at_the_edges() {
        for v in [0, 1, -1, i64::MAX, i64::MIN, 1 << 35] {
            let mut out = Vec::new();
            put_varint(&mut out, zigzag(v));
            assert_eq!(unzigzag(Reader { bytes: &out }.varint()), v);
        }
    }
}
