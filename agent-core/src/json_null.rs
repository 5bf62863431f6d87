//! Optional JSON values that keep an explicit `null`.
//!
//! A field `Option<Value>` written with `skip_serializing_if = "Option::is_none"` is absent for
//! `None` and `null` for `Some(Value::Null)`; serde's default reading turns that `null` back
//! into `None`, so an event, a request or a turn result would not read back as it was written
//! (and a store would refuse the identical event again as a different one). Reading with
//! [`deserialize`] (and `default` for an absent field) keeps the two apart.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Reads a present field as `Some`, `null` included.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "super::deserialize")]
        input: Option<Value>,
    }

    #[test]
    fn absent_null_and_a_value_each_read_back_as_written() {
        for holder in
            [Holder { input: None }, Holder { input: Some(Value::Null) }, Holder { input: Some(json!({"a": 1})) }]
        {
            let written = serde_json::to_string(&holder).unwrap();
            assert_eq!(serde_json::from_str::<Holder>(&written).unwrap(), holder, "{written}");
        }
        assert_eq!(serde_json::to_string(&Holder { input: None }).unwrap(), "{}");
        assert_eq!(serde_json::to_string(&Holder { input: Some(Value::Null) }).unwrap(), r#"{"input":null}"#);
    }
}
