//! The values a CLI was given that must not reach what the harness keeps of its output.
//!
//! A CLI's stderr tail ends up in turn results and error texts, so in events and the store. A
//! CLI that prints a credential it was given (a failed request echoed with its headers, an MCP
//! server's command line, a debug log) would carry it there. [`Secrets`] holds the values a
//! session gives its CLI that are secret — its environment values, its MCP servers'
//! environment values and headers, and the host's values of the credential names a provider's
//! guard knows (the CLI inherits those under `AuthMode::Inherit`) — and [`Secrets::redact`]
//! replaces each occurrence with [`REDACTED`]. Values shorter than [`MIN_SECRET_LEN`] are not
//! kept: `1` or `true` would redact ordinary text, and a credential is longer.
//!
//! ```
//! use agent_provider_kit::secrets::Secrets;
//!
//! let secrets = Secrets::new(["sk-live-0123456789".to_owned(), "1".to_owned()]);
//! assert_eq!(secrets.redact("401: bad key sk-live-0123456789 (1 try)"), "401: bad key [redacted] (1 try)");
//! assert_eq!(format!("{secrets:?}"), "Secrets(1)");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use agent_core::{AuthMode, McpServer, SessionOptions};

/// What replaces a secret value.
pub const REDACTED: &str = "[redacted]";

/// The shortest value redacted, in bytes.
pub const MIN_SECRET_LEN: usize = 8;

/// Secret values to redact from text; cheap to clone. `Debug` shows how many, never a value.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, so that a secret holding another is replaced whole.
    values: Arc<[String]>,
}

impl Secrets {
    /// The values of at least [`MIN_SECRET_LEN`] bytes among `values`.
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut values: Vec<String> = values.into_iter().filter(|v| v.len() >= MIN_SECRET_LEN).collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Secrets { values: values.into() }
    }

    /// The secrets a session gives its CLI: its environment values, its MCP servers'
    /// environment values and headers, and, under `AuthMode::Inherit`, this process's values of
    /// the environment names `credential` accepts (a provider passes its guard's `refuses_env`)
    /// that the session does not remove (under `Subscription` the guard scrubs them).
    pub fn of_session(options: &SessionOptions, credential: impl Fn(&str) -> bool) -> Secrets {
        let session = options.env.set.values().cloned();
        let mcp = options.mcp_servers.values().flat_map(|server| match server {
            McpServer::Stdio { env, .. } => env.values().cloned().collect::<Vec<_>>(),
            McpServer::Http { headers, .. } => headers.values().cloned().collect(),
            _ => Vec::new(),
        });
        // Under `AuthMode::Subscription` the guard scrubs those names from the CLI's environment.
        let host: Vec<String> = match options.auth {
            AuthMode::Inherit => std::env::vars_os()
                .filter_map(|(name, value)| {
                    let name = name.to_str()?;
                    let inherited = !options.env.set.contains_key(name) && !options.env.unset.iter().any(|n| n == name);
                    (inherited && credential(name)).then(|| value.into_string().ok()).flatten()
                })
                .collect(),
            _ => Vec::new(),
        };
        Secrets::new(session.chain(mcp).chain(host))
    }

    /// These secrets and `values` (those of at least [`MIN_SECRET_LEN`] bytes): what a provider
    /// adds to its CLI's environment itself, for one.
    pub fn and(self, values: impl IntoIterator<Item = String>) -> Secrets {
        Secrets::new(self.values.iter().cloned().chain(values))
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every occurrence of a secret replaced by [`REDACTED`]; borrowed when there
    /// was none.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut text = Cow::Borrowed(text);
        for value in self.values.iter() {
            if text.contains(value.as_str()) {
                text = Cow::Owned(text.replace(value.as_str(), REDACTED));
            }
        }
        text
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({})", self.values.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_secret_is_replaced_first_and_short_values_are_left() {
        let secrets = Secrets::new(["token-abc".into(), "token-abcdef".into(), "token-abc".into(), "short".into()]);
        assert_eq!(format!("{secrets:?}"), "Secrets(2)");
        assert_eq!(secrets.redact("token-abcdef, token-abc, short"), "[redacted], [redacted], short");
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
        assert!(Secrets::default().is_empty());
        let more = secrets.and(["token-xyz-123".to_owned(), "token-abc".to_owned()]);
        assert_eq!(format!("{more:?}"), "Secrets(3)");
    }

    #[test]
    fn a_session_gives_its_env_its_mcp_secrets_and_the_credentials_it_inherits() {
        let mut server = McpServer::stdio("mcp-files", ["--verbose"]);
        if let McpServer::Stdio { env, .. } = &mut server {
            env.insert("FILES_TOKEN".into(), "mcp-token-123".into());
        }
        let options = SessionOptions::new("/tmp")
            .env("OPENAI_API_KEY", "sk-session-12345")
            .env("LOG_LEVEL", "debug")
            .mcp_server("files", server)
            .mcp_server(
                "web",
                McpServer::Http {
                    url: "https://mcp.example/x".into(),
                    headers: [("Authorization".to_owned(), "Bearer web-abcdef".to_owned())].into(),
                },
            );
        let secrets = Secrets::of_session(&options, |name| name == "OPENAI_API_KEY");
        let text = "sk-session-12345 mcp-token-123 Bearer web-abcdef debug";
        assert_eq!(secrets.redact(text), "[redacted] [redacted] [redacted] debug");
        assert_eq!(format!("{secrets:?}"), "Secrets(3)", "`debug` is too short to be one");
    }
}
