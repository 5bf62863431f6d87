//! Claude Code's stream-JSON messages, as much of them as the provider reads.
//!
//! Every line is parsed once into a borrowed [`Envelope`]; the parts a message kind needs are
//! parsed from its `RawValue`s only when that kind is handled. Field order is never relied on
//! (2.1.332 moved `type` away from the front of `result`).
//!
//! Optional strings are `Cow<str>` fields defaulting to `""` rather than `Option<Cow<str>>`:
//! serde borrows a `Cow<str>` field from the line only when it is the field's whole type, so an
//! `Option<Cow<str>>` would allocate for every field of every line.

use std::borrow::Cow;

pub(crate) use agent_provider_kit::permission_prompt::control_response;
pub(crate) use agent_provider_kit::rpc::CliRequestId;
use agent_provider_kit::scan::Scanner;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// One stdout line: its `type`, `subtype` and the raw parts the kinds use.
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: Cow<'a, str>,
    /// `""` when absent, `null` or not a string (see [`lenient_str`]).
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub(crate) subtype: Cow<'a, str>,
    /// `""` when absent, `null` or not a string (see [`lenient_str`]).
    #[serde(default, borrow, deserialize_with = "lenient_str")]
    pub(crate) session_id: Cow<'a, str>,
    /// `stream_event`: the API event, read in the same pass as the envelope (the hot path).
    #[serde(default, borrow)]
    pub(crate) event: Option<StreamEvent<'a>>,
    /// `assistant` / `user`: the message.
    #[serde(default, borrow)]
    pub(crate) message: Option<&'a RawValue>,
    /// `control_request`: the request body.
    #[serde(default, borrow)]
    pub(crate) request: Option<&'a RawValue>,
    /// `control_request` / `control_cancel_request`: the CLI's request ID, raw: a string, or a
    /// number a CLI that counts its requests writes (see [`Envelope::control_id`]).
    #[serde(default, borrow)]
    pub(crate) request_id: Option<&'a RawValue>,
    /// `user` lines replayed by the CLI (`set_model` output, resumed history).
    #[serde(default, rename = "isReplay")]
    pub(crate) is_replay: bool,
    /// `assistant`: set on the message claude makes up to report a failed model request
    /// (`"unknown"`, `"server_error"`, …); kept raw, as other kinds may give it another shape.
    #[serde(default, borrow)]
    pub(crate) error: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    /// The CLI's request ID, if it wrote one it can be answered under (a string or a number).
    pub(crate) fn control_id(&self) -> Option<CliRequestId> {
        CliRequestId::of(&serde_json::from_str(self.request_id?.get()).ok()?)
    }

    /// Parses one line: a `stream_event` by the kit's [`Scanner`] (see [`scan_stream_event`]),
    /// anything else — and any stream event the scanner declines — by serde. A parse has read
    /// the whole line, so an envelope means the line is JSON.
    #[cfg(test)]
    pub(crate) fn parse(line: &'a str) -> serde_json::Result<Envelope<'a>> {
        Self::parse_with(line, None)
    }

    /// [`Envelope::parse`], decoding a stream event's text or thinking that claude wrote with
    /// escapes into `scratch` (see
    /// [`Scanner::string_in`](agent_provider_kit::scan::Scanner::string_in)): the reader copies
    /// it into its arena, so one buffer serves every line where a `String` each cost an
    /// allocation and a free.
    pub(crate) fn parse_in(line: &'a str, scratch: &'a mut String) -> serde_json::Result<Envelope<'a>> {
        Self::parse_with(line, Some(scratch))
    }

    fn parse_with(line: &'a str, scratch: Option<&'a mut String>) -> serde_json::Result<Envelope<'a>> {
        match scan_stream_event(line, scratch) {
            Some(envelope) => Ok(envelope),
            None => serde_json::from_str(line),
        }
    }
}

