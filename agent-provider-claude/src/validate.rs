//! Checks of the options the provider cannot honour, the command line and the child
//! environment.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use agent_core::exec::EnvSpec;
use agent_core::{ApprovalPolicy, Error, McpServer, Result, SessionOptions, Skill};
use agent_provider_kit::process::MAX_ARGUMENT;
use serde_json::{Map, Value, json};

use crate::options::{ClaudeOptions, PermissionMode};

/// Flags the provider sets itself; passing them in `extra_args` would break the protocol or
/// the resume rules.
const MANAGED_FLAGS: &[&str] = &[
    "-p",
    "--print",
    "--input-format",
    "--output-format",
    "--verbose",
    "--include-partial-messages",
    "--permission-prompt-tool",
    "--resume",
    "-r",
    "--continue",
    "-c",
    "--fork-session",
    "--session-id",
    "--no-session-persistence",
    "--mcp-config",
    "--strict-mcp-config",
    "--model",
    "--permission-mode",
    "--system-prompt",
];

/// Everything [`crate::ClaudeProvider`] checks before spawning.
pub(crate) fn validate(options: &SessionOptions, claude: &ClaudeOptions) -> Result<()> {
    // Claude reads a backslash in its working directory as a separator: it does not start. It
    // works in the real path (a link with a backslash to another directory is fine; a link to a
    // directory with one is not).
    let real = |cwd: &PathBuf| std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.clone());
    if options.cwd.as_ref().is_some_and(|cwd| real(cwd).as_os_str().as_encoded_bytes().contains(&b'\\')) {
        return Err(invalid("cwd", "holds a backslash: Claude Code cannot work in such a directory"));
    }
    permission_mode(options, claude)?;
    validate_arguments(options, claude)?;
    validate_mcp_servers(options)?;
    skill_roots(options)?;
    validate_claude_options(claude)?;
    crate::auth::GUARD.check(options, None, crate::auth::flag_keys(claude))
}

fn invalid(option: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption { option, reason: reason.into() }
}

/// The permission mode a session starts in: [`ClaudeOptions::permission_mode`], else the
/// approval policy's (`Untrusted` and `OnRequest` → `default`, `Never` → `dontAsk`), else
/// `default`. Always passed on claude's command line, where it wins over a `defaultMode` in the
/// settings files: a project's `.claude/settings.json` saying `bypassPermissions` must not run
/// every tool without asking a session that did not opt in.
pub(crate) fn permission_mode(options: &SessionOptions, claude: &ClaudeOptions) -> Result<PermissionMode> {
    if let Some(mode) = claude.permission_mode {
        if mode == PermissionMode::BypassPermissions && !claude.allow_dangerously_skip_permissions {
            return Err(invalid(
                "provider_options",
                "permission mode `bypassPermissions` runs every tool without asking; set \
                 ClaudeOptions::allow_dangerously_skip_permissions to opt in",
            ));
        }
        return Ok(mode);
    }
    match options.approval_policy {
        None | Some(ApprovalPolicy::Untrusted | ApprovalPolicy::OnRequest) => Ok(PermissionMode::Default),
        Some(ApprovalPolicy::Never) => Ok(PermissionMode::DontAsk),
        Some(other) => Err(invalid(
            "approval_policy",
            format!(
                "Claude Code has no `{other:?}` approval policy; use Untrusted or OnRequest (permission mode \
                 `default`), Never (`dontAsk`), or ClaudeOptions::permission_mode"
            ),
        )),
    }
}

/// What goes on claude's command line as text: no NUL (an argument ends there), none longer
/// than Linux takes, each named as its option before anything is spawned.
fn validate_arguments(options: &SessionOptions, claude: &ClaudeOptions) -> Result<()> {
    let texts = [
        ("system_prompt", options.system_prompt.as_deref()),
        ("model", options.model.as_deref()),
        ("provider_options", claude.append_system_prompt.as_deref()),
    ];
    for (option, text) in texts {
        let Some(text) = text else { continue };
        if text.contains('\0') {
            return Err(invalid(option, "holds a NUL byte, which cannot reach claude's command line"));
        }
        if text.len() > MAX_ARGUMENT {
            return Err(invalid(
                option,
                format!(
                    "is {} bytes; claude takes it on its command line, where Linux allows at most {MAX_ARGUMENT}",
                    text.len()
                ),
            ));
        }
    }
    if let Some(dir) = claude.add_dirs.iter().find(|d| d.to_str().is_none()) {
        return Err(invalid(
            "provider_options",
            format!("ClaudeOptions::add_dirs has {}, which is not UTF-8", dir.display()),
        ));
    }
    Ok(())
}

