//! The JSON forms of the options whose own serde form is not strict enough for a config, and
//! the schemas of the agent-core types a config holds.
//!
//! Tagged enums are written and described as tagged enums, but read through a flat struct of
//! every field: serde buffers a tagged enum's content, which loses the path of an error inside
//! it, and the flat struct refuses unknown fields and says which fields the tag allows.

use super::*;

/// An MCP server, as the schema describes it and `Serialize` writes it.
#[derive(Clone, Serialize)]
#[serde(tag = "transport", rename_all = "snake_case", rename = "McpServer", deny_unknown_fields)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) enum McpServerForm {
    /// A server the CLI starts as a child process.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        /// Its environment.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    /// A server reached over streamable HTTP.
    Http {
        /// The server's `http` or `https` URL.
        url: String,
        /// Headers sent with every request.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Transport {
    Stdio,
    Http,
}

/// Every field of every transport, so each error keeps its path. A field is `None` when it is
/// absent; a `null` is refused, as the schema says.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "McpServer")]
struct McpServerFields {
    transport: Transport,
    #[serde(default, deserialize_with = "present")]
    command: Option<String>,
    #[serde(default, deserialize_with = "present")]
    args: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    env: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "present")]
    url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    headers: Option<BTreeMap<String, String>>,
}

/// A field that is there, which must hold a `T` (not `null`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

impl<'de> Deserialize<'de> for McpServerForm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let McpServerFields { transport, command, args, env, url, headers } =
            McpServerFields::deserialize(deserializer)?;
        let refuse = |name: &str, server: &str, given: bool| match given {
            true => Err(D::Error::custom(format_args!("{server} server takes no `{name}`"))),
            false => Ok(()),
        };
        match transport {
            Transport::Stdio => {
                refuse("url", "a stdio", url.is_some())?;
                refuse("headers", "a stdio", headers.is_some())?;
                let command = command.ok_or_else(|| D::Error::missing_field("command"))?;
                Ok(McpServerForm::Stdio { command, args: args.unwrap_or_default(), env: env.unwrap_or_default() })
            }
            Transport::Http => {
                for (name, given) in [("command", command.is_some()), ("args", args.is_some()), ("env", env.is_some())]
                {
                    refuse(name, "an http", given)?;
                }
                let url = url.ok_or_else(|| D::Error::missing_field("url"))?;
                Ok(McpServerForm::Http { url, headers: headers.unwrap_or_default() })
            }
        }
    }
}

impl From<&McpServer> for McpServerForm {
    fn from(server: &McpServer) -> Self {
        match server.clone() {
            McpServer::Stdio { command, args, env } => McpServerForm::Stdio { command, args, env },
            McpServer::Http { url, headers } => McpServerForm::Http { url, headers },
        }
    }
}

impl From<McpServerForm> for McpServer {
    fn from(form: McpServerForm) -> Self {
        match form {
            McpServerForm::Stdio { command, args, env } => McpServer::Stdio { command, args, env },
            McpServerForm::Http { url, headers } => McpServer::Http { url, headers },
        }
    }
}

pub(super) mod mcp_servers {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        servers: &BTreeMap<String, McpServer>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(servers.iter().map(|(name, server)| (name, McpServerForm::from(server))))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, McpServer>, D::Error> {
        let forms = BTreeMap::<String, McpServerForm>::deserialize(deserializer)?;
        Ok(forms.into_iter().map(|(name, form)| (name, form.into())).collect())
    }
}

/// A skill.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Skill")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) struct SkillForm {
    /// The skill's name.
    name: String,
    /// Absolute path to the skill's `SKILL.md` or its directory.
    path: PathBuf,
}

pub(super) mod skills {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(skills: &[Skill], serializer: S) -> Result<S::Ok, S::Error> {
        let form = |skill: &Skill| SkillForm { name: skill.name.clone(), path: skill.path.clone() };
        serializer.collect_seq(skills.iter().map(form))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Skill>, D::Error> {
        let forms = Vec::<SkillForm>::deserialize(deserializer)?;
        Ok(forms.into_iter().map(|SkillForm { name, path }| Skill::new(name, path)).collect())
    }
}

/// Environment changes for the provider process.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Env")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) struct EnvForm {
    /// Variables to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    set: BTreeMap<String, String>,
    /// Variables to remove from the inherited environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unset: Vec<String>,
}