/// The envelope of a `stream_event` line (most of what a streaming turn writes) read by hand:
/// keys compared as slices, strings borrowed unless escaped, every field it skips checked.
/// Declines (`None`, and serde reads the line) what it does not read as serde would: another
/// `type`, the fields of other kinds (`subtype`, `message`, `request`, `request_id`, `isReplay`),
/// a `null` where serde takes one, a duplicate field, an escaped key, bad JSON.
fn scan_stream_event<'a>(line: &'a str, mut scratch: Option<&'a mut String>) -> Option<Envelope<'a>> {
    let mut s = Scanner::new(line);
    s.begin_object()?;
    let (mut kind, mut session_id, mut event) = (None, None, None);
    // The order claude writes them in: each found with one comparison while they come so.
    let mut next = 0;
    while let Some(key) = s.next_key_in(&["type", "event", "session_id"], &mut next)? {
        match key {
            "type" => {
                let name = s.string()?;
                if name != "stream_event" {
                    return None;
                }
                once(&mut kind, name)?;
            }
            "session_id" => once(&mut session_id, s.string()?)?,
            "event" => once(&mut event, scan_event(&mut s, &mut scratch)?)?,
            "subtype" | "message" | "request" | "request_id" | "isReplay" => return None,
            _ => s.skip_value()?,
        }
    }
    s.end()?;
    Some(Envelope {
        kind: kind?,
        subtype: Cow::Borrowed(""),
        session_id: session_id.unwrap_or_default(),
        event: Some(event?),
        message: None,
        request: None,
        request_id: None,
        is_replay: false,
        error: None,
    })
}

/// [`StreamEvent`]'s fields, as its `Deserialize` takes them (`message` is left to serde).
fn scan_event<'a>(s: &mut Scanner<'a>, scratch: &mut Option<&'a mut String>) -> Option<StreamEvent<'a>> {
    s.begin_object()?;
    let (mut kind, mut delta) = (None, None);
    let mut next = 0;
    while let Some(key) = s.next_key_in(&["type", "index", "delta"], &mut next)? {
        match key {
            "type" => once(&mut kind, s.string()?)?,
            "delta" => once(&mut delta, scan_delta(s, scratch)?)?,
            "message" => return None,
            _ => s.skip_value()?,
        }
    }
    Some(StreamEvent { kind: kind?, delta, message: None })
}

/// [`Delta`]'s fields, as its `Deserialize` takes them; the text (or thinking) decoded into
/// `scratch` when escaped, if it is there (it serves once).
fn scan_delta<'a>(s: &mut Scanner<'a>, scratch: &mut Option<&'a mut String>) -> Option<Delta<'a>> {
    s.begin_object()?;
    let (mut kind, mut text, mut thinking) = (None, None, None);
    let mut next = 0;
    while let Some(key) = s.next_key_in(&["type", "text"], &mut next)? {
        match key {
            "type" => once(&mut kind, s.string()?)?,
            "text" => once(&mut text, text_in(s, scratch)?)?,
            "thinking" => once(&mut thinking, text_in(s, scratch)?)?,
            _ => s.skip_value()?,
        }
    }
    Some(Delta {
        kind: kind.unwrap_or_default(),
        text: text.unwrap_or_default(),
        thinking: thinking.unwrap_or_default(),
    })
}

/// A string, decoded into `scratch` when escaped if it is still there.
fn text_in<'a>(s: &mut Scanner<'a>, scratch: &mut Option<&'a mut String>) -> Option<Cow<'a, str>> {
    match scratch.take() {
        Some(scratch) => s.string_in(scratch).map(Cow::Borrowed),
        None => s.string(),
    }
}

/// Checks that the scanner reads `line` as serde does, if it reads it at all.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_scan_agrees(line: &str) {
    let mut scratch = String::new();
    let Some(fast) = scan_stream_event(line, Some(&mut scratch)) else {
        assert!(scan_stream_event(line, None).is_none(), "{line}");
        return;
    };
    let owned = scan_stream_event(line, None).expect("read with a scratch buffer or without");
    let serde: Envelope<'_> = serde_json::from_str(line).expect("serde reads what the scanner reads");
    let parts = |e: &Envelope<'_>| {
        let event = e.event.as_ref().map(|ev| {
            let delta = ev.delta.as_ref().map(|d| (d.kind.to_string(), d.text.to_string(), d.thinking.to_string()));
            (ev.kind.to_string(), delta, ev.message.is_some())
        });
        let raw = |r: Option<&RawValue>| r.map(|r| r.get().to_owned());
        (e.kind.to_string(), e.subtype.to_string(), e.session_id.to_string(), event, raw(e.message), raw(e.request))
    };
    assert_eq!(parts(&fast), parts(&serde), "{line}");
    assert_eq!(parts(&owned), parts(&serde), "{line}");
    let id = |e: &Envelope<'_>| e.request_id.map(|r| r.get().to_owned());
    assert_eq!((id(&fast), fast.is_replay), (id(&serde), serde.is_replay), "{line}");
}

