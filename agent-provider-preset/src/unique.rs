//! Duplicate object keys in a preset file. A JSON object read into a map keeps the last of two
//! equal keys without a word, so a file showing one `program` could run another; a preset file
//! must name each key of an object once.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::Problem;

/// The first key `text` (JSON) repeats within one object, as a [`Problem`] at its object's path
/// (`env.set`, `events[2]`); `None` when there is none, or when `text` is not JSON (the parse
/// that follows reports that).
pub(crate) fn first_duplicate(text: &str) -> Option<Problem> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let _ = Unique { path: String::new(), found: &mut found }.deserialize(&mut deserializer);
    found
}

/// Walks one value, recording the first duplicate key under it in `found`.
struct Unique<'a> {
    /// The value's path, `""` for the document.
    path: String,
    found: &'a mut Option<Problem>,
}

impl Unique<'_> {
    fn child(&mut self, step: fmt::Arguments<'_>) -> Unique<'_> {
        let path = if self.path.is_empty() {
            step.to_string().trim_start_matches('.').to_owned()
        } else {
            format!("{}{step}", self.path)
        };
        Unique { path, found: self.found }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                let message = format!("the key `{key}` is given twice; a preset names each key of an object once");
                *self.found = Some(Problem::new(self.path.clone(), message));
                return Err(de::Error::custom("duplicate key"));
            }
            map.next_value_seed(self.child(format_args!(".{key}")))?;
            seen.insert(key);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while seq.next_element_seed(self.child(format_args!("[{index}]")))?.is_some() {
            index += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::first_duplicate;

    #[test]
    fn a_repeated_key_is_found_with_its_objects_path() {
        assert!(first_duplicate(r#"{"a": {"b": 1, "c": [1, {"d": 2}]}, "e": "a"}"#).is_none());
        assert!(first_duplicate("{not json").is_none());
        let top = first_duplicate(r#"{"program": "codex", "x": 1, "program": "sh"}"#).expect("found");
        assert_eq!((top.path.as_str(), top.message.contains("`program`")), ("", true), "{top}");
        let nested = first_duplicate(r#"{"env": {"set": {"A": "1", "A": "2"}}}"#).expect("found");
        assert_eq!(nested.path, "env.set");
        let in_list = first_duplicate(r#"{"events": [{}, {"emit": "drop", "emit": "warning"}]}"#).expect("found");
        assert_eq!(in_list.path, "events[1]");
        // Keys written with escapes are compared decoded.
        assert!(first_duplicate(r#"{"id": 1, "\u0069d": 2}"#).is_some());
    }
}
