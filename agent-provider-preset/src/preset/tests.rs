use serde_json::json;

use super::*;

/// A small valid `lines` preset to vary.
pub(crate) fn minimal() -> Value {
    json!({
        "schema_version": 1,
        "id": "mini",
        "program": "mini-cli",
        "args": ["--", "{prompt}"],
        "framing": "lines",
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]}
    })
}

fn allow() -> AllowList {
    AllowList::new().allow("mini-cli")
}

#[track_caller]
fn refused(preset: Value, field: &str, says: &str) -> crate::PresetError {
    let error = Preset::from_json(&preset.to_string(), "dir/mini.json", &allow()).expect_err("refused");
    assert_eq!(error.origin, "dir/mini.json");
    assert_eq!(error.field, field, "{error}");
    assert!(error.message.contains(says), "{error}");
    error
}

/// `preset` with the value at `pointer` set (its parent must exist).
fn with(mut preset: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let parent = preset.pointer_mut(parent).unwrap_or_else(|| panic!("{pointer}"));
    match parent {
        Value::Array(items) => items[key.parse::<usize>().expect("an index")] = value,
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        _ => panic!("{pointer}"),
    }
    preset
}

fn without(mut preset: Value, key: &str) -> Value {
    preset.as_object_mut().unwrap().remove(key);
    preset
}

#[test]
fn a_minimal_preset_loads_with_what_it_makes_possible() {
    let preset = Preset::from_json(&minimal().to_string(), "dir/mini.json", &allow()).unwrap();
    assert_eq!((preset.id(), preset.program(), preset.origin()), ("mini", "mini-cli", "dir/mini.json"));
    let caps = preset.capabilities();
    assert_eq!(caps.cancel, Support::Emulated);
    assert_eq!(caps.resume, Support::Unsupported);
    assert_eq!(caps.approvals, Support::Unsupported);
    let info = preset.info();
    assert_eq!(info.provider, "preset:mini");
    assert!(info.options.iter().all(|o| o.name != "args" && o.name != "approvals"));
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["capabilities"]["cancel"], "emulated");
}

