//! Asks the person at the terminal about a request the flags left open: `y` approves, anything
//! else denies; a question takes one line per question.
//!
//! One plain thread reads the terminal's lines for the whole run (not a Tokio blocking task: a
//! read that never returns must not hold up the runtime's shutdown), and a prompt takes lines
//! only while it is shown: a prompt whose request expired or whose turn ended is dropped and
//! reads nothing more, and lines typed while no prompt was shown are discarded when the next
//! one shows, so an answer never goes to a request it was not typed for.
//!
//! The thread reads only while the process is in the terminal's foreground process group: a
//! read from the background (`agent-harness run … &`) would stop the whole process (SIGTTIN),
//! and `--timeout` with it. In the background it waits, and a prompt still shows and waits for
//! its answer until the run is brought to the foreground (`fg`).
//!
//! The answer to a secret question is typed with the terminal's echo off (see [`Hidden`]): it
//! never shows on the screen, in its scrollback or in a log of the session.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::Duration;

use agent_harness::request::Question;
use agent_harness::{Request, RequestKind, Response};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::termios::{self, LocalModes, OptionalActions};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::render::visible;

/// Starts reading the terminal, before anything is asked: a line typed before the first prompt
/// showed is then read (and discarded when it shows) rather than left in the terminal's queue
/// for that prompt to take as its answer.
pub(crate) fn listen() {
    let _ = typed_lines();
}

/// The lines typed at the terminal (`None` once it closed), read by one thread.
fn typed_lines() -> &'static Mutex<mpsc::UnboundedReceiver<Option<String>>> {
    static LINES: OnceLock<Mutex<mpsc::UnboundedReceiver<Option<String>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            // Its own buffer, not stdin's: whether a line waits in it decides whether to wait
            // for the terminal.
            let Ok(stdin) = io::stdin().as_fd().try_clone_to_owned() else {
                let _ = tx.send(None);
                return;
            };
            let mut terminal = BufReader::new(File::from(stdin));
            loop {
                if terminal.buffer().is_empty() {
                    wait_for_input(terminal.get_ref());
                }
                let mut line = String::new();
                if terminal.read_line(&mut line).unwrap_or(0) == 0 {
                    let _ = tx.send(None);
                    return;
                }
                if tx.send(Some(line.trim_end_matches(['\r', '\n']).to_owned())).is_err() {
                    return;
                }
            }
        });
        Mutex::new(rx)
    })
}

/// How often the reading thread looks whether the process came to the foreground.
const FOREGROUND_POLL: Duration = Duration::from_millis(150);

/// Waits until the terminal can be read without stopping the process: it is in the foreground
/// and something was typed (or the terminal closed). Each time it is in the foreground, it
/// makes the echo what a secret prompt asked for meanwhile ([`Echo::sync`]).
fn wait_for_input(terminal: &File) {
    let tick = Timespec::try_from(FOREGROUND_POLL).expect("a short timespec");
    loop {
        if !in_foreground() {
            std::thread::sleep(FOREGROUND_POLL);
            continue;
        }
        echo().sync();
        let mut fds = [PollFd::new(terminal, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&tick)) {
            Ok(0) | Err(Errno::INTR) => {}
            // Something to read, or an error the read reports.
            _ if in_foreground() => return,
            _ => {}
        }
    }
}

/// Whether the process may read and set the terminal at stdin without being stopped: it is in
/// the terminal's foreground process group, or the terminal is not its controlling terminal (no
/// job control applies to it then).
fn in_foreground() -> bool {
    match termios::tcgetpgrp(io::stdin()) {
        Ok(group) => group == rustix::process::getpgrp(),
        // ENOTTY: not the controlling terminal.
        Err(_) => true,
    }
}

/// A prompt on the terminal; resolves to the response once the person answered. Dropping it
/// stops it from reading the terminal.
#[derive(Debug)]
pub(crate) struct Prompt {
    /// The request asked about.
    pub(crate) request: Request,
    /// The lines typed, one per question (one for an approval).
    pub(crate) lines: oneshot::Receiver<Vec<String>>,
    /// The task asking.
    asking: tokio::task::AbortHandle,
}

impl Drop for Prompt {
    fn drop(&mut self) {
        self.asking.abort();
    }
}

/// What a prompt writes before one line it reads.
#[derive(Debug)]
struct Label {
    text: String,
    /// The answer is secret: it is typed with the echo off.
    hidden: bool,
}

/// What a prompt writes before each line it reads: one per question, with the question's text
/// as the terminal should show it (what the agent wrote may hold escape sequences).
/// A question with choices shows them (`(red, blue)`): the answer is one of them, unless the
/// question takes other answers too (`…`). A secret question says its answer is `(hidden)`.
fn labels(request: &Request) -> Vec<Label> {
    let choices = |q: &Question| {
        if q.choices.is_empty() {
            return String::new();
        }
        let values: Vec<String> = q.choices.iter().map(|c| crate::exit::one_line(&c.value)).collect();
        let other = if q.allow_other { ", …" } else { "" };
        visible(&format!(" ({}{other})", values.join(", "))).into_owned()
    };
    let label = |name: &str, q: Option<&Question>| {
        let hidden = q.is_some_and(|q| q.secret);
        let choices = q.map(choices).unwrap_or_default();
        Label { text: format!("  {name}{choices}{} > ", if hidden { " (hidden)" } else { "" }), hidden }
    };
    match request.kind {
        RequestKind::Question if request.questions.len() > 1 => {
            request.questions.iter().map(|q| label(&visible(&crate::exit::one_line(&q.prompt)), Some(q))).collect()
        }
        RequestKind::Question => vec![label("answer", request.questions.first())],
        _ => vec![Label { text: "  allow? [y/N] ".to_owned(), hidden: false }],
    }
}

