//! The exec a session's provider spawns through: every command it starts is stamped with the
//! harness that runs the session, so that the processes a session leaves behind are found by
//! its harness and session (two harnesses of one process may each run a session of one ID),
//! and counted against the harness's process limit, if it has one.

use std::fmt;

use async_trait::async_trait;

use super::limited::ProcessLimit;
use crate::exec::{Child, Command, DynExec, Exec, ExecError};

/// Sets [`Command::harness`] on every spawn through `inner`, within `limit`.
pub(crate) struct SessionExec {
    inner: DynExec,
    harness: u64,
    limit: Option<ProcessLimit>,
}

impl SessionExec {
    /// Wraps `inner` for the sessions of harness number `harness`, whose processes `limit`
    /// bounds.
    pub(crate) fn wrap(inner: DynExec, harness: u64, limit: Option<ProcessLimit>) -> DynExec {
        std::sync::Arc::new(SessionExec { inner, harness, limit })
    }
}

impl fmt::Debug for SessionExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionExec")
            .field("inner", &self.inner)
            .field("harness", &self.harness)
            .field("limit", &self.limit)
            .finish()
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Exec for SessionExec {
    async fn spawn(&self, mut command: Command) -> Result<Child, ExecError> {
        command.harness = Some(self.harness);
        match &self.limit {
            Some(limit) => limit.spawn(&*self.inner, command).await,
            None => self.inner.spawn(command).await,
        }
    }

    async fn reap_orphans(
        &self,
        is_live: &(dyn for<'s> Fn(&'s str) -> bool + Send + Sync),
    ) -> Result<usize, ExecError> {
        self.inner.reap_orphans(is_live).await
    }

    async fn end_session_processes(&self, session: &str, harness: u64) -> Result<usize, ExecError> {
        self.inner.end_session_processes(session, harness).await
    }

    async fn end_abandoned_processes(&self, session: &str, owner: u32, harness: u64) -> Result<usize, ExecError> {
        self.inner.end_abandoned_processes(session, owner, harness).await
    }

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }
}