#[test]
fn bad_presets_name_the_file_and_the_field() {
    let error = refused(with(minimal(), "/args/1", json!("{promt}")), "args[1]", "unknown placeholder");
    assert_eq!(error.to_string(), format!("dir/mini.json: args[1]: {}", error.message));
    refused(with(minimal(), "/matchers/result/0/when", json!("(RESULT")), "matchers.result[0].when", "invalid regex");
    refused(without(minimal(), "framing"), "", "missing field `framing`");
    refused(without(minimal(), "schema_version"), "schema_version", "missing field");
    refused(with(minimal(), "/schema_version", json!(2)), "schema_version", "unsupported version (this version");
    refused(with(minimal(), "/schema_version", json!("1")), "schema_version", "not a version number");
    refused(with(minimal(), "/program", json!("rm")), "program", "not on the executable allow-list");
    refused(with(minimal(), "/program", json!("./mini-cli")), "program", "neither a bare program name");
    refused(with(minimal(), "/framing", json!("xml")), "framing", "unknown value, expected `jsonl` or `lines`");
    // Values that could never take effect.
    refused(with(minimal(), "/success_exit_codes", json!([0, 256])), "success_exit_codes[1]", "from 0 to 255");
    refused(with(minimal(), "/success_exit_codes", json!([-1])), "success_exit_codes[0]", "from 0 to 255");
    let empty_contains = with(minimal(), "/version", json!({"args": ["--version"], "contains": ""}));
    refused(empty_contains, "version.contains", "an empty text");
    let unnamed = with(minimal(), "/matchers/keep", json!({"": [{"when": "^X (?P<v>.*)$", "value": "v"}]}));
    refused(unnamed, "matchers.keep", "needs a name");
    let error = refused(with(minimal(), "/id", json!("sk-ant-PASTED-KEY")), "id", "not an ID");
    assert!(!error.to_string().contains("PASTED"), "the value is not quoted: {error}");
    refused(with(minimal(), "/matchers/result", json!([])), "matchers.result", "at least one rule");
    refused(with(minimal(), "/matchers/result/0/value", json!("txt")), "matchers.result[0].value", "not a group");
    refused(
        with(minimal(), "/matchers/result/0/kept", json!("last")),
        "matchers.result[0].kept",
        "names no `matchers.keep` value",
    );
    refused(with(minimal(), "/args", json!(["{prompt}", "{prompt}"])), "args", "must be one argument");
    // Twice in one argument is twice too.
    refused(with(minimal(), "/args", json!(["--p={prompt}:{prompt}"])), "args", "(found 2)");
    refused(with(minimal(), "/args", json!(["-x"])), "args", "must be one argument");
    let mut stdin = with(minimal(), "/prompt", json!("stdin"));
    refused(stdin.clone(), "args", "`prompt` is `stdin`");
    stdin["args"] = json!([]);
    assert!(Preset::from_json(&stdin.to_string(), "x", &allow()).is_ok());
    let resume = with(minimal(), "/args", json!([{"if": "resume", "then": ["--resume", "{session_id}"]}, "{prompt}"]));
    refused(resume.clone(), "matchers.session_id", "needs a rule");
    let asking = with(
        with(minimal(), "/args", json!([{"if": "!approvals", "then": ["--", "{prompt}"]}])),
        "/approvals",
        json!({"conversation": "claude_control"}),
    );
    refused(asking, "approvals", "needs `\"framing\": \"jsonl\"`");
    let mut unflagged =
        with(with(minimal(), "/framing", json!("jsonl")), "/approvals", json!({"conversation": "claude_control"}));
    unflagged["matchers"] = json!({"result": [{"when": {"/type": "result"}, "value": "/result"}]});
    unflagged["prompt"] = json!("stdin");
    unflagged["args"] = json!(["--print"]);
    refused(unflagged, "approvals", "needs `approvals` groups in `args`");
    refused(with(minimal(), "/capabilities", json!({"images": "native"})), "capabilities.images", "cannot provide");
    refused(with(minimal(), "/capabilities", json!({"resume": "native"})), "capabilities.resume", "claimed, but");
    // Claims lower what the parts give, never raise it: a preset's cancel stops the process.
    refused(with(minimal(), "/capabilities", json!({"cancel": "native"})), "capabilities.cancel", "claimed native");
    refused(
        with(minimal(), "/capabilities", json!({"teleport": "native"})),
        "capabilities.teleport",
        "unknown capability",
    );
    refused(with(minimal(), "/events", json!([{"when": "x", "emit": "nope"}])), "events[0].emit", "unknown event");
    refused(with(minimal(), "/version", json!({"args": ["-V"], "min": "one"})), "version.min", "not a version");
    refused(with(minimal(), "/env", json!({"set": {"A=B": "x"}})), "env.set", "not an environment variable");
    for name in
        ["PATH", "LD_PRELOAD", "ld_library_path", "DYLD_INSERT_LIBRARIES", "NODE_OPTIONS", "BASH_ENV", "PYTHONPATH"]
    {
        let path = format!("env.set.{name}");
        refused(with(minimal(), "/env", json!({"set": {name: "/tmp/x"}})), &path, "may not set this variable");
    }
    let mut jsonl = with(minimal(), "/framing", json!("jsonl"));
    jsonl["matchers"] = json!({"result": [{"when": {"/type": "end", "$stop": "ok"}}]});
    refused(jsonl, "matchers.result[0].when.$stop", "no `matchers.keep.stop`");
    refused(with(minimal(), "/auth_args", json!(["config"])), "auth_args[0]", "option name");
    refused(with(minimal(), "/reserved_args", json!(["-c", "--x=1"])), "reserved_args[1]", "option name");
    refused(with(minimal(), "/reserved_args", json!(["--"])), "reserved_args[0]", "option name");
    refused(with(minimal(), "/reserved_words", json!(["resume", "--resume"])), "reserved_words[1]", "not an option");
    refused(with(minimal(), "/reserved_words", json!([""])), "reserved_words[0]", "not an option");
    refused(with(minimal(), "/conversation_files", json!("claude")), "conversation_files", "needs a `resume` group");
    let retry = |rule: Value| with(minimal(), "/matchers/retry", json!([rule]));
    refused(retry(json!({"when": "x", "value": "0"})), "matchers.retry[0]", "only `when`");
    refused(retry(json!({"when": "x", "$y": 1})), "matchers.retry[0].$y", "unknown field");
    let mut asking = with(retry(json!({"when": {"/type": "retry"}})), "/framing", json!("jsonl"));
    asking["matchers"]["result"] = json!([{"when": {"/type": "result"}, "value": "/result"}]);
    asking["approvals"] = json!({"conversation": "claude_control"});
    asking["args"] = json!([{"if": "!approvals", "then": ["--", "{prompt}"]}, {"if": "approvals", "then": ["--ask"]}]);
    refused(asking, "matchers.retry", "approval conversation");
    refused(with(minimal(), "/conversation_files", json!("codex")), "conversation_files", "expected `claude` or `pi`");
    refused(with(minimal(), "/arg_aliases", json!({"m": "--model"})), "arg_aliases", "option name");
    // An alias names a flag the template passes a value with: this one has none.
    refused(with(minimal(), "/arg_aliases", json!({"-m": "--model"})), "arg_aliases.-m", "passes a placeholder's");
    let mut model =
        with(minimal(), "/args", json!([{"if": "model", "then": ["--model", "{model}"]}, "--", "{prompt}"]));
    model["arg_aliases"] = json!({"-m": "--model"});
    Preset::from_json(&model.to_string(), "dir/x.json", &allow()).expect("an alias of `--model`");
    let mut unknown = minimal();
    unknown["colour"] = json!("blue");
    refused(unknown, "colour", "unknown field `colour`");
    let twice = minimal().to_string().replacen('{', r#"{"program": "/bin/sh", "#, 1);
    let error = Preset::from_json(&twice, "dir/x.json", &allow()).unwrap_err();
    assert!(error.to_string().contains("the key `program` is given twice"), "{error}");
    let error = Preset::from_json("{not json", "dir/x.json", &allow()).unwrap_err();
    assert!(error.to_string().starts_with("dir/x.json: not JSON"), "{error}");
}

/// A value in the wrong place may be a secret: the error names the field and what it
/// takes, and quotes nothing the file gave.
#[test]
fn parse_errors_say_what_was_expected_not_the_value() {
    let secret = "sk-live-PRESETKEY0123456789";
    for (preset, field, says) in [
        (
            with(minimal(), "/env", json!(format!("MINI_API_KEY={secret}"))),
            "env",
            "invalid type: a string, expected struct EnvFile",
        ),
        (with(minimal(), "/framing", json!(secret)), "framing", "unknown value, expected `jsonl` or `lines`"),
        (with(minimal(), "/prompt", json!(secret)), "prompt", "unknown value, expected `argv` or `stdin`"),
        (with(minimal(), "/capabilities", json!({"cancel": secret})), "capabilities.cancel", "unknown value, expected"),
        (with(minimal(), "/auth_env", json!(secret)), "auth_env", "invalid type: a string, expected a sequence"),
        (with(minimal(), "/version", json!({"args": secret})), "version.args", "invalid type: a string"),
        // A variable assignment pasted as a key: not a name, so not quoted as one.
        (
            with(minimal(), "/env", json!({"set": {format!("MINI_API_KEY={secret}"): "x"}})),
            "env.set",
            "a key is not an environment variable name",
        ),
        (
            with(minimal(), "/env", json!({"set": {format!("MINI_API_KEY={secret}"): 1}})),
            "env.set",
            "invalid type: an integer, expected a string",
        ),
        (
            with(minimal(), "/arg_aliases", json!({format!("--api-key={secret}"): "--model"})),
            "arg_aliases",
            "a key is not an option name",
        ),
        (
            with(minimal(), "/arg_aliases", json!({format!("--api-key={secret}"): 1})),
            "arg_aliases",
            "invalid type: an integer, expected a string",
        ),
        (with(minimal(), "/matchers/result/0/value", json!(secret)), "matchers.result[0].value", "not a group"),
        (
            with(minimal(), "/matchers/result/0/kept", json!(secret)),
            "matchers.result[0].kept",
            "names no `matchers.keep` value",
        ),
    ] {
        let error = refused(preset, field, says);
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains("PRESETKEY"), "{shown}");
        }
    }
}

