//! What the fake model server saw.

use std::fmt;

use serde_json::{Value, json};

use crate::redact;

/// Which API a request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Endpoint {
    /// `POST …/responses` (OpenAI Responses).
    Responses,
    /// `POST …/messages` (Anthropic Messages).
    Messages,
    /// `POST …/messages` without `"stream": true`: Claude Code checks a model this way (a
    /// one-token request) before it switches to it. Answered with a short message; takes no
    /// scenario step and is not a model call.
    MessagesCheck,
    /// `POST …/messages/count_tokens`.
    CountTokens,
    /// `POST …/chat/completions` (OpenAI Chat Completions).
    ChatCompletions,
    /// `GET …/models`.
    Models,
    /// `HEAD` on any path (connection pre-warm).
    Head,
    /// Anything else (answered 404).
    Other,
}

impl Endpoint {
    /// Classifies a request by method and path (the query is ignored).
    pub fn classify(method: &str, path: &str) -> Endpoint {
        let path = path.trim_end_matches('/');
        match method {
            "HEAD" => Endpoint::Head,
            "GET" if path.ends_with("/models") => Endpoint::Models,
            "POST" if path.ends_with("/messages/count_tokens") => Endpoint::CountTokens,
            "POST" if path.ends_with("/messages") => Endpoint::Messages,
            "POST" if path.ends_with("/chat/completions") => Endpoint::ChatCompletions,
            "POST" if path.ends_with("/responses") => Endpoint::Responses,
            _ => Endpoint::Other,
        }
    }

    /// [`Endpoint::classify`], with the request's JSON body: a Messages request that does not
    /// ask to stream is a [`Endpoint::MessagesCheck`].
    pub fn of_request(method: &str, path: &str, body: Option<&Value>) -> Endpoint {
        match Endpoint::classify(method, path) {
            Endpoint::Messages if body.is_some_and(|b| b["stream"] != true) => Endpoint::MessagesCheck,
            endpoint => endpoint,
        }
    }

    /// Whether requests to this endpoint take a scenario step.
    pub fn is_model_call(self) -> bool {
        matches!(self, Endpoint::Responses | Endpoint::Messages | Endpoint::ChatCompletions)
    }

    /// Short name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::MessagesCheck => "messages_check",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::Models => "models",
            Endpoint::Head => "head",
            Endpoint::Other => "other",
        }
    }
}

/// One request the fake model server received. `Debug` and [`RecordedRequest::to_json`] hide
/// credential headers (`authorization`, `x-api-key`, ...); [`RecordedRequest::header`] returns
/// them as sent.
#[derive(Clone)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// Position in the server's log, from 0.
    pub index: usize,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Query string, without `?`.
    pub query: Option<String>,
    /// Headers in arrival order, names lowercase.
    pub headers: Vec<(String, String)>,
    /// The body, when it was JSON.
    pub body: Option<Value>,
    /// Which API the request was for.
    pub endpoint: Endpoint,
    /// The scenario step that answered it (0-based), for model calls that got one.
    pub step: Option<usize>,
    /// How it was answered, in a few words (`"step 0: text"`, `"scenario exhausted"`, ...).
    pub reply: String,
}

impl RecordedRequest {
    /// The first value of header `name` (any case), as sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON form written by the `fake-model` binary, credentials hidden.
    pub fn to_json(&self) -> Value {
        let headers: serde_json::Map<String, Value> =
            redact::headers(&self.headers).into_iter().map(|(n, v)| (n.to_owned(), v.into())).collect();
        json!({
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "endpoint": self.endpoint.as_str(),
            "headers": headers,
            "body": self.body,
            "step": self.step,
            "reply": self.reply,
        })
    }
}

impl fmt::Debug for RecordedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordedRequest")
            .field("index", &self.index)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("endpoint", &self.endpoint)
            .field("headers", &redact::headers(&self.headers))
            .field("body", &self.body.as_ref().map(|_| "<json>"))
            .field("step", &self.step)
            .field("reply", &self.reply)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_ignores_query_and_prefix() {
        assert_eq!(Endpoint::classify("POST", "/v1/messages"), Endpoint::Messages);
        assert_eq!(Endpoint::classify("POST", "/v1/messages/count_tokens"), Endpoint::CountTokens);
        assert_eq!(Endpoint::classify("POST", "/v1/responses"), Endpoint::Responses);
        assert_eq!(Endpoint::classify("POST", "/v1/chat/completions"), Endpoint::ChatCompletions);
        assert_eq!(Endpoint::classify("HEAD", "/"), Endpoint::Head);
        assert_eq!(Endpoint::classify("GET", "/v1/models"), Endpoint::Models);
        assert_eq!(Endpoint::classify("GET", "/v1/responses"), Endpoint::Other);
    }

    #[test]
    fn credentials_stay_out_of_debug_and_json() {
        let request = RecordedRequest {
            index: 0,
            method: "POST".into(),
            path: "/v1/messages".into(),
            query: Some("beta=true".into()),
            headers: vec![
                ("x-api-key".into(), "sk-secret".into()),
                ("authorization".into(), "Bearer sk-secret".into()),
            ],
            body: None,
            endpoint: Endpoint::Messages,
            step: Some(0),
            reply: "step 0: text".into(),
        };
        assert!(!format!("{request:?}").contains("sk-secret"));
        assert!(!request.to_json().to_string().contains("sk-secret"));
        assert_eq!(request.header("X-Api-Key"), Some("sk-secret"));
    }
}
