#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod allow;
mod catalog;
mod conversation;
mod conversation_files;
mod error;
mod events;
mod matcher;
mod options;
mod preset;
mod prompt_file;
mod provider;
mod result;
mod session;
mod template;
mod turn;

pub use allow::{AllowList, NotAllowed};
pub use catalog::{CatalogBuilder, PresetCatalog, SHIPPED};
pub use error::PresetError;
pub use events::OtherLines;
pub use matcher::Framing;
pub use options::{Approvals, DEFAULT_APPROVAL_TIMEOUT, OnBusy, OptionInfo, PresetOptions};
pub use preset::{
    ApprovalConversation, ConversationFiles, DEFAULT_MAX_LINE_BYTES, Preset, PresetInfo, PromptDelivery, SCHEMA_VERSION,
};
pub use provider::{PROVIDER_PREFIX, PresetProvider};
pub use result::PresetResult;
