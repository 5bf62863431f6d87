//! A session's event journal, packed: each event is encoded into large shared byte chunks, so a
//! held event costs a few bytes and what its raw frame does not share with an earlier one — not a
//! struct, an `Arc` and five separate heap strings. Reads decode events back (reads are replays and
//! catch-ups, rare next to writes).
//!
//! What makes it small: the session ID is the journal's own, a runtime-made event ID
//! (`<prefix>.<seq>`, one prefix per run of the session) is rebuilt from its seq and prefix, seqs
//! are kept as runs of consecutive numbers, timestamps as an offset from the first event's, and
//! turn, provider and item IDs as indexes into per-journal tables. Streamed deltas
//! (`message_delta`, `reasoning_delta`, `command_output_delta`) are encoded field by field; any
//! other kind — a few per turn — is kept whole in a side table.
//!
//! A raw frame is kept as what it does not share with its kind's *template*, the last frame of that
//! kind kept whole: the bytes the two start and end with are named by their lengths. A delta's
//! frame that holds its text — verbatim, or as the JSON string it decodes from when the CLI wrote
//! it with escapes — is instead kept in two such parts around the text (against the template's
//! parts around its own), and the text as its place in the frame: the fields after a text (a
//! time, a line's own ID) then share their start with the template's. Streamed frames differ
//! mostly in their text and a few digits or an ID, so a Codex delta's frame of ~225 bytes is kept
//! in ~65 with its header, a Claude one of ~280 (with a line ID of its own) in ~100 — which is
//! also what is written to memory per event, where first-touch page faults are the store's main
//! cost. A frame that shares less than half of itself with its template is kept whole and becomes
//! the template, and so does a frame holding its text when the template does not hold its own.
//! Reading one back takes its template's bytes, one level deep: a template is always kept whole;
//! an escaped text is decoded again.
//!
//! `codec` holds the byte encoding of a record, `frame` the frame and text comparisons.

use std::collections::HashMap;

mod codec;
mod frame;

use agent_core::event::{RawJson, SCHEMA_VERSION, SharedStr};
use agent_core::{Event, EventId, EventKind, ItemId, ProviderId, SessionId, Timestamp, TurnId};

use self::codec::{Reader, put_str, put_varint, unzigzag, zigzag};
use self::frame::{Place, Text, put_part, put_text, shared_ends, text_place, unescape};

/// Size of a chunk of encoded events; an event larger than this gets a chunk of its own size.
/// A session's first chunk is [`FIRST_CHUNK`], each next one twice the one before, up to this:
/// a short session does not hold 64 KiB.
const CHUNK: usize = 64 << 10;
const FIRST_CHUNK: usize = 4 << 10;

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

/// Bytes a frame must share with its template (at its start and end together) to be kept as
/// its difference from it — and at least half its length, else it is kept whole and becomes
/// the template: below this the lengths and the template's position cost about what they save.
const MIN_SHARED: usize = 16;

/// How a frame is kept: the low two bits of its first varint.
const FRAME_WHOLE: u64 = 0;
const FRAME_DIFF: u64 = 1;
const FRAME_SPLIT: u64 = 2;

