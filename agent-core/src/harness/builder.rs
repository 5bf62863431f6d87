//! [`HarnessBuilder`]: what a [`Harness`] is made of, checked before it is built.

use super::*;

/// Builds a [`Harness`].
#[derive(Default)]
pub struct HarnessBuilder {
    providers: Vec<DynProvider>,
    store: Option<StoreChoice>,
    exec: Option<DynExec>,
    max_sessions: Option<usize>,
    max_provider_processes: Option<usize>,
    call_timeout: Option<Duration>,
    request_handler: Option<DynRequestHandler>,
}

impl HarnessBuilder {
    /// Registers a provider under its [`Provider::id`](crate::Provider::id).
    pub fn provider(mut self, provider: impl Into<DynProvider>) -> Self {
        self.providers.push(provider.into());
        self
    }

    /// Sets the default store: a store such as `agent_store_memory::MemoryStore::new()` (by value
    /// or in an `Arc`; the same as [`StoreChoice::Custom`]), or [`StoreChoice::Disabled`] for
    /// live-only sessions. Required.
    pub fn store(mut self, store: impl Into<StoreChoice>) -> Self {
        self.store = Some(store.into());
        self
    }

    /// Sets the default exec, e.g. `agent_exec::LocalExec::new()` (by value, in an `Arc`, or as a
    /// [`DynExec`]). Without one, providers that spawn processes fail at `start_session` with
    /// [`ExecError::Backend`].
    pub fn exec(mut self, exec: impl crate::exec::IntoExec) -> Self {
        self.exec = Some(exec.into_exec());
        self
    }

    /// Bounds the number of live and starting sessions; unlimited by default.
    pub fn max_sessions(mut self, limit: usize) -> Self {
        self.max_sessions = Some(limit);
        self
    }

    /// Bounds how many provider processes (CLIs) run at once across all sessions, whichever exec
    /// they use; unlimited by default. A start beyond it fails with [`ExecError::LimitReached`];
    /// a slot frees when its process exits.
    pub fn max_provider_processes(mut self, limit: usize) -> Self {
        self.max_provider_processes = Some(limit);
        self
    }

    /// Sets the default local deadline of `start_turn` calls.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Answers the requests of every session that has no handler of its own (see
    /// [`crate::handler`]): a closure from [`handler::from_fn`](crate::handler::from_fn) or a
    /// [`RequestPolicy`](crate::handler::RequestPolicy).
    pub fn request_handler(mut self, handler: impl Into<DynRequestHandler>) -> Self {
        self.request_handler = Some(handler.into());
        self
    }

    /// Builds the harness.
    pub fn build(self) -> Result<Harness> {
        let store = match self.store {
            None => {
                return Err(Error::InvalidConfig(
                    "no store configured: use HarnessBuilder::store(StoreChoice::Custom(..)) (e.g. a \
                     MemoryStore, agent_harness::stores::memory) or StoreChoice::Disabled"
                        .into(),
                ));
            }
            Some(StoreChoice::Custom(store)) => Some(store),
            Some(StoreChoice::Disabled) => None,
            Some(StoreChoice::Default) => {
                return Err(Error::InvalidConfig("StoreChoice::Default cannot be the harness default itself".into()));
            }
        };
        if self.max_sessions == Some(0) {
            return Err(Error::InvalidConfig("max_sessions must be positive".into()));
        }
        if self.max_provider_processes == Some(0) {
            return Err(Error::InvalidConfig("max_provider_processes must be positive".into()));
        }
        if self.call_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidConfig("call_timeout must be positive".into()));
        }
        let mut providers = BTreeMap::new();
        for provider in self.providers {
            let id = provider.id();
            if providers.insert(id.clone(), provider).is_some() {
                return Err(Error::InvalidConfig(format!("provider `{id}` registered twice")));
            }
        }
        let exec = self.exec.unwrap_or_else(|| Arc::new(NoExec));
        let registry = Registry::new(self.max_sessions);
        let process_limit = self.max_provider_processes.map(ProcessLimit::new);
        let session_exec = SessionExec::wrap(Arc::clone(&exec), registry.harness_number(), process_limit.clone());
        Ok(Harness {
            inner: Arc::new(Inner {
                providers,
                store,
                exec,
                session_exec,
                registry,
                call_timeout: self.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT),
                process_limit,
                session_stores: Mutex::default(),
                override_execs: Mutex::default(),
                request_handler: self.request_handler,
            }),
        })
    }
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("providers", &self.providers.iter().map(|p| p.id()).collect::<Vec<_>>())
            .field("store", &self.store)
            .field("max_sessions", &self.max_sessions)
            .field("max_provider_processes", &self.max_provider_processes)
            .finish_non_exhaustive()
    }
}
