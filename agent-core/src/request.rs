//! The agent's blocking interactions (questions, approvals, …) and the host's responses.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::ids::{RequestId, SessionId, TurnId};
use crate::time::Timestamp;

mod answers;

use answers::{validate_answer, validate_choice};

/// What the agent is asking for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestKind {
    /// One or more questions for the user, optionally with choices.
    Question,
    /// Permission to run a command.
    CommandApproval,
    /// Permission to change files.
    FileChangeApproval,
    /// Permission for something else (network, a tool, extra filesystem access).
    Permission,
    /// A yes/no confirmation.
    Confirmation,
    /// An MCP server asks the user for structured input (`schema` describes it).
    McpElicitation,
}

impl RequestKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Question => "question",
            RequestKind::CommandApproval => "command_approval",
            RequestKind::FileChangeApproval => "file_change_approval",
            RequestKind::Permission => "permission",
            RequestKind::Confirmation => "confirmation",
            RequestKind::McpElicitation => "mcp_elicitation",
        }
    }

    /// True for the approval kinds (command, file change, permission).
    pub fn is_approval(self) -> bool {
        matches!(self, RequestKind::CommandApproval | RequestKind::FileChangeApproval | RequestKind::Permission)
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestStatus {
    /// Waiting for a response.
    Pending,
    /// A response was delivered and acknowledged by the provider.
    Resolved,
    /// It can no longer be answered.
    Expired,
}

/// One option offered to the user: an answer to a question ([`Question::choices`]), or a
/// provider decision on a request ([`Request::choices`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// Text to show.
    pub label: String,
    /// Value to answer with: the answer text of a question, or the [`Response::Choose`] value of
    /// a request decision (a stable snake_case name).
    pub value: String,
    /// Longer explanation, if the provider gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Choice {
    /// A choice whose value is its label.
    pub fn new(label: impl Into<String>) -> Self {
        let label = label.into();
        Choice { value: label.clone(), label, description: None }
    }
}

/// One question of a question request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// Normalized question ID; answers are keyed by it.
    pub id: String,
    /// A short header, if the provider has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The question text.
    pub prompt: String,
    /// Offered answers; empty for free text.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Several choices may be picked.
    #[serde(default)]
    pub multi_select: bool,
    /// A free-text answer is accepted besides the choices.
    #[serde(default)]
    pub allow_other: bool,
    /// The answer is secret (the provider asked for masked input).
    #[serde(default)]
    pub secret: bool,
}

impl Question {
    /// A free-text question.
    pub fn new(id: impl Into<String>, prompt: impl Into<String>) -> Self {
        Question {
            id: id.into(),
            header: None,
            prompt: prompt.into(),
            choices: Vec::new(),
            multi_select: false,
            allow_other: false,
            secret: false,
        }
    }

    /// Adds offered choices.
    pub fn with_choices(mut self, choices: impl IntoIterator<Item = Choice>) -> Self {
        self.choices = choices.into_iter().collect();
        self
    }
}

/// An opaque provider reference that maps a request back to the provider's own ID.
///
/// Treat it as opaque; only the provider that created it interprets it.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderRef(pub String);

impl fmt::Debug for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A blocking interaction the agent is waiting on. Arrives in `request_created` events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Request {
    /// Harness request ID.
    pub id: RequestId,
    /// The session it belongs to.
    pub session_id: SessionId,
    /// The turn it belongs to.
    pub turn_id: TurnId,
    /// What is asked.
    pub kind: RequestKind,
    /// Human-readable summary (for questions, the first question's text).
    pub prompt: String,
    /// Decisions the provider offers besides approve, deny and cancel, each answered with
    /// [`Response::Choose`] naming its `value` (a stable snake_case name), e.g. "approve this
    /// command and allow commands with the same prefix from now on". `label` is short; the
    /// `description` says what the decision does, including any rule or amendment it would
    /// apply, whose details are also in `metadata`. Empty when there are none. (The choices of a
    /// question are answers, in [`Question::choices`].)
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// The questions of a question request.
    #[serde(default)]
    pub questions: Vec<Question>,
    /// JSON schema of the expected answer (MCP elicitation).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_null::deserialize")]
    pub schema: Option<Value>,
    /// Approval scopes the provider accepts; empty means approvals are not offered.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Provider details: the command, cwd, file diff, reason, …
    #[serde(default)]
    pub metadata: serde_json::Map<String, Value>,
    /// Current status.
    pub status: RequestStatus,
    /// Opaque provider reference.
    pub provider_ref: ProviderRef,
    /// The accepted response, once resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Response>,
    /// When the request was created.
    pub created_at: Timestamp,
    /// When it expires unanswered, if a timeout applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

impl Request {
    /// True when a question asks for masked input; its answers are never recorded.
    pub fn has_secret_question(&self) -> bool {
        self.questions.iter().any(|q| q.secret)
    }

