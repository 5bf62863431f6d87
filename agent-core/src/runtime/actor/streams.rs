//! Credentials kept out of streamed text that brings them in pieces.
//!
//! A provider redacts the credentials a CLI was given from each line it reads, but a model that
//! quotes a key streams it as deltas of a few characters each: no line holds the key, and the
//! deltas concatenate back to it. [`StreamRedactor`] watches each stream of deltas (the
//! messages, reasoning, command output and tool progress of one item of one turn) as one text.
//! Once the end of a stream is more than [`SHOWN`] bytes of a credential's beginning, it holds
//! the rest back instead of publishing it; a key that completes is replaced by [`REDACTED`],
//! and held text that turns out not to be a key goes out with the stream's next delta, or on
//! its own before the item's whole message or tool completion, or the end of the turn (or
//! session): a usage report or a warning between two pieces ends nothing. A credential inside
//! another one's beginning (a URL and its password) is held with it, so the longer one is
//! replaced whole. At most [`SHOWN`] bytes of a credential's beginning (`sk-`) are ever
//! published, against the eight or more a credential has.
//!
//! A delta the redactor changed carries no `raw`: the provider's line holds the piece it took
//! out. One it held back whole is not published (its text goes out with the next). A delta that
//! does not touch a credential passes as it came, after a `memchr` for the credentials' first
//! bytes.
//!
//! [`Learned`] holds the secret answers given to the session's requests, which no provider's
//! list of credentials has: they are added to the redactor's credentials once given, and
//! replaced in every other event (and request) the provider reports after them.

use memchr::memmem::Finder;

use crate::REDACTED;
use crate::event::{EventKind, RawJson};
use crate::ids::{ItemId, TurnId};
use crate::request::Request;
use crate::text::SharedStr;

/// The most bytes of a credential's beginning a stream publishes before it holds the rest.
pub(crate) const SHOWN: usize = 3;

/// The kinds of streamed text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Message,
    Reasoning,
    Command,
    /// A tool's progress messages (Codex streams a file change's output as them).
    Progress,
}

/// One stream whose end may be the beginning of a credential.
#[derive(Debug)]
struct Stream {
    turn: Option<TurnId>,
    flow: Flow,
    item: Option<ItemId>,
    /// The stream's last bytes that are a credential's beginning.
    tail: String,
    /// How many of `tail`'s first bytes were published; the rest is held.
    shown: usize,
}

impl Stream {
    fn is(&self, turn: Option<&TurnId>, flow: Flow, item: Option<&ItemId>) -> bool {
        self.flow == flow && self.turn.as_ref() == turn && self.item.as_ref() == item
    }

    /// The held text, a credential in it replaced, as a delta of this stream.
    fn release(self, credentials: &Credentials) -> Option<EventKind> {
        let Stream { flow, item, mut tail, shown, .. } = self;
        if shown == tail.len() {
            return None;
        }
        credentials.redact(&mut tail, shown);
        tail.drain(..shown);
        Some(delta(flow, item, tail.into()))
    }
}

/// The credentials, and what finds them fast.
struct Credentials {
    /// Longest first, so that a credential holding another is replaced whole.
    finders: Vec<Finder<'static>>,
    /// Whether a byte begins a credential.
    first: [bool; 256],
    /// The bytes that begin one (searched for with `memchr` when there are at most three, else
    /// through `first`).
    firsts: Vec<u8>,
}

/// See the [module docs](self).
pub(crate) struct StreamRedactor {
    credentials: Credentials,
    streams: Vec<Stream>,
}

impl std::fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a credential, nor a piece of one.
        f.debug_struct("StreamRedactor").field("credentials", &self.credentials.finders.len()).finish_non_exhaustive()
    }
}

