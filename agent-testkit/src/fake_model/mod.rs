//! The fake model server: one HTTP/1.1 server on `127.0.0.1:0` that speaks the OpenAI Responses,
//! Anthropic Messages and OpenAI Chat Completions streaming APIs, answers each model request with
//! the next [`Step`] of its [`Scenario`], and records every request.
//!
//! | request | answer |
//! |---|---|
//! | `POST …/responses` | next step as Responses SSE |
//! | `POST …/messages` (any query, e.g. `?beta=true`) | next step as Messages SSE |
//! | `POST …/chat/completions` | next step as Chat Completions SSE |
//! | `POST …/messages/count_tokens` | `{"input_tokens": n}`, no step taken |
//! | `HEAD` any path | `200`, no step taken |
//! | `GET …/models` | a list with the fake model, no step taken |
//! | anything else | `404` |
//!
//! A model request that finds no step left gets HTTP 500 in the endpoint's error format, so a
//! CLI making more calls than the test expected fails visibly. The server also starts a
//! [`RefusingProxy`]: the offline environments point the proxy variables at it, so any attempt to
//! reach a host outside loopback is recorded there and refused.

mod chat;
mod messages;
mod plan;
mod record;
mod responses;
mod sse;
mod tools;
mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::plan::Plan;
use self::wire::{Ctx, USAGE_INPUT_TOKENS, Wire};
use crate::proxy::RefusingProxy;
use crate::scenario::{Scenario, Step};

pub use self::record::{Endpoint, RecordedRequest};

/// Largest request body read; real requests carry the whole conversation (Claude's first one is
/// about 100 KB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The model name listed by `GET …/models`.
const MODEL_NAME: &str = crate::clis::FAKE_MODEL;

/// A running fake model server (and its refusing proxy). Both stop when it is dropped.
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    proxy: RefusingProxy,
    task: JoinHandle<()>,
}