    /// The fields of an MCP elicitation's schema that ask for masked input (`"format":
    /// "password"` or `"writeOnly": true`): their values are never recorded.
    pub fn secret_fields(&self) -> Vec<&str> {
        let Some(Value::Object(properties)) = self.schema.as_ref().and_then(|schema| schema.get("properties")) else {
            return Vec::new();
        };
        let secret = |field: &Value| {
            field.get("format").and_then(Value::as_str) == Some("password")
                || field.get("writeOnly").and_then(Value::as_bool) == Some(true)
        };
        properties.iter().filter(|(_, field)| secret(field)).map(|(name, _)| name.as_str()).collect()
    }

    /// The secret values `response` gives: the answers to secret questions and the values of
    /// secret fields (see [`Request::recorded`]), those of at least 8 bytes each (a shorter one
    /// would be found in ordinary text). The runtime redacts them from what the provider
    /// reports after the answer (an agent that quotes the answer back).
    pub(crate) fn secret_values(&self, response: &Response) -> Vec<String> {
        const MIN_SECRET_LEN: usize = 8;
        let Response::Answer { answer } = response else { return Vec::new() };
        let secret_question = |id: &str| self.questions.iter().any(|q| q.secret && q.id == id);
        let mut values: Vec<String> = match answer {
            Answer::Text(text) if self.has_secret_question() => vec![text.clone()],
            Answer::Many(values) if self.has_secret_question() => values.clone(),
            Answer::ByQuestion(map) => {
                map.iter().filter(|(id, _)| secret_question(id)).flat_map(|(_, values)| values.clone()).collect()
            }
            Answer::Content(Value::Object(content)) => self
                .secret_fields()
                .into_iter()
                .filter_map(|field| content.get(field))
                .filter_map(|value| match value {
                    Value::String(text) => Some(text.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                })
                .collect(),
            _ => Vec::new(),
        };
        values.retain(|value| value.len() >= MIN_SECRET_LEN);
        values
    }

    /// What of `response` is recorded (in events, the store, the request's `response`): all of
    /// it but the answers to secret questions and the values of secret fields (see
    /// [`Request::has_secret_question`], [`Request::secret_fields`]), which reach the provider
    /// only.
    pub(crate) fn recorded(&self, response: Response) -> Response {
        if self.has_secret_question() {
            return response.redacted();
        }
        let secret = self.secret_fields();
        match response {
            Response::Answer { answer: Answer::Content(Value::Object(mut content)) } if !secret.is_empty() => {
                for field in secret {
                    if let Some(value) = content.get_mut(field) {
                        *value = Value::String(crate::REDACTED.into());
                    }
                }
                Response::Answer { answer: Answer::Content(Value::Object(content)) }
            }
            other => other,
        }
    }
}

/// What a provider hands the runtime to create a request; the runtime assigns IDs and status.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RequestSpec {
    /// What is asked.
    pub kind: RequestKind,
    /// Human-readable summary.
    pub prompt: String,
    /// Provider decisions besides approve, deny and cancel, answered with [`Response::Choose`]
    /// (see [`Request::choices`]).
    pub choices: Vec<Choice>,
    /// Questions (for [`RequestKind::Question`]).
    pub questions: Vec<Question>,
    /// Answer schema (MCP elicitation).
    pub schema: Option<Value>,
    /// Accepted approval scopes.
    pub scopes: Vec<Scope>,
    /// Provider details.
    pub metadata: serde_json::Map<String, Value>,
    /// The provider's own reference.
    pub provider_ref: ProviderRef,
    /// A provider-side deadline; the session's `request_timeout` applies when shorter.
    pub timeout: Option<Duration>,
}

impl RequestSpec {
    /// A request of `kind` with a prompt and the provider's reference.
    pub fn new(kind: RequestKind, prompt: impl Into<String>, provider_ref: impl Into<String>) -> Self {
        let scopes =
            if kind.is_approval() || kind == RequestKind::Confirmation { vec![Scope::Once] } else { Vec::new() };
        RequestSpec {
            kind,
            prompt: prompt.into(),
            choices: Vec::new(),
            questions: Vec::new(),
            schema: None,
            scopes,
            metadata: serde_json::Map::new(),
            provider_ref: ProviderRef(provider_ref.into()),
            timeout: None,
        }
    }