/// An envelope's string field as serde would borrow it, where a newer CLI's `null` (or another
/// type) reads as `""` instead of failing the whole line: a `result` whose `subtype` is `null`
/// must still end its turn.
fn lenient_str<'de: 'a, 'a, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Cow<'a, str>, D::Error> {
    struct Lenient;

    impl<'de> serde::de::Visitor<'de> for Lenient {
        type Value = Cow<'de, str>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string, or anything read as none")
        }

        fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(text))
        }

        fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(text.to_owned()))
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }

        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(Cow::Borrowed(""))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            Ok(Cow::Borrowed(""))
        }
    }

    deserializer.deserialize_any(Lenient)
}

/// Fills `slot`; `None` if it was filled already (a duplicate field, which serde refuses).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// `stream_event.event`: the parts of an Anthropic streaming event the provider reads.
#[derive(Deserialize)]
pub(crate) struct StreamEvent<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    pub(crate) message: Option<MessageStart<'a>>,
}

/// `content_block_delta.delta`; absent strings are `""`.
#[derive(Deserialize)]
pub(crate) struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) text: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) thinking: Cow<'a, str>,
}

/// `message_start.message`.
#[derive(Deserialize)]
pub(crate) struct MessageStart<'a> {
    /// `""` when absent.
    #[serde(default, borrow)]
    pub(crate) id: Cow<'a, str>,
}

/// An `assistant` or `user` message.
#[derive(Deserialize)]
pub(crate) struct Message {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) content: Content,
}

/// A message's content: a string or a list of blocks.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(crate) enum Content {
    #[default]
    None,
    Text(String),
    Blocks(Vec<Value>),
}

/// `result`.
#[derive(Deserialize)]
pub(crate) struct ResultMessage {
    #[serde(default)]
    pub(crate) subtype: Option<String>,
    /// Required: a `result` that does not say whether the turn failed is read leniently, with a
    /// warning.
    pub(crate) is_error: bool,
    #[serde(default)]
    pub(crate) result: Option<String>,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    #[serde(default)]
    pub(crate) total_cost_usd: Option<f64>,
    #[serde(default)]
    pub(crate) usage: Option<ResultUsage>,
    #[serde(default)]
    pub(crate) permission_denials: Vec<Value>,
    #[serde(default)]
    pub(crate) terminal_reason: Option<String>,
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
    #[serde(default)]
    pub(crate) api_error_status: Option<Value>,
    #[serde(default)]
    pub(crate) errors: Vec<Value>,
    #[serde(default)]
    pub(crate) num_turns: Option<u64>,
    #[serde(default)]
    pub(crate) duration_ms: Option<u64>,
    #[serde(default)]
    pub(crate) duration_api_ms: Option<u64>,
}

impl ResultMessage {
    /// A `result` whose fields do not all have the types expected (a Claude Code newer than
    /// this provider, say): every field that reads with its type, so that the turn still ends.
    /// An `is_error` that is there but not a boolean counts as an error.
    pub(crate) fn lenient(text: &str) -> Option<ResultMessage> {
        let value: Value = serde_json::from_str(text).ok()?;
        let string = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| value.get(key).and_then(Value::as_u64);
        let list = |key: &str| value.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
        Some(ResultMessage {
            subtype: string("subtype"),
            is_error: value.get("is_error").is_some_and(|e| e.as_bool() != Some(false)),
            result: string("result"),
            session_id: string("session_id"),
            total_cost_usd: value.get("total_cost_usd").and_then(Value::as_f64),
            usage: value.get("usage").and_then(|u| serde_json::from_value(u.clone()).ok()),
            permission_denials: list("permission_denials"),
            terminal_reason: string("terminal_reason"),
            stop_reason: string("stop_reason"),
            api_error_status: value.get("api_error_status").cloned(),
            errors: list("errors"),
            num_turns: number("num_turns"),
            duration_ms: number("duration_ms"),
            duration_api_ms: number("duration_api_ms"),
        })
    }
}

