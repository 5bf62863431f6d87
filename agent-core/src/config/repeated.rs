//! Keys a JSON text gives twice in one object. A JSON object read into a map keeps the last of
//! two equal keys without a word, so a file showing one value could run another: configuration
//! files (a [`SessionConfig`](super::SessionConfig), a preset) name each key of an object once.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A key given twice in one object of a JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepeatedKey {
    /// The object's path: `""` for the document, `env.set`, `events[2]`.
    pub path: String,
    /// The key.
    pub key: String,
}

impl std::fmt::Display for RepeatedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.path.is_empty() { String::new() } else { format!("{}: ", self.path) };
        write!(f, "{at}the key `{}` is given twice", self.key)
    }
}

/// The first key `text` (JSON) gives twice within one object, keys compared decoded; `None`
/// when there is none, or when `text` is not JSON (the parse that follows reports that).
///
/// ```
/// let found = agent_core::config::repeated_key(r#"{"env": {"A": "1", "A": "2"}}"#).expect("found");
/// assert_eq!((found.path.as_str(), found.key.as_str()), ("env", "A"));
/// assert!(agent_core::config::repeated_key(r#"{"a": {"b": 1}, "b": 2}"#).is_none());
/// ```
pub fn repeated_key(text: &str) -> Option<RepeatedKey> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let _ = Unique { path: String::new(), found: &mut found }.deserialize(&mut deserializer);
    found
}

/// Walks one value, recording the first duplicate key under it in `found`.
struct Unique<'a> {
    /// The value's path, `""` for the document.
    path: String,
    found: &'a mut Option<RepeatedKey>,
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
                *self.found = Some(RepeatedKey { path: self.path.clone(), key });
                return Err(de::Error::custom("repeated key"));
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
    use super::repeated_key;

    #[test]
    fn a_repeated_key_is_found_with_its_objects_path() {
        assert!(repeated_key(r#"{"a": {"b": 1, "c": [1, {"d": 2}]}, "e": "a"}"#).is_none());
        assert!(repeated_key("{not json").is_none());
        let top = repeated_key(r#"{"program": "codex", "x": 1, "program": "sh"}"#).expect("found");
        assert_eq!((top.path.as_str(), top.key.as_str()), ("", "program"));
        assert_eq!(top.to_string(), "the key `program` is given twice");
        let nested = repeated_key(r#"{"env": {"set": {"A": "1", "A": "2"}}}"#).expect("found");
        assert_eq!(nested.path, "env.set");
        assert_eq!(nested.to_string(), "env.set: the key `A` is given twice");
        let in_list = repeated_key(r#"{"events": [{}, {"emit": "drop", "emit": "warning"}]}"#).expect("found");
        assert_eq!(in_list.path, "events[1]");
        // Keys written with escapes are compared decoded.
        assert!(repeated_key(r#"{"id": 1, "\u0069d": 2}"#).is_some());
    }
}