    /// Sets the questions.
    pub fn questions(mut self, questions: impl IntoIterator<Item = Question>) -> Self {
        self.questions = questions.into_iter().collect();
        self
    }

    /// Sets the provider decisions offered besides approve, deny and cancel.
    pub fn choices(mut self, choices: impl IntoIterator<Item = Choice>) -> Self {
        self.choices = choices.into_iter().collect();
        self
    }

    /// Sets the accepted approval scopes.
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = Scope>) -> Self {
        self.scopes = scopes.into_iter().collect();
        self
    }

    /// Sets the answer schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Adds a metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets a provider-side timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// How far an approval reaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scope {
    /// This request only.
    #[default]
    Once,
    /// This and identical requests for the rest of the session.
    Session,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Once => "once",
            Scope::Session => "session",
        })
    }
}

/// An answer to a question or elicitation request.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
#[non_exhaustive]
pub enum Answer {
    /// One text answer, for a request with one question.
    Text(String),
    /// Several picked choices, for a request with one multi-select question.
    Many(Vec<String>),
    /// Answers keyed by question ID; every question must be answered.
    ByQuestion(BTreeMap<String, Vec<String>>),
    /// Structured content for an MCP elicitation.
    Content(Value),
}

impl fmt::Debug for Answer {
    // Answers can be secrets (masked questions): never print their values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Text(_) => f.write_str("Answer::Text(..)"),
            Answer::Many(v) => write!(f, "Answer::Many({} values)", v.len()),
            Answer::ByQuestion(m) => f.debug_tuple("Answer::ByQuestion").field(&m.keys().collect::<Vec<_>>()).finish(),
            Answer::Content(_) => f.write_str("Answer::Content(..)"),
        }
    }
}

/// The host's response to a [`Request`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
#[non_exhaustive]
pub enum Response {
    /// Answer a question or elicitation.
    Answer {
        /// The answer.
        answer: Answer,
    },
    /// Allow what was asked.
    Approve {
        /// How far the approval reaches.
        scope: Scope,
    },
    /// Refuse; the agent sees the refusal and continues.
    Deny {
        /// Why, for the agent.
        reason: Option<String>,
    },
    /// Refuse and stop the operation (providers usually end the turn).
    Cancel {
        /// Why.
        reason: Option<String>,
    },
    /// Allow what was asked with the tool input replaced by `input` (the agent runs the edited
    /// call, e.g. another command line). Only providers whose CLI can run an edited call accept
    /// it (Claude Code's `updatedInput`); others refuse it with `Error::InvalidResponse`.
    ApproveEdited {
        /// How far the approval reaches.
        scope: Scope,
        /// The tool input to run instead of the one asked for.
        input: Value,
    },
    /// Take one of the decisions the request offers in [`Request::choices`], by its
    /// [`Choice::value`]: what approve, deny and cancel cannot say, such as approving a command
    /// and allowing commands with the same prefix from now on. Only a value the request offers
    /// is accepted; the provider sends its own decision for it (with the details it offered).
    Choose {
        /// The chosen [`Choice::value`].
        value: String,
    },
}

impl Response {
    /// A single text answer.
    pub fn answer(text: impl Into<String>) -> Self {
        Response::Answer { answer: Answer::Text(text.into()) }
    }

    /// Answers keyed by question ID.
    pub fn answers<K, V>(answers: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let map = answers.into_iter().map(|(k, v)| (k.into(), vec![v.into()])).collect();
        Response::Answer { answer: Answer::ByQuestion(map) }
    }

    /// Structured elicitation content.
    pub fn content(value: Value) -> Self {
        Response::Answer { answer: Answer::Content(value) }
    }

    /// How far an approval reaches (`Approve`, `ApproveEdited`); `None` for other responses.
    pub fn scope(&self) -> Option<Scope> {
        match self {
            Response::Approve { scope } | Response::ApproveEdited { scope, .. } => Some(*scope),
            _ => None,
        }
    }

