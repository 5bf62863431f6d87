#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod alloc;
pub mod clis;
pub mod conformance;
pub mod demo;
pub mod events;
pub mod fake_cli;
pub mod fake_model;
pub mod live;
pub mod offline;
pub mod programs;
pub mod proxy;
pub mod recording;
pub mod scenario;
pub mod streams;

mod jsonl;
mod redact;
mod scratch;

pub use clis::{Channel, Cli, ClisError, Provider};
pub use fake_model::{Endpoint, FakeModel, RecordedRequest};
pub use offline::{OfflineEnv, PiApi};
pub use scenario::{Scenario, ScenarioError, Step};