impl StreamRedactor {
    /// `None` when there is no credential to watch for.
    pub(crate) fn new(credentials: &[String]) -> Option<StreamRedactor> {
        let mut credentials: Vec<&String> = credentials.iter().filter(|c| !c.is_empty()).collect();
        credentials.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        credentials.dedup();
        if credentials.is_empty() {
            return None;
        }
        let mut first = [false; 256];
        for credential in &credentials {
            first[usize::from(credential.as_bytes()[0])] = true;
        }
        let firsts: Vec<u8> = (0..=u8::MAX).filter(|&b| first[usize::from(b)]).collect();
        let finders = credentials.iter().map(|c| Finder::new(c.as_bytes()).into_owned()).collect();
        Some(StreamRedactor { credentials: Credentials { finders, first, firsts }, streams: Vec::new() })
    }

    /// Adds `values` to the credentials held back and replaced, keeping the streams it watches
    /// (the text they hold back stays held).
    pub(crate) fn learn(&mut self, values: &[String]) {
        let mut all: Vec<String> =
            self.credentials.finders.iter().map(|f| String::from_utf8_lossy(f.needle()).into_owned()).collect();
        all.extend(values.iter().cloned());
        if let Some(fresh) = StreamRedactor::new(&all) {
            self.credentials = fresh.credentials;
        }
    }

    /// A delta of `turn` as it is to be published, with its raw line if it was not changed;
    /// `None` when all of it is held. Any other kind passes unchanged.
    pub(crate) fn delta(
        &mut self,
        turn: Option<&TurnId>,
        kind: EventKind,
        raw: Option<RawJson>,
    ) -> Option<(EventKind, Option<RawJson>)> {
        let Some((flow, item, text)) = parts(&kind) else { return Some((kind, raw)) };
        let at = self.streams.iter().position(|s| s.is(turn, flow, item));
        if at.is_none() && !self.credentials.touch(text) {
            return Some((kind, raw));
        }
        let (tail, shown) = at.map_or(("", 0), |i| (self.streams[i].tail.as_str(), self.streams[i].shown));
        let unchanged_before = shown == tail.len();
        let mut work = String::with_capacity(tail.len() + text.len());
        work.push_str(tail);
        work.push_str(text);
        // Decided on the text as it came: a shorter credential inside a longer one's beginning
        // is held with it, so the longer one is replaced whole once it completes.
        let open = self.credentials.open_at(&work);
        let (open, held_from) = if work.len() - open > SHOWN {
            // A whole credential reaching into the held text is held with it, from its start.
            let open = self.credentials.crossing(&work, open);
            (open, open.max(shown))
        } else {
            (open, work.len())
        };
        let mut published = work[..held_from].to_owned();
        let replaced = self.credentials.redact(&mut published, shown);
        let unchanged = unchanged_before && !replaced && held_from == work.len();
        let item = item.cloned();
        if open < work.len() {
            let stream = Stream {
                turn: turn.cloned(),
                flow,
                item: item.clone(),
                tail: work[open..].to_owned(),
                shown: held_from - open,
            };
            match at {
                Some(i) => self.streams[i] = stream,
                None => self.streams.push(stream),
            }
        } else if let Some(i) = at {
            self.streams.swap_remove(i);
        }
        if unchanged {
            return Some((kind, raw));
        }
        published.drain(..shown);
        (!published.is_empty()).then(|| (delta(flow, item, published.into()), None))
    }

    /// The held text of the streams a turn's event (not its terminal: see
    /// [`end_turn`](Self::end_turn)) ends, each as a delta to publish before it: a whole
    /// message ends the message streams of its item (a message without one, those without
    /// one), a tool's completion the streams of its item. Nothing else ends a stream: a usage
    /// report or a warning between two pieces of a key must not let the rest through.
    pub(crate) fn ended_by(&mut self, turn: Option<&TurnId>, kind: &EventKind) -> Vec<EventKind> {
        if self.streams.is_empty() {
            return Vec::new();
        }
        match kind {
            EventKind::AssistantMessage { item_id, .. } => self.take(|s| {
                s.turn.as_ref() == turn && s.item == *item_id && matches!(s.flow, Flow::Message | Flow::Reasoning)
            }),
            EventKind::ToolCompleted { item_id, .. } => {
                self.take(|s| s.turn.as_ref() == turn && s.item.as_ref() == Some(item_id))
            }
            _ => Vec::new(),
        }
    }

