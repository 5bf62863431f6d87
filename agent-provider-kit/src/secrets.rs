//! The values a CLI was given that must not reach what the harness keeps of its output.
//!
//! A CLI's stderr tail ends up in turn results and error texts, so in events and the store. A
//! CLI that prints a credential it was given (a failed request echoed with its headers, an MCP
//! server's command line, a debug log) would carry it there. [`Secrets`] holds the values a
//! session gives its CLI that are secret — its environment values, its MCP servers'
//! environment values and headers, and the host's values of the credential names it inherits
//! (those a provider's guard knows under `AuthMode::Inherit`, where the guard lets them through,
//! and every name [`is_credential_name`] accepts) — and [`Secrets::redact`]
//! replaces each occurrence with [`REDACTED`]. Values shorter than [`MIN_SECRET_LEN`] are not
//! kept: `1` or `true` would redact ordinary text, and a credential is longer. A value of several
//! lines (a PEM key, a `.env` text) is kept whole and, since output is read a line at a time,
//! so is each of its lines of key material (a line of a key's base64) and each value of its
//! `name=value` lines that looks like a secret (letters and digits, or 16 bytes or more); its
//! armor lines and the rest (`NODE_ENV=production`, a path) are not, being as often ordinary
//! text, and neither is a key's last line shorter than [`MIN_SECRET_LEN`].
//!
//! Stdout is the CLI's protocol, and what the agent does reaches it too: a tool that runs
//! `env`, or reads a `.env` file, brings the session's key into a tool result, and from there
//! into events and the store. The credentials among the secrets — the values whose name says
//! they are one ([`is_credential_name`]: `OPENAI_API_KEY`, `GITHUB_TOKEN`, an `Authorization`
//! header), and every value given to [`Secrets::new`] — are redacted from stdout lines too, by
//! the line reader ([`LineReader::redacting`](crate::framing::LineReader::redacting)), before
//! anything parses them. The other values (a `HOME`, a log level) are kept out of stderr tails
//! only: a path the agent works in is ordinary text in its messages.
//!
//! A line holds what it holds: a model that quotes a key streams it a few characters per delta,
//! no line holding it whole. A provider therefore also hands the credentials to the runtime,
//! with `Opened::new(session).credentials(secrets.credentials())`, which reads each item's
//! deltas as one text and keeps the key out of them (see `agent_core::provider::Opened::credentials`).
//!
//! ```
//! use agent_provider_kit::secrets::Secrets;
//!
//! let secrets = Secrets::new(["sk-live-0123456789".to_owned(), "1".to_owned()]);
//! assert_eq!(secrets.redact("401: bad key sk-live-0123456789 (1 try)"), "401: bad key [redacted] (1 try)");
//! assert_eq!(secrets.credentials().collect::<Vec<_>>(), ["sk-live-0123456789"]);
//! assert_eq!(format!("{secrets:?}"), "Secrets(1)");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use agent_core::{McpServer, SessionOptions};

/// What replaces a secret value (the same text as everywhere the harness keeps a secret out).
pub use agent_core::REDACTED;

/// The shortest value redacted, in bytes.
pub const MIN_SECRET_LEN: usize = 8;

/// Name segments that mark a value as a credential (see [`is_credential_name`]).
const CREDENTIAL_WORDS: &[&str] = &[
    "KEY",
    "APIKEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "BEARER",
    "PAT",
];

/// True when an environment variable or header named `name` holds a credential, by its name:
/// one of its words (split at `_`, `-` and `.`, in any case) is `KEY`, `TOKEN`, `SECRET`,
/// `PASSWORD`, `AUTH`, `AUTHORIZATION`, `COOKIE`, `CREDENTIALS` or the like, or ends in `KEY`,
/// `TOKEN` or `SECRET` (`APIKEY`, `ACCESSTOKEN`).
///
/// ```
/// use agent_provider_kit::secrets::is_credential_name;
///
/// assert!(is_credential_name("OPENAI_API_KEY") && is_credential_name("GITHUB_TOKEN"));
/// assert!(is_credential_name("Authorization") && is_credential_name("x-api-key"));
/// assert!(!is_credential_name("OPENAI_BASE_URL") && !is_credential_name("HOME"));
/// ```
pub fn is_credential_name(name: &str) -> bool {
    let ends_with = |word: &str, end: &str| {
        word.len() >= end.len() && word.as_bytes()[word.len() - end.len()..].eq_ignore_ascii_case(end.as_bytes())
    };
    name.split(['_', '-', '.']).any(|word| {
        let word = word.trim();
        CREDENTIAL_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
            || ["KEY", "TOKEN", "SECRET"].iter().any(|end| ends_with(word, end))
    })
}

