//! The session runtime against the scripted provider: one test per behaviour the seed's
//! getting-started guide states.

mod common;

mod awaiting;
mod cancel;
mod credentials;
mod events;
mod handlers;
mod inactivity;
mod lag;
mod panics;
mod queued_writes;
mod racing;
mod requests;
mod resume;
mod sessions;
mod sharing;
mod store_failure;
mod turns;
