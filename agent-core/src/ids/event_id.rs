//! [`EventId`]: a generated ID, or one the session runtime makes from its session's prefix and
//! an event's seq, written inside the value.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{generate_with_prefix, stored_id_problem};

/// An event ID: generated (`evt_…`), or made by the session runtime from its session's prefix
/// and the event's seq (`<prefix>.<seq>`), or any other string a store or wire format holds.
///
/// An ID made in sequence is written in place, inside the value: the runtime makes one per
/// event, and it costs no allocation. Equality, order and hashing are those of the text,
/// whatever the form.
#[derive(Clone)]
pub struct EventId(EventIdRepr);

/// Bytes an ID made in sequence holds in place: a generated prefix (30 bytes), a dot and any
/// `u64` in decimal (20 digits) fit.
const INLINE_ID: usize = 54;

#[derive(Clone)]
enum EventIdRepr {
    Text(Arc<str>),
    InSequence {
        seq: u64,
        /// `bytes[..prefix]` is the prefix; `bytes[..len]` the whole ID.
        prefix: u8,
        len: u8,
        bytes: [u8; INLINE_ID],
    },
}

impl EventId {
    /// A new unique event ID (`evt_…`): the current millisecond and 80 random bits.
    ///
    /// # Panics
    ///
    /// If the operating system cannot supply random bytes.
    pub fn generate() -> Self {
        EventId(EventIdRepr::Text(Arc::from(generate_with_prefix("evt_"))))
    }

    /// Wraps an identifier read back from a store or a wire format.
    ///
    /// No format is enforced: identifiers written by other versions stay readable.
    pub fn from_string(id: impl Into<String>) -> Self {
        EventId(EventIdRepr::Text(Arc::from(id.into())))
    }

    /// The ID of the event with `seq` in a session whose event IDs start with `prefix` (a
    /// generated event ID): `<prefix>.<seq>`, as the session runtime makes them. Unique as long as
    /// prefixes are, and cheaper than a fresh random ID per event: nothing is allocated (a prefix
    /// longer than a generated ID's is kept as text).
    pub fn in_sequence(prefix: &str, seq: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        let mut rest = seq;
        loop {
            start -= 1;
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let digits = &digits[start..];
        let len = prefix.len() + 1 + digits.len();
        if len > INLINE_ID {
            return EventId::from_string(format!("{prefix}.{seq}"));
        }
        let mut bytes = [0u8; INLINE_ID];
        bytes[..prefix.len()].copy_from_slice(prefix.as_bytes());
        bytes[prefix.len()] = b'.';
        bytes[prefix.len() + 1..len].copy_from_slice(digits);
        // Both fit in a byte: `len <= INLINE_ID`.
        EventId(EventIdRepr::InSequence { seq, prefix: prefix.len() as u8, len: len as u8, bytes })
    }

    /// Makes `self` the ID of `seq` in `prefix`'s sequence, as [`EventId::in_sequence`] would:
    /// in place when it is an ID of that sequence already (only the digits change, without
    /// copying the prefix or the whole value), and by replacing it otherwise. The session runtime
    /// writes each new event into the allocation of one the replay ring let go, whose ID is of
    /// its own sequence.
    pub(crate) fn set_in_sequence(&mut self, prefix: &str, seq: u64) {
        let end = prefix.len() + 1 + seq.checked_ilog10().map_or(1, |log| log as usize + 1);
        if let EventIdRepr::InSequence { seq: held, prefix: at, len, bytes } = &mut self.0
            && end <= INLINE_ID
            && usize::from(*at) == prefix.len()
            && &bytes[..prefix.len()] == prefix.as_bytes()
        {
            let mut rest = seq;
            for slot in bytes[prefix.len() + 1..end].iter_mut().rev() {
                *slot = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            // Fits in a byte: `end <= INLINE_ID`.
            (*held, *len) = (seq, end as u8);
            return;
        }
        *self = EventId::in_sequence(prefix, seq);
    }

    /// The prefix and seq of an ID the session runtime made in sequence (`<prefix>.<seq>`);
    /// `None` for any other ID (even one whose text has that shape: parse [`EventId::as_str`]
    /// for those).
    pub fn sequence(&self) -> Option<(&str, u64)> {
        match &self.0 {
            EventIdRepr::InSequence { seq, prefix, .. } => Some((&self.as_str()[..usize::from(*prefix)], *seq)),
            EventIdRepr::Text(_) => None,
        }
    }

    /// The identifier as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            EventIdRepr::Text(text) => text,
            EventIdRepr::InSequence { len, bytes, .. } => {
                let text = &bytes[..usize::from(*len)];
                debug_assert!(std::str::from_utf8(text).is_ok());
                // SAFETY: `in_sequence` writes `bytes` as a `&str` (the prefix), a `.` and ASCII
                // digits, and `len` ends after the last digit: a whole UTF-8 sequence;
                // `set_in_sequence`, the only other writer, rewrites only the digits after that
                // `.` and ends `len` after them. Checking it again on every call cost stores a fifth of
                // their write path (each event's ID is read twice or more per write).
                unsafe { std::str::from_utf8_unchecked(text) }
            }
        }
    }
}

