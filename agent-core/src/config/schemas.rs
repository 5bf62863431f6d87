//! `schemars::JsonSchema` for the agent-core types a config holds as they are: IDs and the
//! string enums. The enums' values come from their own `Serialize`, and each impl matches every
//! variant, so a new variant does not compile until its schema is considered.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use super::*;
use crate::ids::MAX_SESSION_ID_LEN;

impl JsonSchema for SessionId {
    fn schema_name() -> Cow<'static, str> {
        "SessionId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A caller-chosen session ID: ASCII letters, digits and `-_.:@`, other than `.` and `..`.",
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_SESSION_ID_LEN,
            "pattern": "^(?!\\.\\.?$)[A-Za-z0-9._:@-]+$",
        })
    }
}

impl JsonSchema for ProviderId {
    fn schema_name() -> Cow<'static, str> {
        "ProviderId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "The name a provider is registered under: `codex`, `claude`, `pi`, or a preset's ID.",
            "type": "string",
            "minLength": 1,
            "pattern": "\\S",
        })
    }
}

macro_rules! string_enum_schema {
    ($($ty:ident { $($variant:ident),+ $(,)? } => $description:literal;)+) => {$(
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                // A unit variant serializes to its string; the checked-in schema's test
                // would show one that did not.
                let every = |value: $ty| match value {
                    $($ty::$variant)|+ => serde_json::to_value(value).ok(),
                };
                let values: Vec<Value> = [$(every($ty::$variant)),+].into_iter().flatten().collect();
                json_schema!({ "description": $description, "type": "string", "enum": values })
            }
        }
    )+};
}

string_enum_schema! {
    ApprovalPolicy { Untrusted, OnFailure, OnRequest, Never } =>
        "When the agent must ask before acting: `untrusted` (anything not known to be safe), \
         `on_failure` (when a sandboxed action fails), `on_request` (the agent decides), `never`.";
    SandboxMode { ReadOnly, WorkspaceWrite, DangerFullAccess } =>
        "How far the agent's commands may reach: `read_only`, `workspace_write` (the working directory), \
         `danger_full_access` (no sandbox).";
    AuthMode { Subscription, Inherit } =>
        "How the provider CLI authenticates: `subscription` (its saved login; API keys, endpoint and cloud \
         overrides are refused) or `inherit` (the environment passes through as given).";
    StoreFailurePolicy { Degrade, Stop } =>
        "What a session does when a store write fails: `degrade` (keep running live-only) or `stop` (end \
         the session).";
    Reuse { Never, Closed, Replace } =>
        "Whether the session may replace a stored session with its ID: `never`, `closed` (a cleanly \
         closed one), `replace` (any that is not live).";
}