/// A frame kept whole, that frames of its kind are kept against.
#[derive(Clone, Debug)]
struct Template {
    /// Position of its event.
    pos: usize,
    /// Where its bytes are: chunk index in the high 32 bits, offset in the low 32.
    at: u64,
    len: usize,
    /// Where its event's text (or the JSON string body it decodes from) is in it, as the
    /// event's record says.
    text: Option<std::ops::Range<usize>>,
}

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
    /// The template of each kind tag's frames.
    templates: [Option<Template>; 4],
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
            templates: [None, None, None, None],
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
        let tag = kind_tag(&event.kind);
        let text = delta_text(&event.kind);
        // Where a delta's text is in its frame; the template's says where to look for an
        // escaped one.
        let hint = self.templates[usize::from(tag)].as_ref().and_then(|t| t.text.as_ref()).map(|t| t.start);
        let place = text.zip(raw).and_then(|(text, raw)| text_place(text, raw, hint));
        // Where a frame kept whole starts in the record, to make it its kind's template.
        let range = place.as_ref().map(|place| place.range.clone());
        let whole = raw.and_then(|raw| self.put_raw(&mut out, pos, tag, raw, range.clone()));
        self.put_kind(&mut out, &event.kind, place.as_ref());
        self.place(&out);
        self.scratch = out;
        if let (Some(offset), Some(raw)) = (whole, raw) {
            let at = self.starts[pos] + offset as u64;
            self.templates[usize::from(tag)] = Some(Template { pos, at, len: raw.len(), text: range });
        }

        match self.runs.last() {
            // The event at `pos` continues the last run if its seq is the run's next.
            Some(&(first, seq)) if seq + (pos - first) as u64 == event.seq => {}
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

    /// Writes `raw`, the frame of the event at `pos` whose kind has `tag`, as its difference
    /// from the kind's template, or whole; whole, it says where its bytes start in `out`.
    ///
    /// A delta's frame whose text is in it, against a template whose text is too, is kept in
    /// two parts around the text (`FRAME_SPLIT`): what comes before the text against what comes
    /// before the template's, and likewise after — the fields after a text (a time, an ID of
    /// the line) share their start with the template's even where they do not share their end.
    /// Where the two parts share at least half the frame, the single difference is not tried:
    /// it would share more only where the two texts agree.
    fn put_raw(
        &self,
        out: &mut Vec<u8>,
        pos: usize,
        tag: u8,
        raw: &str,
        place: Option<std::ops::Range<usize>>,
    ) -> Option<usize> {
        // A frame whose text is in it does not use a template whose text is not (a delta the
        // CLI wrote with escapes): it could only be kept as one difference running from its text
        // to the last field that changed; kept whole, it becomes the template the next ones are
        // split against.
        if let Some(template) = &self.templates[usize::from(tag)]
            && (place.is_none() || template.text.is_some())
        {
            let (chunk, offset) = split(template.at);
            let shared = &self.chunks[chunk][offset..offset + template.len];
            let back = (pos - template.pos) as u64;
            if let (Some(place), Some(theirs)) = (place, template.text.clone()) {
                let (before, after) = (&raw[..place.start], &raw[place.end..]);
                let (before_shared, after_shared) =
                    (shared_ends(&shared[..theirs.start], before), shared_ends(&shared[theirs.end..], after));
                if before_shared.0 + before_shared.1 + after_shared.0 + after_shared.1 >= MIN_SHARED.max(raw.len() / 2)
                {
                    put_varint(out, back << 2 | FRAME_SPLIT);
                    put_part(out, before, before_shared);
                    put_str(out, &raw[place]);
                    put_part(out, after, after_shared);
                    return None;
                }
            }
            let ends = shared_ends(shared, raw);
            let diff = ends.0 + ends.1;
            if diff >= MIN_SHARED.max(raw.len() / 2) {
                put_varint(out, back << 2 | FRAME_DIFF);
                put_part(out, raw, ends);
                return None;
            }
        }
        put_varint(out, (raw.len() as u64) << 2 | FRAME_WHOLE);
        let start = out.len();
        out.extend_from_slice(raw.as_bytes());
        Some(start)
    }

    fn put_kind(&mut self, out: &mut Vec<u8>, kind: &EventKind, place: Option<&Place>) {
        fn item(out: &mut Vec<u8>, items: &mut Table<ItemId>, id: Option<&ItemId>) {
            let index = id.map_or(0, |id| u64::from(items.intern(id, ItemId::clone)) + 1);
            put_varint(out, index);
        }
        match kind {
            EventKind::MessageDelta { item_id, text } => {
                out.push(MESSAGE_DELTA);
                item(out, &mut self.items, item_id.as_ref());
                put_text(out, text, place);
            }
            EventKind::ReasoningDelta { item_id, text } => {
                out.push(REASONING_DELTA);
                item(out, &mut self.items, item_id.as_ref());
                put_text(out, text, place);
            }
            EventKind::CommandOutputDelta { item_id, text } => {
                out.push(COMMAND_OUTPUT_DELTA);
                item(out, &mut self.items, Some(item_id));
                put_text(out, text, place);
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
            let size = self.chunks.last().map_or(FIRST_CHUNK, |last| (last.capacity() * 2).clamp(FIRST_CHUNK, CHUNK));
            self.chunks.push(Vec::with_capacity(size.max(record.len())));
        }
        let index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[index];
        let offset = chunk.len();
        chunk.extend_from_slice(record);
        let index = u32::try_from(index).expect("fewer than 2^32 chunks");
        let offset = u32::try_from(offset).expect("chunks under 4 GiB");
        self.starts.push(u64::from(index) << 32 | u64::from(offset));
    }

    /// Gives back the room kept for events to come (a closed session's; one appended later
    /// gets a new chunk).
    pub(crate) fn shrink(&mut self) {
        if let Some(last) = self.chunks.last_mut() {
            last.shrink_to_fit();
        }
        self.starts.shrink_to_fit();
    }

    /// Bytes allocated for events and not yet used.
    #[cfg(test)]
    pub(crate) fn spare(&self) -> usize {
        self.chunks.iter().map(|chunk| chunk.capacity() - chunk.len()).sum()
    }

    /// The event at `pos` (`pos < len`).
    pub(crate) fn get(&self, pos: usize) -> Event {
        let mut r = self.reader(pos);
        let seq = self.seq_at(pos);
        let header = self.header(&mut r);
        let id = if let Some(prefix) = header.prefix {
            EventId::from_string(format!("{prefix}.{seq}"))
        } else {
            EventId::from_string(header.id)
        };
        let session_id = header.session.map_or_else(|| self.session.clone(), SessionId::from_stored);
        let turn_id = header.turn.map(|turn| self.turns.get(turn).clone());
        let at = Timestamp::from_unix_micros(self.base_at.wrapping_add(header.at));
        let provider = self.providers.get(header.provider).clone();
        let schema_version = header.schema_version;
        let raw = (header.flags & HAS_RAW != 0).then(|| RawJson::parsed(self.frame(&mut r, pos)));
        let item = |r: &mut Reader<'_>| match r.varint() {
            0 => None,
            i => Some(self.items.get(i - 1).clone()),
        };
        // A text kept as a place in the frame becomes a slice of the rebuilt frame, or, written
        // there with escapes, its decoding.
        let text = |r: &mut Reader<'_>| match (r.text(), &raw) {
            (Text::InFrame(Place { range, escaped: false }), Some(raw)) => raw.share(&raw.get()[range]),
            (Text::InFrame(Place { range, escaped: true }), Some(raw)) => SharedStr::from(unescape(&raw.get()[range])),
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

    /// Reads the fields before an event's frame.
    fn header<'a>(&'a self, r: &mut Reader<'a>) -> Header<'a> {
        let flags = r.byte();
        let prefix = (flags & ID_IN_SEQUENCE != 0).then(|| &**self.prefixes.get(r.varint()));
        let at = unzigzag(r.varint());
        let provider = r.varint();
        let turn = (flags & HAS_TURN != 0).then(|| r.varint());
        let id = if prefix.is_none() { r.str() } else { "" };
        let session = (flags & OTHER_SESSION != 0).then(|| r.str());
        let schema_version = if flags & OTHER_SCHEMA != 0 {
            u32::try_from(r.varint()).expect("encoded from a u32")
        } else {
            SCHEMA_VERSION
        };
        Header { flags, prefix, at, provider, turn, id, session, schema_version }
    }

    /// Reads back the frame [`Self::put_raw`] wrote for the event at `pos`.
    fn frame(&self, r: &mut Reader<'_>, pos: usize) -> String {
        let tagged = r.varint();
        let (mode, value) = (tagged & 3, tagged >> 2);
        if mode == FRAME_WHOLE {
            return r.str_of(value).to_owned();
        }
        let (template, theirs) = self.whole_frame(pos - usize::try_from(value).expect("a position back"));
        let mut frame = String::new();
        if mode == FRAME_DIFF {
            r.part(template, &mut frame);
            return frame;
        }
        let theirs = theirs.expect("a frame is split only against a template with its text");
        r.part(&template[..theirs.start], &mut frame);
        frame.push_str(r.str());
        r.part(&template[theirs.end..], &mut frame);
        frame
    }

    /// The frame of a template's event, which is kept whole, and where its text is in it.
    fn whole_frame(&self, pos: usize) -> (&str, Option<std::ops::Range<usize>>) {
        let mut r = self.reader(pos);
        self.header(&mut r);
        let tagged = r.varint();
        assert_eq!(tagged & 3, FRAME_WHOLE, "a template is kept whole");
        let frame = r.str_of(tagged >> 2);
        let text = match r.byte() {
            MESSAGE_DELTA | REASONING_DELTA | COMMAND_OUTPUT_DELTA => {
                r.varint();
                match r.text() {
                    Text::InFrame(place) => Some(place.range),
                    Text::Kept(_) => None,
                }
            }
            _ => None,
        };
        (frame, text)
    }

    /// Positions of `turn`'s events, ascending.
    pub(crate) fn turn_positions(&self, turn: &TurnId) -> impl DoubleEndedIterator<Item = usize> + '_ {
        let index = self.turns.index.get(turn).copied();
        let ranges = index.and_then(|i| self.by_turn.get(&i)).into_iter().flatten().copied();
        let open = self.open_range.filter(|&(open, _, _)| Some(open) == index).map(|(_, start, end)| (start, end));
        ranges.chain(open).flat_map(|(start, end)| start..end)
    }
}

/// The fields of an event before its frame, as [`EventLog::push`] wrote them.
struct Header<'a> {
    flags: u8,
    prefix: Option<&'a str>,
    /// Microseconds from the journal's first event.
    at: i64,
    provider: u64,
    turn: Option<u64>,
    /// Empty when made in sequence (from `prefix`).
    id: &'a str,
    session: Option<&'a str>,
    schema_version: u32,
}

fn kind_tag(kind: &EventKind) -> u8 {
    match kind {
        EventKind::MessageDelta { .. } => MESSAGE_DELTA,
        EventKind::ReasoningDelta { .. } => REASONING_DELTA,
        EventKind::CommandOutputDelta { .. } => COMMAND_OUTPUT_DELTA,
        _ => OTHER_KIND,
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

/// The text of a streamed delta.
fn delta_text(kind: &EventKind) -> Option<&SharedStr> {
    match kind {
        EventKind::MessageDelta { text, .. }
        | EventKind::ReasoningDelta { text, .. }
        | EventKind::CommandOutputDelta { text, .. } => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