/// A `value` that is no JSON pointer in a `jsonl` rule: named by its field, not quoted.
#[test]
fn a_value_that_is_no_pointer_is_not_quoted() {
    let mut preset = with(minimal(), "/framing", json!("jsonl"));
    preset["matchers"] = json!({"result": [{"when": {"/type": "done"}, "value": "sk-live-PRESETKEY0123456789"}]});
    let error = refused(preset, "matchers.result[0].value", "not a JSON pointer");
    assert!(!format!("{error} {error:?}").contains("PRESETKEY"), "{error}");
}

#[test]
fn a_file_that_begins_with_a_byte_order_mark_loads() {
    let text = format!("\u{feff}{}", minimal());
    let preset = Preset::from_json(&text, "dir/mini.json", &allow()).expect("loads");
    assert_eq!(preset.id, "mini");
}

/// Nor a number: a token may be all digits.
#[test]
fn parse_errors_quote_no_number_either() {
    for (preset, field, says) in [
        (
            with(minimal(), "/env", json!({"set": {"MY_TOKEN": 12345678901234_u64}})),
            "env.set.MY_TOKEN",
            "invalid type: an integer, expected a string",
        ),
        (with(minimal(), "/description", json!(-1234567.5)), "description", "invalid type: a number, expected"),
        (with(minimal(), "/schema_version", json!(1234567)), "schema_version", "unsupported version"),
    ] {
        let error = refused(preset, field, says);
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains("1234567"), "{shown}");
        }
    }
}