    /// Approve this request once.
    pub fn approve() -> Self {
        Response::Approve { scope: Scope::Once }
    }

    /// Approve with a scope.
    pub fn approve_with(scope: Scope) -> Self {
        Response::Approve { scope }
    }

    /// Approve once, with the tool input replaced by `input` (see [`Response::ApproveEdited`]).
    pub fn approve_edited(input: Value) -> Self {
        Response::ApproveEdited { scope: Scope::Once, input }
    }

    /// Deny with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Response::Deny { reason: Some(reason.into()) }
    }

    /// Cancel with a reason.
    pub fn cancel(reason: impl Into<String>) -> Self {
        Response::Cancel { reason: Some(reason.into()) }
    }

    /// Take the offered decision whose [`Choice::value`] is `value` (see [`Request::choices`]).
    pub fn choose(value: impl Into<String>) -> Self {
        Response::Choose { value: value.into() }
    }

    /// The same response with answer values replaced by `"[redacted]"`, for recording answers
    /// to secret questions. Other responses (a [`Response::Choose`] value names an offered
    /// decision, never a secret) pass through unchanged.
    pub fn redacted(&self) -> Response {
        use crate::REDACTED;
        let answer = match self {
            Response::Answer { answer } => answer,
            other => return other.clone(),
        };
        let answer = match answer {
            Answer::Text(_) => Answer::Text(REDACTED.into()),
            Answer::Many(values) => Answer::Many(vec![REDACTED.into(); values.len()]),
            Answer::ByQuestion(map) => {
                Answer::ByQuestion(map.iter().map(|(k, v)| (k.clone(), vec![REDACTED.into(); v.len()])).collect())
            }
            Answer::Content(_) => Answer::Content(Value::String(REDACTED.into())),
        };
        Response::Answer { answer }
    }

    /// The response's action.
    pub fn action(&self) -> ResponseAction {
        match self {
            Response::Answer { .. } => ResponseAction::Answer,
            Response::Approve { .. } | Response::ApproveEdited { .. } => ResponseAction::Approve,
            Response::Deny { .. } => ResponseAction::Deny,
            Response::Cancel { .. } => ResponseAction::Cancel,
            Response::Choose { .. } => ResponseAction::Choose,
        }
    }

    /// Checks that this response fits `request`, without asking the provider.
    ///
    /// Rules: questions take `answer` (every question answered, no unknown question IDs), `deny`
    /// or `cancel`; approvals and confirmations take `approve` (with a scope the request offers),
    /// `deny` or `cancel`; MCP elicitations take `answer` with content, `deny` or `cancel`; any
    /// request takes `choose` with the value of one of its [`Request::choices`]
    /// (`Error::InvalidResponse` naming the offered values otherwise).
    pub fn validate_for(&self, request: &Request) -> Result<()> {
        let mismatch = || Error::ResponseKindMismatch { kind: request.kind, action: self.action() };
        match (request.kind, self) {
            (_, Response::Deny { .. } | Response::Cancel { .. }) => Ok(()),
            (_, Response::Choose { value }) => validate_choice(request, value),
            (RequestKind::Question, Response::Answer { answer }) => validate_answer(request, answer),
            (RequestKind::McpElicitation, Response::Answer { answer }) => match answer {
                Answer::Content(_) | Answer::ByQuestion(_) => Ok(()),
                Answer::Text(_) | Answer::Many(_) => Err(Error::InvalidResponse(
                    "an MCP elicitation is answered with structured content (Response::content)".into(),
                )),
            },
            (kind, Response::Approve { scope } | Response::ApproveEdited { scope, .. })
                if kind.is_approval() || kind == RequestKind::Confirmation =>
            {
                if request.scopes.contains(scope) {
                    Ok(())
                } else {
                    Err(Error::UnsupportedScope { scope: *scope })
                }
            }
            _ => Err(mismatch()),
        }
    }
}

/// The action of a [`Response`], for errors and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseAction {
    /// [`Response::Answer`].
    Answer,
    /// [`Response::Approve`].
    Approve,
    /// [`Response::Deny`].
    Deny,
    /// [`Response::Cancel`].
    Cancel,
    /// [`Response::Choose`].
    Choose,
}

