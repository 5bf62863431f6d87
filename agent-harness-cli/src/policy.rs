//! Answers the agent's requests from the command line: approvals by `--approvals`, questions
//! with the `--answer` values in order. Without a terminal (or with `--json`) a request handler
//! answers by the policy and denies what it leaves open; on a terminal the run loop asks the
//! policy about each request and leaves the rest to [`crate::prompt`], whatever `--approvals`
//! says: it answers approvals only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agent_harness::handler::{self, DynRequestHandler};
use agent_harness::{Request, RequestKind, Response};

use crate::args::Approvals;

/// What the flags say about requests.
#[derive(Debug)]
pub(crate) struct Policy {
    approvals: Approvals,
    answers: Mutex<VecDeque<String>>,
}

/// What [`Policy::decide`] says about one request.
#[derive(Debug)]
pub(crate) enum Decision {
    /// The flags answer it.
    Answer(Response),
    /// Nothing on the command line answers it; `.0` is why, for the denial without a terminal.
    Ask(&'static str),
}

impl Policy {
    /// The policy of `--approvals` and the `--answer` values.
    pub(crate) fn new(approvals: Approvals, answers: Vec<String>) -> Arc<Policy> {
        Arc::new(Policy { approvals, answers: Mutex::new(VecDeque::from(answers)) })
    }

    /// A request handler answering by this policy and denying what it leaves open (no terminal
    /// to ask on).
    pub(crate) fn handler(self: Arc<Self>) -> DynRequestHandler {
        handler::from_fn(move |request| {
            let response = match self.decide(&request) {
                Decision::Answer(response) => response,
                Decision::Ask(reason) => Response::deny(reason),
            };
            async move { Some(response) }
        })
    }

    /// The answer to `request`, taking `--answer` values for a question.
    pub(crate) fn decide(&self, request: &Request) -> Decision {
        match request.kind {
            RequestKind::Question => {
                let mut answers = self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let needed = request.questions.len().max(1);
                if answers.len() < needed {
                    return Decision::Ask("no --answer left for this question");
                }
                let mut next = answers.drain(..needed);
                Decision::Answer(match request.questions.as_slice() {
                    [] | [_] => Response::answer(next.next().unwrap_or_default()),
                    questions => Response::answers(questions.iter().map(|q| q.id.clone()).zip(next)),
                })
            }
            RequestKind::McpElicitation => {
                Decision::Answer(Response::deny("the command line cannot answer an MCP elicitation"))
            }
            _ => match self.approvals {
                Approvals::Approve => Decision::Answer(Response::approve()),
                Approvals::Deny => Decision::Answer(Response::deny("denied by --approvals deny")),
                Approvals::Ask => Decision::Ask("denied: no terminal to ask on (--approvals ask)"),
            },
        }
    }
}