fn is_server_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_mcp_servers(options: &SessionOptions) -> Result<()> {
    for (name, server) in &options.mcp_servers {
        if !is_server_name(name) {
            return Err(invalid(
                "mcp_servers",
                format!("Claude Code MCP server names may only contain letters, digits, `_` and `-`, got {name:?}"),
            ));
        }
        match server {
            McpServer::Stdio { command, env, .. } => {
                let path = Path::new(command);
                let bare = path.components().count() == 1 && !command.contains('/');
                if command.is_empty() || !(path.is_absolute() || bare) {
                    return Err(invalid(
                        "mcp_servers",
                        format!(
                            "MCP server `{name}`: the command must be an absolute path or a program name looked up \
                             on PATH, got the relative path {command:?}"
                        ),
                    ));
                }
                if env.keys().any(|k| k.is_empty() || k.contains(['=', '\0'])) {
                    return Err(invalid("mcp_servers", format!("MCP server `{name}` has a malformed variable name")));
                }
            }
            McpServer::Http { url, headers } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("mcp_servers", format!("MCP server `{name}` needs an http(s) URL")));
                }
                if headers.keys().any(|k| k.is_empty() || k.contains(['\n', ':'])) {
                    return Err(invalid("mcp_servers", format!("MCP server `{name}` has a malformed header name")));
                }
                // Claude Code expands `${…}` in a header's value once more after taking it from
                // its environment: the value would reach the server changed.
                if let Some(header) = headers.iter().find(|(_, v)| v.contains("${")).map(|(k, _)| k) {
                    return Err(invalid(
                        "mcp_servers",
                        format!(
                            "MCP server `{name}`: the value of header `{header}` holds `${{`, which Claude Code would \
                             expand as a variable"
                        ),
                    ));
                }
            }
            _ => {
                return Err(invalid(
                    "mcp_servers",
                    format!("server `{name}` uses a transport Claude Code cannot express"),
                ));
            }
        }
    }
    Ok(())
}

/// The directory whose `.claude/skills/` holds `skill`: Claude Code loads the skills of a
/// directory given with `--add-dir` from there (measured), so a skill must live at
/// `<root>/.claude/skills/<name>/SKILL.md`.
fn skill_root(skill: &Skill) -> Result<PathBuf> {
    let dir = if skill.path.file_name().is_some_and(|n| n == "SKILL.md") {
        skill.path.parent().unwrap_or(&skill.path)
    } else {
        &skill.path
    };
    let layout = || {
        invalid(
            "skills",
            format!(
                "skill `{}`: Claude Code loads a session's skills from `<dir>/.claude/skills/<name>/SKILL.md` (the \
                 provider passes `--add-dir <dir>`); {} is not such a path",
                skill.name,
                skill.path.display()
            ),
        )
    };
    if !skill.path.is_absolute() || dir.file_name().is_none_or(|n| n != skill.name.as_str()) {
        return Err(layout());
    }
    let skills = dir.parent().filter(|p| p.file_name().is_some_and(|n| n == "skills")).ok_or_else(layout)?;
    let dot_claude = skills.parent().filter(|p| p.file_name().is_some_and(|n| n == ".claude")).ok_or_else(layout)?;
    dot_claude.parent().map(Path::to_path_buf).ok_or_else(layout)
}

/// The directories to pass with `--add-dir` for the session's skills (each once; the working
/// directory's own skills are loaded anyway).
pub(crate) fn skill_roots(options: &SessionOptions) -> Result<Vec<PathBuf>> {
    let mut names = HashSet::new();
    let mut roots = Vec::new();
    for skill in &options.skills {
        if !names.insert(skill.name.as_str()) {
            return Err(invalid("skills", format!("skill `{}` is configured twice", skill.name)));
        }
        let root = skill_root(skill)?;
        if options.cwd.as_deref() != Some(root.as_path()) && !roots.contains(&root) {
            roots.push(root);
        }
    }
    Ok(roots)
}

fn validate_claude_options(claude: &ClaudeOptions) -> Result<()> {
    const OPTION: &str = "provider_options";
    if let Some(binary) = &claude.binary {
        let bare = binary.components().count() == 1 && !binary.as_os_str().is_empty();
        if !(binary.is_absolute() || bare) {
            return Err(invalid(
                OPTION,
                format!(
                    "ClaudeOptions::binary must be an absolute path or a bare program name, got {}",
                    binary.display()
                ),
            ));
        }
    }
    for arg in &claude.extra_args {
        let flag = arg.split('=').next().unwrap_or_default();
        if (flag.starts_with("--dangerously") || flag.starts_with("--allow-dangerously"))
            && !claude.allow_dangerously_skip_permissions
        {
            return Err(invalid(
                OPTION,
                format!(
                    "ClaudeOptions::extra_args has `{flag}`, which skips permission checks; set \
                     ClaudeOptions::allow_dangerously_skip_permissions to opt in"
                ),
            ));
        }
        if MANAGED_FLAGS.contains(&flag) {
            return Err(invalid(
                OPTION,
                format!(
                    "ClaudeOptions::extra_args has `{flag}`, which the provider sets itself; use the matching option"
                ),
            ));
        }
    }
    if claude.add_dirs.iter().any(|d| !d.is_absolute()) {
        return Err(invalid(OPTION, "ClaudeOptions::add_dirs must be absolute paths"));
    }
    if claude.max_turns == Some(0) {
        return Err(invalid(OPTION, "ClaudeOptions::max_turns must be at least 1"));
    }
    if claude.max_line_bytes < 1024 {
        return Err(invalid(OPTION, "ClaudeOptions::max_line_bytes must be at least 1024"));
    }
    Ok(())
}