/// State shared with the request handlers.
struct Shared {
    steps: Mutex<VecDeque<Step>>,
    steps_taken: Mutex<usize>,
    log: Mutex<Vec<RecordedRequest>>,
    logged: watch::Sender<usize>,
    hangups: Mutex<Vec<usize>>,
    hung_up: watch::Sender<usize>,
    next_id: AtomicU64,
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical section
/// is a single push or pop).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakeModel {
    /// Starts a server that answers with `scenario`'s steps, and its refusing proxy.
    pub async fn start(scenario: Scenario) -> std::io::Result<FakeModel> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let proxy = RefusingProxy::start().await?;
        let shared = Arc::new(Shared {
            steps: Mutex::new(scenario.into_iter().collect()),
            steps_taken: Mutex::new(0),
            log: Mutex::new(Vec::new()),
            logged: watch::Sender::new(0),
            hangups: Mutex::new(Vec::new()),
            hung_up: watch::Sender::new(0),
            next_id: AtomicU64::new(1),
        });
        let app = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // Serving only ends with an accept error on the loopback listener; the log keeps
            // everything recorded until then.
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeModel { addr, shared, proxy, task })
    }

    /// The address the server listens on (always `127.0.0.1`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`: the Anthropic base URL (`ANTHROPIC_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI base URL (Codex, Pi).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The proxy that refuses and records every outside request.
    pub fn proxy(&self) -> &RefusingProxy {
        &self.proxy
    }

    /// Appends a step to the scenario.
    pub fn push(&self, step: Step) {
        lock(&self.shared.steps).push_back(step);
    }

    /// Steps not yet taken.
    pub fn remaining_steps(&self) -> usize {
        lock(&self.shared.steps).len()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log).clone()
    }

    /// The model calls so far (Responses, Messages, Chat Completions requests).
    pub fn model_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log).iter().filter(|r| r.endpoint.is_model_call()).cloned().collect()
    }

    /// Waits until at least `count` requests are recorded; returns them all.
    pub async fn wait_for_requests(&self, count: usize) -> Vec<RecordedRequest> {
        let mut logged = self.shared.logged.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = logged.wait_for(|n| *n >= count).await;
        self.requests()
    }

    /// Indexes of the requests whose streamed answer the client hung up on before it ended.
    pub fn hangups(&self) -> Vec<usize> {
        lock(&self.shared.hangups).clone()
    }

    /// Waits until at least `count` hang-ups are recorded; returns their request indexes.
    pub async fn wait_for_hangups(&self, count: usize) -> Vec<usize> {
        let mut hung_up = self.shared.hung_up.subscribe();
        let _ = hung_up.wait_for(|n| *n >= count).await;
        self.hangups()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for FakeModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeModel")
            .field("addr", &self.addr)
            .field("proxy", &self.proxy)
            .field("requests", &lock(&self.shared.log).len())
            .field("remaining_steps", &self.remaining_steps())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn id(&self, prefix: &str) -> String {
        format!("{prefix}_fake{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Takes the next step; returns it with its 0-based position.
    fn take_step(&self) -> Option<(usize, Step)> {
        let step = lock(&self.steps).pop_front()?;
        let mut taken = lock(&self.steps_taken);
        let index = *taken;
        *taken += 1;
        Some((index, step))
    }

    fn record(&self, mut request: RecordedRequest) -> usize {
        let mut log = lock(&self.log);
        request.index = log.len();
        let index = request.index;
        log.push(request);
        drop(log);
        self.logged.send_modify(|n| *n += 1);
        index
    }

    fn hangup(&self, request: usize) {
        lock(&self.hangups).push(request);
        self.hung_up.send_modify(|n| *n += 1);
    }
}

/// The answer to a request before it becomes an HTTP response.
enum Answer {
    Empty(StatusCode),
    Json(StatusCode, Vec<(&'static str, String)>, Value),
    Stream { wire: Wire, blocks: Vec<plan::Block>, end: plan::StreamEnd, model: String },
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_BODY_BYTES).await.unwrap_or_default();
    let body: Option<Value> = if bytes.is_empty() { None } else { serde_json::from_slice(&bytes).ok() };
    let endpoint = Endpoint::of_request(parts.method.as_str(), parts.uri.path(), body.as_ref());
    let (answer, step, reply) = answer(&shared, endpoint, body.as_ref());
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let index = shared.record(RecordedRequest {
        index: 0,
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers,
        body,
        endpoint,
        step,
        reply,
    });
    into_response(&shared, index, answer)
}

/// Decides the answer; returns it with the step taken and a description for the log.
fn answer(shared: &Shared, endpoint: Endpoint, body: Option<&Value>) -> (Answer, Option<usize>, String) {
    let wire = match endpoint {
        Endpoint::Responses => Wire::Responses,
        Endpoint::Messages => Wire::Messages,
        Endpoint::ChatCompletions => Wire::ChatCompletions,
        Endpoint::Head => return (Answer::Empty(StatusCode::OK), None, "200".into()),
        Endpoint::MessagesCheck => {
            let model = body.and_then(|b| b["model"].as_str()).unwrap_or(MODEL_NAME);
            let message = json!({
                "id": shared.id("msg"), "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": 1, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0},
            });
            return (Answer::Json(StatusCode::OK, Vec::new(), message), None, "model check".into());
        }
        Endpoint::CountTokens => {
            let tokens = body.map_or(0, |b| b.to_string().len() / 4);
            return (Answer::Json(StatusCode::OK, Vec::new(), json!({"input_tokens": tokens})), None, "count".into());
        }
        Endpoint::Models => {
            let list = json!({"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}], "models": []});
            return (Answer::Json(StatusCode::OK, Vec::new(), list), None, "model list".into());
        }
        Endpoint::Other => {
            let error = json!({"error": {"message": "fake model: no such endpoint", "type": "not_found"}});
            return (Answer::Json(StatusCode::NOT_FOUND, Vec::new(), error), None, "404".into());
        }
    };
    let error =
        |status: StatusCode, message: &str| Answer::Json(status, Vec::new(), wire.error_body(status.as_u16(), message));
    let Some(body) = body else {
        return (
            error(StatusCode::BAD_REQUEST, "fake model: the request body is not JSON"),
            None,
            "400 not JSON".into(),
        );
    };
    let Some((index, step)) = shared.take_step() else {
        let message = "fake model: the scenario has no step left for this request";
        return (error(StatusCode::INTERNAL_SERVER_ERROR, message), None, "scenario exhausted".into());
    };
    let reply = format!("step {index}: {}", step.name());
    let answer = match Plan::for_step(&step, wire, body) {
        Plan::Error { status, message, reset_after_s } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let headers = reset_after_s.map(|s| wire.reset_headers(s)).unwrap_or_default();
            Answer::Json(status, headers, wire.error_body(status.as_u16(), &message))
        }
        Plan::Stream { blocks, end } => {
            let model = body.get("model").and_then(Value::as_str).unwrap_or(MODEL_NAME).to_owned();
            Answer::Stream { wire, blocks, end, model }
        }
    };
    (answer, Some(index), reply)
}

fn into_response(shared: &Arc<Shared>, index: usize, answer: Answer) -> Response {
    match answer {
        Answer::Empty(status) => status.into_response(),
        Answer::Json(status, headers, body) => {
            let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
            for (name, value) in headers {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        Answer::Stream { wire, blocks, end, model } => {
            let ids = |prefix: &str| shared.id(prefix);
            let frames = wire.render(&blocks, end, &Ctx { model: &model, ids: &ids });
            let on_hangup = {
                let shared = Arc::clone(shared);
                move || shared.hangup(index)
            };
            let body: Body = sse::spawn_writer(frames, end, on_hangup);
            let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
            (StatusCode::OK, headers, body).into_response()
        }
    }
}
