//! Workers: client-go's processNextItem / handleErr loop around a plugin's reconcile.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::NamespacedKey;
use super::metrics::Handles;
use crate::plugin::{Action, CallFailed, Plugin};
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
    queue: WorkQueue<NamespacedKey>,
    metrics: Handles,
    max_retries: Option<u32>,
    workers: Mutex<Workers>,
}

/// Worker bookkeeping. Worker `i` runs while `i < desired`; it checks between keys, under this
/// lock, so a resize never leaves a slot both unfilled and believed alive.
#[derive(Default)]
struct Workers {
    desired: u32,
    running: bool,
    alive: HashSet<u32>,
    handles: Vec<JoinHandle<()>>,
}

impl Reconciler {
    /// A reconciler serving `plugin` from `queue`. `max_retries`: `None` retries forever, as
    /// controller-runtime does; `Some(n)` drops a key after `n` failures in a row.
    pub fn new(
        plugin: Arc<Plugin>,
        queue: WorkQueue<NamespacedKey>,
        metrics: Handles,
        max_retries: Option<u32>,
    ) -> Self {
        metrics.max_concurrent.set(plugin.max_concurrent().into());
        let workers = Mutex::new(Workers { desired: plugin.max_concurrent(), ..Workers::default() });
        Self { name: plugin.name().to_owned(), plugin: RwLock::new(plugin), queue, metrics, max_retries, workers }
    }

    /// The plugin version serving now.
    pub fn plugin(&self) -> Arc<Plugin> {
        self.plugin.read().clone()
    }

    /// Serves `plugin` from the next dequeue on; reconciles in flight finish on the old version.
    /// The number of workers follows the new version's `max_concurrent`.
    pub fn swap(self: &Arc<Self>, plugin: Arc<Plugin>) -> Arc<Plugin> {
        let workers = plugin.max_concurrent();
        let old = std::mem::replace(&mut *self.plugin.write(), plugin);
        self.set_workers(workers);
        old
    }

    /// Sets the number of workers: more start at once (if running), surplus ones stop after
    /// their current key.
    pub fn set_workers(self: &Arc<Self>, n: u32) {
        self.metrics.max_concurrent.set(n.into());
        let mut workers = self.workers.lock();
        workers.desired = n.max(1);
        if workers.running {
            self.spawn_missing(&mut workers);
        }
    }

    fn spawn_missing(self: &Arc<Self>, workers: &mut Workers) {
        for i in 0..workers.desired {
            if workers.alive.insert(i) {
                let this = self.clone();
                workers.handles.push(tokio::spawn(async move { this.work(i).await }));
            }
        }
    }

    async fn work(&self, i: u32) {
        loop {
            {
                let mut workers = self.workers.lock();
                if i >= workers.desired {
                    workers.alive.remove(&i);
                    return;
                }
            }
            if self.process_next_item().await.is_none() {
                self.workers.lock().alive.remove(&i);
                return;
            }
        }
    }

    /// The controller's queue.
    pub fn queue(&self) -> &WorkQueue<NamespacedKey> {
        &self.queue
    }

    /// Takes one key, reconciles it, and settles it. `None` once the queue is shut down.
    pub async fn process_next_item(&self) -> Option<Outcome> {
        let key = self.queue.get().await?;
        let plugin = self.plugin();
        let attempt = self.queue.num_requeues(&key);
        let revision = plugin.revision();
        let span = tracing::info_span!("reconcile", controller = %self.name, key = %key, attempt, revision);
        self.metrics.active_workers.inc();
        let started = Instant::now();
        let result = plugin.reconcile(&key.to_object_key(), attempt).instrument(span.clone()).await;
        self.metrics.observe(started.elapsed());
        self.metrics.active_workers.dec();
        let outcome = span.in_scope(|| self.handle_result(&key, result));
        // The reconcile is over before another worker may take the key.
        drop(span);
        self.queue.done(&key);
        Some(outcome)
    }

    fn handle_result(&self, key: &NamespacedKey, result: Result<Action, CallFailed>) -> Outcome {
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

    /// Runs the plugin's `max_concurrent` workers (changed by [`swap`](Self::swap) and
    /// [`set_workers`](Self::set_workers)) until the queue shuts down.
    pub async fn run(self: Arc<Self>) {
        {
            let mut workers = self.workers.lock();
            workers.running = true;
            self.spawn_missing(&mut workers);
        }
        loop {
            let handles = std::mem::take(&mut self.workers.lock().handles);
            if handles.is_empty() {
                return;
            }
            for handle in handles {
                let _ = handle.await;
            }
        }
    }

    /// Workers running now.
    pub fn workers(&self) -> usize {
        self.workers.lock().alive.len()
    }
}