#[test]
fn bash_functions_may_not_be_set() {
    for name in ["BASH_FUNC_date%%", "BASH_FUNC_date()", "bash_func_ls%%", "date%%"] {
        let preset = with(minimal(), "/env", json!({"set": {name: "() { echo hijacked; }"}}));
        refused(preset, &format!("env.set.{name}"), "may not set this variable");
    }
    let unset = with(minimal(), "/env", json!({"unset": ["BASH_FUNC_date%%"], "set": {"BASH_FUNCTIONS": "x"}}));
    assert!(Preset::from_json(&unset.to_string(), "x", &allow()).is_ok(), "removing one is fine");
}

/// Only a `resume` group passing `{session_id}` continues a conversation; `!resume` groups
/// say what a turn passes when there is none.
#[test]
fn only_a_resume_group_makes_resume_possible() {
    let session_id = json!([{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}]);
    let fresh = with(
        with(minimal(), "/args", json!([{"if": "!resume", "then": ["--new-conversation"]}, "--", "{prompt}"])),
        "/matchers/session_id",
        session_id,
    );
    let preset = Preset::from_json(&fresh.to_string(), "x", &allow()).unwrap();
    assert_eq!(preset.capabilities().resume, Support::Unsupported);
    assert!(!preset.info().resume && !preset.resumes());
    refused(with(fresh.clone(), "/capabilities", json!({"resume": "native"})), "capabilities.resume", "claimed, but");
    // Without a `session_id` rule it loads too: there is no conversation to find.
    let mut no_rule = fresh.clone();
    no_rule["matchers"].as_object_mut().unwrap().remove("session_id");
    assert!(!Preset::from_json(&no_rule.to_string(), "x", &allow()).unwrap().info().resume);

    let both = with(
        fresh,
        "/args",
        json!([
            {"if": "!resume", "then": ["--new-conversation"]},
            {"if": "resume", "then": ["--resume", "{session_id}"]},
            "--", "{prompt}"
        ]),
    );
    let preset = Preset::from_json(&both.to_string(), "x", &allow()).unwrap();
    assert_eq!(preset.capabilities().resume, Support::Native);
    assert!(preset.info().resume && preset.resumes());
    let continuing = with(both, "/args/1", json!({"if": "resume", "then": ["--continue"]}));
    refused(continuing, "args[1].if", "pass `{session_id}`");
    let asking_alone = with(minimal(), "/args", json!([{"if": "!approvals", "then": ["--", "{prompt}"]}]));
    refused(asking_alone, "args", "an `approvals` group needs an `approvals` conversation");
}

#[test]
fn rules_take_kept_values_by_name() {
    let mut preset = with(minimal(), "/framing", json!("jsonl"));
    preset["matchers"] = json!({
        "keep": {"sid": [{"when": {"/type": "init"}, "value": "/id"}]},
        "session_id": [{"when": {"/type": "done"}, "kept": "sid"}],
        "result": [{"when": {"/type": "done"}, "value": "/text"}]
    });
    let loaded = Preset::from_json(&preset.to_string(), "x", &allow()).unwrap();
    assert_eq!(loaded.matchers.session_id[0].kept.as_deref(), Some("sid"));
    refused(
        with(preset.clone(), "/matchers/session_id/0/kept", json!("other")),
        "matchers.session_id[0].kept",
        "names no `matchers.keep` value",
    );
    // A kept value from another (or itself) would be read one line late: refused, not guessed at.
    for name in ["sid", "last"] {
        let mut keeping = preset.clone();
        keeping["matchers"]["keep"]["last"] = json!([{"when": {"/type": "end"}, "kept": name}]);
        refused(keeping, "matchers.keep.last[0].kept", "a `keep` rule takes its value from the line");
    }
}

#[test]
fn nul_characters_are_refused_where_no_process_could_take_them() {
    refused(with(minimal(), "/env", json!({"set": {"MY_FLAG": "a\u{0}b"}})), "env.set.MY_FLAG", "NUL character");
    refused(with(minimal(), "/env", json!({"set": {"MY\u{0}FLAG": "ab"}})), "env.set", "not an environment");
    refused(with(minimal(), "/env", json!({"unset": ["MY\u{0}FLAG"]})), "env.unset[0]", "not an environment");
    refused(with(minimal(), "/args/0", json!("-\u{0}-")), "args[0]", "NUL character");
    refused(with(minimal(), "/version", json!({"args": ["--version", "-\u{0}"]})), "version.args[1]", "NUL character");
}

