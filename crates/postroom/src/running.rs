//! A started service: its consumers are attached and running, the relay publishing. Shut it
//! down with [`Running::shutdown`], which drains.

use crate::stack::Stack;
use postroom_core::Transport;
use postroom_core::stats::{ConsumerStats, StatsSnapshot};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) struct RunningConsumer {
    pub name: String,
    pub stats: Arc<ConsumerStats>,
    pub task: JoinHandle<()>,
}

/// A running service.
#[must_use = "a service stops only through `shutdown` (dropping it leaves its tasks running)"]
pub struct Running {
    stack: Stack,
    owns_transport: bool,
    stop: watch::Sender<bool>,
    consumers: Vec<RunningConsumer>,
    relay: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("transport", &self.stack.transport().name())
            .field("consumers", &self.consumer_names())
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

impl Running {
    pub(crate) fn new(stack: Stack, stop: watch::Sender<bool>) -> Self {
        Self {
            stack,
            owns_transport: false,
            stop,
            consumers: Vec::new(),
            relay: None,
            tasks: Vec::new(),
        }
    }

    pub(crate) fn owning_transport(mut self, owned: bool) -> Self {
        self.owns_transport = owned;
        self
    }

    pub(crate) fn push_consumer(&mut self, c: RunningConsumer) {
        self.consumers.push(c);
    }

    pub(crate) fn push_task(&mut self, t: JoinHandle<()>) {
        self.tasks.push(t);
    }

    pub(crate) fn set_relay(&mut self, t: JoinHandle<()>) {
        self.relay = Some(t);
    }

    /// The transport (for its publisher, backlog figures, capabilities).
    #[must_use]
    pub fn transport(&self) -> &Arc<dyn Transport> {
        self.stack.transport()
    }

    /// The store and the transport, with the workload, to read figures from while the
    /// service runs (a clone outlives [`shutdown`](Self::shutdown), its transport closed).
    #[must_use]
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// The names of the attached consumers.
    #[must_use]
    pub fn consumer_names(&self) -> Vec<&str> {
        self.consumers.iter().map(|c| c.name.as_str()).collect()
    }

    /// What consumer `name` did so far (applied, duplicates, retries per stage, parked per
    /// code); `None` for a name the service does not run.
    #[must_use]
    pub fn stats(&self, name: &str) -> Option<StatsSnapshot> {
        self.consumers
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.stats.snapshot())
    }

    /// True while every consumer and the relay are running (a task that ended by itself, or
    /// panicked, makes it false).
    #[must_use]
    pub fn is_running(&self) -> bool {
        // Running from start() until shutdown() sends the stop (whether anything holds a
        // receiver of it or not).
        !*self.stop.borrow()
            && self.consumers.iter().all(|c| !c.task.is_finished())
            && self.relay.as_ref().is_none_or(|r| !r.is_finished())
    }

    /// Stop pulling, let every in-flight delivery finish and settle, mark what the relay
    /// had confirmed and give back what it had claimed, stop the parking ingest, then close
    /// the transport if the service opened it.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for c in self.consumers.drain(..) {
            if let Err(e) = c.task.await {
                tracing::error!(consumer = %c.name, error = %e, "consumer task failed");
            }
        }
        if let Some(relay) = self.relay.take()
            && let Err(e) = relay.await
        {
            tracing::error!(error = %e, "relay task failed");
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        if self.owns_transport {
            self.stack.transport().close().await;
        }
    }
}