    /// The held text of every stream of `turn` (`None`: the session's own, at its end), which
    /// end with it.
    pub(crate) fn end_turn(&mut self, turn: Option<&TurnId>) -> Vec<EventKind> {
        self.take(|s| s.turn.as_ref() == turn)
    }

    fn take(&mut self, ends: impl Fn(&Stream) -> bool) -> Vec<EventKind> {
        let mut released = Vec::new();
        let mut i = 0;
        while i < self.streams.len() {
            if ends(&self.streams[i]) {
                released.extend(self.streams.remove(i).release(&self.credentials));
            } else {
                i += 1;
            }
        }
        released
    }
}

/// The secret answers given to a session's requests (answers to secret questions, values of
/// secret fields): the provider's CLI may report them back (an agent quoting what it was told),
/// and no credential list of the provider's holds them. Every event the provider reports after
/// one was given has them replaced by [`REDACTED`]: found in the event's JSON, in the form a
/// JSON string holds them, and the event's raw line dropped when it holds one. A session that
/// never had a secret answer pays nothing; one that had pays a serialization of each event.
#[derive(Default)]
pub(crate) struct Learned {
    /// Each value as a JSON string's text holds it (escaped), longest first.
    escaped: Vec<String>,
    /// Each value as it is, and escaped, to look for in a raw line.
    finders: Vec<Finder<'static>>,
}

impl std::fmt::Debug for Learned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learned").field("values", &self.escaped.len()).finish()
    }
}

impl Learned {
    /// Adds `values` (each non-empty).
    pub(crate) fn add(&mut self, values: &[String]) {
        for value in values.iter().filter(|v| !v.is_empty()) {
            let quoted = serde_json::to_string(value).unwrap_or_default();
            let escaped = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default().to_owned();
            for needle in [value.as_str(), escaped.as_str()] {
                if !self.finders.iter().any(|f| f.needle() == needle.as_bytes()) {
                    self.finders.push(Finder::new(needle.as_bytes()).into_owned());
                }
            }
            if !self.escaped.contains(&escaped) {
                self.escaped.push(escaped);
            }
        }
        self.escaped.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }

    /// Replaces every value in `kind`, and drops `raw` when it holds one.
    pub(crate) fn redact(&self, kind: &mut EventKind, raw: &mut Option<RawJson>) {
        self.drop_raw(raw);
        if let Some(replaced) = self.rewritten(kind) {
            *kind = replaced;
        }
    }

    /// Replaces every value in what `request` asks (its prompt, questions, choices, schema and
    /// metadata; not the IDs it is answered by), and drops `raw` when it holds one: an agent
    /// may ask approval for a command that holds the answer it was given.
    pub(crate) fn redact_request(&self, request: &mut Request, raw: &mut Option<RawJson>) {
        self.drop_raw(raw);
        if let Some(mut replaced) = self.rewritten(request) {
            replaced.id = request.id.clone();
            replaced.provider_ref = request.provider_ref.clone();
            *request = replaced;
        }
    }

    /// Drops `raw` when it holds a value.
    pub(crate) fn drop_raw(&self, raw: &mut Option<RawJson>) {
        if raw.as_ref().is_some_and(|raw| self.finders.iter().any(|f| f.find(raw.get().as_bytes()).is_some())) {
            *raw = None;
        }
    }

    /// `value` rebuilt from its JSON with every value replaced; `None` when it holds none.
    /// Escaped, a value holds no quote of its own, so a replacement inside a string keeps the
    /// JSON readable; one that matched outside a string (a value that reads as a number) does
    /// not, and `value` stays as it was.
    fn rewritten<T: serde::Serialize + serde::de::DeserializeOwned>(&self, value: &T) -> Option<T> {
        let json = serde_json::to_string(value).ok()?;
        if !self.escaped.iter().any(|v| json.contains(v.as_str())) {
            return None;
        }
        let redacted = self.escaped.iter().fold(json, |json, v| json.replace(v.as_str(), REDACTED));
        serde_json::from_str(&redacted).ok()
    }
}

