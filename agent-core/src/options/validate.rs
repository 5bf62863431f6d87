//! The provider-neutral checks of [`SessionOptions`]: what every session must get right before
//! a provider sees it.

use super::*;

impl SessionOptions {
    /// Checks every provider-neutral rule. Returns the validated session ID: the one given, else
    /// for a resume of a stored session the source's (a stored session resumes under its own
    /// ID), else `None` (the harness makes one up).
    pub fn validate(&self) -> Result<Option<SessionId>> {
        let id = self.id.as_ref().map(|id| SessionId::new(id.clone())).transpose()?;
        let cwd = self.cwd.as_ref().ok_or_else(|| Error::invalid("cwd", "is required"))?;
        if !cwd.is_absolute() {
            return Err(Error::invalid("cwd", format!("must be absolute, got {}", cwd.display())));
        }
        if cwd.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(Error::invalid("cwd", "must not contain NUL"));
        }
        if cwd.to_str().is_none() {
            // A session's snapshot and events are JSON, which holds text: such a path could be
            // neither stored nor shown, and the store would fail at the first write.
            return Err(Error::invalid("cwd", format!("must be UTF-8 text, got {}", cwd.display())));
        }
        match std::fs::metadata(cwd) {
            Ok(found) if found.is_dir() => {}
            Ok(_) => return Err(Error::invalid("cwd", format!("{} is not a directory", shortened(cwd)))),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::invalid("cwd", format!("{} is not an existing directory", shortened(cwd))));
            }
            Err(error) => return Err(Error::invalid("cwd", format!("{} cannot be used: {error}", shortened(cwd)))),
        }
        if self.event_buffer_size == 0 {
            return Err(Error::invalid("event_buffer_size", "must be positive"));
        }
        if self.event_buffer_size > MAX_EVENT_BUFFER_SIZE {
            return Err(Error::invalid(
                "event_buffer_size",
                format!("must be at most {MAX_EVENT_BUFFER_SIZE}, got {}", self.event_buffer_size),
            ));
        }
        for (name, value) in [
            ("startup_timeout", self.startup_timeout),
            ("startup_finalization_timeout", self.startup_finalization_timeout),
            ("turn_start_timeout", self.turn_start_timeout),
            ("provider_command_timeout", self.provider_command_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(name, "must be positive"));
            }
        }
        if self.request_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid("request_timeout", "must be positive"));
        }
        if self.turn_inactivity_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid("turn_inactivity_timeout", "must be positive"));
        }
        match &self.conversation {
            Conversation::Resume(ConversationSource::Session(source)) if id.as_ref().is_some_and(|id| id != source) => {
                return Err(Error::invalid(
                    "conversation",
                    format!("a stored session is resumed under its own ID `{source}`, not another one"),
                ));
            }
            Conversation::Fork(ConversationSource::Session(source)) if id.as_ref() == Some(source) => {
                return Err(Error::invalid(
                    "conversation",
                    format!("a fork of `{source}` is a new session and needs another ID"),
                ));
            }
            Conversation::Resume(ConversationSource::Provider(p))
            | Conversation::Fork(ConversationSource::Provider(p)) => {
                if let Some(problem) = provider_conversation_problem(p) {
                    return Err(Error::invalid("conversation", format!("the provider conversation ID {problem}")));
                }
            }
            _ => {}
        }
        if let Some(empty) = [("model", &self.model), ("system_prompt", &self.system_prompt)]
            .into_iter()
            .find(|(_, v)| v.as_deref().is_some_and(|s| s.trim().is_empty()))
        {
            return Err(Error::invalid(empty.0, "must not be empty when set"));
        }
        // Every CLI gets these as command-line arguments or environment values, which end at a
        // NUL; none has a use for one.
        if let Some(with_nul) = [("model", &self.model), ("system_prompt", &self.system_prompt)]
            .into_iter()
            .find(|(_, v)| v.as_deref().is_some_and(|s| s.contains('\0')))
        {
            return Err(Error::invalid(with_nul.0, "must not contain NUL"));
        }
        for (name, server) in &self.mcp_servers {
            if let Some(problem) = mcp_server_problem(name, server) {
                return Err(Error::invalid("mcp_servers", problem));
            }
        }
        for skill in &self.skills {
            if skill.name.trim().is_empty() {
                return Err(Error::invalid("skills", "skill names must not be empty"));
            }
            if !skill.path.is_absolute() {
                return Err(Error::invalid(
                    "skills",
                    format!("skill `{}` path must be absolute, got {}", skill.name, skill.path.display()),
                ));
            }
        }
        for key in self.env.set.keys().chain(self.env.unset.iter()) {
            if let Some(problem) = variable_name_problem(key) {
                return Err(Error::invalid("env", problem));
            }
        }
        if let Some(name) = self.env.unset.iter().find(|name| self.env.set.contains_key(*name)) {
            return Err(Error::invalid(
                "env",
                format!("{:?} is both set and removed: give it in one of the two", Shown(name)),
            ));
        }
        if let Some((name, _)) = self.env.set.iter().find(|(_, value)| value.contains('\0')) {
            return Err(Error::invalid("env", format!("the value of {:?} has a NUL in it", Shown(name))));
        }
        self.provider_options.check_types()?;
        Ok(id.or_else(|| match &self.conversation {
            Conversation::Resume(ConversationSource::Session(source)) => Some(source.clone()),
            _ => None,
        }))
    }
}