impl PartialEq for EventId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EventId {}

impl PartialOrd for EventId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EventId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for EventId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As the text's, so that `Borrow<str>` holds.
        self.as_str().hash(state)
    }
}

impl Serialize for EventId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

// Reading an ID from JSON applies the rules of its kind: an empty or blank ID is never accepted
// from the outside.
impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = String::deserialize(deserializer)?;
        match stored_id_problem(&id) {
            Some(reason) => Err(serde::de::Error::custom(format_args!("invalid EventId {id:?}: {reason}"))),
            None => Ok(EventId::from_string(id)),
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl AsRef<str> for EventId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for EventId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::hash_of;
    use super::*;

    fn seq_id(prefix: &str, seq: u64) -> EventId {
        EventId::in_sequence(prefix, seq)
    }

    #[test]
    fn sequence_event_ids_are_the_prefix_a_dot_and_the_seq() {
        assert_eq!(seq_id("ev_01ABC", 0).as_str(), "ev_01ABC.0");
        assert_eq!(seq_id("ev_01ABC", 42).as_str(), "ev_01ABC.42");
        assert_eq!(seq_id("p", u64::MAX).as_str(), format!("p.{}", u64::MAX));
        let long = "x".repeat(200);
        assert_eq!(seq_id(&long, 7).as_str(), format!("{long}.7"), "longer than fits in place");
        assert_eq!(seq_id(&long, 7).sequence(), None, "kept as text");
        assert_eq!(seq_id("ev_01ABC", 42).sequence(), Some(("ev_01ABC", 42)));
        assert_eq!(EventId::from_string("ev_01ABC.42").sequence(), None, "only the runtime's own IDs have parts");
    }

    #[test]
    fn an_id_set_in_sequence_is_the_one_in_sequence_makes() {
        let long = "x".repeat(40);
        for prefix in ["evt_01JABCDEFGHJKMNPQRSTVWXYZ0", "p", long.as_str()] {
            for (from, to) in [(0, 1), (9, 10), (12_345, 7), (7, u64::MAX), (u64::MAX, 0), (99, 100)] {
                let mut id = seq_id(prefix, from);
                id.set_in_sequence(prefix, to);
                let made = seq_id(prefix, to);
                assert_eq!((id.as_str(), id.sequence()), (made.as_str(), made.sequence()), "{prefix} {from} -> {to}");
            }
        }
        // An ID of another sequence, or not made in one, is replaced.
        for mut id in [seq_id("evt_A", 5), seq_id("evt_AB", 5), EventId::from_string("evt_01AB.5"), EventId::generate()]
        {
            id.set_in_sequence("evt_01AB", 6);
            assert_eq!((id.as_str(), id.sequence()), ("evt_01AB.6", Some(("evt_01AB", 6))));
        }
    }

    #[test]
    fn an_id_made_in_sequence_is_its_text_in_every_comparison() {
        let made = seq_id("evt_01ABC", 42);
        let text = EventId::from_string("evt_01ABC.42");
        assert_eq!(made.to_string(), "evt_01ABC.42");
        assert_eq!(serde_json::to_string(&made).unwrap(), r#""evt_01ABC.42""#);
        assert_eq!(format!("{made:?}"), format!("{text:?}"));
        assert_eq!(made, text);
        assert_eq!(text, made);
        assert_eq!(made, seq_id("evt_01ABC", 42));
        for other in [seq_id("evt_01ABC", 4), seq_id("evt_01ABC", 420), seq_id("evt_01AB", 42)] {
            assert_ne!(made, other);
        }
        for other in ["evt_01ABC.4", "evt_01ABC.420", "evt_01ABC42", "evt_01ABC.042", "evt_01AB.42", "evt_01ABC.42 "] {
            assert_ne!(made, EventId::from_string(other), "{other}");
            assert_ne!(EventId::from_string(other), made, "{other}");
        }
        assert_eq!(hash_of(&made), hash_of(&text));
        assert_eq!(hash_of(&made), hash_of("evt_01ABC.42"), "Borrow<str> holds");
        assert_eq!(made.cmp(&seq_id("evt_01ABC", 5)), "evt_01ABC.42".cmp("evt_01ABC.5"), "ordered by text");
        let set: std::collections::HashSet<EventId> = [made.clone()].into();
        assert!(set.contains("evt_01ABC.42") && set.contains(&text));
        let back: EventId = serde_json::from_str(r#""evt_01ABC.42""#).unwrap();
        assert_eq!(back, made);
    }
}
