//! Workers: client-go's processNextItem / handleErr around a plugin's reconcile, on `queue::run_gated`.

mod report;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt as _;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use self::report::FAILURE_LINES_PER_SECOND;
use self::report::{FailureLog, panic_message};
use super::ObjectKey;
use super::metrics::Handles;
use super::policy::Outcome;
use super::reconcile::Reconcile;
use crate::breaker::Breaker;
use crate::canary::{Offer, Served, Side, WriteLog};
use crate::plugin::{CallFailed, Plugin};
use crate::queue::{self, Gate, Handled, Next, WorkQueue};
use crate::shard::{Admission, ShardGate};

/// Tracing target of the two trace events that bound every reconcile (`reconcile started`,
/// `reconcile finished`, with the controller and key): `--log warn,kubewasm::reconcile=trace`
/// shows when each key was reconciled where, e.g. to check that sharded replicas never
/// reconcile a key at the same time (shard_e2e). Off by default: a disabled event costs nothing.
pub const RECONCILE_TRACE_TARGET: &str = "kubewasm::reconcile";

/// The serving half of a controller: its queue, its current plugin version and the worker
/// tasks that take keys off the queue and hand them to the plugin (the host's runner; the
/// SDKs' `Reconciler` is the plugin's own logic). Each worker is a [`queue::run_gated`] loop
/// behind a gate of its own. `R` is what they call: a loaded [`Plugin`] unless a test says otherwise.
pub struct Workers<R = Plugin> {
    name: String,
    plugin: RwLock<Arc<R>>,
    queue: WorkQueue<ObjectKey>,
    metrics: Handles,
    max_retries: Option<u32>,
    slots: Mutex<Slots>,
    /// The desired number of workers, for surplus workers waiting for a key to notice a downsize.
    desired: watch::Sender<u32>,
    breaker: Option<Breaker>,
    shard: ShardGate,
    failure_log: FailureLog,
    /// A dry-run candidate shown every reconcile of the serving version (its writes logged).
    canary: RwLock<Option<Arc<dyn Offer>>>,
}

/// Worker bookkeeping. Worker `i` runs while `i < desired`; it checks before each key, under
/// this lock, so a resize never leaves a slot both unfilled and believed alive.
#[derive(Default)]
struct Slots {
    desired: u32,
    running: bool,
    alive: HashSet<u32>,
    handles: Vec<JoinHandle<()>>,
}

impl<R: Reconcile> Workers<R> {
    /// Workers serving `plugin` from `queue`. `max_retries`: `None` retries forever, as
    /// controller-runtime does; `Some(n)` drops a key after `n` failures in a row.
    pub fn new(plugin: Arc<R>, queue: WorkQueue<ObjectKey>, metrics: Handles, max_retries: Option<u32>) -> Self {
        metrics.max_concurrent.set(plugin.max_concurrent().into());
        let desired = plugin.max_concurrent().max(1);
        let slots = Mutex::new(Slots { desired, ..Slots::default() });
        Self {
            name: plugin.name().to_owned(),
            plugin: RwLock::new(plugin),
            queue,
            metrics,
            max_retries,
            slots,
            desired: watch::Sender::new(desired),
            breaker: None,
            shard: ShardGate::default(),
            failure_log: FailureLog::default(),
            canary: RwLock::new(None),
        }
    }

    /// Pauses dispatch while `breaker` is not closed, and re-adds keys that failed during an
    /// outage without charging their backoff.
    #[must_use]
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Reconciles only the keys `shard` admits; the others are dropped (their owner has them).
    #[must_use]
    pub fn shard(mut self, shard: ShardGate) -> Self {
        self.shard = shard;
        self
    }

    /// Shows every reconcile of the serving version from now on, with the writes it made, to
    /// `canary` (none: stop).
    pub fn set_canary(&self, canary: Option<Arc<dyn Offer>>) {
        *self.canary.write() = canary;
    }