pub(super) mod env {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(env: &Env, serializer: S) -> Result<S::Ok, S::Error> {
        let Env { set, unset } = env.clone();
        EnvForm { set, unset }.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Env, D::Error> {
        let EnvForm { set, unset } = EnvForm::deserialize(deserializer)?;
        Ok(Env { set, unset })
    }
}

/// Which provider conversation a session opens.
#[derive(Serialize)]
#[serde(tag = "mode", content = "from", rename_all = "snake_case", rename = "Conversation", deny_unknown_fields)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) enum ConversationForm {
    /// A new provider conversation.
    New,
    /// Continue an earlier conversation (needs the `resume` capability).
    Resume(SourceForm),
    /// Branch an earlier conversation into a new one (needs the `fork` capability).
    Fork(SourceForm),
}

/// Where a resumed or forked conversation comes from.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", rename = "ConversationSource")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) enum SourceForm {
    /// A stopped session of the session's store, by its session ID. Resuming it continues
    /// that session under its own ID and its stored history; forking it starts a new one.
    Session(SessionId),
    /// A provider conversation by the provider's own ID (a Codex thread ID, a Claude session
    /// ID); the session starts with an empty history.
    Provider(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    New,
    Resume,
    Fork,
}

/// Both fields, so each error keeps its path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "Conversation")]
struct ConversationFields {
    mode: Mode,
    #[serde(default, deserialize_with = "present")]
    from: Option<SourceForm>,
}

impl<'de> Deserialize<'de> for ConversationForm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let ConversationFields { mode, from } = ConversationFields::deserialize(deserializer)?;
        match (mode, from) {
            (Mode::New, None) => Ok(ConversationForm::New),
            (Mode::New, Some(_)) => Err(D::Error::custom("a new conversation takes no `from`")),
            (Mode::Resume | Mode::Fork, None) => Err(D::Error::custom(
                "a resumed or forked conversation needs `from`: {\"session\": …} or {\"provider\": …}",
            )),
            (Mode::Resume, Some(from)) => Ok(ConversationForm::Resume(from)),
            (Mode::Fork, Some(from)) => Ok(ConversationForm::Fork(from)),
        }
    }
}

impl From<&ConversationSource> for SourceForm {
    fn from(source: &ConversationSource) -> Self {
        match source {
            ConversationSource::Session(id) => SourceForm::Session(id.clone()),
            ConversationSource::Provider(id) => SourceForm::Provider(id.clone()),
        }
    }
}

impl From<SourceForm> for ConversationSource {
    fn from(form: SourceForm) -> Self {
        match form {
            SourceForm::Session(id) => ConversationSource::Session(id),
            SourceForm::Provider(id) => ConversationSource::Provider(id),
        }
    }
}

pub(super) mod conversation {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        conversation: &Option<Conversation>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let form = conversation.as_ref().map(|conversation| match conversation {
            Conversation::New => ConversationForm::New,
            Conversation::Resume(source) => ConversationForm::Resume(source.into()),
            Conversation::Fork(source) => ConversationForm::Fork(source.into()),
        });
        form.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Conversation>, D::Error> {
        Ok(Option::<ConversationForm>::deserialize(deserializer)?.map(|form| match form {
            ConversationForm::New => Conversation::New,
            ConversationForm::Resume(from) => Conversation::Resume(from.into()),
            ConversationForm::Fork(from) => Conversation::Fork(from.into()),
        }))
    }
}

/// A number of completed turns, or `"unbounded"`.
#[derive(Serialize)]
#[serde(untagged, rename = "CacheSize")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) enum CacheSizeForm {
    /// At most this many (0 turns the cache off).
    Bounded(usize),
    /// Every completed turn, for the session's life.
    Unbounded(Unbounded),
}

/// The word `unbounded`.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub(super) enum Unbounded {
    /// Keep every completed turn.
    Unbounded,
}

impl<'de> Deserialize<'de> for CacheSizeForm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CacheSizeForm;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of turns or \"unbounded\"")
            }

            fn visit_u64<E: serde::de::Error>(self, turns: u64) -> Result<CacheSizeForm, E> {
                usize::try_from(turns)
                    .map(CacheSizeForm::Bounded)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(turns), &self))
            }

            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<CacheSizeForm, E> {
                match word {
                    "unbounded" => Ok(CacheSizeForm::Unbounded(Unbounded::Unbounded)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(word), &self)),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

pub(super) mod cache_size {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(size: &Option<CacheSize>, serializer: S) -> Result<S::Ok, S::Error> {
        let form = size.map(|size| match size {
            CacheSize::Bounded(turns) => CacheSizeForm::Bounded(turns),
            CacheSize::Unbounded => CacheSizeForm::Unbounded(Unbounded::Unbounded),
        });
        form.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<CacheSize>, D::Error> {
        Ok(Option::<CacheSizeForm>::deserialize(deserializer)?.map(|form| match form {
            CacheSizeForm::Bounded(turns) => CacheSize::Bounded(turns),
            CacheSizeForm::Unbounded(_) => CacheSize::Unbounded,
        }))
    }
}
