//! Workers: client-go's processNextItem / handleErr loop around a plugin's reconcile.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::FutureExt as _;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::ObjectKey;
use super::metrics::Handles;
use super::policy::{Outcome, decide};
use crate::breaker::Breaker;
use crate::canary::{Canary, Served, Side, WriteLog};
use crate::plugin::{Action, CallFailed, Plugin};
use crate::queue::{Next, WorkQueue};
use crate::shard::ShardGate;

/// Most per-key failure lines a controller logs a second; past it lines are counted and the
/// next logged one says how many were suppressed. Protects the log pipeline when every key
/// fails at once (an outage logged 1,100–2,500 lines a second before this; issue 16).
pub const FAILURE_LINES_PER_SECOND: u32 = 10;

/// Tracing target of the two trace events that bound every reconcile (`reconcile started`,
/// `reconcile finished`, with the controller and key): `--log warn,kubewasm::reconcile=trace`
/// shows when each key was reconciled where, e.g. to check that sharded replicas never
/// reconcile a key at the same time (shard_e2e). Off by default: a disabled event costs nothing.
pub const RECONCILE_TRACE_TARGET: &str = "kubewasm::reconcile";

/// Rate limit of the per-key failure lines: governor's bucket, and the lines it suppressed.
struct FailureLog {
    bucket: governor::DefaultDirectRateLimiter,
    suppressed: AtomicU64,
}

impl Default for FailureLog {
    fn default() -> Self {
        let rate = NonZeroU32::new(FAILURE_LINES_PER_SECOND).expect("a positive constant");
        Self { bucket: governor::RateLimiter::direct(governor::Quota::per_second(rate)), suppressed: AtomicU64::new(0) }
    }
}