    /// The plugin version serving now.
    pub fn plugin(&self) -> Arc<R> {
        self.plugin.read().clone()
    }

    /// Serves `plugin` from the next dequeue on; reconciles in flight finish on the old version.
    /// The number of workers follows the new version's `max_concurrent`.
    pub fn swap(self: &Arc<Self>, plugin: Arc<R>) -> Arc<R> {
        let workers = plugin.max_concurrent();
        let old = std::mem::replace(&mut *self.plugin.write(), plugin);
        self.set_workers(workers);
        old
    }

    /// Sets the number of workers: more start at once (if running); surplus ones stop at once
    /// if they wait for a key, else after their current one, so no more than `n` reconciles
    /// start from now on.
    pub fn set_workers(self: &Arc<Self>, n: u32) {
        self.metrics.max_concurrent.set(n.into());
        let mut slots = self.slots.lock();
        slots.desired = n.max(1);
        self.desired.send_replace(slots.desired);
        if slots.running {
            self.spawn_missing(&mut slots);
        }
    }

    fn spawn_missing(self: &Arc<Self>, slots: &mut Slots) {
        for i in 0..slots.desired {
            if slots.alive.insert(i) {
                let this = self.clone();
                slots.handles.push(tokio::spawn(async move { this.work(i).await }));
            }
        }
    }

    /// Worker `i`: takes keys while its turn lasts, until the queue shuts down.
    async fn work(&self, i: u32) {
        let turn = Turn { workers: self, i, freed: false };
        queue::run_gated(&self.queue, turn, |key| self.process(key)).await;
    }

    /// Resolves once worker `i` is surplus.
    async fn retired(&self, i: u32) {
        let mut desired = self.desired.subscribe();
        // The sender lives in `self`, so this cannot fail.
        let _ = desired.wait_for(|&n| i >= n).await;
    }

    /// The controller's metric handles.
    pub(crate) fn metrics(&self) -> &Handles {
        &self.metrics
    }

    /// The controller's queue.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// Queues `key` of the for kind if the serving version may see it (its namespace scope);
    /// every trigger enqueues through this, so a confined plugin never learns of other keys.
    pub(crate) fn enqueue(&self, key: ObjectKey) {
        if self.plugin().sees_key(&key) {
            self.queue.add(key);
        }
    }

    /// Reconciles `key` (taken from the queue) and says how it is settled.
    async fn process(&self, key: ObjectKey) -> Finished {
        // Held for the whole reconcile: the range cannot move to another replica meanwhile.
        let Some(admission) = self.shard.admit(key.as_str()).await else {
            return Finished { next: Next::Forget, offer: None, admission: None };
        };
        let plugin = self.plugin();
        let attempt = self.queue.num_requeues(&key);
        let revision = plugin.revision();
        let span = tracing::info_span!("reconcile", controller = %self.name, key = %key, attempt, revision);
        tracing::trace!(target: RECONCILE_TRACE_TARGET, controller = %self.name, %key, "reconcile started");
        self.metrics.active_workers.inc();
        let mark = self.breaker.as_ref().map(Breaker::mark).unwrap_or_default();
        let started = Instant::now();
        // A panic on the host side (a host-function bug) costs this reconcile only: the key is
        // settled like a trap (counted as a panic, retried with backoff) and the worker lives on.
        // Without this the task would die with the key marked processing and its slot taken.
        let canary = self.canary.read().clone();
        let log = canary.as_ref().map(|_| Arc::new(WriteLog::default()));
        let reconcile = plugin.reconcile(&key, attempt).instrument(span.clone());
        let reconcile = crate::canary::tap::logged(log.clone(), reconcile);
        let result = AssertUnwindSafe(reconcile).catch_unwind().await.unwrap_or_else(|panic| {
            let message = panic_message(panic.as_ref());
            span.in_scope(|| tracing::error!(panic = %message, "the host panicked during a reconcile"));
            Err(CallFailed::Trap(format!("host panicked: {message}")))
        });
        self.metrics.observe(started.elapsed());
        self.metrics.active_workers.dec();
        let outage = match (&self.breaker, &result) {
            (Some(breaker), Err(_)) => breaker.outage_since(mark).await,
            _ => false,
        };
        let (outcome, next) = span.in_scope(|| self.handle_result(&key, &result, outage));
        // The reconcile is over before another worker may take the key.
        drop(span);
        tracing::trace!(target: RECONCILE_TRACE_TARGET, controller = %self.name, %key, "reconcile finished");
        // A reconcile cut short by an API-server outage says nothing about the version, so it
        // is not compared.
        let offer = match (canary, log) {
            (Some(canary), Some(log)) if outcome != Outcome::Deferred => {
                let side = Side { error: result.err().map(|e| e.to_string()), writes: log.take() };
                Some((canary, Served { key, attempt, side }))
            }
            _ => None,
        };
        Finished { next, offer, admission: Some(admission) }
    }