/// `result.usage` (per turn).
#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct ResultUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Option<u64>,
}

/// `system` `api_retry`.
#[derive(Deserialize)]
pub(crate) struct ApiRetry {
    #[serde(default)]
    pub(crate) attempt: Option<u64>,
    #[serde(default)]
    pub(crate) max_retries: Option<u64>,
    #[serde(default)]
    pub(crate) error_status: Option<Value>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// A control response the CLI wrote (to one of our requests).
#[derive(Deserialize)]
pub(crate) struct ControlResponseLine {
    pub(crate) response: ControlResponseBody,
}

/// `control_response.response`.
#[derive(Deserialize)]
pub(crate) struct ControlResponseBody {
    pub(crate) subtype: String,
    /// A string; an object's `message`, or any other value, is read as text.
    #[serde(default, deserialize_with = "agent_provider_kit::rpc::error_text")]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) response: Option<Value>,
}

// ----- outgoing ------------------------------------------------------------------------------

/// A prompt: `{"type":"user","message":{"role":"user","content":…},…}`.
#[derive(Serialize)]
pub(crate) struct UserLine<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) message: UserMessage<'a>,
    pub(crate) parent_tool_use_id: Option<&'a str>,
    pub(crate) session_id: &'a str,
}

/// The message of a [`UserLine`].
#[derive(Serialize)]
pub(crate) struct UserMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: &'a Value,
}

/// A control request we send.
#[derive(Serialize)]
pub(crate) struct ControlRequestLine<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) request_id: &'a str,
    pub(crate) request: Value,
}

/// The text of a message's content: a string, or its `text` blocks joined.
pub(crate) fn content_text(content: &Content) -> String {
    match content {
        Content::None => String::new(),
        Content::Text(text) => text.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
    }
}

/// The text of a `tool_result` block's `content`: a string, or its text blocks joined.
pub(crate) fn tool_result_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => {
            Some(blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"))
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scanner_reads_every_stream_event_it_takes_as_serde_does() {
        let taken = [
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \"there\"\n\u00e9"}},"session_id":"s-1","parent_tool_use_id":null,"uuid":"u"}"#,
            r#" { "uuid" : "u" , "event" : { "delta" : { "thinking" : "hmm" , "type" : "thinking_delta" , "signature" : [1, {"a": null}] } , "type" : "content_block_delta" } , "type" : "stream_event" } "#,
            r#"{"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"s"}"#,
            r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}}"#,
        ];
        for line in taken {
            assert!(scan_stream_event(line, None).is_some(), "the scanner declined {line}");
            assert_scan_agrees(line);
        }
        let declined = [
            r#"{"type":"assistant","message":{"id":"m","content":[]},"session_id":"s"}"#,
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1"}}}"#,
            r#"{"type":"stream_event","event":null}"#,
            r#"{"type":"stream_event"}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}}"#,
            r#"{"type":"stream_event","type":"stream_event","event":{"type":"x"}}"#,
            r#"{"type":"stream_event","\u0065vent":{"type":"x"}}"#,
            r#"{"type":"stream_event","event":{"type":"x"},"isReplay":true}"#,
            r#"{"type":"stream_event","event":{"type":"x"},"session_id":null}"#,
            r#"{"type":"stream_event","event":{"type":"x"}} trailing"#,
        ];
        for line in declined {
            assert!(scan_stream_event(line, None).is_none(), "{line}");
        }
        // Those serde reads, it reads with their other fields.
        let start = Envelope::parse(declined[1]).unwrap();
        assert_eq!(start.event.unwrap().message.unwrap().id, "msg_1");
        assert!(Envelope::parse(declined[2]).unwrap().event.is_none());
        assert!(Envelope::parse(declined[7]).unwrap().is_replay);
        assert!(Envelope::parse(declined[9]).is_err());
    }
}