/// Secret values to redact from text; cheap to clone. `Debug` shows how many, never a value.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, so that a secret holding another is replaced whole.
    values: Arc<[String]>,
    /// The credentials among `values` (see the module docs), in the same order.
    credentials: Arc<[String]>,
}

impl Secrets {
    /// The values of at least [`MIN_SECRET_LEN`] bytes among `values`, each a credential:
    /// redacted from stdout lines as well as from stderr.
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let values = kept(values);
        Secrets { credentials: Arc::clone(&values), values }
    }

    /// `credentials` (redacted from stdout and stderr) and `others` (from stderr only), those of
    /// at least [`MIN_SECRET_LEN`] bytes each.
    fn split(credentials: impl IntoIterator<Item = String>, others: impl IntoIterator<Item = String>) -> Secrets {
        let credentials = kept(credentials);
        let values = kept(credentials.iter().cloned().chain(others));
        Secrets { values, credentials }
    }

    /// The secrets a session gives its CLI: its environment values, its MCP servers'
    /// environment values, headers and arguments, and this process's values of the environment
    /// names `credential` accepts (a provider passes its guard's `refuses_env`) or
    /// [`is_credential_name`] does, that the session does not set or remove. In every auth mode:
    /// under `AuthMode::Subscription` the guard scrubs the names it refuses, but the CLI still
    /// inherits the others (a `GITHUB_TOKEN`), and a tool that prints its environment prints
    /// them.
    ///
    /// The credentials among them, redacted from stdout too, are the MCP servers' environment
    /// and header values, and the session's and host's values whose name
    /// [`is_credential_name`] accepts. MCP arguments are not: they are as often a path the
    /// agent works in as a token.
    pub fn of_session(options: &SessionOptions, credential: impl Fn(&str) -> bool) -> Secrets {
        let (mut mcp, mut mcp_args) = (Vec::new(), Vec::new());
        for server in options.mcp_servers.values() {
            match server {
                McpServer::Stdio { env, args, .. } => {
                    mcp.extend(env.values().cloned());
                    mcp_args.extend(args.iter().cloned());
                }
                McpServer::Http { headers, .. } => mcp.extend(headers.values().flat_map(|value| header_secrets(value))),
                _ => {}
            }
        }
        let host = host_vars(|name| {
            let inherited = !options.env.set.contains_key(name) && !options.env.unset.iter().any(|n| n == name);
            inherited && (credential(name) || is_credential_name(name))
        });
        Secrets::split(mcp, mcp_args)
            .and_env(options.env.set.iter().chain(host.iter().map(|(name, value)| (name, value))))
    }

    /// The secrets of the environment `command` runs with: the values it sets, and the host's
    /// values of credential names ([`is_credential_name`]) it inherits. For a command run
    /// outside a session's process (a `--version` probe), whose output reaches error texts.
    pub fn of_command(command: &agent_core::exec::Command) -> Secrets {
        let env = &command.env;
        let set: Vec<(String, String)> = env
            .set
            .iter()
            .filter_map(|(name, value)| Some((name.to_str()?.to_owned(), value.to_str()?.to_owned())))
            .collect();
        let host = host_vars(|name| {
            let named = |list: &[std::ffi::OsString]| list.iter().any(|n| n.to_str() == Some(name));
            is_credential_name(name)
                && (!env.clear || named(&env.allow))
                && !named(&env.unset)
                && !env.set.iter().any(|(n, _)| n.to_str() == Some(name))
        });
        Secrets::default().and_env(set.iter().chain(&host).map(|(name, value)| (name, value)))
    }

    /// These secrets and `values` (those of at least [`MIN_SECRET_LEN`] bytes), each a
    /// credential: what a provider adds to its CLI's environment itself, for one.
    pub fn and(self, values: impl IntoIterator<Item = String>) -> Secrets {
        Secrets::split(self.credentials.iter().cloned().chain(values), self.values.iter().cloned())
    }

    /// These secrets and the values of `vars` (those of at least [`MIN_SECRET_LEN`] bytes), an
    /// environment a provider gives its CLI itself, each a credential when its name
    /// ([`is_credential_name`]) says so.
    pub fn and_env<'v>(self, vars: impl IntoIterator<Item = (&'v String, &'v String)>) -> Secrets {
        let (mut credentials, mut others) = (self.credentials.to_vec(), self.values.to_vec());
        for (name, value) in vars {
            let list = if is_credential_name(name) { &mut credentials } else { &mut others };
            list.push(value.clone());
        }
        Secrets::split(credentials, others)
    }

    /// The credentials, longest first: what [`LineReader::redacting`] redacts from stdout
    /// lines.
    ///
    /// [`LineReader::redacting`]: crate::framing::LineReader::redacting
    pub fn credentials(&self) -> impl Iterator<Item = &str> {
        self.credentials.iter().map(String::as_str)
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every credential (see [`Secrets::credentials`]) replaced by [`REDACTED`];
    /// borrowed when there was none. For text a provider gathers from stdout pieces that no
    /// line held whole (a message's deltas), as the line reader redacts a line.
    pub fn redact_credentials<'t>(&self, text: &'t str) -> Cow<'t, str> {
        replace_all(text, &self.credentials)
    }

    /// `text` with every occurrence of a secret replaced by [`REDACTED`]; borrowed when there
    /// was none.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        replace_all(text, &self.values)
    }
}

