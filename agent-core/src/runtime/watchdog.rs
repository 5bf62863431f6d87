//! The running turn's watchdog: an inactivity deadline, then a stall deadline.
//!
//! A turn with an inactivity timeout is watched from its admission. Any message from the
//! provider counts as activity (the CLI is not silent); the timer is not reset per message —
//! when it fires, it re-arms from the last activity if there was some, so the hot path only
//! stores an `Instant` per batch of provider messages. When the turn was silent for the whole
//! timeout, the actor cancels it and arms the stall deadline; if the provider has not ended the
//! turn when that passes, the actor fails it as stalled. A cancel the caller asked for arms the
//! same deadline once the provider took it (with or without an inactivity timeout): a provider
//! that acknowledges a cancel and never ends the turn does not leave it cancelling for good.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::time::deadline_after;

/// What a fired watchdog asks the actor to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// The turn was silent for `timeout`.
    Inactive { timeout: Duration },
    /// The turn was cancelled (as stalled, or by the caller) and the provider did not end it in
    /// time.
    Stalled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Inactive { timeout: Duration },
    Stalled,
}

#[derive(Default)]
pub(crate) struct Watchdog {
    sleep: Option<Pin<Box<Sleep>>>,
    phase: Option<Phase>,
    last_activity: Option<Instant>,
}

impl Watchdog {
    pub(crate) fn is_armed(&self) -> bool {
        self.phase.is_some()
    }

    /// Watches a turn that was just admitted.
    pub(crate) fn watch(&mut self, timeout: Duration) {
        let now = Instant::now();
        self.last_activity = Some(now);
        self.arm(Phase::Inactive { timeout }, deadline_after(now, timeout));
    }

    /// Watches a turn that waits on the host (a pending request) again from now.
    pub(crate) fn rewatch(&mut self, timeout: Duration) {
        self.watch(timeout);
    }

    /// Gives the provider until `deadline` from now to end a turn cancelled as stalled.
    pub(crate) fn stall(&mut self, deadline: Duration) {
        self.arm(Phase::Stalled, deadline_after(Instant::now(), deadline));
    }

    pub(crate) fn disarm(&mut self) {
        self.phase = None;
        self.last_activity = None;
    }

    /// Notes that the provider sent `messages` (a batch from its sink).
    pub(crate) fn activity(&mut self, messages: usize) {
        if messages > 0 && matches!(self.phase, Some(Phase::Inactive { .. })) {
            self.last_activity = Some(Instant::now());
        }
    }

    /// Completes when the armed deadline passes (pending while disarmed; guard with
    /// [`Watchdog::is_armed`]).
    pub(crate) async fn expired(&mut self) {
        match self.sleep.as_mut() {
            Some(sleep) => sleep.as_mut().await,
            None => std::future::pending().await,
        }
    }

    /// Called when the deadline passed: what to do, or `None` when the turn was active after all
    /// (the watchdog re-armed itself).
    pub(crate) fn fired(&mut self) -> Option<Fired> {
        match self.phase? {
            Phase::Inactive { timeout } => {
                let silent_since = self.last_activity.unwrap_or_else(Instant::now);
                if silent_since.elapsed() < timeout {
                    self.arm(Phase::Inactive { timeout }, deadline_after(silent_since, timeout));
                    return None;
                }
                self.phase = None;
                Some(Fired::Inactive { timeout })
            }
            Phase::Stalled => {
                self.phase = None;
                Some(Fired::Stalled)
            }
        }
    }

    fn arm(&mut self, phase: Phase, deadline: Instant) {
        self.phase = Some(phase);
        match self.sleep.as_mut() {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_fires_after_the_timeout_and_activity_pushes_it_back() {
        let mut dog = Watchdog::default();
        dog.watch(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(6)).await;
        dog.activity(1);
        let started = Instant::now();
        dog.expired().await;
        assert_eq!(dog.fired(), None, "activity 4 s before the deadline re-arms it");
        dog.expired().await;
        assert_eq!(dog.fired(), Some(Fired::Inactive { timeout: Duration::from_secs(10) }));
        assert_eq!(started.elapsed(), Duration::from_secs(10), "fired 10 s after the last activity");
        assert!(!dog.is_armed());
        dog.stall(Duration::from_secs(3));
        dog.expired().await;
        assert_eq!(dog.fired(), Some(Fired::Stalled));
    }
}