/// The session's MCP servers as `mcp_set_servers` takes them, by name. They reach claude over
/// its stdin only: on its command line they would show in the process table, and in its
/// environment every command it runs for the model (`env` in a Bash tool call) would show the
/// servers' variables, headers and arguments to the model.
pub(crate) fn mcp_servers(options: &SessionOptions) -> Map<String, Value> {
    let mut servers = Map::new();
    for (name, server) in &options.mcp_servers {
        let config = match server {
            McpServer::Stdio { command, args, env } => {
                json!({"type": "stdio", "command": command, "args": args, "env": env})
            }
            McpServer::Http { url, headers } => json!({"type": "http", "url": url, "headers": headers}),
            _ => continue,
        };
        servers.insert(name.clone(), config);
    }
    servers
}

/// The child environment: the session's changes and, under
/// [`AuthMode::Subscription`](agent_core::AuthMode), the scrubbed variables.
pub(crate) fn env_spec(options: &SessionOptions) -> EnvSpec {
    let mut spec = EnvSpec::default();
    spec.set = options.env.set.iter().map(|(k, v)| (k.into(), v.into())).collect();
    spec.unset = options.env.unset.iter().map(Into::into).collect();
    spec.unset.extend(crate::auth::scrubbed(options));
    spec
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use agent_core::AuthMode;

    use super::*;

    fn options() -> SessionOptions {
        SessionOptions::new(std::env::temp_dir()).auth(AuthMode::Inherit)
    }

    #[track_caller]
    fn invalid_option(options: SessionOptions, claude: ClaudeOptions, option: &str, says: &str) {
        match validate(&options, &claude) {
            Err(Error::InvalidOption { option: got, reason }) => {
                assert_eq!(got, option);
                assert!(reason.contains(says), "{reason}");
            }
            other => panic!("expected invalid `{option}`, got {other:?}"),
        }
    }

    #[test]
    fn bad_input_is_named() {
        let none = ClaudeOptions::new;
        invalid_option(options().approval_policy(ApprovalPolicy::OnFailure), none(), "approval_policy", "OnFailure");
        invalid_option(
            options().mcp_server("files", McpServer::stdio("./bin/server", ["x"])),
            none(),
            "mcp_servers",
            "relative path",
        );
        invalid_option(
            options().mcp_server("bad.name", McpServer::stdio("srv", ["x"])),
            none(),
            "mcp_servers",
            "names",
        );
        invalid_option(
            options(),
            none().permission_mode(PermissionMode::BypassPermissions),
            "provider_options",
            "allow_dangerously_skip_permissions",
        );
        invalid_option(
            options(),
            none().extra_arg("--dangerously-skip-permissions"),
            "provider_options",
            "allow_dangerously_skip_permissions",
        );
        invalid_option(options(), none().extra_arg("--resume=x"), "provider_options", "sets itself");
        invalid_option(options(), none().binary("bin/claude"), "provider_options", "absolute");
        // What goes on claude's command line: no NUL, nothing over Linux's argument limit.
        invalid_option(options().system_prompt("a\0b"), none(), "system_prompt", "NUL");
        invalid_option(options().model("m\0"), none(), "model", "NUL");
        invalid_option(options().system_prompt("x".repeat(200_000)), none(), "system_prompt", "200000 bytes");
        invalid_option(
            options(),
            none().append_system_prompt("y".repeat(MAX_ARGUMENT + 1)),
            "provider_options",
            "Linux",
        );
        assert!(validate(&options().system_prompt("x".repeat(MAX_ARGUMENT)), &none()).is_ok());
        let non_utf8 = std::ffi::OsStr::from_bytes(b"/tmp/extra-\xff-dir");
        invalid_option(options(), none().add_dir(non_utf8), "provider_options", "not UTF-8");
        let mut web = McpServer::http("https://mcp.example/v1");
        if let McpServer::Http { headers, .. } = &mut web {
            headers.insert("Authorization".into(), "Bearer tok-${PATH}".into());
        }
        invalid_option(options().mcp_server("web", web), none(), "mcp_servers", "`Authorization` holds `${`");
        assert!(
            validate(
                &options(),
                &none().permission_mode(PermissionMode::BypassPermissions).allow_dangerously_skip_permissions(true)
            )
            .is_ok()
        );
        assert!(validate(&options().mcp_server("files", McpServer::stdio("python3", ["x"])), &none()).is_ok());
        assert!(validate(&options().mcp_server("files", McpServer::stdio("/usr/bin/srv", ["x"])), &none()).is_ok());
    }

    /// Claude works in its cwd's real path: a link whose name has a backslash is a fine cwd
    /// when the directory it names has none (and the other way round, see the real-claude test).
    #[test]
    fn a_backslash_counts_in_the_real_path_of_the_cwd() {
        let dir = std::env::temp_dir().join(format!("claude-cwd-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("plain")).expect("dir");
        let link = dir.join("link\\name");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(dir.join("plain"), &link).expect("link");
        let mut linked = options();
        linked.cwd = Some(link);
        assert!(validate(&linked, &ClaudeOptions::new()).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn skills_live_under_a_dot_claude_skills_directory() {
        let o = options()
            .skill(Skill::new("notes", "/repo/.claude/skills/notes/SKILL.md"))
            .skill(Skill::new("lint", "/repo/.claude/skills/lint"))
            .skill(Skill::new("mine", "/home/me/.claude/skills/mine"));
        assert_eq!(skill_roots(&o).unwrap(), [PathBuf::from("/repo"), PathBuf::from("/home/me")]);
        for bad in ["/s/notes/SKILL.md", "/repo/.claude/skills/other", "rel/.claude/skills/notes", "/repo/skills/notes"]
        {
            invalid_option(
                options().skill(Skill::new("notes", bad)),
                ClaudeOptions::new(),
                "skills",
                "`<dir>/.claude/skills",
            );
        }
        let twice =
            options().skill(Skill::new("a", "/x/.claude/skills/a")).skill(Skill::new("a", "/y/.claude/skills/a"));
        invalid_option(twice, ClaudeOptions::new(), "skills", "twice");
    }

    #[test]
    fn approval_policies_map_to_permission_modes() {
        let mode = |o: SessionOptions| permission_mode(&o, &ClaudeOptions::new()).unwrap();
        assert_eq!(mode(options().approval_policy(ApprovalPolicy::Untrusted)), PermissionMode::Default);
        assert_eq!(mode(options().approval_policy(ApprovalPolicy::Never)), PermissionMode::DontAsk);
        assert_eq!(mode(options()), PermissionMode::Default, "explicit, whatever the settings files say");
        let explicit = ClaudeOptions::new().permission_mode(PermissionMode::AcceptEdits);
        let o = options().approval_policy(ApprovalPolicy::Never);
        assert_eq!(permission_mode(&o, &explicit).unwrap(), PermissionMode::AcceptEdits);
    }

    #[test]
    fn subscription_refuses_keys_and_endpoints() {
        for name in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_USE_BEDROCK", "anthropic_auth_token"] {
            let o = SessionOptions::new(std::env::temp_dir()).env(name, "sekrit");
            match validate(&o, &ClaudeOptions::new()) {
                Err(Error::AuthGuard { reason }) => {
                    assert!(reason.to_uppercase().contains(&name.to_uppercase()), "{reason}");
                    assert!(!reason.contains("sekrit"), "{reason}");
                }
                other => panic!("expected the guard to refuse {name}, got {other:?}"),
            }
        }
        let spec = env_spec(&SessionOptions::new(std::env::temp_dir()));
        assert!(spec.unset.contains(&"ANTHROPIC_API_KEY".into()));
        assert!(env_spec(&options().env("ANTHROPIC_API_KEY", "k")).unset.is_empty());
    }

    #[test]
    fn mcp_servers_are_described_whole_and_stay_out_of_the_environment() {
        let mut server = McpServer::stdio("python3", ["/srv/echo.py", "--token=arg-sekrit"]);
        if let McpServer::Stdio { env, .. } = &mut server {
            env.insert("TOKEN".into(), "sekrit".into());
        }
        let o = options().mcp_server("echo", server).mcp_server(
            "web",
            McpServer::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: [("Authorization".into(), "h".into())].into(),
            },
        );
        let servers = mcp_servers(&o);
        assert_eq!(
            servers["echo"],
            json!({"type": "stdio", "command": "python3", "args": ["/srv/echo.py", "--token=arg-sekrit"], "env": {"TOKEN": "sekrit"}})
        );
        assert_eq!(
            servers["web"],
            json!({"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "h"}})
        );
        assert!(!format!("{:?}", env_spec(&o)).contains("sekrit"));
    }
}
