//! The session runtime against the scripted provider: one test per behaviour the seed's
//! getting-started guide states.

mod common;

mod awaiting;
mod cancel;
mod events;
mod lag;
mod requests;
mod sessions;
mod store_failure;
mod turns;