#[test]
fn debug_shows_environment_names_not_values() {
    let preset = with(minimal(), "/env", json!({"set": {"MINI_TOKEN": "sekrit-value"}}));
    let preset = Preset::from_json(&preset.to_string(), "x", &allow()).unwrap();
    let debug = format!("{preset:?}");
    assert!(debug.contains("MINI_TOKEN") && !debug.contains("sekrit"), "{debug}");
    let info = serde_json::to_string(&preset.info()).unwrap();
    assert!(!info.contains("sekrit"), "{info}");
}

#[test]
fn claims_can_lower_what_the_parts_make_possible() {
    let mut preset = with(minimal(), "/capabilities", json!({"cancel": "unsupported"}));
    preset["events"] = json!([{"when": "^D (?P<t>.*)$", "emit": "message_delta", "text": "t"}]);
    let preset = Preset::from_json(&preset.to_string(), "x", &allow()).unwrap();
    assert_eq!(preset.capabilities().cancel, Support::Unsupported);
    assert_eq!(preset.capabilities().token_streaming, Support::Native);
}

/// A shipped preset runs the same CLI as a native provider, so under `AuthMode::Subscription`
/// it refuses at least what that provider's guard refuses: each name and each prefix of the
/// provider's own rules (the kit's common rules apply to every preset anyway).
#[test]
fn shipped_presets_guard_what_their_native_provider_guards() {
    use agent_provider_kit::auth::EnvRules;
    let natives = [
        ("claude-print.json", EnvRules::CLAUDE),
        ("codex-exec.json", EnvRules::CODEX),
        ("pi-print.json", EnvRules::PI),
    ];
    for (file, rules) in natives {
        let text = crate::catalog::SHIPPED.iter().find(|(name, _)| *name == file).expect("shipped").1;
        let preset = Preset::from_json(text, file, &AllowList::shipped()).expect("loads");
        for name in rules.names {
            assert!(preset.lists_auth_env(name), "{file} does not list `{name}`");
        }
        for prefix in rules.prefixes {
            assert!(preset.lists_auth_env(&format!("{prefix}ANY_NAME")), "{file} does not cover `{prefix}*`");
        }
        assert!(rules.suffixes.is_empty(), "an `auth_env` entry cannot name a suffix");
    }
}

#[test]
fn auth_env_lists_names_and_prefixes() {
    let preset = with(minimal(), "/auth_env", json!(["MINI_TOKEN", "MINI_CLOUD_*"]));
    let preset = Preset::from_json(&preset.to_string(), "dir/mini.json", &allow()).expect("loads");
    for name in ["MINI_TOKEN", "mini_token", "MINI_CLOUD_ZONE", "MINI_CLOUD_"] {
        assert!(preset.lists_auth_env(name), "{name}");
    }
    for name in ["MINI_TOKENS", "MINI_CLOUD", "OTHER"] {
        assert!(!preset.lists_auth_env(name), "{name}");
    }
    refused(with(minimal(), "/auth_env", json!(["MINI_*_TOKEN"])), "auth_env[0]", "may only end a name");
    refused(with(minimal(), "/auth_env", json!(["*"])), "auth_env[0]", "not an environment variable name");
}

/// A `$name` test reads a kept value wherever a test stands, a tool's `failed_when` too: one
/// naming no `matchers.keep` entry is refused, where it would otherwise never match.
#[test]
fn a_failed_when_tests_only_kept_values_that_exist() {
    let jsonl = with(
        with(minimal(), "/framing", json!("jsonl")),
        "/matchers/result/0",
        json!({"when": {"/t": "done"}, "value": "/text"}),
    );
    let rule = |failed_when: Value| json!([{"when": {"/t": "tool"}, "emit": "tool_completed", "item_id": "/id", "failed_when": failed_when}]);
    refused(
        with(jsonl.clone(), "/events", rule(json!({"$nope": "x"}))),
        "events[0].failed_when.$nope",
        "no `matchers.keep.nope`",
    );
    let kept = with(jsonl, "/matchers/keep", json!({"phase": [{"when": {"/t": "phase"}, "value": "/p"}]}));
    let preset = with(kept, "/events", rule(json!({"$phase": "x"})));
    Preset::from_json(&preset.to_string(), "dir/mini.json", &allow()).expect("a kept value that exists");
}
