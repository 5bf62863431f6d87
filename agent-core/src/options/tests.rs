//! The option types' checks, defaults and `Debug` output.

use super::*;

fn tmp() -> PathBuf {
    std::env::temp_dir()
}

#[track_caller]
fn invalid(options: SessionOptions, option: &str) {
    match options.validate() {
        Err(Error::InvalidOption { option: got, .. }) => assert_eq!(got, option),
        other => panic!("expected invalid `{option}`, got {other:?}"),
    }
}

#[test]
fn defaults_follow_the_seed() {
    let o = SessionOptions::new(tmp());
    assert_eq!(o.event_buffer_size, 1000);
    assert_eq!(o.effective_cache_size(), CacheSize::Bounded(1000));
    assert_eq!(o.startup_timeout, Duration::from_secs(30));
    assert_eq!(o.startup_finalization_timeout, Duration::from_secs(5));
    assert_eq!(o.turn_start_timeout, Duration::from_secs(30));
    assert_eq!(o.provider_command_timeout, Duration::from_secs(30));
    assert_eq!(o.store_failure, StoreFailurePolicy::Degrade);
    assert_eq!(o.reuse, Reuse::Never);
    assert_eq!(o.auth, AuthMode::Subscription);
    assert!(o.validate().unwrap().is_none());
}

#[test]
fn cwd_rules() {
    invalid(SessionOptions::default(), "cwd");
    invalid(SessionOptions::new("relative/dir"), "cwd");
    invalid(SessionOptions::new("/definitely/not/here/agent-harness"), "cwd");
    {
        use std::os::unix::ffi::OsStrExt;
        let not_text = std::env::temp_dir().join(std::ffi::OsStr::from_bytes(b"agent-harness-\xff-cwd"));
        std::fs::create_dir_all(&not_text).expect("a directory");
        invalid(SessionOptions::new(&not_text), "cwd");
        let _ = std::fs::remove_dir(&not_text);
    }
    let reason = |options: SessionOptions| match options.validate() {
        Err(Error::InvalidOption { option: "cwd", reason }) => reason,
        other => panic!("expected invalid `cwd`, got {other:?}"),
    };
    let file = tmp().join(format!("agent-harness-cwd-file-{}", std::process::id()));
    std::fs::write(&file, "").expect("a file");
    assert!(reason(SessionOptions::new(&file)).ends_with("is not a directory"));
    let _ = std::fs::remove_file(&file);
    // A path the system cannot take says why, shown shortened.
    let long = tmp().join(["a"; 5000].join(""));
    let why = reason(SessionOptions::new(&long));
    assert!(why.contains("cannot be used: File name too long") && why.contains("…"), "{why}");
    assert!(why.len() < 300, "{why}");
}

#[test]
fn sizes_timeouts_and_shapes() {
    invalid(SessionOptions::new(tmp()).event_buffer_size(0), "event_buffer_size");
    invalid(SessionOptions::new(tmp()).startup_timeout(Duration::ZERO), "startup_timeout");
    invalid(SessionOptions::new(tmp()).turn_start_timeout(Duration::ZERO), "turn_start_timeout");
    invalid(SessionOptions::new(tmp()).model(" "), "model");
    invalid(SessionOptions::new(tmp()).skill(Skill::new("s", "rel/SKILL.md")), "skills");
    invalid(SessionOptions::new(tmp()).env("A=B", "x"), "env");
    invalid(SessionOptions::new(tmp()).mcp_server("m", McpServer::http("ftp://x")), "mcp_servers");
    // A conversation ID becomes an argument after `--resume`: it may not pass as an option.
    for id in [" ", "--settings={\"hooks\":{}}", "-x", "a\nb"] {
        invalid(SessionOptions::new(tmp()).resume_provider_session(id), "conversation");
        invalid(SessionOptions::new(tmp()).fork_provider_session(id), "conversation");
    }
    assert!(matches!(SessionOptions::new(tmp()).id("bad id").validate(), Err(Error::InvalidSessionId { .. })));
}