/// `path` as shown in an error: whole up to 200 characters, else its first and last 80 (a
/// path of kilobytes would drown the message).
fn shortened(path: &std::path::Path) -> String {
    let shown = path.display().to_string();
    let count = shown.chars().count();
    if count <= 200 {
        return shown;
    }
    let head: String = shown.chars().take(80).collect();
    let tail: String = shown.chars().skip(count - 80).collect();
    format!("{head}…{tail} ({} bytes)", path.as_os_str().len())
}

/// What keeps `name` from being a name an environment can hold (blank, or with `=` or NUL in
/// it), in words that quote no more of it than [`Shown`] does: a name holding `=` is most often
/// a whole `NAME=value` pair, its value a credential. (White space around a name that the auth
/// guard knows, such as ` OPENAI_API_KEY`, is the guard's to refuse, by name.)
fn variable_name_problem(name: &str) -> Option<String> {
    let what = if name.trim().is_empty() {
        return Some("a variable name is blank".to_owned());
    } else if name.contains('=') {
        "has `=` in it (a `NAME=value` pair goes in as a name and a value)"
    } else if name.contains('\0') {
        "has a NUL in it"
    } else {
        return None;
    };
    Some(format!("the variable name {:?} {what}", Shown(name)))
}

/// What is wrong with the MCP server `name`, if anything, in words that quote no value (an
/// argument, a header or a URL can hold a credential).
fn mcp_server_problem(name: &str, server: &McpServer) -> Option<String> {
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Some(format!("server names must be non-blank text without control characters, got {name:?}"));
    }
    let problem = match server {
        McpServer::Stdio { command, args, env } => {
            if command.trim().is_empty() {
                Some("needs a command".to_owned())
            } else if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
                Some("has a NUL in its command or arguments".to_owned())
            } else if let Some(problem) = env.keys().find_map(|k| variable_name_problem(k)) {
                Some(format!("has an invalid environment: {problem}"))
            } else if env.values().any(|v| v.contains('\0')) {
                Some("has a NUL in an environment value".to_owned())
            } else {
                None
            }
        }
        McpServer::Http { url, headers } => {
            let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
            let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
            // A header name is an HTTP token; a value ends at a line break.
            let token = |n: &str| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            };
            if host.is_none_or(|host| host.rsplit('@').next().unwrap_or_default().is_empty()) {
                Some("needs an http(s) URL with a host".to_owned())
            } else if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                Some("has white space or a control character in its URL".to_owned())
            } else if let Some(header) = headers.keys().find(|h| !token(h)) {
                Some(format!("has an invalid header name {:?} (a name is one token: no spaces, no `:`)", Shown(header)))
            } else if headers.values().any(|v| v.chars().any(|c| c.is_control() && c != '\t')) {
                Some("has a control character (a line break, a NUL) in a header value".to_owned())
            } else {
                None
            }
        }
    };
    problem.map(|problem| format!("server `{name}` {problem}"))
}