    /// Runs the plugin's `max_concurrent` workers (changed by [`swap`](Self::swap) and
    /// [`set_workers`](Self::set_workers)) until the queue shuts down.
    pub async fn run(self: Arc<Self>) {
        {
            let mut slots = self.slots.lock();
            slots.running = true;
            self.spawn_missing(&mut slots);
        }
        loop {
            let handles = std::mem::take(&mut self.slots.lock().handles);
            if handles.is_empty() {
                return;
            }
            for handle in handles {
                let _ = handle.await;
            }
        }
    }

    /// Workers running now.
    pub fn running(&self) -> usize {
        self.slots.lock().alive.len()
    }
}

/// A reconciled key's settling, and what follows it.
struct Finished {
    next: Next,
    /// The reconcile for the canary, handed over once the key is settled: the candidate never
    /// holds the key up.
    offer: Option<(Arc<dyn Offer>, Served)>,
    /// The shard admission, released last: the key's range cannot move to another replica
    /// before the key is settled.
    admission: Option<Admission>,
}

impl Handled for Finished {
    fn next(&self) -> Next {
        self.next
    }

    fn settled(self) {
        if let Some((canary, served)) = self.offer {
            canary.offer(served);
        }
        drop(self.admission);
    }
}

/// Worker `i`'s gate: open while `i` is below the desired number of workers and the breaker is
/// closed, so a paused or surplus worker holds no key. A worker made surplus while it waits
/// stops at once: before this each took one more key and ran it beside the new workers
/// (issue 16).
struct Turn<'a, R> {
    workers: &'a Workers<R>,
    i: u32,
    /// Whether the slot was given up under the slots lock (so dropping the turn leaves alone a
    /// slot a later upsize filled again).
    freed: bool,
}

impl<R: Reconcile> Gate for Turn<'_, R> {
    async fn open(&mut self) -> bool {
        loop {
            {
                let mut slots = self.workers.slots.lock();
                if self.i >= slots.desired {
                    slots.alive.remove(&self.i);
                    self.freed = true;
                    return false;
                }
            }
            let Some(breaker) = &self.workers.breaker else { return true };
            // A paused worker made surplus stops without waiting for the API server.
            tokio::select! {
                biased;
                () = self.workers.retired(self.i) => {}
                () = breaker.wait_closed() => return true,
            }
        }
    }

    async fn shut(&mut self) {
        let paused = async {
            match &self.workers.breaker {
                Some(breaker) => breaker.wait_tripped().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.workers.retired(self.i) => {}
            () = paused => {}
        }
    }
}

impl<R> Drop for Turn<'_, R> {
    fn drop(&mut self) {
        // The queue shut down (or the task was aborted) with the slot still taken.
        if !self.freed {
            self.workers.slots.lock().alive.remove(&self.i);
        }
    }
}
