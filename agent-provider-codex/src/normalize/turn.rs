//! The running turn's state: its IDs, open items and what the turn's result is made of.

use agent_core::event::{FileChangeEntry, ToolStatus};
use agent_core::{EventKind, ItemId, TurnId, TurnResult, Usage};
use agent_provider_kit::clones::Clones;
use agent_provider_kit::secrets::Secrets;
use serde_json::Value;

use super::Action;
use crate::wire::Tokens;

/// Output kept per open tool item, to report with a tool closed by the turn's end.
const MAX_TOOL_OUTPUT: usize = 64 * 1024;

/// An item that started and has not completed. A message keeps its text so far for a turn that
/// ends before the message does, up to the normalizer's text limit (`cut` once a delta did not
/// fit).
#[derive(Debug)]
pub(super) enum OpenItem {
    Message { text: String, cut: bool },
    Reasoning { streamed: bool },
    Tool { output: String },
    FileChange { changes: Vec<FileChangeEntry>, output: String },
}

/// An open item: its shared ID, with clones made ahead for its deltas, and a copy of the ID's
/// text to match incoming IDs against (see [`Clones`] for why not the shared text).
#[derive(Debug)]
pub(super) struct Open {
    pub(super) key: Box<str>,
    pub(super) id: Clones<ItemId>,
    pub(super) item: OpenItem,
}

impl Open {
    pub(super) fn new(id: ItemId, item: OpenItem) -> Open {
        Open { key: id.as_str().into(), id: Clones::new(id), item }
    }
}

/// The running turn.
#[derive(Debug)]
pub(super) struct TurnState {
    /// The harness's ID of the turn, with clones made ahead for the streamed kinds.
    pub(super) harness: Clones<TurnId>,
    pub(super) codex: Option<String>,
    pub(super) baseline: Tokens,
    pub(super) usage: Option<Usage>,
    pub(super) items: Vec<Open>,
    pub(super) last_message: Option<String>,
    pub(super) diff: Option<String>,
    pub(super) error: Option<Value>,
    /// A `turn/interrupt` was sent for it (codex gets at most one per turn, but for one it
    /// refused before announcing the turn).
    pub(super) interrupt_sent: bool,
    /// Codex announced it (`turn/started`): from then on it takes an interrupt.
    pub(super) announced: bool,
}

impl TurnState {
    /// A turn just sent, with the thread's token totals so far as its baseline.
    pub(super) fn new(harness: TurnId, baseline: Tokens) -> TurnState {
        TurnState {
            harness: Clones::new(harness),
            codex: None,
            baseline,
            usage: None,
            items: Vec::new(),
            last_message: None,
            diff: None,
            error: None,
            interrupt_sent: false,
            announced: false,
        }
    }

    /// The harness's ID of the turn.
    pub(super) fn id(&self) -> &TurnId {
        self.harness.get()
    }

    pub(super) fn find(&self, id: &str) -> Option<&Open> {
        self.items.iter().find(|open| *open.key == *id)
    }

    pub(super) fn open(&mut self, id: &str) -> Option<&mut Open> {
        self.items.iter_mut().find(|open| *open.key == *id)
    }

    pub(super) fn item(&mut self, id: &str) -> Option<&mut OpenItem> {
        self.open(id).map(|open| &mut open.item)
    }

    /// The shared ID of the open item `id`, or a new one for an item not open.
    pub(super) fn item_id(&self, id: &str) -> ItemId {
        self.find(id).map_or_else(|| ItemId::from(id), |open| open.id.get().clone())
    }

    pub(super) fn take_item(&mut self, id: &str) -> Option<OpenItem> {
        let index = self.items.iter().position(|open| *open.key == *id)?;
        Some(self.items.remove(index).item)
    }

    /// Closes the turn's open tool items as interrupted; an open message's text becomes the
    /// turn's last message if none completed, with a warning if it was cut.
    pub(super) fn close_items(&mut self, secrets: &Secrets) -> Vec<Action> {
        std::mem::take(&mut self.items)
            .into_iter()
            .filter_map(|Open { id, item, .. }| match item {
                OpenItem::Tool { output } | OpenItem::FileChange { output, .. } => Some(Action::Emit {
                    turn: Some(self.id().clone()),
                    kind: EventKind::ToolCompleted {
                        item_id: id.into_inner(),
                        status: ToolStatus::Interrupted,
                        output: Some(secrets.redact_credentials(&output).into_owned()).filter(|o| !o.is_empty()),
                        exit_code: None,
                    },
                    raw: None,
                }),
                OpenItem::Message { text, cut } => {
                    if self.last_message.is_some() || text.is_empty() {
                        return None;
                    }
                    let kept = text.len();
                    self.last_message = Some(secrets.redact_credentials(&text).into_owned());
                    cut.then(|| Action::Emit {
                        turn: Some(self.id().clone()),
                        kind: EventKind::Warning {
                            message: format!(
                                "codex's message `{id}` did not complete, and only the first {kept} bytes of \
                                 its text were kept for the turn's result (the provider's max_line_bytes)",
                                id = id.get()
                            ),
                        },
                        raw: None,
                    })
                }
                OpenItem::Reasoning { .. } => None,
            })
            .collect()
    }

    /// The turn's result so far: `summary_text`, or the last message's text.
    pub(super) fn result(&self, summary_text: Option<String>) -> TurnResult {
        let mut result = TurnResult::default();
        result.text = summary_text.or_else(|| self.last_message.clone());
        result.usage = self.usage;
        result.provider_turn_id = self.codex.clone();
        result
    }
}

/// Appends `text` to a tool's kept output, up to [`MAX_TOOL_OUTPUT`] bytes (cut at a character
/// boundary).
pub(super) fn push_bounded(buffer: &mut String, text: &str) {
    push_within(buffer, text, MAX_TOOL_OUTPUT);
}

/// Appends as much of `text` as keeps `buffer` within `max` bytes (cut at a character
/// boundary); whether all of it fit.
pub(super) fn push_within(buffer: &mut String, text: &str, max: usize) -> bool {
    let room = max.saturating_sub(buffer.len());
    if text.len() <= room {
        buffer.push_str(text);
        return true;
    }
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    buffer.push_str(&text[..end]);
    false
}
