//! Why a preset did not load: the file, the field and what is wrong with it.

use std::fmt;

/// A preset file, or a presets directory, that could not be loaded. The other presets still
/// load; [`PresetCatalog::errors`](crate::PresetCatalog::errors) lists these.
///
/// Displayed as `<origin>: <field>: <message>`, e.g.
/// `/etc/agent-presets/gemini.json: matchers.result[0].when./type.matches: invalid regex: …`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
#[non_exhaustive]
pub struct PresetError {
    /// Where the preset came from: a file path, `shipped:<name>.json`, or the directory.
    pub origin: String,
    /// The field path in the file (`args[3]`, `matchers.result[0].value`); empty for the whole file.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// The ID of the preset that did not load, when its file says it (or is named after it):
    /// the catalog offers no preset of that ID, not even a shipped one.
    pub id: Option<String>,
}

impl PresetError {
    pub(crate) fn new(origin: impl Into<String>, problem: Problem) -> Self {
        PresetError { origin: origin.into(), field: problem.path, message: problem.message, id: None }
    }
}

/// A problem at a field path, before the file it is in is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) path: String,
    pub(crate) message: String,
}

impl Problem {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}