#[test]
fn values_no_cli_can_take_are_refused_by_name() {
    invalid(SessionOptions::new("/tmp/a\0b"), "cwd");
    invalid(SessionOptions::new(tmp()).model("tiny\0x"), "model");
    invalid(SessionOptions::new(tmp()).system_prompt("be\0brief"), "system_prompt");
    for name in [" ", "\t", "A=B", "A\0B"] {
        invalid(SessionOptions::new(tmp()).env(name, "x"), "env");
    }
    match SessionOptions::new(tmp()).env("LOG_LEVEL", "de\0bug").validate() {
        Err(Error::InvalidOption { option: "env", reason }) => {
            assert_eq!(reason, "the value of \"LOG_LEVEL\" has a NUL in it", "named, its value not shown")
        }
        other => panic!("expected invalid `env`, got {other:?}"),
    }
    let stdio = |command: &str, args: &[&str], env: &[(&str, &str)]| McpServer::Stdio {
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let http = |url: &str, headers: &[(&str, &str)]| McpServer::Http {
        url: url.into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    for server in [
        stdio("   ", &[], &[]),
        stdio("mcp", &["--root\0"], &[]),
        stdio("mcp", &[], &[("TOKEN", "a\0b")]),
        stdio("mcp", &[], &[("BAD=NAME", "x")]),
        http("https://", &[]),
        http("https://user@/v1", &[]),
        http("https://mcp.example/a b", &[]),
        http("https://mcp.example", &[("Bad Header:", "x")]),
        http("https://mcp.example", &[("Authorization", "Bearer x\r\nX-Injected: y")]),
        http("https://mcp.example", &[("Authorization", "Bearer \0")]),
    ] {
        let options = SessionOptions::new(tmp()).mcp_server("m", server.clone());
        match options.validate() {
            Err(Error::InvalidOption { option: "mcp_servers", reason }) => {
                assert!(reason.starts_with("server `m` ") && !reason.contains("Bearer"), "{reason}")
            }
            other => panic!("{server:?}: {other:?}"),
        }
    }
    for fine in [
        stdio("mcp-files", &["--root", "/srv"], &[("TOKEN", "t")]),
        http("http://127.0.0.1:8080/mcp?x=1", &[("Authorization", "Bearer\ttoken")]),
    ] {
        assert!(SessionOptions::new(tmp()).mcp_server("m", fine.clone()).validate().is_ok(), "{fine:?}");
    }
    // A refused ID far over the limit is quoted by its beginning only.
    let long = "x".repeat(1 << 20);
    let error = SessionOptions::new(tmp()).id(long.as_str()).validate().unwrap_err().to_string();
    assert!(error.len() < 400 && error.contains("more bytes"), "{} bytes", error.len());
}

/// A credential pasted into a name (`NAME=value`, `Authorization: Bearer …`) is refused, and
/// neither the error nor `Debug` output quotes more than the name's first characters.
#[test]
fn a_credential_pasted_into_a_name_is_not_quoted() {
    const KEY: &str = "sk-live-0123456789abcdef";
    let pair = format!("OPENAI_API_KEY={KEY}");
    let header = format!("Authorization: Bearer {KEY}");
    let stdio = McpServer::Stdio { command: "mcp".into(), args: vec![], env: [(pair.clone(), "x".into())].into() };
    let http = McpServer::Http { url: "https://mcp.example".into(), headers: [(header.clone(), "x".into())].into() };
    for (options, option) in [
        (SessionOptions::new(tmp()).env(pair.as_str(), ""), "env"),
        (SessionOptions::new(tmp()).env_remove(pair.as_str()), "env"),
        (SessionOptions::new(tmp()).mcp_server("m", stdio), "mcp_servers"),
        (SessionOptions::new(tmp()).mcp_server("m", http), "mcp_servers"),
    ] {
        let debug = format!("{options:?}");
        assert!(!debug.contains("0123456789"), "{debug}");
        match options.validate() {
            Err(Error::InvalidOption { option: refused, reason }) => {
                assert_eq!(refused, option);
                assert!(!reason.contains("0123456789") && !reason.contains("API_KEY"), "{reason}");
            }
            other => panic!("{option}: {other:?}"),
        }
    }
    // A plain name is shown whole.
    let debug = format!("{:?}", SessionOptions::new(tmp()).env("OPENAI_BASE_URL", "http://127.0.0.1:1"));
    assert!(debug.contains("\"OPENAI_BASE_URL\""), "{debug}");
}

/// A value no provider reads by its type is refused, not ignored: a wrapped options value, a
/// standard type, a primitive. A provider's own type passes, whichever provider's it is.
#[test]
fn provider_options_of_no_providers_type_are_refused() {
    #[derive(Debug)]
    struct Extras;
    let refused = |options: SessionOptions, named: &str| {
        let error = options.validate().unwrap_err();
        assert!(
            matches!(&error, Error::InvalidOption { option: "provider_options", reason } if reason.contains(named)),
            "{error}"
        );
    };
    refused(SessionOptions::new(tmp()).provider_option(Arc::new(Extras)), "alloc::sync::Arc<");
    refused(SessionOptions::new(tmp()).provider_option(Box::new(Extras)), "alloc::boxed::Box<");
    refused(SessionOptions::new(tmp()).provider_option(Some(Extras)), "core::option::Option<");
    refused(SessionOptions::new(tmp()).provider_option(String::from("x")), "alloc::string::String");
    refused(SessionOptions::new(tmp()).provider_option(7_u32), "`u32`");
    refused(SessionOptions::new(tmp()).provider_option("x"), "`&str`");
    refused(SessionOptions::new(tmp()).provider_option((Extras, 1)), "`(");
    assert!(SessionOptions::new(tmp()).provider_option(Extras).validate().is_ok());
}

#[test]
fn debug_never_shows_secret_values() {
    // Every field that can hold a secret carries one; the Debug impls name every field, so a
    // new field cannot be printed without a decision.
    let mut http = McpServer::http("https://user:sekrit-userinfo@mcp.example/v1?token=sekrit-query");
    if let McpServer::Http { headers, .. } = &mut http {
        headers.insert("Authorization".into(), "Bearer sekrit-header".into());
    }
    let mut stdio = McpServer::stdio("tool-server", ["--token", "sekrit-arg"]);
    if let McpServer::Stdio { env, .. } = &mut stdio {
        env.insert("TOOL_TOKEN".into(), "sekrit-mcp-env".into());
    }
    let o = SessionOptions::new(tmp())
        .env("OPENAI_API_KEY", "sk-sekrit-value")
        .mcp_server("web", http)
        .mcp_server("tools", stdio)
        .metadata("note", "sekrit-metadata")
        .provider_option(String::from("sekrit-provider-option"))
        .system_prompt("sekrit-prompt-text");
    let text = format!("{o:?}");
    assert!(!text.contains("sekrit"), "{text}");
    for name in ["OPENAI_API_KEY", "TOOL_TOKEN", "Authorization", "note", "mcp.example/v1", "tool-server"] {
        assert!(text.contains(name), "{name} stays visible: {text}");
    }
    // A URL's user info goes whole, unencoded `?` and `#` in a password included.
    for (url, shown) in [
        ("https://user:sekrit?x@mcp.example/v1", "https://mcp.example/v1"),
        ("https://user:sek#rit@mcp.example", "https://mcp.example"),
        ("https://mcp.example/v1?token=sekrit@x#y", "https://mcp.example/v1"),
        ("https://mcp.example?token=sekrit/x", "https://mcp.example"),
        ("mcp.example/sekrit", "[redacted]"),
    ] {
        let text = format!("{:?}", McpServer::http(url));
        assert!(text.contains(&format!("url: {shown:?}")) && !text.contains("sekrit"), "{url}: {text}");
    }
    let turn = TurnOptions::new().metadata("note", "sekrit-turn-metadata");
    let text = format!("{turn:?}");
    assert!(!text.contains("sekrit") && text.contains("note"), "{text}");
}

#[test]
fn fingerprint_tracks_configuration_but_not_secret_values() {
    let a = SessionOptions::new(tmp()).model("m1").env("TOKEN", "one");
    let b = SessionOptions::new(tmp()).model("m1").env("TOKEN", "two");
    let c = SessionOptions::new(tmp()).model("m2").env("TOKEN", "one");
    assert_eq!(a.fingerprint("codex"), b.fingerprint("codex"));
    assert_ne!(a.fingerprint("codex"), c.fingerprint("codex"));
    assert_ne!(a.fingerprint("codex"), a.fingerprint("claude"));
    assert_eq!(a.fingerprint("codex").len(), 32);
}

#[test]
fn provider_options_are_typed() {
    #[derive(Debug, PartialEq)]
    struct CodexExtras {
        profile: &'static str,
    }
    let o = SessionOptions::new(tmp()).provider_option(CodexExtras { profile: "p" });
    assert_eq!(o.provider_options.get::<CodexExtras>(), Some(&CodexExtras { profile: "p" }));
    assert_eq!(o.provider_options.get::<String>(), None);
}

/// A name is set or removed, never both: the builders keep the last word, and options holding
/// both (built field by field, or from a config) are refused by name.
#[test]
fn a_variable_is_either_set_or_removed() {
    let options = SessionOptions::new(tmp()).env_remove("A").env("A", "1").env("B", "2").env_remove("B");
    assert_eq!(options.env.set.get("A").map(String::as_str), Some("1"));
    assert_eq!((options.env.unset.as_slice(), options.env.set.contains_key("B")), (&["B".to_owned()][..], false));
    assert!(options.validate().is_ok());
    assert_eq!(SessionOptions::new(tmp()).env_remove("C").env_remove("C").env.unset, ["C"]);
    let mut both = SessionOptions::new(tmp()).env("A", "1");
    both.env.unset.push("A".into());
    match both.validate() {
        Err(Error::InvalidOption { option: "env", reason }) => {
            assert!(reason.contains("both set and removed"), "{reason}")
        }
        other => panic!("a name both set and removed must be refused, got {other:?}"),
    }
}
