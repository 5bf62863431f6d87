//! What a session gives its CLI's process besides its command line — MCP servers, skills,
//! environment variables — and how `Debug` shows them without the secrets they carry.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A session-scoped MCP server.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "transport")]
#[non_exhaustive]
pub enum McpServer {
    /// A server the CLI starts as a child process.
    Stdio {
        /// Program.
        command: String,
        /// Arguments (a provider keeps them off its CLI's command line where it can, and out
        /// of logs and the CLI's stderr kept for errors: they often carry a token). Unlike
        /// `env` values they are not redacted from the CLI's output: as often a path the agent
        /// works in, one the agent prints reaches its events.
        #[serde(default)]
        args: Vec<String>,
        /// Environment (values are secrets: never logged or stored).
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// A server reached over streamable HTTP.
    Http {
        /// URL (put credentials in `headers`, not in the URL: it may be on a command line).
        url: String,
        /// Headers (values are secrets: never logged or stored).
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

impl McpServer {
    /// A stdio server.
    pub fn stdio(command: impl Into<String>, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        McpServer::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
        }
    }

    /// An HTTP server.
    pub fn http(url: impl Into<String>) -> Self {
        McpServer::Http { url: url.into(), headers: BTreeMap::new() }
    }
}

impl fmt::Debug for McpServer {
    // Arguments (`--token …`), environment and header values, and a URL's credentials or query
    // can all be secrets: only names, counts and the URL's origin and path are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpServer::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", &format_args!("[{} redacted]", args.len()))
                .field("env_keys", &env.keys().map(|k| Shown(k)).collect::<Vec<_>>())
                .finish(),
            McpServer::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", &redacted_url(url))
                .field("header_names", &headers.keys().map(|k| Shown(k)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// A URL without its user info, query and fragment: what can be shown of it. The user info
/// goes first, up to the authority's last `@`, so a password holding an unencoded `?` or `#`
/// goes with it.
fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return crate::REDACTED.into() };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let after_user = authority.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let shown = after_user.split(['?', '#']).next().unwrap_or_default();
    format!("{scheme}://{shown}")
}

/// A skill: a named directory or `SKILL.md` the provider makes available.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skill {
    /// Skill name.
    pub name: String,
    /// Absolute path to the skill's `SKILL.md` or directory.
    pub path: PathBuf,
}

impl Skill {
    /// A skill.
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Skill { name: name.into(), path: path.into() }
    }
}

/// Environment changes for the provider process. Values are never shown by `Debug`,
/// stored, or logged. A name is either set or removed: validation refuses one in both (which a
/// process would get removed).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// Variables to set.
    pub set: BTreeMap<String, String>,
    /// Variables to remove from the inherited environment.
    pub unset: Vec<String>,
}

impl Env {
    /// Sets a variable (no longer removed, if it was).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.unset.retain(|name| *name != key);
        self.set.insert(key, value.into());
        self
    }

    /// Removes an inherited variable (no longer set, if it was).
    pub fn unset(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.set.remove(&key);
        if !self.unset.contains(&key) {
            self.unset.push(key);
        }
        self
    }

    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty()
    }
}

impl fmt::Debug for Env {
    // Values can be credentials: names only (and of a name that is not one, its beginning).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Env { set, unset } = self;
        f.debug_struct("Env")
            .field("set", &set.keys().map(|k| Shown(k)).collect::<Vec<_>>())
            .field("unset", &unset.iter().map(|k| Shown(k)).collect::<Vec<_>>())
            .finish()
    }
}

/// A variable or header name as `Debug` output and errors show it: whole when it is a plain
/// name (letters, digits, `_`, `-`, `.`), else only its first characters — a name holding `=`,
/// `:` or white space is most often a pasted `NAME=value` or `Authorization: Bearer …`, whose
/// value is a credential.
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl Shown<'_> {
    fn is_plain(&self) -> bool {
        !self.0.is_empty() && self.0.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_plain() {
            return fmt::Debug::fmt(self.0, f);
        }
        let beginning: String = self.0.chars().take(3).flat_map(char::escape_debug).collect();
        write!(f, "\"{beginning}…\"")
    }
}
