//! Workers: client-go's processNextItem / handleErr loop around a plugin's reconcile.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use tracing::Instrument;

use super::metrics::Handles;
use crate::plugin::{Action, CallFailed, ObjectKey, Plugin};
use crate::queue::WorkQueue;

/// What happened to a key after its reconcile; returned for tests and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Reconciled; its backoff was forgotten.
    Done,
    /// Reconciled and scheduled again after the plugin's delay.
    RequeuedAfter,
    /// Failed and re-added with backoff.
    Retried,
    /// Failed more than `max_retries` times in a row and was dropped.
    Dropped,
}

/// The serving half of a controller: its queue, its current plugin version and its workers.
pub struct Reconciler {
    name: String,
    plugin: RwLock<Arc<Plugin>>,
    queue: WorkQueue<ObjectKey>,
    metrics: Handles,
    max_retries: Option<u32>,
}

impl Reconciler {
    /// A reconciler serving `plugin` from `queue`. `max_retries`: `None` retries forever, as
    /// controller-runtime does; `Some(n)` drops a key after `n` failures in a row.
    pub fn new(plugin: Arc<Plugin>, queue: WorkQueue<ObjectKey>, metrics: Handles, max_retries: Option<u32>) -> Self {
        metrics.max_concurrent.set(plugin.max_concurrent().into());
        Self { name: plugin.name().to_owned(), plugin: RwLock::new(plugin), queue, metrics, max_retries }
    }

    /// The plugin version serving now.
    pub fn plugin(&self) -> Arc<Plugin> {
        self.plugin.read().clone()
    }

    /// Serves `plugin` from the next dequeue on; reconciles in flight finish on the old version.
    pub fn swap(&self, plugin: Arc<Plugin>) -> Arc<Plugin> {
        self.metrics.max_concurrent.set(plugin.max_concurrent().into());
        std::mem::replace(&mut *self.plugin.write(), plugin)
    }

    /// The controller's queue.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// Takes one key, reconciles it, and settles it. `None` once the queue is shut down.
    pub async fn process_next_item(&self) -> Option<Outcome> {
        let key = self.queue.get().await?;
        let plugin = self.plugin();
        let attempt = self.queue.num_requeues(&key);
        let span = tracing::info_span!("reconcile", controller = %self.name, key = %key, attempt);
        self.metrics.active_workers.inc();
        let started = Instant::now();
        let result = plugin.reconcile(&key, attempt).instrument(span.clone()).await;
        self.metrics.observe(started.elapsed());
        self.metrics.active_workers.dec();
        let outcome = span.in_scope(|| self.handle_result(&key, result));
        self.queue.done(&key);
        Some(outcome)
    }

    fn handle_result(&self, key: &ObjectKey, result: Result<Action, CallFailed>) -> Outcome {
        match result {
            Ok(Action::Done) => {
                self.metrics.success.inc();
                self.queue.forget(key);
                Outcome::Done
            }
            Ok(Action::RequeueAfter(delay)) => {
                self.metrics.requeue_after.inc();
                self.queue.forget(key);
                self.queue.add_after(key.clone(), delay);
                Outcome::RequeuedAfter
            }
            Err(err) => {
                self.metrics.error.inc();
                self.metrics.errors.inc();
                if err.is_panic() {
                    self.metrics.panics.inc();
                }
                let failures = self.queue.num_requeues(key) + 1;
                if self.max_retries.is_some_and(|max| failures > max) {
                    tracing::warn!(error = %err, failures, "dropping key after too many failures");
                    self.metrics.dropped.inc();
                    self.queue.forget(key);
                    Outcome::Dropped
                } else {
                    tracing::warn!(error = %err, failures, "reconcile failed; retrying with backoff");
                    self.queue.add_rate_limited(key.clone());
                    Outcome::Retried
                }
            }
        }
    }

    /// Runs `workers` workers until the queue shuts down.
    pub async fn run(self: Arc<Self>, workers: u32) {
        let tasks: Vec<_> = (0..workers.max(1))
            .map(|_| {
                let this = self.clone();
                tokio::spawn(async move { while this.process_next_item().await.is_some() {} })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}