/// `text` with each of `values` (longest first) replaced by [`REDACTED`].
fn replace_all<'t>(text: &'t str, values: &[String]) -> Cow<'t, str> {
    let mut text = Cow::Borrowed(text);
    for value in values {
        if text.contains(value.as_str()) {
            text = Cow::Owned(text.replace(value.as_str(), REDACTED));
        }
    }
    text
}

/// This process's environment variables (those in UTF-8) whose names `inherited` accepts.
fn host_vars(inherited: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| inherited(name))
        .collect()
}

/// A header value, and the credential in it after an authentication scheme
/// (`Bearer <token>`, `Basic <base64>`, `token <token>`): a CLI that echoes the credential alone
/// echoes that part.
fn header_secrets(value: &str) -> impl Iterator<Item = String> {
    let credential = value.trim().split_once(char::is_whitespace).and_then(|(scheme, credential)| {
        let credential = credential.trim();
        let is_scheme = !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        (is_scheme && !credential.is_empty()).then(|| credential.to_owned())
    });
    std::iter::once(value.to_owned()).chain(credential)
}

/// The values of at least [`MIN_SECRET_LEN`] bytes, longest first, each once — and the
/// [secrets in the lines](secrets_in_line) of a value of several lines (a PEM key, a `.env`
/// text): output is read and kept a line at a time (a stderr tail, a preset's stdout), so no
/// line holds such a value whole.
fn kept(values: impl IntoIterator<Item = String>) -> Arc<[String]> {
    let mut values: Vec<String> = values
        .into_iter()
        .flat_map(|value| {
            let mut parts = Vec::new();
            if value.contains('\n') {
                // An armored key's `Name: value` lines are its headers (`Proc-Type`, `Version`).
                let armored = value.lines().any(|line| line.trim_start().starts_with("-----"));
                for line in value.lines() {
                    secrets_in_line(line, !armored, &mut parts);
                }
            }
            std::iter::once(value).chain(parts)
        })
        .filter(|v| v.len() >= MIN_SECRET_LEN)
        .collect();
    values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    values.dedup();
    values.into()
}