impl fmt::Display for ResponseAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResponseAction::Answer => "answer",
            ResponseAction::Approve => "approve",
            ResponseAction::Deny => "deny",
            ResponseAction::Cancel => "cancel",
            ResponseAction::Choose => "choose",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: RequestKind, questions: Vec<Question>, scopes: Vec<Scope>) -> Request {
        Request {
            id: RequestId::generate(),
            session_id: SessionId::new("s").unwrap(),
            turn_id: TurnId::generate(),
            kind,
            prompt: "?".into(),
            choices: vec![],
            questions,
            schema: None,
            scopes,
            metadata: Default::default(),
            status: RequestStatus::Pending,
            provider_ref: ProviderRef("1".into()),
            response: None,
            created_at: Timestamp::now(),
            expires_at: None,
        }
    }

    #[test]
    fn answer_to_a_command_approval_is_a_kind_mismatch() {
        let r = request(RequestKind::CommandApproval, vec![], vec![Scope::Once]);
        let err = Response::answer("yes").validate_for(&r).unwrap_err();
        assert!(matches!(
            err,
            Error::ResponseKindMismatch { kind: RequestKind::CommandApproval, action: ResponseAction::Answer }
        ));
        assert!(Response::approve().validate_for(&r).is_ok());
        assert!(Response::deny("no").validate_for(&r).is_ok());
    }

    #[test]
    fn approve_to_a_question_is_a_kind_mismatch() {
        let r = request(RequestKind::Question, vec![Question::new("q", "?")], vec![]);
        assert!(matches!(Response::approve().validate_for(&r), Err(Error::ResponseKindMismatch { .. })));
    }

    #[test]
    fn an_edited_approval_is_an_approval() {
        let r = request(RequestKind::CommandApproval, vec![], vec![Scope::Once]);
        let edited = Response::approve_edited(serde_json::json!({"command": "echo edited"}));
        assert_eq!(edited.action(), ResponseAction::Approve);
        assert!(edited.validate_for(&r).is_ok());
        let session = Response::ApproveEdited { scope: Scope::Session, input: serde_json::json!({}) };
        assert!(matches!(session.validate_for(&r), Err(Error::UnsupportedScope { scope: Scope::Session })));
        let q = request(RequestKind::Question, vec![Question::new("q", "?")], vec![]);
        assert!(matches!(edited.validate_for(&q), Err(Error::ResponseKindMismatch { .. })));
        let json = serde_json::to_value(&edited).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"action": "approve_edited", "scope": "once", "input": {"command": "echo edited"}})
        );
        assert_eq!(serde_json::from_value::<Response>(json).unwrap(), edited);
    }

    #[test]
    fn session_scope_needs_to_be_offered() {
        let once_only = request(RequestKind::CommandApproval, vec![], vec![Scope::Once]);
        assert!(matches!(
            Response::approve_with(Scope::Session).validate_for(&once_only),
            Err(Error::UnsupportedScope { scope: Scope::Session })
        ));
        let both = request(RequestKind::FileChangeApproval, vec![], vec![Scope::Once, Scope::Session]);
        assert!(Response::approve_with(Scope::Session).validate_for(&both).is_ok());
    }

    #[test]
    fn multi_question_answers_must_be_complete_and_known() {
        let r = request(
            RequestKind::Question,
            vec![Question::new("database", "Which?"), Question::new("region", "Where?")],
            vec![],
        );
        assert!(matches!(
            Response::answers([("database", "Postgres")]).validate_for(&r),
            Err(Error::MissingAnswer { question_id }) if question_id == "region"
        ));
        assert!(matches!(
            Response::answers([("database", "Postgres"), ("region", "x"), ("zone", "y")]).validate_for(&r),
            Err(Error::UnknownQuestion { question_id }) if question_id == "zone"
        ));
        assert!(matches!(Response::answer("Postgres").validate_for(&r), Err(Error::InvalidResponse(_))));
        assert!(Response::answers([("database", "Postgres"), ("region", "eu")]).validate_for(&r).is_ok());
    }

    #[test]
    fn a_question_with_choices_takes_one_of_them_unless_it_allows_others() {
        let mut question = Question::new("db", "Which?").with_choices([Choice::new("Postgres"), Choice::new("MySQL")]);
        let r = request(RequestKind::Question, vec![question.clone()], vec![]);
        assert!(Response::answer("MySQL").validate_for(&r).is_ok());
        // A question's choice is an answer; `choose` takes the request's own choices.
        let err = Response::choose("MySQL").validate_for(&r).unwrap_err();
        assert!(matches!(err, Error::InvalidResponse(ref m) if m.contains("Response::answer")), "{err}");
        let err = Response::answer("Oracle").validate_for(&r).unwrap_err();
        assert!(
            matches!(err, Error::InvalidResponse(ref m) if m.contains("(Postgres, MySQL)") && !m.contains("Oracle"))
        );
        let none = Response::Answer { answer: Answer::ByQuestion([("db".to_owned(), Vec::new())].into()) };
        assert!(matches!(none.validate_for(&r), Err(Error::MissingAnswer { question_id }) if question_id == "db"));
        question.allow_other = true;
        let open = request(RequestKind::Question, vec![question], vec![]);
        assert!(Response::answer("Oracle").validate_for(&open).is_ok());
    }

    #[test]
    fn answers_never_appear_in_debug_output() {
        let text = format!("{:?}", Response::answer("hunter2"));
        assert!(!text.contains("hunter2"), "{text}");
        let text = format!("{:?}", Response::answers([("password", "hunter2")]));
        assert!(!text.contains("hunter2") && text.contains("password"), "{text}");
    }

    fn with_choices(mut request: Request, values: &[&str]) -> Request {
        request.choices = values
            .iter()
            .map(|value| Choice { label: value.to_string(), value: value.to_string(), description: None })
            .collect();
        request
    }

    #[test]
    fn choose_takes_only_an_offered_value() {
        let plain = request(RequestKind::CommandApproval, vec![], vec![Scope::Once]);
        let offered =
            with_choices(plain.clone(), &["accept_with_execpolicy_amendment", "apply_network_policy_amendment"]);
        assert!(Response::choose("accept_with_execpolicy_amendment").validate_for(&offered).is_ok());
        match Response::choose("accept_everything").validate_for(&offered) {
            Err(Error::InvalidResponse(message)) => {
                assert!(message.contains("`accept_everything`"), "{message}");
                assert!(
                    message.contains("`accept_with_execpolicy_amendment`, `apply_network_policy_amendment`"),
                    "the offered values are named: {message}"
                );
            }
            other => panic!("expected InvalidResponse, got {other:?}"),
        }
        match Response::choose("accept_with_execpolicy_amendment").validate_for(&plain) {
            Err(Error::InvalidResponse(message)) => assert!(message.contains("offers none"), "{message}"),
            other => panic!("expected InvalidResponse, got {other:?}"),
        }
        // A value of megabytes is quoted by its beginning, not echoed whole.
        match Response::choose("x".repeat(10 << 20)).validate_for(&offered) {
            Err(Error::InvalidResponse(message)) => {
                assert!(message.len() < 1024 && message.contains("more bytes"), "{} bytes", message.len())
            }
            other => panic!("expected InvalidResponse, got {other:?}"),
        }
        // Any kind of request may offer decisions; approve, deny and cancel keep working.
        let question = with_choices(request(RequestKind::Question, vec![Question::new("q", "?")], vec![]), &["skip"]);
        assert!(Response::choose("skip").validate_for(&question).is_ok());
        assert!(Response::approve().validate_for(&offered).is_ok());
        assert!(Response::deny("no").validate_for(&offered).is_ok());
        assert!(Response::cancel("stop").validate_for(&offered).is_ok());
    }

    #[test]
    fn choose_is_recorded_as_is() {
        let choose = Response::choose("accept_with_execpolicy_amendment");
        assert_eq!(choose.redacted(), choose);
        assert_eq!(choose.action(), ResponseAction::Choose);
        assert_eq!(ResponseAction::Choose.to_string(), "choose");
        let json = serde_json::to_value(&choose).unwrap();
        assert_eq!(json, serde_json::json!({"action": "choose", "value": "accept_with_execpolicy_amendment"}));
        assert_eq!(serde_json::from_value::<Response>(json).unwrap(), choose);
    }

    #[test]
    fn response_json_is_tagged_by_action() {
        let json = serde_json::to_value(Response::approve_with(Scope::Session)).unwrap();
        assert_eq!(json, serde_json::json!({"action": "approve", "scope": "session"}));
        let json = serde_json::to_value(Response::deny("no")).unwrap();
        assert_eq!(json, serde_json::json!({"action": "deny", "reason": "no"}));
    }
}
