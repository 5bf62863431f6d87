//! Whether a response fits its request: a choice among those it offers, answers to its
//! questions (each one of a question's choices unless it takes others). See
//! [`Response::validate_for`](super::Response::validate_for).

use super::{Answer, Question, Request};
use crate::error::{Error, Result};

pub(super) fn validate_choice(request: &Request, value: &str) -> Result<()> {
    if request.choices.iter().any(|choice| choice.value == value) {
        return Ok(());
    }
    // Quoted in the error, but not whole: a caller's mistake of megabytes is not echoed back.
    let value = &crate::ids::refused_id(value.to_owned());
    let offered: Vec<String> = request.choices.iter().map(|choice| format!("`{}`", choice.value)).collect();
    Err(Error::InvalidResponse(if offered.is_empty() && request.questions.iter().any(|q| !q.choices.is_empty()) {
        // The choices are its questions': a question's choice is an answer.
        format!(
            "`{value}` is not a choice of this {} request, whose choices are its questions': answer with \
             Response::answer (one question) or Response::answers (by question ID)",
            request.kind
        )
    } else if offered.is_empty() {
        format!("`{value}` is not a choice of this {} request: it offers none", request.kind)
    } else {
        format!("`{value}` is not a choice of this {} request; it offers {}", request.kind, offered.join(", "))
    }))
}

pub(super) fn validate_answer(request: &Request, answer: &Answer) -> Result<()> {
    match answer {
        Answer::Text(_) | Answer::Many(_) => {
            if request.questions.len() > 1 {
                return Err(Error::InvalidResponse(format!(
                    "the request has {} questions; answer with a map keyed by question id",
                    request.questions.len()
                )));
            }
            if let (Answer::Many(values), Some(q)) = (answer, request.questions.first())
                && values.len() > 1
                && !q.multi_select
            {
                return Err(Error::InvalidResponse(format!("question `{}` takes one answer", q.id)));
            }
            match (answer, request.questions.first()) {
                (Answer::Text(text), Some(q)) => check_values(q, std::slice::from_ref(text)),
                (Answer::Many(values), Some(q)) => check_values(q, values),
                _ => Ok(()),
            }
        }
        Answer::ByQuestion(map) => {
            if let Some(unknown) = map.keys().find(|k| !request.questions.iter().any(|q| &q.id == *k)) {
                return Err(Error::UnknownQuestion { question_id: unknown.clone() });
            }
            if let Some(missing) = request.questions.iter().find(|q| !map.contains_key(&q.id)) {
                return Err(Error::MissingAnswer { question_id: missing.id.clone() });
            }
            if let Some(q) =
                request.questions.iter().find(|q| !q.multi_select && map.get(&q.id).is_some_and(|v| v.len() > 1))
            {
                return Err(Error::InvalidResponse(format!("question `{}` takes one answer", q.id)));
            }
            request.questions.iter().try_for_each(|q| check_values(q, map.get(&q.id).map_or(&[][..], Vec::as_slice)))
        }
        Answer::Content(_) => Err(Error::InvalidResponse(
            "questions are answered with text (Response::answer or Response::answers)".into(),
        )),
    }
}

/// Checks the answer `values` of question `q`: at least one, and each one of its choices (by
/// value or label) unless it takes other answers. Values are never quoted: they may be secret.
fn check_values(q: &Question, values: &[String]) -> Result<()> {
    if values.is_empty() {
        return Err(Error::MissingAnswer { question_id: q.id.clone() });
    }
    if q.choices.is_empty() || q.allow_other {
        return Ok(());
    }
    let offered = |value: &String| q.choices.iter().any(|c| c.value == *value || c.label == *value);
    if values.iter().all(offered) {
        return Ok(());
    }
    let choices: Vec<&str> = q.choices.iter().map(|c| c.value.as_str()).collect();
    Err(Error::InvalidResponse(format!(
        "question `{}` takes one of its choices ({}) and no other answer",
        q.id,
        choices.join(", ")
    )))
}