/// What of one line of a secret of several lines is a secret of its own, into `found`:
/// - a line of key material (base64, standard or URL-safe, `=` only as its padding, or hex:
///   a PEM, OpenSSH or PGP key's lines), without its surrounding whitespace;
/// - with `fields` (a value that is not an armored key, whose `Name: value` lines are its
///   headers), the value of a `name=value` or `name: value` line (a `.env` or INI text, YAML,
///   a pretty-printed JSON field), without quotes and a trailing comma, and the lines of key
///   material of a value that holds `\n` escapes (a JSON service account's `private_key`).
///
/// Each only when it looks like a secret: letters and digits both (key material of 16 bytes
/// or more: capitals and small letters will do), or at least 16 bytes for a value (a password
/// of words). Not an armor line (`-----BEGIN PRIVATE KEY-----`), which every
/// key of its kind has, nor anything else (`Proc-Type: 4,ENCRYPTED`, `NODE_ENV=production`, a
/// path, a word of a script): those are ordinary text elsewhere, and redacting them would hide
/// what an agent says, not a secret.
fn secrets_in_line(line: &str, fields: bool, found: &mut Vec<String>) {
    let line = line.trim();
    if line.starts_with("-----") {
        return;
    }
    if let Some(key) = key_material(line) {
        found.push(key.to_owned());
        return;
    }
    if !fields {
        return;
    }
    let value = match (line.find('='), line.find(": ")) {
        (Some(eq), Some(colon)) if colon < eq => &line[colon + 2..],
        (Some(eq), _) => &line[eq + 1..],
        (None, Some(colon)) => &line[colon + 2..],
        (None, None) => return,
    };
    let value = value.trim().trim_end_matches(',').trim();
    let value = ['"', '\''].iter().fold(value, |v, q| v.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)).unwrap_or(v));
    let words = value.contains(char::is_whitespace);
    if value.len() >= 16 || (!words && value.len() >= MIN_SECRET_LEN && mixed(value)) {
        found.push(value.to_owned());
        found.extend(value.split("\\n").filter_map(key_material).map(str::to_owned));
    }
}

/// `text` when it is a line of key material (see [`secrets_in_line`]) of at least
/// [`MIN_SECRET_LEN`] bytes with letters and digits, or of at least 16 with capitals and small
/// letters (base64 without a digit): not a word, a path or a flag.
fn key_material(text: &str) -> Option<&str> {
    let text = text.trim();
    let body = text.trim_end_matches('=');
    let material = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_');
    let cased = text.len() >= 16
        && text.bytes().any(|b| b.is_ascii_uppercase())
        && text.bytes().any(|b| b.is_ascii_lowercase());
    let is = !body.is_empty() && body.bytes().all(material) && text.len() >= MIN_SECRET_LEN && (mixed(text) || cased);
    is.then_some(text)
}

