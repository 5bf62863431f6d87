//! Answers the agent's requests from the command line: approvals by `--approvals`, questions
//! with the `--answer` values in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agent_harness::handler::{self, DynRequestHandler};
use agent_harness::{Request, RequestKind, Response};

use crate::args::Approvals;

/// The handler for `approvals` and `answers`. `ask` denies: interactive answers need a
/// terminal, and this command answers by policy.
pub(crate) fn handler(approvals: Approvals, answers: Vec<String>) -> DynRequestHandler {
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    handler::from_fn(move |request| {
        let response = decide(approvals, &answers, &request);
        async move { Some(response) }
    })
}

fn decide(approvals: Approvals, answers: &Mutex<VecDeque<String>>, request: &Request) -> Response {
    match request.kind {
        RequestKind::Question => {
            let mut answers = answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let needed = request.questions.len().max(1);
            if answers.len() < needed {
                return Response::deny("no --answer left for this question");
            }
            let mut next = answers.drain(..needed);
            match request.questions.as_slice() {
                [] | [_] => Response::answer(next.next().unwrap_or_default()),
                questions => Response::answers(questions.iter().map(|q| q.id.clone()).zip(next)),
            }
        }
        RequestKind::McpElicitation => Response::deny("the command line cannot answer an MCP elicitation"),
        _ => match approvals {
            Approvals::Approve => Response::approve(),
            Approvals::Deny => Response::deny("denied by --approvals deny"),
            Approvals::Ask => Response::deny("denied: no terminal to ask on (--approvals ask)"),
        },
    }
}