/// The terminal's echo, off while this lives: what is typed meanwhile is not shown. Dropping it
/// turns the echo back on, so a prompt given up or aborted leaves the terminal as it found it
/// (in the background, once the process is back in the foreground: see [`Echo::sync`]).
#[derive(Debug)]
struct Hidden;

impl Hidden {
    fn new() -> Hidden {
        let mut echo = echo();
        echo.hidden = true;
        echo.sync();
        Hidden
    }
}

impl Drop for Hidden {
    fn drop(&mut self) {
        let mut echo = echo();
        echo.hidden = false;
        echo.sync();
    }
}

/// What the terminal's echo should be, and what this process made it.
#[derive(Debug)]
struct Echo {
    /// A secret answer is being typed: the echo should be off.
    hidden: bool,
    /// This process turned the echo off and owes turning it back on.
    off: bool,
}

/// The echo's state, shared by the prompts and the reading thread.
fn echo() -> std::sync::MutexGuard<'static, Echo> {
    static ECHO: std::sync::Mutex<Echo> = std::sync::Mutex::new(Echo { hidden: false, off: false });
    // Each field is whole at every point: a panic elsewhere leaves nothing half-done.
    ECHO.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Echo {
    /// Makes the echo what [`Echo::hidden`] asks for, in the foreground only: setting the
    /// terminal's modes from the background would stop the process (SIGTTOU), and the modes
    /// are then the foreground job's. What cannot be done now is done by the reading thread
    /// once the process is in the foreground (a shell brings back the modes a job had when it
    /// stopped, echo off included). An echo that was off already is left off.
    fn sync(&mut self) {
        if self.hidden == self.off || !in_foreground() {
            return;
        }
        let stdin = io::stdin();
        let Ok(mut modes) = termios::tcgetattr(&stdin) else { return };
        if self.hidden {
            if modes.local_modes.contains(LocalModes::ECHO) {
                modes.local_modes.remove(LocalModes::ECHO);
                self.off = termios::tcsetattr(&stdin, OptionalActions::Now, &modes).is_ok();
            }
        } else {
            modes.local_modes.insert(LocalModes::ECHO);
            let _ = termios::tcsetattr(&stdin, OptionalActions::Now, &modes);
            self.off = false;
        }
    }
}

impl Prompt {
    /// Writes the question(s) for `request` and starts reading the answers.
    pub(crate) fn ask(request: Request) -> Prompt {
        let labels = labels(&request);
        let (tx, lines) = oneshot::channel();
        let asking = tokio::spawn(async move {
            let mut typed_lines = typed_lines().lock().await;
            // Typed before this prompt showed: not an answer to it.
            let mut closed = false;
            while let Ok(line) = typed_lines.try_recv() {
                closed |= line.is_none();
            }
            let mut typed = Vec::new();
            for label in labels {
                if closed {
                    break;
                }
                // Off before the label shows, so no key typed at it is echoed.
                let hidden = label.hidden.then(Hidden::new);
                // After the events before it, which may still wait to be written.
                let _ = crate::output::write(label.text.into_bytes());
                let line = typed_lines.recv().await.flatten();
                if let (Some(hidden), Some(_)) = (hidden, &line) {
                    drop(hidden);
                    // The Enter that ended the line was not echoed either.
                    let _ = crate::output::write(b"\n".to_vec());
                }
                match line {
                    Some(line) => typed.push(line),
                    None => break,
                }
            }
            let _ = tx.send(typed);
        });
        Prompt { request, lines, asking: asking.abort_handle() }
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

#[cfg(test)]
mod tests {
    use agent_harness::request::Question;

    use super::*;

    #[test]
    fn a_questions_label_shows_no_escape_sequence() {
        let questions = vec![Question::new("a", "Title?\x1b]0;PWNED\x07\x1b[2J"), Question::new("b", "Second\nline?")];
        let request: Request = serde_json::from_value(serde_json::json!({
            "id": "req_1", "session_id": "s", "turn_id": "turn_1", "kind": "question", "prompt": "Pick",
            "questions": questions, "status": "pending", "provider_ref": "r1",
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .expect("a request");
        let labels = labels(&request);
        assert!(labels.iter().all(|label| !label.text.contains(['\x1b', '\x07', '\n'])), "{labels:?}");
        assert!(labels[0].text.starts_with("  Title?"), "{labels:?}");
    }

    #[test]
    fn a_secret_questions_label_says_its_answer_is_hidden() {
        let mut secret = Question::new("token", "Paste the token");
        secret.secret = true;
        let request: Request = serde_json::from_value(serde_json::json!({
            "id": "req_1", "session_id": "s", "turn_id": "turn_1", "kind": "question", "prompt": "Token",
            "questions": [secret, Question::new("name", "Your name?")], "status": "pending", "provider_ref": "r1",
            "created_at": "2026-01-01T00:00:00Z"
        }))
        .expect("a request");
        let labels = labels(&request);
        assert_eq!(labels[0].text, "  Paste the token (hidden) > ");
        assert!(labels[0].hidden);
        assert_eq!(labels[1].text, "  Your name? > ");
        assert!(!labels[1].hidden);
    }
}