/// True when `text` has both ASCII letters and digits, as a generated secret nearly always has
/// and a word or a path seldom does.
fn mixed(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit()) && text.bytes().any(|b| b.is_ascii_alphabetic())
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

    /// Output is kept a line at a time: each line of key material of a value of several lines,
    /// and each value of its `name=value` lines that looks like a secret, is redacted on its
    /// own, as well as the value whole; armor lines, an armored key's headers and other lines
    /// are ordinary text.
    #[test]
    fn a_value_of_several_lines_is_redacted_line_by_line_too() {
        let key = "-----BEGIN PRIVATE KEY-----\r\nProc-Type: 4,ENCRYPTED\n  MIIEvQIBADANBgkq \nshort\nAb+d/f9h==\nZg==\n-----END PRIVATE KEY-----";
        let secrets = Secrets::new([key.to_owned()]);
        assert_eq!(format!("{secrets:?}"), "Secrets(3)", "the value and its two lines of base64");
        assert_eq!(secrets.redact(key), "[redacted]");
        let tail = "error: -----BEGIN PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEvQIBADANBgkq\nshort Ab+d/f9h==";
        assert_eq!(
            secrets.redact(tail),
            "error: -----BEGIN PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n[redacted]\nshort [redacted]"
        );
        let ordinary = [
            "first line of words\nsecond line of words",
            "LOG_LEVEL=info\nNODE_ENV=production\n[default]\nregion = eu-west",
            "a==b====\nrepository\n/home/me/project\n--verbose\n__init__",
        ];
        for other in ordinary {
            let secrets = Secrets::new([other.to_owned()]);
            assert_eq!(format!("{secrets:?}"), "Secrets(1)", "{other:?}: the value whole only");
        }
        let hex = Secrets::new(["0123456789abcdef\n0123456789ABCDEF".to_owned()]);
        assert_eq!(hex.redact("0123456789abcdef"), "[redacted]");
        // A `.env` text, an AWS credentials file, a pretty-printed service account.
        let dotenv = "OPENAI_API_KEY=sk-proj-0123456789\nLOG_LEVEL=info\nDB_PASSWORD='hunter22'\n";
        let aws = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY\n";
        let account = "{\n  \"type\": \"service_account\",\n  \"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B\\n-----END PRIVATE KEY-----\\n\",\n  \"passphrase\": \"correct horse battery staple\"\n}";
        let secrets = Secrets::new([dotenv.to_owned(), aws.to_owned(), account.to_owned()]);
        let echoed = "KEY=sk-proj-0123456789 pw hunter22 id AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCY \
                      key MIIEvQIBADANBgkqhkiG9w0B says correct horse battery staple; LOG_LEVEL=info service_account";
        assert_eq!(
            secrets.redact(echoed),
            "KEY=[redacted] pw [redacted] id [redacted] secret [redacted] key [redacted] says [redacted]; \
             LOG_LEVEL=info service_account"
        );
    }

    #[test]
    fn a_header_gives_its_credential_after_the_scheme_too() {
        let of = |value: &str| header_secrets(value).collect::<Vec<_>>();
        assert_eq!(of("Bearer tok-123456"), ["Bearer tok-123456", "tok-123456"]);
        assert_eq!(of("Basic dXNlcjpwYXNzd29yZA=="), ["Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="]);
        assert_eq!(of(" token  ghp_0123456789 "), [" token  ghp_0123456789 ", "ghp_0123456789"]);
        assert_eq!(of("sk-plain-0123456789"), ["sk-plain-0123456789"], "no scheme: the value alone");
        assert_eq!(of("Bearer "), ["Bearer "], "a scheme without a credential");
        assert_eq!(of("k=v; other"), ["k=v; other"], "not a scheme");
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
        let options = options.env("PROJECT_DIR", "/tmp/project-1");
        let secrets = Secrets::of_session(&options, |name| name == "OPENAI_API_KEY");
        let text = "sk-session-12345 mcp-token-123 Bearer web-abcdef /tmp/project-1 debug";
        assert_eq!(secrets.redact(text), "[redacted] [redacted] [redacted] [redacted] debug");
        assert_eq!(format!("{secrets:?}"), "Secrets(6)", "`--verbose` is one, `debug` is too short to be one");
        // The header's token alone, as a CLI echoing it would print it.
        assert_eq!(secrets.redact_credentials("token=web-abcdef"), "token=[redacted]");
        assert_eq!(secrets.redact("mcp-files --verbose"), "mcp-files [redacted]");
        // A path and an MCP argument are kept out of stderr tails only; the named credentials
        // and the MCP servers' environment and headers out of stdout too.
        let credentials: Vec<&str> = secrets.credentials().collect();
        assert_eq!(credentials, ["Bearer web-abcdef", "sk-session-12345", "mcp-token-123", "web-abcdef"]);
        let more = secrets.and(["provider-added-1".to_owned()]);
        assert_eq!(more.credentials().count(), 5);
        assert_eq!(format!("{more:?}"), "Secrets(7)");
        let env = [
            ("CLI_TOKEN".to_owned(), "cli-token-12345".to_owned()),
            ("CLI_HOME".to_owned(), "/tmp/cli-home".to_owned()),
        ];
        let more = more.and_env(env.iter().map(|(name, value)| (name, value)));
        assert!(
            more.credentials().any(|c| c == "cli-token-12345") && !more.credentials().any(|c| c == "/tmp/cli-home")
        );
        assert_eq!(more.redact("/tmp/cli-home"), "[redacted]");
        assert_eq!(more.redact_credentials("/tmp/cli-home cli-token-12345"), "/tmp/cli-home [redacted]");
    }

    #[test]
    fn credential_names_are_told_by_their_words() {
        for name in ["ANTHROPIC_API_KEY", "github_token", "AWS_SECRET_ACCESS_KEY", "X-Api-Key", "Cookie", "DB_PASSWORD"]
        {
            assert!(is_credential_name(name), "{name}");
        }
        for name in ["ANTHROPIC_BASE_URL", "PATH", "PWD", "LOG_LEVEL", "AWS_REGION", "Accept"] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