impl Credentials {
    /// Whether `text` holds a credential or ends with the beginning of one. Only where a byte
    /// begins one is looked at: a delta of English text against a key has one or two such.
    fn touch(&self, text: &str) -> bool {
        let bytes = text.as_bytes();
        let touches = |at: usize| {
            self.finders.iter().any(|f| {
                let needle = f.needle();
                needle[0] == bytes[at] && (bytes[at..].starts_with(needle) || needle.starts_with(&bytes[at..]))
            })
        };
        match self.firsts[..] {
            [a] => memchr::memchr_iter(a, bytes).any(touches),
            [a, b] => memchr::memchr2_iter(a, b, bytes).any(touches),
            [a, b, c] => memchr::memchr3_iter(a, b, c, bytes).any(touches),
            _ => (0..bytes.len()).filter(|&at| self.first[usize::from(bytes[at])]).any(touches),
        }
    }

    /// Replaces every credential in `work` that ends after its first `shown` bytes (published
    /// already, and left as they are) by [`REDACTED`]. Returns whether it replaced any.
    fn redact(&self, work: &mut String, shown: usize) -> bool {
        let mut replaced = false;
        for finder in &self.finders {
            let mut from = 0;
            while let Some(at) = finder.find(&work.as_bytes()[from..]) {
                let (start, end) = ((from + at).max(shown), from + at + finder.needle().len());
                if end <= shown {
                    from = end;
                    continue;
                }
                work.replace_range(start..end, REDACTED);
                from = start + REDACTED.len();
                replaced = true;
            }
        }
        replaced
    }

    /// Where the held text starting at `open` must start instead so that no whole credential
    /// begins before it and ends inside it.
    fn crossing(&self, text: &str, mut open: usize) -> usize {
        loop {
            let crossing = self.finders.iter().filter_map(|f| {
                f.find_iter(text.as_bytes())
                    .map(|at| (at, at + f.needle().len()))
                    .find(|&(at, end)| at < open && end > open)
            });
            match crossing.map(|(at, _)| at).min() {
                Some(at) => open = at,
                None => return open,
            }
        }
    }

    /// Where the longest end of `text` that is the beginning of a credential (not all of it)
    /// starts; `text.len()` when none is.
    fn open_at(&self, text: &str) -> usize {
        let bytes = text.as_bytes();
        let longest = self.finders.first().map_or(0, |f| f.needle().len());
        let from = bytes.len().saturating_sub(longest - 1);
        // A credential begins at a character boundary, so a match does too.
        (from..bytes.len())
            .filter(|&at| self.first[usize::from(bytes[at])])
            .find(|&at| {
                self.finders.iter().any(|f| f.needle().len() > bytes.len() - at && f.needle().starts_with(&bytes[at..]))
            })
            .unwrap_or(bytes.len())
    }
}

/// A streamed kind's flow, item and text.
fn parts(kind: &EventKind) -> Option<(Flow, Option<&ItemId>, &str)> {
    match kind {
        EventKind::MessageDelta { item_id, text } => Some((Flow::Message, item_id.as_ref(), text.as_str())),
        EventKind::ReasoningDelta { item_id, text } => Some((Flow::Reasoning, item_id.as_ref(), text.as_str())),
        EventKind::CommandOutputDelta { item_id, text } => Some((Flow::Command, Some(item_id), text.as_str())),
        EventKind::ToolProgress { item_id, message } => Some((Flow::Progress, Some(item_id), message.as_str())),
        _ => None,
    }
}

