//! What loading a preset checks, seen from a presets directory and from the turns of a made-up
//! CLI (a shell script this test writes): which groups continue a conversation, session IDs
//! taken from kept values, and presets refused without quoting what they hold.

mod support;

use std::path::Path;
use std::sync::Arc;

use agent_core::{Harness, SessionOptions, TurnStatus};
use agent_exec::LocalExec;
use agent_provider_preset::{AllowList, PresetCatalog};
use agent_store_memory::MemoryStore;
use agent_testkit::events::{names, terminal};
use agent_testkit::programs::ProgramDir;
use agent_testkit::recording::RecordingExec;
use serde_json::{Value, json};
use support::payload;

/// The catalog of the presets directory `programs/presets` holding `preset` (its `id` names its
/// file), allowed to run `program`; the shipped presets are left out.
fn load(programs: &ProgramDir, program: &Path, preset: &Value) -> PresetCatalog {
    let presets = programs.path().join("presets");
    if !presets.exists() {
        programs.dir("presets");
    }
    let file = presets.join(format!("{}.json", preset["id"].as_str().expect("an id")));
    std::fs::write(file, preset.to_string()).expect("preset written");
    PresetCatalog::builder(AllowList::new().allow(program)).without_shipped().dir(&presets).load()
}

/// A harness running `catalog`'s presets through a recording local exec, on a memory store.
fn harness_of(catalog: &PresetCatalog) -> (Arc<RecordingExec>, Harness) {
    let exec = Arc::new(RecordingExec::new(Arc::new(LocalExec::new())));
    let harness = support::harness(catalog, &exec, Arc::new(MemoryStore::new()));
    (exec, harness)
}

/// The argv (without the program) of the `n`-th process `exec` started.
fn argv(exec: &RecordingExec, n: usize) -> Vec<String> {
    exec.commands()[n].args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// A CLI that starts a new conversation every turn (it is never told one to continue), and
/// says whether it was asked to.
const FRESH_CLI: &str = r#"
new=no
while [ $# -gt 0 ]; do
  case "$1" in
    --new-conversation) new=yes; shift;;
    --) shift; break;;
    *) shift;;
  esac
done
echo "SESSION s-$$"
echo "RESULT new=$new: $1"
"#;

/// A `!resume` group says what a turn passes when it continues nothing; with no `resume` group
/// the preset cannot continue a conversation, so every turn starts a new one, and a CLI
/// reporting a new session ID each turn is what it should do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_with_only_a_negated_resume_group_starts_a_new_conversation_each_turn() {
    let programs = ProgramDir::new("preset-fresh");
    let script = programs.script("fresh-cli", FRESH_CLI);
    let preset = json!({
        "schema_version": 1, "id": "fresh", "program": script, "framing": "lines",
        "args": [{"if": "!resume", "then": ["--new-conversation"]}, "--", "{prompt}"],
        "matchers": {
            "session_id": [{"when": "^SESSION (?P<id>\\S+)$", "value": "id"}],
            "result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]
        }
    });
    let catalog = load(&programs, &script, &preset);
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    let info = catalog.get("fresh").expect("loaded").info();
    assert!(!info.resume && !info.capabilities.resume.is_available(), "{info:?}");

    let (exec, harness) = harness_of(&catalog);
    let workspace = programs.dir("work");
    let session = harness.start_session("preset:fresh", SessionOptions::new(&workspace)).await.expect("starts");
    let mut ids = Vec::new();
    for (n, prompt) in ["one", "two"].into_iter().enumerate() {
        let (_, events) = support::run(&harness, &session, prompt, |_| None).await;
        assert_eq!(terminal(&events).status, TurnStatus::Completed, "turn {prompt}: {}", names(&events));
        assert_eq!(terminal(&events).result.text.as_deref(), Some(format!("new=yes: {prompt}").as_str()));
        assert_eq!(argv(&exec, n), ["--new-conversation", "--", prompt]);
        ids.push(payload(&events).session_id);
    }
    assert_ne!(ids[0], ids[1], "each turn is a new conversation");
    // Nor can a session ask to continue one.
    let resuming = SessionOptions::new(&workspace).resume_provider_session("s-1");
    assert!(harness.start_session("preset:fresh", resuming).await.is_err());
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// A `jsonl` CLI that names its session on an `init` line and ends with a `done` line that does
/// not repeat it; `--resume ID` continues `ID`.
const KEEPING_CLI: &str = r#"
session=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) session="$2"; shift 2;;
    --) shift; break;;
    *) shift;;
  esac
done
[ -n "$session" ] || session="s-$$"
echo "{\"type\":\"init\",\"id\":\"$session\"}"
echo "{\"type\":\"done\",\"text\":\"$1 in $session\"}"
"#;

