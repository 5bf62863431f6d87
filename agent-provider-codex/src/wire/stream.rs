//! The streamed deltas' fast path: the envelope and params of a delta read in one pass by the
//! kit's [`Scanner`], without serde. Whatever it declines goes through the serde types of the
//! parent module, which read the same deltas.

use std::borrow::Cow;

use agent_provider_kit::scan::Scanner;

use super::{Delta, Notification};

/// The streamed notifications, whose params [`fast_delta`] decodes in place.
fn delta_method(method: &str) -> Option<fn(Delta<'_>) -> Notification<'_>> {
    Some(match method {
        "item/agentMessage/delta" => |d| Notification::AgentMessageDelta(d),
        "item/reasoning/summaryTextDelta" => |d| Notification::ReasoningDelta(d, "item/reasoning/summaryTextDelta"),
        "item/reasoning/textDelta" => |d| Notification::ReasoningDelta(d, "item/reasoning/textDelta"),
        "item/commandExecution/outputDelta" => |d| Notification::CommandOutputDelta(d),
        "item/fileChange/outputDelta" => |d| Notification::FileChangeOutputDelta(d),
        _ => return None,
    })
}

/// The envelope read in one pass, for the lines that stream: when `method` comes before
/// `params` (as codex writes them) and names a delta, the params are decoded where they stand
/// by the kit's [`Scanner`] — the line is read once, strings are borrowed from it, and nothing
/// is allocated (an escaped delta text is decoded into `scratch` when there is one; an escaped
/// ID, which codex never writes, into a `String`). Any other line, or a delta this does not take
/// (its params of another shape, an escaped key, a duplicate field), goes through the parent's
/// [`Envelope`](super::Envelope) and serde, which decode the same deltas (or say why not).
pub(super) fn fast_delta<'a>(line: &'a str, mut scratch: Option<&'a mut String>) -> Option<Notification<'a>> {
    let mut s = Scanner::new(line);
    s.begin_object()?;
    let (mut wrap, mut note) = (None, None);
    // Codex writes `method` first, then `params`: each found with one comparison.
    loop {
        let key = if wrap.is_none() && s.key_is("method") {
            "method"
        } else if wrap.is_some() && note.is_none() && s.key_is("params") {
            "params"
        } else {
            match s.next_key()? {
                Some(key) => key,
                None => break,
            }
        };
        match key {
            "method" if wrap.is_none() => wrap = Some(delta_method(&s.string()?)?),
            "params" if note.is_none() => note = Some(wrap?(scan_delta(&mut s, &mut scratch)?)),
            // A duplicate field, which serde refuses; or a request or a response.
            "method" | "params" | "id" => return None,
            _ => s.skip_value()?,
        }
    }
    s.end()?;
    note
}

/// [`Delta`]'s fields, as its `Deserialize` takes them.
fn scan_delta<'a>(s: &mut Scanner<'a>, scratch: &mut Option<&'a mut String>) -> Option<Delta<'a>> {
    /// The fields in the order codex writes them: while they come so, each is found with one
    /// comparison.
    const ORDER: [&str; 4] = ["threadId", "turnId", "itemId", "delta"];
    s.begin_object()?;
    let mut fields: [Option<Option<Cow<'a, str>>>; 4] = [None, None, None, None];
    let mut expected = 0;
    loop {
        let field = match ORDER.get(expected) {
            Some(key) if s.key_is(key) => {
                expected += 1;
                expected - 1
            }
            _ => match s.next_key()? {
                Some(key) => match ORDER.iter().position(|field| *field == key) {
                    Some(field) => field,
                    None => {
                        s.skip_value()?;
                        continue;
                    }
                },
                None => break,
            },
        };
        // `threadId` and `turnId` may be null.
        let value = if field < 2 {
            s.string_or_null()?
        } else if field == 3
            && let Some(scratch) = scratch.take()
        {
            // The text, decoded into the scratch buffer when escaped (it serves once per line).
            Some(Cow::Borrowed(s.string_in(scratch)?))
        } else {
            Some(s.string()?)
        };
        // A duplicate field, which serde refuses.
        if fields[field].replace(value).is_some() {
            return None;
        }
    }
    let [thread_id, turn_id, item_id, delta] = fields;
    Some(Delta { thread_id: thread_id.flatten(), turn_id: turn_id.flatten(), item_id: item_id??, delta: delta?? })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::{Envelope, Notification};
    use super::*;

    /// The serde path's reading of a line, as `parse` reads it when the fast path declines.
    fn by_serde(line: &str) -> Option<Delta<'_>> {
        let envelope = serde_json::from_str::<Envelope<'_>>(line).ok()?;
        match Notification::parse(envelope.method.as_deref()?, envelope.params) {
            Notification::AgentMessageDelta(d)
            | Notification::ReasoningDelta(d, _)
            | Notification::CommandOutputDelta(d)
            | Notification::FileChangeOutputDelta(d) => Some(d),
            _ => None,
        }
    }

    fn fields<'a>(d: &'a Delta<'_>) -> [Option<&'a str>; 4] {
        [d.thread_id.as_deref(), d.turn_id.as_deref(), Some(&*d.item_id), Some(&*d.delta)]
    }

    #[test]
    fn the_fast_path_reads_every_delta_it_takes_as_serde_does() {
        let taken = [
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"th","turnId":"t","itemId":"m","delta":"Hi"},"emittedAtMs":1}"#,
            r#" { "params_first" : [1, {"x": null}], "method" : "item/reasoning/textDelta" , "params" : { "itemId" : "r" , "delta" : "a\"b\\c\nd\u00e9\ud83d\ude00" , "extra" : {"deep": [true, false, -1.5e3]} } } "#,
            r#"{"method":"item/commandExecution/outputDelta","params":{"threadId":null,"turnId":null,"itemId":"c","delta":""}}"#,
            r#"{"method":"item/fileChange/outputDelta","params":{"itemId":"f","delta":"x","n":0}}"#,
            // Codex's order with a field between, one out of order, one written with spaces.
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"th","x":[1],"turnId":"t","delta":"Hi","itemId":"m"}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"th", "turnId" :"t","itemId":"m","delta":"Hi"}}"#,
        ];
        for line in taken {
            let mut scratch = String::new();
            let Some(fast) = fast_delta(line, Some(&mut scratch)) else { panic!("the fast path declined {line}") };
            let (Notification::AgentMessageDelta(d)
            | Notification::ReasoningDelta(d, _)
            | Notification::CommandOutputDelta(d)
            | Notification::FileChangeOutputDelta(d)) = &fast
            else {
                panic!("not a delta: {fast:?}")
            };
            let serde = by_serde(line).expect("serde reads it");
            assert_eq!(fields(d), fields(&serde), "{line}");
            assert_eq!(fast.method(), serde_json::from_str::<Value>(line).unwrap()["method"].as_str().unwrap());
        }
        // Declined: each goes through serde, which reads it, refuses it or makes it another frame.
        let declined = [
            r#"{"id":3,"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi"}}"#,
            r#"{"params":{"itemId":"m","delta":"Hi"},"method":"item/agentMessage/delta"}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi","delta":"again"}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","\u0064elta":"Hi"}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":7}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m"}}"#,
            r#"{"method":"turn/started","params":{"turn":{"id":"t"}}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi"}} x"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi"}"#,
            // Duplicates after fields in codex's order, and of the envelope's fields.
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"a","turnId":"t","itemId":"m","delta":"Hi","delta":"again"}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"threadId":"a","threadId":"b","itemId":"m","delta":"Hi"}}"#,
            r#"{"method":"item/agentMessage/delta","method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi"}}"#,
            r#"{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":"Hi"},"params":{"itemId":"m","delta":"Hi"}}"#,
        ];
        for line in declined {
            assert!(fast_delta(line, None).is_none(), "{line}");
        }
        // The one among them serde takes as a delta, it reads in full.
        let reordered = by_serde(declined[1]).expect("serde reads params before method");
        assert_eq!(fields(&reordered), [None, None, Some("m"), Some("Hi")]);
    }
}
