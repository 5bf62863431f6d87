//! Tests of `SessionConfig`: parsing, errors by path, applying, and the schema.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::ErrorKind;
use crate::testing::ScriptedProvider;

#[test]
fn parse_errors_say_where_and_what_was_expected_but_not_the_value() {
    let cases = [
        (
            json!({"provider": "scripted", "env": "OPENAI_API_KEY=sk-SENTINEL-1"}),
            "env: invalid type: a string, expected",
        ),
        (
            json!({"provider": "scripted", "mcp_servers": {"x": {"type": "http", "url": "http://h", "headers": "Bearer sk-SENTINEL-2"}}}),
            "mcp_servers.x",
        ),
        (
            json!({"provider": "scripted", "approval_policy": ["sk-SENTINEL-3"]}),
            "approval_policy: invalid type: sequence",
        ),
        (json!({"provider": "scripted", "model": ["sk-SENTINEL-4"]}), "model: invalid type: sequence, expected"),
        // A key pasted into an ID field is refused by the ID's rules, without being quoted.
        (json!({"provider": "scripted", "id": "sk-SENTINEL-5 x"}), "id: invalid SessionId: may contain only"),
        (
            json!({"provider": "scripted", "conversation": {"mode": "resume", "from": {"session": "sk-SENTINEL-6 y"}}}),
            "conversation.from.session: invalid SessionId: may contain only",
        ),
        // A token may be all digits: numbers are not quoted either.
        (
            json!({"provider": "scripted", "env": {"set": {"PIN_TOKEN": 98765432109876_u64}}}),
            "env.set.PIN_TOKEN: invalid type: an integer, expected a string",
        ),
        (
            json!({"provider": "scripted", "mcp_servers": {"x": {"type": "http", "url": "http://h", "headers": {"X-Key": 1.5e300}}}}),
            "mcp_servers.x.headers.X-Key: invalid type: a number, expected a string",
        ),
    ];
    for (config, says) in cases {
        let error = SessionConfig::from_json_value(config.clone()).unwrap_err().to_string();
        let quoted = |error: &str| error.contains("SENTINEL") || error.contains("98765432109876");
        assert!(error.contains(says) && !quoted(&error), "{error}");
        let error = SessionConfig::from_json_str(&config.to_string()).unwrap_err().to_string();
        assert!(!quoted(&error), "{error}");
    }
    assert_eq!(
        without_values(r#"invalid type: string "a\"b\\", expected x; invalid value: string "日", expected y"#),
        "invalid type: a string, expected x; invalid value: a string, expected y"
    );
}

/// An enum field given a string it does not know (a key pasted into `auth`, say): the error
/// names the field and the values it takes, never the one it was given.
#[test]
fn unknown_enum_values_are_named_by_what_was_expected_not_by_the_value() {
    let cases = [
        (
            json!({"provider": "scripted", "auth": "sk-live-SENTINEL0123"}),
            "auth: unknown value, expected `subscription` or `inherit`",
        ),
        (
            json!({"provider": "scripted", "sandbox": "sk-live-SENTINEL0123"}),
            "sandbox: unknown value, expected one of `read_only`",
        ),
        (
            json!({"provider": "scripted", "mcp_servers": {"x": {"transport": "sk-live-SENTINEL0123", "command": "c"}}}),
            "mcp_servers.x.transport: unknown value, expected `stdio` or `http`",
        ),
        (
            json!({"provider": "scripted", "conversation": {"mode": "resume", "from": {"sk-live-SENTINEL0123": "t"}}}),
            "conversation.from: unknown value, expected `session` or `provider`",
        ),
        (
            json!({"provider": "scripted", "approval_policy": "sk-live-SENTINEL`, expected `x"}),
            "approval_policy: unknown value, expected one of `untrusted`",
        ),
    ];
    for (config, says) in cases {
        let message = invalid(SessionConfig::from_json_value(config.clone()));
        assert!(message.starts_with(says) && !message.contains("SENTINEL"), "{message}");
        let message = invalid(SessionConfig::from_json_str(&config.to_string()));
        assert!(message.starts_with(says) && message.contains(" at line 1 column "), "{message}");
        assert!(!message.contains("SENTINEL"), "{message}");
    }
    let provider_options = json!({"mode": "sk-live-SENTINEL0123"});
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        #[serde(rename = "fast")]
        Fast,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Options {
        mode: Mode,
    }
    let message = invalid(provider_options_from_json::<Options>(&ProviderId::from("scripted"), &provider_options));
    assert_eq!(message, "provider_options.mode: unknown value, expected `fast` (provider `scripted`)");
}

#[test]
fn without_values_drops_the_values_serde_quotes_and_keeps_the_rest() {
    for (message, stripped) in [
        ("unknown variant `sk-1`, expected `a` or `b`", "unknown value, expected `a` or `b`"),
        (
            "unknown variant `sk-1`, expected one of `a`, `b`, `c` at line 1 column 9",
            "unknown value, expected one of `a`, `b`, `c` at line 1 column 9",
        ),
        ("unknown variant `sk-1`, there are no variants", "unknown value, there are no variants"),
        // Serde writes the value as it is: a backtick, or serde's own words, inside it do not end it.
        ("unknown variant `a`b`, expected `c`, expected `a` or `b`", "unknown value, expected `a` or `b`"),
        (r#"unknown variant `string "sk-1`, expected `a`"#, "unknown value, expected `a`"),
        (
            r#"invalid type: string "unknown variant `sk-1`, expected `x`", expected a map"#,
            "invalid type: a string, expected a map",
        ),
        // Not closed: the rest is dropped rather than shown.
        ("unknown variant `sk-1", "unknown value"),
        (r#"invalid value: string "sk-1"#, "invalid value: a string"),
        (
            "unknown field `modle`, expected one of `model`, `cwd`",
            "unknown field `modle`, expected one of `model`, `cwd`",
        ),
        ("invalid type: integer `1`, expected a string", "invalid type: integer `1`, expected a string"),
    ] {
        assert_eq!(without_values(message), stripped, "{message}");
    }
}

#[test]
fn without_any_values_drops_numbers_too() {
    for (message, stripped) in [
        ("invalid type: integer `12345678`, expected a string", "invalid type: an integer, expected a string"),
        ("invalid type: floating point `-1234567.5`, expected a string", "invalid type: a number, expected a string"),
        (r#"invalid type: string "integer `1`", expected u32"#, "invalid type: a string, expected u32"),
        ("invalid value: integer `-1", "invalid value: an integer"),
    ] {
        assert_eq!(without_any_values(message), stripped, "{message}");
    }
}

/// Every field set, in the form `Serialize` writes.
fn full() -> Value {
    json!({
        "provider": "scripted",
        "id": "review-42",
        "cwd": "/srv/repo",
        "model": "gpt-5-codex",
        "system_prompt": "Answer briefly.",
        "approval_policy": "on_request",
        "sandbox": "workspace_write",
        "mcp_servers": {
            "docs": { "transport": "http", "url": "https://docs.example/mcp", "headers": { "X-Key": "k" } },
            "files": { "transport": "stdio", "command": "mcp-files", "args": ["--root", "/srv"], "env": { "A": "1" } }
        },
        "skills": [{ "name": "review", "path": "/skills/review" }],
        "env": { "set": { "RUST_LOG": "warn" }, "unset": ["OPENAI_API_KEY"] },
        "auth": "inherit",
        "conversation": { "mode": "fork", "from": { "provider": "thread-1" } },
        "metadata": { "ticket": 42 },
        "event_buffer_size": 50,
        "completed_turn_cache_size": "unbounded",
        "startup_timeout_ms": 1000,
        "startup_finalization_timeout_ms": 2000,
        "turn_start_timeout_ms": 3000,
        "provider_command_timeout_ms": 4000,
        "request_timeout_ms": 5000,
        "turn_inactivity_timeout_ms": 6000,
        "store_failure": "stop",
        "reuse": "closed"
    })
}

/// The message of an [`Error::InvalidConfig`].
#[track_caller]
fn invalid(result: Result<impl fmt::Debug>) -> String {
    match result {
        Err(Error::InvalidConfig(message)) => message,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// Parsing `json` fails with a message that starts with `path` and contains `says`.
#[track_caller]
fn check_error(json: &str, path: &str, says: &str) {
    let message = invalid(SessionConfig::from_json_str(json));
    assert!(message.starts_with(&format!("{path}: ")), "{message:?} starts with {path:?}");
    assert!(message.contains(says), "{message:?} contains {says:?}");
    let value: Value = serde_json::from_str(json).expect("valid JSON");
    let message = invalid(SessionConfig::from_json_value(value));
    assert!(message.starts_with(&format!("{path}: ")) && message.contains(says), "{message:?}");
}

#[test]
fn a_config_round_trips_through_json() {
    let config = SessionConfig::from_json_value(full()).expect("parses");
    assert_eq!(serde_json::to_value(&config).expect("serializes"), full());
    let text = serde_json::to_string_pretty(&config).expect("serializes");
    assert_eq!(SessionConfig::from_json_str(&text).expect("parses again"), config);

    let minimal = SessionConfig::from_json_str(r#"{ "provider": "codex" }"#).expect("parses");
    assert_eq!(minimal, SessionConfig::new("codex"));
    assert_eq!(serde_json::to_value(&minimal).expect("serializes"), json!({ "provider": "codex" }));
}

/// A map keeps the last of two equal keys without a word: a key given twice in one object is
/// refused by its object's path.
#[test]
fn a_key_given_twice_is_refused_by_path() {
    let twice = r#"{ "provider": "codex", "env": { "set": { "A": "1", "A": "2" } } }"#;
    assert_eq!(invalid(SessionConfig::from_json_str(twice)), "env.set: the key `A` is given twice");
    let twice = r#"{ "provider": "codex", "model": "x", "model": "y" }"#;
    assert_eq!(invalid(SessionConfig::from_json_str(twice)), "the key `model` is given twice");
}

#[test]
fn unknown_fields_are_refused_by_path() {
    check_error(r#"{ "provider": "codex", "modle": "x" }"#, "modle", "unknown field `modle`");
    check_error(
        r#"{ "provider": "codex", "mcp_servers": { "files": { "transport": "stdio", "comand": "x" } } }"#,
        "mcp_servers.files.comand",
        "unknown field `comand`",
    );
    check_error(
        r#"{ "provider": "codex", "skills": [{ "name": "a", "path": "/a", "version": 2 }] }"#,
        "skills[0].version",
        "unknown field `version`",
    );
    check_error(
        r#"{ "provider": "codex", "conversation": { "mode": "resume", "from": { "thread": "t" } } }"#,
        "conversation.from",
        "unknown value, expected `session` or `provider`",
    );
}

#[test]
fn wrong_types_are_refused_by_path() {
    check_error(
        r#"{ "provider": "codex", "mcp_servers": { "files": { "transport": "stdio", "command": "x", "args": ["a", 1] } } }"#,
        "mcp_servers.files.args[1]",
        "invalid type: an integer, expected a string",
    );
    check_error(
        r#"{ "provider": "codex", "mcp_servers": { "files": { "transport": "stdio", "command": 7 } } }"#,
        "mcp_servers.files.command",
        "invalid type: an integer",
    );
    check_error(r#"{ "provider": "codex", "startup_timeout_ms": "5s" }"#, "startup_timeout_ms", "invalid type");
    check_error(r#"{ "provider": "codex", "startup_timeout_ms": 0 }"#, "startup_timeout_ms", "nonzero");
    check_error(r#"{ "provider": "codex", "approval_policy": "sometimes" }"#, "approval_policy", "unknown value");
    check_error(r#"{ "provider": "codex", "env": { "set": { "A": true } } }"#, "env.set.A", "invalid type");
    check_error(
        r#"{ "provider": "codex", "completed_turn_cache_size": "lots" }"#,
        "completed_turn_cache_size",
        "\"unbounded\"",
    );
    check_error(
        r#"{ "provider": "codex", "mcp_servers": { "docs": { "transport": "http", "url": "u", "command": "x" } } }"#,
        "mcp_servers.docs",
        "an http server takes no `command`",
    );
    check_error(r#"{ "provider": "codex", "conversation": { "mode": "resume" } }"#, "conversation", "needs `from`");
    // `null` is no value of these fields, as the schema says (absent is their default).
    for (config, path, says) in [
        (
            r#"{ "provider": "codex", "mcp_servers": { "f": { "transport": "stdio", "command": "x", "args": null } } }"#,
            "mcp_servers.f.args",
            "invalid type: null",
        ),
        (
            r#"{ "provider": "codex", "mcp_servers": { "f": { "transport": "stdio", "command": "x", "env": null } } }"#,
            "mcp_servers.f.env",
            "invalid type: null",
        ),
        (
            r#"{ "provider": "codex", "mcp_servers": { "f": { "transport": "http", "url": "u", "headers": null } } }"#,
            "mcp_servers.f.headers",
            "invalid type: null",
        ),
        (
            r#"{ "provider": "codex", "conversation": { "mode": "new", "from": null } }"#,
            "conversation.from",
            // serde's text reader says `expected value` here, its value reader `invalid type: null`.
            "",
        ),
    ] {
        check_error(config, path, says);
    }
}

#[test]
fn malformed_json_is_an_invalid_config_with_its_position() {
    for (json, says) in [
        (r#"{ "provider": "codex", "#, "EOF while parsing a value at line 1 column 23"),
        (r#"{ "provider": "codex" } trailing"#, "trailing characters at line 1 column 25"),
        ("", "EOF while parsing a value at line 1 column 0"),
        ("[]", "expected a JSON object, found an array"),
        (r#"["codex"]"#, "expected a JSON object, found an array"),
    ] {
        let error = SessionConfig::from_json_str(json).expect_err(json);
        assert_eq!(error.kind(), ErrorKind::InvalidConfig);
        assert!(error.to_string().contains(says), "{error} contains {says:?}");
    }
    let message = invalid(SessionConfig::from_json_str(r#"{ "cwd": "/x" }"#));
    assert!(message.contains("missing field `provider`"), "{message}");
}

#[test]
fn options_take_every_field_the_config_sets() {
    let (provider, _) = ScriptedProvider::new("scripted");
    let options = SessionConfig::from_json_value(full()).and_then(|c| c.into_options(provider.as_ref()));
    let options = options.expect("options");
    assert_eq!(options.id.as_deref(), Some("review-42"));
    assert_eq!(options.cwd.as_deref(), Some(Path::new("/srv/repo")));
    assert_eq!(options.system_prompt.as_deref(), Some("Answer briefly."));
    assert_eq!(options.sandbox, Some(SandboxMode::WorkspaceWrite));
    assert_eq!(
        options.mcp_servers["files"],
        McpServer::Stdio {
            command: "mcp-files".into(),
            args: vec!["--root".into(), "/srv".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
        }
    );
    assert_eq!(options.skills, vec![Skill::new("review", "/skills/review")]);
    assert_eq!(options.env.unset, ["OPENAI_API_KEY"]);
    assert_eq!(options.auth, AuthMode::Inherit);
    assert_eq!(options.conversation, Conversation::Fork(ConversationSource::Provider("thread-1".into())));
    assert_eq!(options.metadata["ticket"], 42);
    assert_eq!(options.event_buffer_size, 50);
    assert_eq!(options.completed_turn_cache_size, Some(CacheSize::Unbounded));
    assert_eq!(options.startup_timeout, Duration::from_secs(1));
    assert_eq!(options.startup_finalization_timeout, Duration::from_secs(2));
    assert_eq!(options.turn_start_timeout, Duration::from_secs(3));
    assert_eq!(options.provider_command_timeout, Duration::from_secs(4));
    assert_eq!(options.request_timeout, Some(Duration::from_secs(5)));
    assert_eq!(options.turn_inactivity_timeout, Some(Duration::from_secs(6)));
    assert_eq!(options.store_failure, StoreFailurePolicy::Stop);
    assert_eq!(options.reuse, Reuse::Closed);
}

#[test]
fn a_config_layers_over_options_set_in_code() {
    let (provider, _) = ScriptedProvider::new("scripted");
    let base = SessionOptions::new("/base")
        .model("base-model")
        .env("KEEP", "1")
        .env("RUST_LOG", "debug")
        .metadata("owner", "ops")
        .startup_timeout(Duration::from_secs(9));
    let config = SessionConfig::from_json_value(json!({
        "provider": "scripted",
        "model": "config-model",
        "env": { "set": { "RUST_LOG": "warn" } },
        "metadata": { "ticket": 42 }
    }));
    let options = config.and_then(|c| c.apply_to(provider.as_ref(), base)).expect("options");
    assert_eq!(options.cwd.as_deref(), Some(Path::new("/base")), "left out: kept");
    assert_eq!(options.model.as_deref(), Some("config-model"), "set: replaced");
    assert_eq!(options.startup_timeout, Duration::from_secs(9));
    assert_eq!(options.env.set.get("KEEP").map(String::as_str), Some("1"));
    assert_eq!(options.env.set.get("RUST_LOG").map(String::as_str), Some("warn"));
    assert_eq!(options.metadata.len(), 2);

    // The config's word on a variable replaces the code's: removed there, set here, or the other
    // way round; one the config both sets and removes is refused when the options are checked.
    let base = SessionOptions::new(std::env::temp_dir()).env("DROP", "1").env_remove("ADD");
    let config = json!({"provider": "scripted", "env": {"set": {"ADD": "2"}, "unset": ["DROP"]}});
    let options = SessionConfig::from_json_value(config).and_then(|c| c.apply_to(provider.as_ref(), base.clone()));
    let options = options.expect("options");
    assert_eq!(options.env.set.keys().collect::<Vec<_>>(), ["ADD"]);
    assert_eq!(options.env.unset, ["DROP"]);
    let config = json!({"provider": "scripted", "env": {"set": {"BOTH": "2"}, "unset": ["BOTH"]}});
    let options = SessionConfig::from_json_value(config).and_then(|c| c.apply_to(provider.as_ref(), base));
    let refused = options.expect("applied").validate().expect_err("a name both set and removed");
    assert!(refused.to_string().contains("both set and removed"), "{refused}");
}

/// A conversation the config sets, `new` included, replaces the one set in code; one it leaves
/// out (or gives as `null`) keeps it.
#[test]
fn a_config_conversation_of_new_replaces_a_resume_set_in_code() {
    let (provider, _) = ScriptedProvider::new("scripted");
    let base = || SessionOptions::new("/base").resume_provider_session("thread-123");
    let resumed = Conversation::Resume(ConversationSource::Provider("thread-123".into()));
    for (config, expected) in [
        (json!({"provider": "scripted", "conversation": {"mode": "new"}}), Conversation::New),
        (json!({"provider": "scripted"}), resumed.clone()),
        (json!({"provider": "scripted", "conversation": null}), resumed.clone()),
    ] {
        let options =
            SessionConfig::from_json_value(config.clone()).and_then(|c| c.apply_to(provider.as_ref(), base()));
        assert_eq!(options.expect("options").conversation, expected, "{config}");
    }
}

#[test]
fn the_default_provider_takes_no_options() {
    let (provider, _) = ScriptedProvider::new("scripted");
    for nothing in [Value::Null, json!({})] {
        let mut config = SessionConfig::new("scripted");
        config.provider_options = nothing;
        assert!(config.into_options(provider.as_ref()).is_ok());
    }
    let mut config = SessionConfig::new("scripted");
    config.provider_options = json!({ "binary": "/opt/codex" });
    let message = invalid(config.into_options(provider.as_ref()));
    assert!(message.starts_with("provider_options: provider `scripted` takes no options"), "{message}");
}

#[test]
fn a_config_for_another_provider_is_refused() {
    let (provider, _) = ScriptedProvider::new("scripted");
    let message = invalid(SessionConfig::new("codex").into_options(provider.as_ref()));
    assert!(message.starts_with("provider: the config is for provider `codex`"), "{message}");
}

#[test]
fn provider_option_errors_carry_their_path_and_the_provider() {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Extras {
        #[serde(default)]
        flags: Vec<u32>,
    }
    let provider = ProviderId::new("extras");
    let message = invalid(provider_options_from_json::<Extras>(&provider, &json!({ "flags": [1, "x"] })));
    assert!(message.starts_with("provider_options.flags[1]: invalid type: a string, expected u32"), "{message}");
    assert!(message.ends_with("(provider `extras`)"), "{message}");
    let message = invalid(provider_options_from_json::<Extras>(&provider, &json!({ "flag": [] })));
    assert!(message.starts_with("provider_options.flag: unknown field `flag`"), "{message}");
    for not_an_object in [json!([]), Value::Null, json!("flags")] {
        let message = invalid(provider_options_from_json::<Extras>(&provider, &not_an_object));
        assert!(message.starts_with("provider_options: expected a JSON object, found"), "{message}");
    }
}

#[test]
fn debug_shows_no_secret_values() {
    let mut config = SessionConfig::from_json_value(full()).expect("parses");
    config.provider_options = json!({ "token": "sekrit-option" });
    config.env.set.insert("TOKEN".into(), "sekrit-env".into());
    let text = format!("{config:?}");
    config.metadata.insert("note".into(), "sekrit-metadata".into());
    for secret in ["sekrit", "Answer briefly", "--root"] {
        assert!(!text.contains(secret), "{secret:?} in {text}");
    }
    assert!(text.contains("token") && text.contains("ticket"), "{text}");
}

/// A harness with the scripted provider and no store.
fn scripted_harness() -> (Harness, crate::testing::ScriptedControl) {
    let (provider, control) = ScriptedProvider::new("scripted");
    let harness = Harness::builder().provider(provider).store(crate::StoreChoice::Disabled).build().expect("harness");
    (harness, control)
}

#[tokio::test]
async fn the_harness_starts_a_session_from_a_config() {
    let (harness, _) = scripted_harness();
    let cwd = std::env::temp_dir();
    let config = SessionConfig::from_json_value(json!({
        "provider": "scripted",
        "id": "from-config",
        "cwd": cwd,
        "metadata": { "ticket": 42 }
    }));
    let session = harness.start_session_from_config(config.expect("parses")).await.expect("starts");
    assert_eq!(session.id.as_str(), "from-config");
    assert_eq!(harness.list_sessions(), std::slice::from_ref(&session));
    harness.stop_session(&session, true).await.expect("stops");
}

#[tokio::test]
async fn a_bad_config_starts_nothing() {
    let (harness, control) = scripted_harness();
    let cwd = std::env::temp_dir();
    let mut options = SessionConfig::new("scripted");
    options.cwd = Some(cwd.clone());
    options.provider_options = json!({ "binary": "/opt/codex" });
    let error = harness.start_session_from_config(options).await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::InvalidConfig);

    let mut elsewhere = SessionConfig::new("claude");
    elsewhere.cwd = Some(cwd);
    let error = harness.start_session_from_config(elsewhere).await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::UnknownProvider);

    assert!(harness.list_sessions().is_empty());
    assert!(control.conversations().is_empty(), "no open was attempted");
}

/// The checked-in schema is what the code generates.
#[test]
fn the_checked_in_schema_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/session-config.schema.json");
    let generated = serde_json::to_string_pretty(&SessionConfig::json_schema()).expect("serializes") + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("schema directory");
        std::fs::write(&path, &generated).expect("schema written");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date; regenerate it with `UPDATE_SCHEMA=1 cargo test -p agent-core config`",
        path.display()
    );
}

#[test]
fn the_schema_describes_what_parses() {
    let schema = SessionConfig::json_schema();
    assert_eq!(schema["required"], json!(["provider"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    let properties = schema["properties"].as_object().expect("properties");
    let mut fields: Vec<String> = full().as_object().expect("an object").keys().cloned().collect();
    fields.push("provider_options".into());
    fields.sort();
    let mut described: Vec<String> = properties.keys().cloned().collect();
    described.sort();
    assert_eq!(described, fields, "the schema describes every field, and only those");
}