fn delta(flow: Flow, item: Option<ItemId>, text: SharedStr) -> EventKind {
    match flow {
        Flow::Message => EventKind::MessageDelta { item_id: item, text },
        Flow::Reasoning => EventKind::ReasoningDelta { item_id: item, text },
        Flow::Command => EventKind::CommandOutputDelta { item_id: item.expect("command output has an item"), text },
        Flow::Progress => {
            EventKind::ToolProgress { item_id: item.expect("progress has an item"), message: text.to_string() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-0123456789";

    fn redactor() -> StreamRedactor {
        StreamRedactor::new(&[KEY.to_owned(), "ghp_abcdefgh".to_owned()]).expect("credentials")
    }

    fn message(text: &str) -> EventKind {
        EventKind::MessageDelta { item_id: Some(ItemId::new("msg_1")), text: text.into() }
    }

    fn text(kind: &EventKind) -> &str {
        parts(kind).expect("a delta").2
    }

    /// The published texts of `pieces` streamed as one message, then ended, and whether each
    /// published delta kept its raw line.
    fn stream(redactor: &mut StreamRedactor, turn: &TurnId, pieces: &[&str]) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for piece in pieces {
            let raw = RawJson::from_string(format!("{{\"delta\":{}}}", serde_json::to_string(piece).unwrap()));
            if let Some((kind, raw)) = redactor.delta(Some(turn), message(piece), Some(raw.unwrap())) {
                out.push((text(&kind).to_owned(), raw.is_some()));
            }
        }
        let end = EventKind::AssistantMessage { item_id: Some(ItemId::new("msg_1")), text: String::new() };
        out.extend(redactor.ended_by(Some(turn), &end).iter().map(|k| (text(k).to_owned(), false)));
        out
    }

    fn joined(out: &[(String, bool)]) -> String {
        out.iter().map(|(t, _)| t.as_str()).collect()
    }

    #[test]
    fn a_key_streamed_in_pieces_is_redacted_and_only_its_first_bytes_are_published() {
        let turn = TurnId::generate();
        let mut r = redactor();
        let out = stream(&mut r, &turn, &["Your key is ", "sk", "-li", "ve-01", "2345", "6789", ", keep it."]);
        // "sk" was published (two bytes), the rest held until it completed.
        assert_eq!(joined(&out), "Your key is sk[redacted], keep it.");
        assert!(out.iter().all(|(t, _)| !t.contains("ve-01") && !t.contains("2345")), "{out:?}");
        // Deltas that touched no credential keep their raw line; changed ones have none.
        assert_eq!(out[0], ("Your key is ".to_owned(), true));
        assert!(out.iter().filter(|(t, _)| t.contains("[redacted]")).all(|(_, raw)| !raw));
        assert!(r.streams.is_empty());
    }

    #[test]
    fn held_text_that_is_no_key_goes_out_with_the_next_delta_or_at_the_items_end() {
        let turn = TurnId::generate();
        let mut r = redactor();
        let out = stream(&mut r, &turn, &["ask sk-li", "ght questions", " and sk-live"]);
        let texts: Vec<&str> = out.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(texts, ["ask ", "sk-light questions", " and ", "sk-live"], "the last released at the item's end");
        assert!(out.iter().all(|(_, raw)| !raw), "each was changed");
        assert!(r.streams.is_empty());
    }

    #[test]
    fn a_short_match_is_published_and_still_completes_a_key() {
        let turn = TurnId::generate();
        let mut r = redactor();
        // "sk-" is published (three bytes), then the key completes across the next deltas.
        let out = stream(&mut r, &turn, &["a sk-", "live-0123456789 b"]);
        assert_eq!(out[0], ("a sk-".to_owned(), true), "three bytes are not held");
        assert_eq!(joined(&out), "a sk-[redacted] b");
        // A whole key in one delta, and one after a piece of text that only looked like one.
        let out = stream(&mut r, &turn, &["sk-li", "sk-live-0123456789"]);
        assert_eq!(joined(&out), "sk-li[redacted]");
    }

    #[test]
    fn streams_of_other_items_and_kinds_do_not_mix_and_a_terminal_releases_them() {
        let turn = TurnId::generate();
        let mut r = redactor();
        let item = |n: &str| ItemId::new(n);
        let reasoning = EventKind::ReasoningDelta { item_id: Some(item("r")), text: "ghp_ab".into() };
        assert!(r.delta(Some(&turn), reasoning, None).is_none(), "held whole");
        let output = EventKind::CommandOutputDelta { item_id: item("c"), text: "cdefgh\n".into() };
        let (kind, _) = r.delta(Some(&turn), output, None).expect("published");
        assert_eq!(text(&kind), "cdefgh\n", "another stream does not complete the key");
        let done = EventKind::ToolCompleted {
            item_id: item("c"),
            status: crate::event::ToolStatus::Completed,
            output: None,
            exit_code: None,
        };
        assert!(r.ended_by(Some(&turn), &done).is_empty(), "the reasoning stream is not the tool's");
        let more = EventKind::ReasoningDelta { item_id: Some(item("r")), text: "cdefgh!".into() };
        let (kind, raw) = r.delta(Some(&turn), more, None).expect("published");
        assert_eq!((text(&kind), raw.is_none()), ("[redacted]!", true));
        let held = EventKind::MessageDelta { item_id: None, text: "sk-live-01".into() };
        assert!(r.delta(Some(&turn), held, None).is_none());
        // A session-level stream is not the turn's: it ends with the session.
        let session_level = EventKind::MessageDelta { item_id: None, text: "ghp_abcd".into() };
        assert!(r.delta(None, session_level, None).is_none());
        let released = r.end_turn(Some(&turn));
        assert_eq!(released.iter().map(text).collect::<Vec<_>>(), ["sk-live-01"]);
        assert_eq!(r.end_turn(None).iter().map(text).collect::<Vec<_>>(), ["ghp_abcd"]);
        assert!(r.streams.is_empty());
    }

    #[test]
    fn a_delta_held_whole_is_not_published_and_no_credential_means_no_redactor() {
        let turn = TurnId::generate();
        let mut r = redactor();
        assert!(r.delta(Some(&turn), message("sk"), None).is_some_and(|(k, raw)| text(&k) == "sk" && raw.is_none()));
        assert!(r.delta(Some(&turn), message("-l"), None).is_none(), "all of it is held");
        assert!(r.delta(Some(&turn), message("ive-0123456789"), None).is_some_and(|(k, _)| text(&k) == "[redacted]"));
        assert!(StreamRedactor::new(&[]).is_none() && StreamRedactor::new(&[String::new()]).is_none());
        // Other kinds pass untouched.
        let usage = EventKind::Warning { message: "sk-live-0123456789".into() };
        assert!(matches!(r.delta(Some(&turn), usage, None), Some((EventKind::Warning { .. }, None))));
    }

    #[test]
    fn other_events_between_pieces_do_not_end_a_stream_and_progress_is_one() {
        let turn = TurnId::generate();
        let mut r = redactor();
        let tool = ItemId::new("file_1");
        let progress = |text: &str| EventKind::ToolProgress { item_id: tool.clone(), message: text.into() };
        let mut out = String::new();
        for (i, piece) in ["wrote .env: KEY=sk-li", "ve-0123", "456789\n"].into_iter().enumerate() {
            if let Some((kind, _)) = r.delta(Some(&turn), progress(piece), None) {
                out.push_str(text(&kind));
            }
            if i == 0 {
                // A usage report, a warning and the tool's own progress naming no piece end nothing.
                for between in [EventKind::Warning { message: "slow".into() }, message("x")] {
                    assert!(r.ended_by(Some(&turn), &between).is_empty());
                }
            }
        }
        assert_eq!(out, "wrote .env: KEY=[redacted]\n");
        // A message without an item, a warning between its pieces.
        let no_item = |text: &str| EventKind::MessageDelta { item_id: None, text: text.into() };
        assert!(r.delta(Some(&turn), no_item("key: sk-live-01"), None).is_some());
        assert!(r.ended_by(Some(&turn), &EventKind::Warning { message: "w".into() }).is_empty());
        let (kind, _) = r.delta(Some(&turn), no_item("23456789 done"), None).expect("published");
        assert_eq!(text(&kind), "[redacted] done");
    }

    #[test]
    fn a_credential_inside_another_is_replaced_with_the_whole_one() {
        let url = "postgres://admin:Tr0ub4dor-x9@db.internal:5432/prod";
        let mut r = StreamRedactor::new(&[url.to_owned(), "Tr0ub4dor-x9".to_owned()]).expect("credentials");
        let turn = TurnId::generate();
        let pieces = ["DATABASE_URL=postgres://admin:Tr0ub", "4dor-x9@db.inter", "nal:5432/prod\n", "pw Tr0ub4dor-x9!"];
        assert_eq!(joined(&stream(&mut r, &turn, &pieces)), "DATABASE_URL=[redacted]\npw [redacted]!");
        // The password alone, then text that is not the rest of the URL.
        let pieces = ["postgres://admin:Tr0ub4dor-x9", " was the old one"];
        assert_eq!(joined(&stream(&mut r, &turn, &pieces)), "postgres://admin:[redacted] was the old one");
        // Held at the item's end: released with the inner credential replaced.
        assert_eq!(
            joined(&stream(&mut r, &turn, &["postgres://admin:Tr0ub4dor-x9@db"])),
            "postgres://admin:[redacted]@db"
        );
    }

    #[test]
    fn multibyte_text_is_split_at_character_boundaries() {
        let turn = TurnId::generate();
        let mut r = StreamRedactor::new(&["clé-секрет-1234".to_owned()]).expect("credential");
        let out = stream(&mut r, &turn, &["é clé-с", "екрет-1", "234 ✓"]);
        let texts: Vec<&str> = out.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(texts, ["é ", "[redacted] ✓"]);
    }

    #[test]
    fn any_split_of_any_text_publishes_it_with_each_key_redacted() {
        const WORDS: [&str; 12] =
            ["sk-", "sk", "s", "k", "-", "live", " ", "sk-live-0123456789", "-0123", "456789", "x", "sk-live-"];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        // Two credentials (their first bytes found with `memchr2`), five (a table), and three
        // inside one another (a URL and the password in it, say).
        let more = || {
            let five = [KEY, "ghp_abcdefgh", "xoxb-12345678", "AKIA12345678", "-----BEGIN KEY"].map(String::from);
            StreamRedactor::new(&five).expect("credentials")
        };
        let nested = || {
            let three = [KEY, "sk-live-01234567", "live-0123"].map(String::from);
            StreamRedactor::new(&three).expect("credentials")
        };
        let nested_credentials = [KEY, "sk-live-01234567", "live-0123"];
        for round in 0..6000 {
            let make = [redactor, more, nested][round % 3];
            let text: String = (0..next(12) + 1).map(|_| WORDS[next(WORDS.len())]).collect();
            let mut cuts: Vec<usize> = (0..next(8)).map(|_| next(text.len() + 1)).collect();
            cuts.extend([0, text.len()]);
            cuts.sort_unstable();
            let pieces: Vec<&str> = cuts.windows(2).map(|w| &text[w[0]..w[1]]).filter(|p| !p.is_empty()).collect();
            let turn = TurnId::generate();
            let out = joined(&stream(&mut make(), &turn, &pieces));
            let credentials: &[&str] = if round % 3 == 2 { &nested_credentials } else { &[KEY] };
            assert!(credentials.iter().all(|c| !out.contains(c)), "{pieces:?} -> {out:?}");
            // The text itself, each key replaced (longest first, as a whole text would be),
            // where at most its first three bytes may show.
            let mut expected = text.clone();
            for credential in credentials {
                expected = expected.replace(credential, REDACTED);
            }
            let mut rest = out.as_str();
            for (i, segment) in expected.split(REDACTED).enumerate() {
                if i > 0 {
                    let shown = (0..=SHOWN)
                        .rev()
                        .find(|&n| credentials.iter().any(|c| rest.starts_with(&format!("{}{REDACTED}", &c[..n]))));
                    let shown = shown.unwrap_or_else(|| panic!("{pieces:?} -> {out:?}, expected {expected:?}"));
                    rest = &rest[shown + REDACTED.len()..];
                }
                assert!(rest.starts_with(segment), "{pieces:?} -> {out:?}, expected {expected:?}");
                rest = &rest[segment.len()..];
            }
            assert!(rest.is_empty(), "{pieces:?} -> {out:?}, expected {expected:?}");
        }
    }
}