impl FailureLog {
    /// `Some(lines suppressed since the last one)` if this line may be logged, else `None`.
    fn admit(&self) -> Option<u64> {
        if self.bucket.check().is_ok() {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The serving half of a controller: its queue, its current plugin version and the worker
/// tasks that take keys off the queue and hand them to the plugin (the host's runner; the
/// SDKs' `Reconciler` is the plugin's own logic).
pub struct Workers {
    name: String,
    plugin: RwLock<Arc<Plugin>>,
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
    canary: RwLock<Option<Arc<Canary>>>,
}

/// Worker bookkeeping. Worker `i` runs while `i < desired`; it checks between keys, under this
/// lock, so a resize never leaves a slot both unfilled and believed alive.
#[derive(Default)]
struct Slots {
    desired: u32,
    running: bool,
    alive: HashSet<u32>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Workers serving `plugin` from `queue`. `max_retries`: `None` retries forever, as
    /// controller-runtime does; `Some(n)` drops a key after `n` failures in a row.
    pub fn new(plugin: Arc<Plugin>, queue: WorkQueue<ObjectKey>, metrics: Handles, max_retries: Option<u32>) -> Self {
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
    pub fn set_canary(&self, canary: Option<Arc<Canary>>) {
        *self.canary.write() = canary;
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

    async fn work(&self, i: u32) {
        loop {
            {
                let mut slots = self.slots.lock();
                if i >= slots.desired {
                    slots.alive.remove(&i);
                    return;
                }
            }
            // A worker made surplus by a downsize while it waits takes no key: before this, each
            // surplus worker took one more key and ran it beside the new workers (issue 16).
            let key = tokio::select! {
                biased;
                () = self.retired(i) => continue,
                key = self.next_key() => key,
            };
            let Some(key) = key else {
                self.slots.lock().alive.remove(&i);
                return;
            };
            self.process(key).await;
        }
    }

    /// Resolves once worker `i` is surplus.
    async fn retired(&self, i: u32) {
        let mut desired = self.desired.subscribe();
        // The sender lives in `self`, so this cannot fail.
        let _ = desired.wait_for(|&n| i >= n).await;
    }

    /// The next key, once the breaker is closed; `None` once the queue is shut down.
    /// Cancel-safe: a key is taken only when this returns it.
    async fn next_key(&self) -> Option<ObjectKey> {
        if !self.wait_for_breaker().await {
            return None;
        }
        self.queue.get().await
    }

    /// Waits while the breaker is not closed; `false` if the queue shut down meanwhile.
    async fn wait_for_breaker(&self) -> bool {
        let Some(breaker) = &self.breaker else { return true };
        // A paused worker holds no key; the queue's shutdown ends the wait, and wins a tie.
        tokio::select! {
            biased;
            () = self.queue.closed() => false,
            () = breaker.wait_closed() => true,
        }
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
        let plugin = self.plugin();
        if plugin.sees(&plugin.registration().for_kind, key.namespace(), key.name()) {
            self.queue.add(key);
        }
    }

    /// Takes one key, reconciles it, and settles it. `None` once the queue is shut down.
    pub async fn process_next_item(&self) -> Option<Outcome> {
        let key = self.queue.get().await?;
        Some(self.process(key).await)
    }

    /// Reconciles `key` (taken from the queue) and settles it.
    async fn process(&self, key: ObjectKey) -> Outcome {
        // Held for the whole reconcile: the range cannot move to another replica meanwhile.
        let Some(_admission) = self.shard.admit(key.as_str()).await else {
            self.queue.settle(&key, Next::Forget);
            return Outcome::NotOwned;
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
        let failed = log.as_ref().and_then(|_| result.as_ref().err().map(ToString::to_string));
        let (outcome, next) = span.in_scope(|| self.handle_result(&key, &result, outage));
        // The reconcile is over before another worker may take the key (and, sharded, before
        // its range may move: the admission is dropped last).
        drop(span);
        tracing::trace!(target: RECONCILE_TRACE_TARGET, controller = %self.name, %key, "reconcile finished");
        self.queue.settle(&key, next);
        // After the key is done: the candidate never holds it up. A reconcile cut short by an
        // API-server outage says nothing about the version, so it is not compared.
        if let (Some(canary), Some(log), false) = (canary, log, outcome == Outcome::Deferred) {
            canary.offer(Served { key, attempt, side: Side { error: failed, writes: log.take() } });
        }
        outcome
    }

    /// Counts and logs a finished reconcile, and says how its key is settled ([`decide`]).
    fn handle_result(&self, key: &ObjectKey, result: &Result<Action, CallFailed>, outage: bool) -> (Outcome, Next) {
        let failures = self.queue.num_requeues(key) + 1;
        let (outcome, next) = decide(result, outage, failures, self.max_retries);
        let err = match result {
            Ok(Action::Done) => {
                self.metrics.success.inc();
                return (outcome, next);
            }
            Ok(Action::RequeueAfter(_)) => {
                self.metrics.requeue_after.inc();
                return (outcome, next);
            }
            Err(err) => err,
        };
        self.metrics.error.inc();
        self.metrics.errors.inc();
        if err.is_panic() {
            self.metrics.panics.inc();
        }
        if outcome == Outcome::Deferred {
            // The breaker logged the outage once; the key waits for it, not for backoff.
            tracing::debug!(error = %err, "reconcile failed during an API-server outage; re-added");
            return (outcome, next);
        }
        match outcome {
            Outcome::Terminal => self.metrics.terminal.inc(),
            Outcome::Dropped => self.metrics.dropped.inc(),
            _ => {}
        }
        let Some(suppressed) = self.failure_log.admit() else { return (outcome, next) };
        match (outcome, err) {
            (Outcome::Terminal, _) => {
                tracing::warn!(error = %err, suppressed, "reconcile failed with a terminal error; not retrying");
            }
            (Outcome::RetryAfter, CallFailed::RequeueAfter { after, reason }) => {
                tracing::info!(reason = %reason, after = ?after, suppressed, "reconcile asked to retry after a delay");
            }
            (Outcome::Dropped, _) => {
                tracing::warn!(error = %err, failures, suppressed, "dropping key after too many failures");
            }
            _ => tracing::warn!(error = %err, failures, suppressed, "reconcile failed; retrying with backoff"),
        }
        (outcome, next)
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

/// The text of a panic payload (`panic!` with a literal or a formatted message).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_past_the_rate_are_counted_instead_of_logged() {
        let log = FailureLog::default();
        let tries = FAILURE_LINES_PER_SECOND * 5;
        let admitted = (0..tries).filter(|_| log.admit().is_some()).count() as u32;
        // governor refills one line every 100 ms: a slow machine may see one more.
        assert!((FAILURE_LINES_PER_SECOND..=FAILURE_LINES_PER_SECOND + 1).contains(&admitted), "{admitted}");
        assert_eq!(log.suppressed.load(Ordering::Relaxed), u64::from(tries - admitted));
    }

    #[test]
    fn a_panic_message_is_read_from_either_payload_type() {
        assert_eq!(panic_message(&"literal"), "literal");
        assert_eq!(panic_message(&String::from("formatted 1")), "formatted 1");
        assert_eq!(panic_message(&42_u8), "a panic without a message");
    }
}
