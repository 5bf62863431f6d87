//! A dropped line read from both of its ends ([`LineReader::too_long_head`] and
//! [`LineReader::too_long_tail`]): the members of its root object that either end holds whole,
//! the head's first (a member written after a long one is only in the tail).
//!
//! ```
//! use agent_provider_kit::framing::ends::{id_member, string_member};
//!
//! let ends = (&br#"{"type":"control_request","request":{"input":"xxxx"#[..], &br#"xx"},"request_id":7}"#[..]);
//! assert_eq!(string_member(ends, "type"), Some("control_request"));
//! assert_eq!(id_member(ends, "request_id").map(|id| id.to_json()), Some(serde_json::json!(7)));
//! ```
//!
//! [`LineReader::too_long_head`]: super::LineReader::too_long_head
//! [`LineReader::too_long_tail`]: super::LineReader::too_long_tail

use serde_json::Value;

use super::head::{find_key, integer_at, object_at, string_at};
use super::tail::find_root_key;
use crate::rpc::CliRequestId;

/// The root member `key` as a string without escapes, from the head, else from the tail.
pub fn string_member<'b>((head, tail): (&'b [u8], &'b [u8]), key: &str) -> Option<&'b str> {
    let root = head.strip_prefix(b"{");
    root.and_then(|root| string_at(root, find_key(root, key)?)).or_else(|| string_at(tail, find_root_key(tail, key)?))
}

/// The root member `key` as the ID of a request the CLI made: a string, or an integer (answered
/// as one), from the head, else from the tail.
pub fn id_member(ends: (&[u8], &[u8]), key: &str) -> Option<CliRequestId> {
    let (head, tail) = ends;
    let integer = || {
        let root = head.strip_prefix(b"{");
        let in_head = root.and_then(|root| integer_at(root, find_key(root, key)?));
        in_head.or_else(|| integer_at(tail, find_root_key(tail, key)?))
    };
    let value = string_member(ends, key).map(Value::from).or_else(|| integer().map(Value::from))?;
    CliRequestId::of(&value)
}

/// The body of the root member `key`, an object, as far as the head holds it (for
/// [`find_key`]).
pub fn head_object<'b>(head: &'b [u8], key: &str) -> Option<&'b [u8]> {
    let root = head.strip_prefix(b"{")?;
    object_at(root, find_key(root, key)?)
}
