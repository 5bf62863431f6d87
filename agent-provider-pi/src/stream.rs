//! The streamed deltas' fast path: a `message_update` frame carrying a text or thinking delta,
//! read in one pass by the kit's [`Scanner`] instead of serde.
//!
//! Pi repeats the whole partial message in every update (`assistantMessageEvent.partial` and
//! `message` in 0.73.1), so a delta line grows with the reply; the scanner checks those values
//! as it skips them, without building anything, and borrows the delta's text from the line.
//! It takes only the keys pi writes on such a line (`type`, `assistantMessageEvent`,
//! `message`, and 1.6's `usage`); a line with any other key, an escaped `type`, a duplicate
//! field or a delta of another shape goes through the normalizer's serde `Frame`, which reads
//! the same deltas (or says why not).

use std::borrow::Cow;

use agent_provider_kit::scan::Scanner;

/// What a streamed update carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeltaKind {
    /// `text_delta`: reply text.
    Text,
    /// `thinking_delta`: reasoning.
    Thinking,
}

impl DeltaKind {
    /// The kind as pi names it, for those it streams; `None` for any other event type.
    pub(crate) fn of(name: &str) -> Option<DeltaKind> {
        match name {
            "text_delta" => Some(DeltaKind::Text),
            "thinking_delta" => Some(DeltaKind::Thinking),
            _ => None,
        }
    }

    /// Pi's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DeltaKind::Text => "text_delta",
            DeltaKind::Thinking => "thinking_delta",
        }
    }
}

/// A streamed delta, its text borrowed from the line (owned only when pi escaped a character).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Delta<'a> {
    pub(crate) kind: DeltaKind,
    pub(crate) text: Cow<'a, str>,
}

/// The top-level keys in the order pi writes them: while they come so, each is found with one
/// comparison.
const ORDER: [&str; 3] = ["type", "assistantMessageEvent", "message"];
/// `assistantMessageEvent`'s keys, likewise.
const EVENT_ORDER: [&str; 4] = ["type", "contentIndex", "delta", "partial"];

/// The delta `line` carries, when it is a `message_update` frame of the shape above; `None`
/// for any other line, which the serde path reads.
pub(crate) fn fast_delta(line: &str) -> Option<Delta<'_>> {
    let mut s = Scanner::new(line);
    s.begin_object()?;
    let (mut next, mut is_update, mut delta) = (0, false, None);
    while let Some(key) = s.next_key_in(&ORDER, &mut next)? {
        match key {
            // Serde borrows `type`: an escaped one fails the frame there.
            "type" if !is_update => match s.string()? {
                Cow::Borrowed("message_update") => is_update = true,
                _ => return None,
            },
            "assistantMessageEvent" if delta.is_none() => delta = Some(event(&mut s)?),
            "message" | "usage" => s.skip_value()?,
            // A duplicate field, which serde refuses; or a field `Frame` reads with a type.
            _ => return None,
        }
    }
    s.end()?;
    if is_update { delta } else { None }
}

/// `assistantMessageEvent`, when it is a text or thinking delta.
fn event<'a>(s: &mut Scanner<'a>) -> Option<Delta<'a>> {
    s.begin_object()?;
    let (mut next, mut kind, mut text) = (0, None, None);
    while let Some(key) = s.next_key_in(&EVENT_ORDER, &mut next)? {
        match key {
            "type" if kind.is_none() => kind = Some(DeltaKind::of(&s.string()?)?),
            "delta" if text.is_none() => text = Some(s.string()?),
            // A duplicate field, which serde refuses.
            "type" | "delta" => return None,
            _ => s.skip_value()?,
        }
    }
    Some(Delta { kind: kind?, text: text? })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::normalize::serde_delta as by_serde;

    #[test]
    fn the_fast_path_reads_every_delta_it_takes_as_serde_does() {
        let taken = [
            // pi 0.73.1: the partial message in the event and again beside it.
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"Hello from the","partial":{"role":"assistant","content":[{"type":"text","text":"Hello from the fake"}],"usage":{"input":0,"cost":{"total":0}},"stopReason":"stop","timestamp":1795934810216}},"message":{"role":"assistant","content":[{"type":"text","text":"Hello"}]}}"#,
            // pi 1.6: usage beside the event, no partial.
            r#"{"type":"message_update","usage":{"input":3,"output":1},"assistantMessageEvent":{"type":"thinking_delta","contentIndex":1,"delta":"hm"}}"#,
            // Another order (serde_json's own, sorted), spaces, escapes, an unknown event field.
            r#" { "assistantMessageEvent" : { "contentIndex" : 0 , "delta" : "a\"b\\c\nd\u00e9\ud83d\ude00" , "type" : "text_delta" , "x" : [null] } , "type" : "message_update" } "#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":""}}"#,
        ];
        for line in taken {
            let fast = fast_delta(line).unwrap_or_else(|| panic!("the fast path declined {line}"));
            let (kind, text) = by_serde(line).unwrap_or_else(|| panic!("serde reads {line}"));
            assert_eq!((fast.kind.name(), &*fast.text), (kind.as_str(), text.as_str()), "{line}");
        }
        // Declined: each goes through serde, which reads it, refuses it or makes it another frame.
        let declined = [
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_start","contentIndex":0}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":null}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":7}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a","delta":"b"}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"},"id":3}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"},"id":"u1"}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"b"},"later":1}"#,
            r#"{"type":"message_update","type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}}"#,
            r#"{"type":"message_upd\u0061te","assistantMessageEvent":{"type":"text_delta","delta":"a"}}"#,
            r#"{"type":"message_end","assistantMessageEvent":{"type":"text_delta","delta":"a"}}"#,
            r#"{"assistantMessageEvent":{"type":"text_delta","delta":"a"}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}} x"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"},"message":{"#,
            r#"{"type":"message_update"}"#,
        ];
        for line in declined {
            assert_eq!(fast_delta(line), None, "{line}");
        }
        // Among them, serde takes exactly the three with a field the fast path leaves to it (an
        // `id`, a string or a number, and an unknown field).
        let taken_by_serde: Vec<_> = declined.iter().filter_map(|line| by_serde(line)).collect();
        let delta = |text: &str| ("text_delta".to_owned(), text.to_owned());
        assert_eq!(taken_by_serde, [delta("a"), delta("a"), delta("b")]);
    }
}
