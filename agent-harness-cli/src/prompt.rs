//! Asks the person at the terminal about a request the flags left open: `y` approves, anything
//! else denies; a question takes one line per question.
//!
//! Lines are read on a plain thread, not a Tokio blocking task: a read that never returns (the
//! turn ended while the prompt waited) must not hold up the runtime's shutdown.

use std::io::{self, BufRead, Write};

use agent_harness::{Request, RequestKind, Response};
use tokio::sync::oneshot;

/// A prompt on the terminal; resolves to the response once the person answered.
#[derive(Debug)]
pub(crate) struct Prompt {
    /// The request asked about.
    pub(crate) request: Request,
    /// The lines typed, one per question (one for an approval).
    pub(crate) lines: oneshot::Receiver<Vec<String>>,
}

impl Prompt {
    /// Writes the question(s) for `request` and starts reading the answers.
    pub(crate) fn ask(request: Request) -> Prompt {
        let labels: Vec<String> = match request.kind {
            RequestKind::Question if request.questions.len() > 1 => {
                request.questions.iter().map(|q| format!("  {} > ", q.prompt)).collect()
            }
            RequestKind::Question => vec!["  answer > ".to_owned()],
            _ => vec!["  allow? [y/N] ".to_owned()],
        };
        let (tx, lines) = oneshot::channel();
        std::thread::spawn(move || {
            let stdin = io::stdin();
            let mut typed = Vec::new();
            for label in labels {
                let mut out = io::stdout().lock();
                let _ = out.write_all(label.as_bytes()).and_then(|()| out.flush());
                drop(out);
                let mut line = String::new();
                if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                typed.push(line.trim_end_matches(['\r', '\n']).to_owned());
            }
            let _ = tx.send(typed);
        });
        Prompt { request, lines }
    }

    /// The response `typed` gives.
    pub(crate) fn response(&self, typed: Vec<String>) -> Response {
        match self.request.kind {
            RequestKind::Question => match self.request.questions.as_slice() {
                [] | [_] => match typed.into_iter().next() {
                    Some(answer) => Response::answer(answer),
                    None => Response::deny("no answer was typed"),
                },
                questions if typed.len() == questions.len() => {
                    Response::answers(questions.iter().map(|q| q.id.clone()).zip(typed))
                }
                _ => Response::deny("not every question was answered"),
            },
            _ if typed.first().is_some_and(|line| matches!(line.trim(), "y" | "Y" | "yes")) => Response::approve(),
            _ => Response::deny("denied at the terminal"),
        }
    }
}