/// A `session_id` rule takes the session ID a `keep` rule kept from an earlier line, and the
/// next turn continues that conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_taken_from_a_kept_value_continues_the_conversation() {
    let programs = ProgramDir::new("preset-keeping");
    let script = programs.script("keeping-cli", KEEPING_CLI);
    let preset = json!({
        "schema_version": 1, "id": "keeping", "program": script, "framing": "jsonl",
        "args": [{"if": "resume", "then": ["--resume", "{session_id}"]}, "--", "{prompt}"],
        "matchers": {
            "keep": {"sid": [{"when": {"/type": "init"}, "value": "/id"}]},
            "session_id": [{"when": {"/type": "done"}, "kept": "sid"}],
            "result": [{"when": {"/type": "done"}, "value": "/text"}]
        }
    });
    let catalog = load(&programs, &script, &preset);
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    assert!(catalog.get("keeping").expect("loaded").info().resume);

    let (exec, harness) = harness_of(&catalog);
    let workspace = programs.dir("work");
    let session = harness.start_session("preset:keeping", SessionOptions::new(&workspace)).await.expect("starts");
    let (_, first) = support::run(&harness, &session, "one", |_| None).await;
    assert_eq!(terminal(&first).status, TurnStatus::Completed, "{}", names(&first));
    let id = payload(&first).session_id.expect("the kept session ID");
    let (_, second) = support::run(&harness, &session, "two", |_| None).await;
    assert_eq!(terminal(&second).status, TurnStatus::Completed, "{}", names(&second));
    assert_eq!(terminal(&second).result.text.as_deref(), Some(format!("two in {id}").as_str()));
    assert_eq!(argv(&exec, 1), ["--resume", id.as_str(), "--", "two"]);
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}

/// Presets a directory holds that must not load: each error names the file and the field, and
/// shows nothing of the value it holds.
#[test]
fn bad_presets_in_a_directory_are_refused_by_field_without_their_values() {
    let programs = ProgramDir::new("preset-refused");
    let script = programs.script("any-cli", "echo \"RESULT $(date)\"");
    let base = json!({
        "schema_version": 1, "id": "p", "program": script, "framing": "lines",
        "args": ["--", "{prompt}"],
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]}
    });
    let cases = [
        // An `env` written as a variable assignment: a key in the wrong place.
        (json!({"env": "MINI_API_KEY=sk-live-PRESETKEY0123456789"}), "env", "invalid type: a string, expected"),
        (json!({"framing": "sk-live-PRESETKEY0123456789"}), "framing", "unknown value, expected `jsonl` or `lines`"),
        // A bash function named after a command the CLI runs.
        (
            json!({"env": {"set": {"BASH_FUNC_date%%": "() { echo PRESETKEY; }"}}}),
            "env.set.BASH_FUNC_date%%",
            "may not set this variable",
        ),
        (json!({"env": {"set": {"MY_FLAG": "PRESETKEY\u{0}b"}}}), "env.set.MY_FLAG", "NUL character"),
        (json!({"args": ["--flag=PRESETKEY\u{0}", "--", "{prompt}"]}), "args[0]", "NUL character"),
        (json!({"version": {"args": ["--version\u{0}PRESETKEY"]}}), "version.args[0]", "NUL character"),
        // Values that are not what their field takes: named by the field, not quoted.
        (
            json!({"matchers": {"result": [{"when": "^RESULT (PRESETKEY", "value": "0"}]}}),
            "matchers.result[0].when",
            "invalid regex",
        ),
        (json!({"version": {"args": ["--version"], "min": "PRESETKEY"}}), "version.min", "not a version"),
        (json!({"events": [{"when": "^x", "emit": "PRESETKEY"}]}), "events[0].emit", "unknown event"),
        (json!({"args": ["{PRESETKEY}", "--", "{prompt}"]}), "args[0]", "unknown placeholder"),
        (json!({"args": ["{PRESETKEY", "--", "{prompt}"]}), "args[0]", "is not closed"),
        (json!({"args": [{"if": "PRESETKEY", "then": []}, "--", "{prompt}"]}), "args[0].if", "unknown condition"),
    ];
    for (n, (change, field, says)) in cases.into_iter().enumerate() {
        let mut preset = base.clone();
        preset["id"] = json!(format!("p{n}"));
        preset.as_object_mut().unwrap().extend(change.as_object().unwrap().clone());
        let dir = ProgramDir::new("preset-refused-case");
        let catalog = load(&dir, &script, &preset);
        let [error] = catalog.errors() else { panic!("one error: {:?}", catalog.errors()) };
        assert_eq!(error.field, field, "{error}");
        assert!(error.message.contains(says), "{error}");
        assert!(error.origin.ends_with(&format!("presets/p{n}.json")), "{error}");
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains("PRESETKEY"), "{shown}");
        }
        assert!(catalog.get(&format!("p{n}")).is_none());
    }
}

/// The session's environment wins over the preset's: a name the preset removes from the CLI's
/// environment (`env.unset`) is passed on when the session sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_session_sets_is_not_removed_by_the_presets_unset() {
    let programs = ProgramDir::new("preset-unset");
    let script = programs.script("unset-cli", "echo \"RESULT foo=${PRESET_FOO-unset} bar=${PRESET_BAR-unset}\"\n");
    let preset = json!({
        "schema_version": 1, "id": "unsetting", "program": script, "framing": "lines",
        "args": ["--", "{prompt}"], "env": {"unset": ["PRESET_FOO", "PRESET_BAR"]},
        "matchers": {"result": [{"when": "^RESULT (?P<text>.*)$", "value": "text"}]}
    });
    let catalog = load(&programs, &script, &preset);
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    let (exec, harness) = harness_of(&catalog);
    let options = SessionOptions::new(programs.dir("work")).env("PRESET_FOO", "from-session");
    let session = harness.start_session("preset:unsetting", options).await.expect("starts");
    let (_, events) = support::run(&harness, &session, "env", |_| None).await;
    assert_eq!(terminal(&events).result.text.as_deref(), Some("foo=from-session bar=unset"), "{}", names(&events));
    support::finish(&harness, &exec).await;
    harness.shutdown().await;
}
