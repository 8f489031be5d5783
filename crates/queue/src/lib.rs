//! A work queue with client-go semantics: dedup, one worker per key, delaying and rate limiting.
//!
//! Hand-written because no well-kept crate offers client-go's `util/workqueue`: kube-runtime's
//! scheduler and runner are internal to its `Controller`, with no public `get`/`done`/`forget` or
//! rate limiters. The semantics are client-go's `Typed` queue plus its delaying and rate-limiting
//! layers, in one type:
//!
//! - a key is *queued* at most once: adding a queued key does nothing;
//! - [`get`](WorkQueue::get) hands out the oldest queued key and marks it *processing*; until the
//!   worker calls [`done`](WorkQueue::done), nobody else gets that key;
//! - adding a processing key marks it *dirty*; `done` then queues it again (once);
//! - after [`shut_down`](WorkQueue::shut_down) adds are ignored, `get` still hands out what is
//!   queued and returns `None` once the queue is empty;
//!   [`shut_down_with_drain`](WorkQueue::shut_down_with_drain) also waits until no key is
//!   processing; [`shut_down_now`](WorkQueue::shut_down_now) (ours, not client-go's) drops what
//!   is queued, so `get` returns `None` at once, and waits for the keys being processed.
//!
//! All time comes from [`tokio::time::Instant`], so tests run on virtual time.
//!
//! The lowest crate of the workspace: it depends on no other kubewasm crate. Start reading at
//! [`WorkQueue`]; [`rate_limiter`] holds client-go's rate limiters and [`metrics`] the
//! workqueue metrics under client-go's names.

mod delaying;
mod hashed;
pub mod metrics;
pub mod rate_limiter;
mod runner;

use std::{
    collections::{VecDeque, hash_map},
    fmt::Debug,
    hash::{BuildHasher, Hash, RandomState},
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use tokio::{sync::Notify, time::Instant};

pub use self::runner::{Gate, Handled, Next, Open, run, run_gated};

use self::{
    delaying::{Promote, Waiting},
    hashed::{Hashed, HashedMap, Probe},
};
pub use self::{
    metrics::QueueMetrics,
    rate_limiter::{Bucket, ItemExponentialFailure, ItemFastSlow, MaxOf, RateLimiter},
};

/// Errors of the queue module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The workqueue metrics could not be created or registered.
    #[error("registering workqueue metrics")]
    Metrics(#[source] prometheus::Error),
}

/// Result of the queue module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a queue key must be: cheap to compare and hash, shareable between tasks.
pub trait Key: Clone + Eq + Hash + Send + Sync + Debug + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + Debug + 'static> Key for T {}

/// How to build a [`WorkQueue`].
pub struct Config<K> {
    name: String,
    rate_limiter: Arc<dyn RateLimiter<K>>,
    metrics: Option<QueueMetrics>,
}

impl<K: Key> Default for Config<K> {
    /// Unnamed, without metrics, rate limited by [`rate_limiter::default_controller`].
    fn default() -> Self {
        Self { name: String::new(), rate_limiter: Arc::new(rate_limiter::default_controller()), metrics: None }
    }
}

impl<K> Debug for Config<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .finish_non_exhaustive()
    }
}

impl<K> Config<K> {
    /// The queue's name: the `name` label of its metrics (usually the controller's name).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The limiter behind [`WorkQueue::add_rate_limited`] (default
    /// [`rate_limiter::default_controller`]).
    #[must_use]
    pub fn rate_limiter(mut self, rate_limiter: impl RateLimiter<K> + 'static) -> Self {
        self.rate_limiter = Arc::new(rate_limiter);
        self
    }

    /// Report under these metrics. As in client-go, an unnamed queue reports nothing.
    #[must_use]
    pub fn metrics(mut self, metrics: QueueMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// A deduplicating, delaying, rate-limited queue of keys that hands each key to one worker at a
/// time (see the [module docs](self)). Cheap to clone: clones share one queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<K: Key> Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("WorkQueue")
            .field("queued", &state.queue.len())
            .field("processing", &state.processing)
            .field("waiting", &state.waiting.len())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    /// Wakes `get` callers: one per newly queued key, all on shutdown.
    getters: Notify,
    /// Wakes `shut_down_with_drain` when the last processing key is done.
    drained: Notify,
    /// Wakes [`WorkQueue::closed`] waiters on shutdown.
    closed: Notify,
    /// Wakes the timer task: a new earliest deadline, shutdown, or the queue is dropped.
    timer: Arc<Notify>,
    timer_started: AtomicBool,
    /// SipHash with a per-queue random key; applied before taking the lock.
    hasher: RandomState,
    rate_limiter: Arc<dyn RateLimiter<K>>,
    metrics: Option<metrics::Handle>,
}

/// client-go's `queue` + `dirty` + `processing`, folded into one map: the set a key is in is its
/// [`Status`], so each operation hashes the key once.
struct State<K> {
    /// Keys in the order they will be handed out; exactly the keys whose status is `Queued`.
    queue: VecDeque<Hashed<K>>,
    status: HashedMap<K, Status>,
    /// How many keys are `Processing` or `Dirty`.
    processing: usize,
    /// `get` callers registered on `Inner::getters` and about to sleep. Adds skip the
    /// (contended) notify when there are none: a getter registers under this lock after
    /// finding the queue empty, so an add either sees it or is seen by it.
    idle_getters: usize,
    shutting_down: bool,
    drain: bool,
    waiting: Waiting<K>,
}

/// Where a key is. Timestamps are kept only when the queue has metrics.
#[derive(Clone, Copy)]
enum Status {
    /// In `queue`, waiting for a worker (client-go: dirty, not processing).
    Queued { added: Option<Instant> },
    /// Handed to a worker (client-go: processing, not dirty).
    Processing { started: Option<Instant> },
    /// Handed to a worker and added again since (client-go: processing and dirty).
    Dirty { started: Option<Instant>, added: Option<Instant> },
}

impl<K: Key> State<K> {
    /// Adds `key`; returns whether it was pushed onto `queue` while a getter sleeps (so one
    /// must be woken).
    fn add(&mut self, key: Hashed<K>, metrics: Option<&metrics::Handle>) -> bool {
        if self.shutting_down {
            return false;
        }
        match self.status.entry(key) {
            hash_map::Entry::Vacant(vacant) => {
                let added = metrics.map(|metrics| {
                    metrics.add();
                    Instant::now()
                });
                self.queue.push_back(vacant.key().clone());
                vacant.insert(Status::Queued { added });
                self.idle_getters > 0
            }
            hash_map::Entry::Occupied(mut occupied) => {
                if let Status::Processing { started } = *occupied.get() {
                    let added = metrics.map(|metrics| {
                        metrics.add();
                        Instant::now()
                    });
                    occupied.insert(Status::Dirty { started, added });
                }
                false
            }
        }
    }

    /// Takes the oldest queued key and marks it processing.
    fn pop(&mut self, metrics: Option<&metrics::Handle>) -> Option<K> {
        let key = self.queue.pop_front()?;
        let now = metrics.map(|_| Instant::now());
        if let Some(status) = self.status.get_mut(&key as &dyn hashed::Lookup<K>) {
            if let (Some(metrics), Some(now), Status::Queued { added }) = (metrics, now, *status) {
                metrics.get(added, now);
            }
            *status = Status::Processing { started: now };
        }
        self.processing += 1;
        Some(key.key)
    }

    /// Moves every key whose delay has passed into the queue; returns how many getters to wake.
    fn promote_due(&mut self, hasher: &RandomState, metrics: Option<&metrics::Handle>) -> usize {
        if self.waiting.is_empty() {
            return 0;
        }
        let now = Instant::now();
        let mut pushed = 0;
        while let Some(key) = self.waiting.pop_due(now) {
            let hash = hasher.hash_one(&key);
            pushed += usize::from(self.add(Hashed { hash, key }, metrics));
        }
        pushed
    }
}

impl<K: Key> WorkQueue<K> {
    /// Creates a queue. Tasks are only started later, by the first delayed add.
    pub fn new(config: Config<K>) -> Self {
        let Config { name, rate_limiter, metrics } = config;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner<K>>| {
            let source: Weak<dyn metrics::InFlight> = weak.clone();
            Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    status: HashedMap::default(),
                    processing: 0,
                    idle_getters: 0,
                    shutting_down: false,
                    drain: false,
                    waiting: Waiting::default(),
                }),
                getters: Notify::new(),
                drained: Notify::new(),
                closed: Notify::new(),
                timer: Arc::new(Notify::new()),
                timer_started: AtomicBool::new(false),
                hasher: RandomState::new(),
                rate_limiter,
                metrics: metrics.filter(|_| !name.is_empty()).map(|metrics| metrics.queue(&name, source)),
            }
        });
        Self { inner }
    }

    /// Queues `key` unless it is already queued. If a worker is processing it, it is marked
    /// dirty and queued again when that worker calls [`done`](Self::done). Ignored after
    /// shutdown.
    pub fn add(&self, key: K) {
        let inner = &*self.inner;
        let key = inner.hashed(key);
        let wake = inner.state.lock().add(key, inner.metrics.as_ref());
        if wake {
            inner.getters.notify_one();
        }
    }

    /// Waits for a key and marks it processing; the caller must call [`done`](Self::done) with
    /// it. Returns `None` once the queue is shut down and nothing is left queued.
    ///
    /// Cancel safe: dropping the future takes no key.
    pub async fn get(&self) -> Option<K> {
        let inner = &*self.inner;
        if let Some(next) = inner.try_get() {
            return next;
        }
        let mut idle = Idle { inner, registered: false };
        loop {
            // Register as a waiter before looking, so a key queued in between wakes us.
            let notified = inner.getters.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = inner.state.lock();
                if idle.registered {
                    state.idle_getters -= 1;
                    idle.registered = false;
                }
                if let Some(key) = state.pop(inner.metrics.as_ref()) {
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
                state.idle_getters += 1;
                idle.registered = true;
            }
            notified.await;
        }
    }

    /// Marks `key` as no longer processing; if it was added meanwhile, queues it again.
    /// A key that is not processing is ignored.
    pub fn done(&self, key: &K) {
        let inner = &*self.inner;
        let probe = Probe(inner.hasher.hash_one(key), key);
        let mut state = inner.state.lock();
        // Remove first: the common case (processing, not dirty) then probes the map once.
        let Some((owned, status)) = state.status.remove_entry(&probe as &dyn hashed::Lookup<K>) else {
            return;
        };
        let (started, requeue) = match status {
            Status::Queued { .. } => {
                state.status.insert(owned, status);
                return;
            }
            Status::Processing { started } => (started, None),
            Status::Dirty { started, added } => (started, Some(added)),
        };
        if let Some(added) = requeue {
            state.queue.push_back(owned.clone());
            state.status.insert(owned, Status::Queued { added });
        }
        state.processing -= 1;
        let wake = requeue.is_some() && state.idle_getters > 0;
        let drained = state.processing == 0 && state.shutting_down;
        drop(state);
        if let (Some(metrics), Some(started)) = (&inner.metrics, started) {
            metrics.done(Some(started), Instant::now());
        }
        if wake {
            inner.getters.notify_one();
        }
        if drained {
            inner.drained.notify_waiters();
        }
    }

    /// How many keys are queued (not counting processing or delayed keys).
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting keys and wakes every waiting [`get`](Self::get); delayed keys are dropped.
    /// Keys already queued are still handed out. Cancels a pending
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) wait, as in client-go.
    pub fn shut_down(&self) {
        self.inner.shut_down(false);
    }

    /// Like [`shut_down`](Self::shut_down), then waits until no key is processing, i.e. every
    /// key handed out has been [`done`](Self::done). As in client-go it does not wait for keys
    /// still queued: workers keep getting those until `get` returns `None`.
    pub async fn shut_down_with_drain(&self) {
        let inner = &*self.inner;
        inner.shut_down(true);
        loop {
            let notified = inner.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = inner.state.lock();
                if state.processing == 0 || !state.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Stops handing out keys at once: like [`shut_down`](Self::shut_down), and the keys still
    /// queued (and those marked to come back after processing) are dropped, so every `get`
    /// returns `None` from now on. Then waits until no key is processing. A process stopping on
    /// SIGTERM uses it: only the reconciles in flight finish, not a backlog (client-go's
    /// `ShutDownWithDrain` hands out the queued keys first).
    pub async fn shut_down_now(&self) {
        let inner = &*self.inner;
        {
            let mut state = inner.state.lock();
            let mut dropped = state.queue.len();
            for key in std::mem::take(&mut state.queue) {
                state.status.remove(&key);
            }
            for status in state.status.values_mut() {
                if let Status::Dirty { started, .. } = *status {
                    *status = Status::Processing { started };
                    dropped += 1;
                }
            }
            if let Some(metrics) = &inner.metrics {
                metrics.discarded(dropped);
            }
        }
        self.shut_down_with_drain().await;
    }

    /// Whether the queue has been shut down.
    pub fn shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// Resolves once the queue has been shut down (at once if it already is): for a worker that
    /// waits on something else than [`get`](Self::get) and must stop with the queue.
    pub async fn closed(&self) {
        loop {
            let notified = self.inner.closed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shutting_down() {
                return;
            }
            notified.await;
        }
    }

    /// Adds `key` once `delay` has passed; a zero delay adds it now. Never blocks: the key
    /// waits on a timer heap. If the key is already waiting, the earlier deadline wins.
    /// Ignored after shutdown.
    ///
    /// # Panics
    ///
    /// The first delayed add starts the queue's timer task, so it must happen inside a tokio
    /// runtime.
    pub fn add_after(&self, key: K, delay: Duration) {
        let inner = &*self.inner;
        if delay.is_zero() {
            let key = inner.hashed(key);
            {
                let mut state = inner.state.lock();
                if state.shutting_down {
                    return;
                }
                if let Some(metrics) = &inner.metrics {
                    metrics.retry();
                }
                if !state.add(key, inner.metrics.as_ref()) {
                    return;
                }
            }
            inner.getters.notify_one();
            return;
        }
        let now = Instant::now();
        // Past ~30 years the difference is moot; avoid overflowing Instant.
        let at = now.checked_add(delay).unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400));
        let earliest = {
            let mut state = inner.state.lock();
            if state.shutting_down {
                return;
            }
            if let Some(metrics) = &inner.metrics {
                metrics.retry();
            }
            state.waiting.insert(key, at)
        };
        if !inner.timer_started.swap(true, Ordering::AcqRel) {
            let queue: Weak<dyn Promote> = Arc::downgrade(&self.inner) as Weak<dyn Promote>;
            tokio::spawn(delaying::run_timer(queue, Arc::clone(&inner.timer)));
        } else if earliest {
            inner.timer.notify_one();
        }
    }

    /// Adds `key` after the delay the rate limiter asks for, counting a failure of `key`.
    pub fn add_rate_limited(&self, key: K) {
        let delay = self.inner.rate_limiter.when(&key);
        self.add_after(key, delay);
    }

    /// Clears `key`'s failure history in the rate limiter (call after a successful reconcile).
    /// It does not remove the key from the queue.
    pub fn forget(&self, key: &K) {
        self.inner.rate_limiter.forget(key);
    }

    /// How many times `key` has been rate limited since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.rate_limiter.num_requeues(key)
    }
}

/// A sleeping `get`'s registration in `State::idle_getters`, withdrawn if the future is dropped.
struct Idle<'a, K> {
    inner: &'a Inner<K>,
    registered: bool,
}

impl<K> Drop for Idle<'_, K> {
    fn drop(&mut self) {
        if self.registered {
            self.inner.state.lock().idle_getters -= 1;
        }
    }
}

impl<K: Key> Inner<K> {
    fn hashed(&self, key: K) -> Hashed<K> {
        Hashed { hash: self.hasher.hash_one(&key), key }
    }

    /// `Some(Some(key))`: took a key; `Some(None)`: shut down and empty; `None`: must wait.
    fn try_get(&self) -> Option<Option<K>> {
        let mut state = self.state.lock();
        if let Some(key) = state.pop(self.metrics.as_ref()) {
            return Some(Some(key));
        }
        state.shutting_down.then_some(None)
    }

    fn shut_down(&self, drain: bool) {
        {
            let mut state = self.state.lock();
            state.shutting_down = true;
            state.drain = drain;
            state.waiting.clear();
        }
        self.getters.notify_waiters();
        self.drained.notify_waiters();
        self.closed.notify_waiters();
        self.timer.notify_one();
    }
}

impl<K: Key> Promote for Inner<K> {
    fn promote_due(&self) -> Result<Option<Instant>, ()> {
        let (pushed, next) = {
            let mut state = self.state.lock();
            if state.shutting_down {
                return Err(());
            }
            let pushed = state.promote_due(&self.hasher, self.metrics.as_ref());
            (pushed, state.waiting.next_deadline())
        };
        for _ in 0..pushed {
            self.getters.notify_one();
        }
        Ok(next)
    }
}

impl<K: Key> metrics::InFlight for Inner<K> {
    fn in_flight(&self, now: Instant) -> (f64, f64) {
        let state = self.state.lock();
        if state.processing == 0 {
            return (0.0, 0.0);
        }
        let mut total = 0.0;
        let mut longest: f64 = 0.0;
        for status in state.status.values() {
            if let Status::Processing { started: Some(started) } | Status::Dirty { started: Some(started), .. } = status
            {
                let seconds = now.saturating_duration_since(*started).as_secs_f64();
                total += seconds;
                longest = longest.max(seconds);
            }
        }
        (total, longest)
    }
}

impl<K> Drop for Inner<K> {
    fn drop(&mut self) {
        // Let the timer task notice the queue is gone.
        self.timer.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use futures::FutureExt;
    use prometheus::Registry;
    use proptest::prelude::*;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::new(Config::default())
    }

    /// `get` without waiting: `None` if it would wait.
    fn try_get<K: Key>(queue: &WorkQueue<K>) -> Option<Option<K>> {
        queue.get().now_or_never()
    }

    #[tokio::test]
    async fn queue_hands_out_keys_in_order_and_drops_repeated_adds() {
        let queue = queue();
        for key in ["a", "b", "c", "a", "b", "a"] {
            queue.add(key);
        }
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.get().await, Some("a"));
        assert_eq!(queue.get().await, Some("b"));
        assert_eq!(queue.get().await, Some("c"));
        assert!(queue.is_empty());
        assert_eq!(try_get(&queue), None, "an empty queue makes get wait");
    }

    #[tokio::test]
    async fn a_key_added_while_processing_waits_for_done_then_comes_back_once() {
        let queue = queue();
        queue.add("a");
        assert_eq!(queue.get().await, Some("a"));
        queue.add("a");
        queue.add("a");
        assert_eq!(queue.len(), 0, "a processing key is not queued again yet");
        assert_eq!(try_get(&queue), None, "nor handed to a second worker");
        queue.done(&"a");
        assert_eq!(queue.len(), 1, "done queues it again, once");
        assert_eq!(queue.get().await, Some("a"));
        queue.done(&"a");
        assert!(queue.is_empty());
        assert_eq!(try_get(&queue), None, "and not a third time");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_get_takes_no_key_and_later_getters_are_still_woken() {
        let queue = queue();
        let timed_out = tokio::time::timeout(Duration::from_secs(1), queue.get()).await;
        assert!(timed_out.is_err());
        queue.add("a");
        assert_eq!(queue.len(), 1, "the dropped get took nothing");
        assert_eq!(queue.get().await, Some("a"));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        queue.add("b");
        let got = tokio::time::timeout(Duration::from_secs(1), waiting).await;
        assert_eq!(got.expect("woken by the add").unwrap(), Some("b"));
    }

    #[tokio::test]
    async fn done_of_a_key_that_is_not_processing_changes_nothing() {
        let queue = queue();
        queue.add("a");
        queue.done(&"a");
        queue.done(&"b");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_key_is_retried_five_times_with_growing_delays_then_dropped() {
        let queue = WorkQueue::new(Config::default().rate_limiter(ItemExponentialFailure::default()));
        queue.add("a");
        let mut attempts = Vec::new();
        let start = Instant::now();
        // client-go's processNextItem / handleErr, with a reconcile that always fails.
        while let Some(key) = tokio::time::timeout(Duration::from_secs(60), queue.get()).await.ok().flatten() {
            attempts.push(Instant::now() - start);
            if queue.num_requeues(&key) < 5 {
                queue.add_rate_limited(key);
            } else {
                queue.forget(&key);
            }
            queue.done(&key);
        }
        // Delays 5, 10, 20, 40, 80 ms between attempts (tokio timers have 1 ms granularity).
        let expected = [0, 5, 15, 35, 75, 155].map(|ms| ms * MS);
        assert_eq!(attempts.len(), expected.len(), "one attempt and five retries");
        for (got, want) in attempts.iter().zip(expected) {
            assert!(*got >= want && *got <= want + 2 * MS, "{attempts:?}");
        }
        assert_eq!(queue.num_requeues(&"a"), 0, "forgotten after the last retry");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_delivers_at_the_deadline_and_the_earliest_deadline_wins() {
        let queue = queue();
        let s = Duration::from_secs(1);
        queue.add_after("a", 10 * s);
        queue.add_after("a", 5 * s);
        queue.add_after("a", 20 * s);
        queue.add_after("b", Duration::ZERO);
        assert_eq!(queue.len(), 1, "a zero delay adds at once");
        assert_eq!(queue.get().await, Some("b"));
        tokio::time::sleep(4 * s).await;
        assert_eq!(queue.len(), 0);
        let start = Instant::now();
        assert_eq!(queue.get().await, Some("a"));
        let waited = Instant::now() - start;
        assert!(waited >= s && waited <= s + 2 * MS, "{waited:?}");
        queue.done(&"a");
        tokio::time::sleep(30 * s).await;
        assert_eq!(queue.len(), 0, "the later deadlines were dropped, not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_that_comes_due_while_processing_is_marked_dirty() {
        let queue: WorkQueue<String> = WorkQueue::new(Config::default());
        for n in 0..10_000u64 {
            queue.add_after(n.to_string(), Duration::from_secs(1 + n % 7));
        }
        let three = "3".to_string();
        queue.add(three.clone());
        assert_eq!(queue.get().await, Some(three.clone()));
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(queue.len(), 9_999, "3 is processing, so its timer only marked it dirty");
        queue.done(&three);
        assert_eq!(queue.len(), 10_000);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_waiting_getters_with_none() {
        let queue = queue();
        let getters: Vec<_> = (0..3)
            .map(|_| {
                tokio::spawn({
                    let queue = queue.clone();
                    async move { queue.get().await }
                })
            })
            .collect();
        tokio::task::yield_now().await;
        queue.add_after("late", Duration::from_secs(1));
        queue.shut_down();
        assert!(queue.shutting_down());
        for getter in getters {
            assert_eq!(getter.await.unwrap(), None);
        }
        queue.add("a");
        assert_eq!(queue.len(), 0, "adds after shutdown are ignored");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(queue.len(), 0, "delayed keys are dropped by shutdown");
    }

    #[tokio::test]
    async fn keys_queued_before_shut_down_are_still_handed_out() {
        let queue = queue();
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.get().await, Some("a"));
        queue.add("a");
        queue.shut_down();
        assert_eq!(queue.get().await, Some("b"));
        queue.done(&"a");
        assert_eq!(queue.get().await, Some("a"), "a dirty key is re-queued by done");
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_until_every_key_handed_out_is_done() {
        let queue = queue();
        queue.add("a");
        queue.add("b");
        let a = queue.get().await.unwrap();
        let b = queue.get().await.unwrap();
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!drain.is_finished());
        queue.done(&a);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!drain.is_finished(), "b is still processing");
        queue.done(&b);
        tokio::time::timeout(Duration::from_secs(1), drain).await.expect("drain returns once b is done").unwrap();
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_when_the_queue_shuts_down_and_at_once_after() {
        let queue = queue();
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.closed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "an open queue is not closed");
        queue.shut_down();
        waiter.await.unwrap();
        queue.closed().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_now_hands_out_no_queued_key_and_waits_only_for_keys_in_flight() {
        let queue = queue();
        for key in ["a", "b", "c"] {
            queue.add(key);
        }
        let a = queue.get().await.unwrap();
        queue.add("a");
        let stop = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_now().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(try_get(&queue), Some(None), "b and c are not handed out after shutdown");
        assert!(!stop.is_finished(), "a is still processing");
        queue.done(&a);
        tokio::time::timeout(Duration::from_secs(1), stop).await.expect("returns once a is done").unwrap();
        assert_eq!(queue.get().await, None, "a, added while processing, does not come back either");
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn shut_down_with_drain_returns_at_once_when_nothing_is_processing() {
        let queue = queue();
        queue.shut_down_with_drain().await;
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_ends_a_pending_drain() {
        let queue = queue();
        queue.add("a");
        queue.get().await.unwrap();
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        queue.shut_down();
        tokio::time::timeout(Duration::from_secs(1), drain).await.expect("drain is cancelled by shut_down").unwrap();
    }

    fn sample(registry: &Registry, name: &str) -> Option<prometheus::proto::Metric> {
        registry
            .gather()
            .into_iter()
            .find(|family| family.name() == name)?
            .get_metric()
            .iter()
            .find(|metric| metric.get_label().iter().any(|label| label.name() == "name" && label.value() == "test"))
            .cloned()
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_report_depth_adds_latencies_in_flight_work_and_retries() {
        let registry = Registry::new();
        let metrics = QueueMetrics::register(&registry).unwrap();
        let queue = WorkQueue::new(Config::default().name("test").metrics(metrics.clone()));
        queue.add("a");
        queue.add("b");
        queue.add("a");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(queue.get().await, Some("a"));
        tokio::time::advance(Duration::from_secs(2)).await;

        let value = |name| sample(&registry, name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(value("workqueue_depth").get_gauge().get_value(), 1.0);
        assert_eq!(value("workqueue_adds_total").get_counter().get_value(), 2.0);
        let waited = value("workqueue_queue_duration_seconds");
        assert_eq!(waited.get_histogram().get_sample_count(), 1);
        assert_eq!(waited.get_histogram().get_sample_sum(), 3.0);
        let unfinished = value("workqueue_unfinished_work_seconds");
        assert_eq!(unfinished.get_gauge().get_value(), 2.0);
        let longest = value("workqueue_longest_running_processor_seconds");
        assert_eq!(longest.get_gauge().get_value(), 2.0);

        queue.done(&"a");
        queue.add_after("c", Duration::from_secs(1));
        let worked = value("workqueue_work_duration_seconds");
        assert_eq!(worked.get_histogram().get_sample_count(), 1);
        assert_eq!(worked.get_histogram().get_sample_sum(), 2.0);
        assert_eq!(value("workqueue_retries_total").get_counter().get_value(), 1.0);
        assert_eq!(value("workqueue_unfinished_work_seconds").get_gauge().get_value(), 0.0);

        drop(queue);
        assert!(
            sample(&registry, "workqueue_unfinished_work_seconds").is_none(),
            "a dropped queue's in-flight gauges go away"
        );
        assert!(QueueMetrics::register(&registry).is_err(), "names are taken");
    }

    #[tokio::test]
    async fn an_unnamed_queue_reports_nothing() {
        let registry = Registry::new();
        let metrics = QueueMetrics::register(&registry).unwrap();
        let queue = WorkQueue::new(Config::default().metrics(metrics));
        queue.add("a");
        assert_eq!(queue.get().await, Some("a"));
        let families = registry.gather();
        assert!(families.iter().all(|family| family.get_metric().is_empty()));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        Get,
        /// Done of the n-th (modulo) key currently held by a worker.
        Done(usize),
        ShutDown,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..6).prop_map(Op::Add),
            4 => Just(Op::Get),
            4 => any::<usize>().prop_map(Op::Done),
            1 => Just(Op::ShutDown),
        ]
    }

    /// client-go's queue written as plainly as possible: queue, dirty set, processing set.
    #[derive(Default)]
    struct Model {
        queue: VecDeque<u8>,
        dirty: HashSet<u8>,
        processing: HashSet<u8>,
        shutting_down: bool,
    }

    impl Model {
        fn add(&mut self, key: u8) {
            if self.shutting_down || !self.dirty.insert(key) {
                return;
            }
            if !self.processing.contains(&key) {
                self.queue.push_back(key);
            }
        }
        /// `None`: would wait.
        fn get(&mut self) -> Option<Option<u8>> {
            match self.queue.pop_front() {
                Some(key) => {
                    self.dirty.remove(&key);
                    self.processing.insert(key);
                    Some(Some(key))
                }
                None => self.shutting_down.then_some(None),
            }
        }
        fn done(&mut self, key: u8) {
            self.processing.remove(&key);
            if self.dirty.contains(&key) {
                self.queue.push_back(key);
            }
        }
    }

    proptest! {
        /// Runs random add/get/done/shutdown sequences against [`Model`] and checks, besides
        /// equal answers, that no key is held by two workers and that every add made after a
        /// key was handed out is delivered again.
        #[test]
        fn queue_behaves_like_client_go_and_never_loses_or_doubles_a_key(
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let queue: WorkQueue<u8> = WorkQueue::new(Config::default());
            let mut model = Model::default();
            let mut held: Vec<u8> = Vec::new();
            // Keys added (while accepting) and not handed out since: they are owed a delivery.
            let mut owed: HashSet<u8> = HashSet::new();
            for op in ops {
                match op {
                    Op::Add(key) => {
                        if !queue.shutting_down() {
                            owed.insert(key);
                        }
                        queue.add(key);
                        model.add(key);
                    }
                    Op::Get => {
                        let got = try_get(&queue);
                        prop_assert_eq!(got, model.get());
                        if let Some(Some(key)) = got {
                            prop_assert!(!held.contains(&key), "{} handed to two workers", key);
                            held.push(key);
                            owed.remove(&key);
                        }
                    }
                    Op::Done(n) if !held.is_empty() => {
                        let key = held.swap_remove(n % held.len());
                        queue.done(&key);
                        model.done(key);
                    }
                    Op::Done(_) => {}
                    Op::ShutDown => {
                        queue.shut_down();
                        model.shutting_down = true;
                    }
                }
                prop_assert_eq!(queue.len(), model.queue.len());
            }
            // Finish everything: each owed key must come out.
            for key in held.drain(..) {
                queue.done(&key);
            }
            while let Some(Some(key)) = try_get(&queue) {
                owed.remove(&key);
                queue.done(&key);
            }
            prop_assert!(owed.is_empty(), "never delivered: {:?}", owed);
        }

        /// Workers process and sometimes re-add keys while the queue is shut down with drain:
        /// the drain returns only after every key in flight at shutdown is done, every add made
        /// before shutdown is delivered, and workers then see `None`.
        #[test]
        fn shut_down_with_drain_loses_nothing(
            keys in proptest::collection::vec(0u8..20, 1..60),
            readds in proptest::collection::vec(0u8..20, 0..20),
            workers in 1usize..5,
            shutdown_after in 0usize..40,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async move {
                let queue: WorkQueue<u8> = WorkQueue::new(Config::default());
                let log = Arc::new(Mutex::new(Log::default()));
                for &key in &keys {
                    queue.add(key);
                    log.lock().owe(key);
                }
                let readds = Arc::new(Mutex::new(readds));
                let tasks: Vec<_> = (0..workers)
                    .map(|worker| {
                        let (queue, log, readds) = (queue.clone(), log.clone(), readds.clone());
                        tokio::spawn(async move {
                            while let Some(key) = queue.get().await {
                                let id = log.lock().start(key);
                                tokio::time::sleep(MS * (1 + (key as u32 + worker as u32) % 3)).await;
                                if let Some(readd) = readds.lock().pop() {
                                    if !queue.shutting_down() {
                                        log.lock().owe(readd);
                                    }
                                    queue.add(readd);
                                }
                                log.lock().finish(id);
                                queue.done(&key);
                            }
                        })
                    })
                    .collect();
                tokio::time::sleep(MS * shutdown_after as u32).await;
                let in_flight_at_shutdown: Vec<usize> = log.lock().in_flight.iter().copied().collect();
                queue.shut_down_with_drain().await;
                {
                    let log = log.lock();
                    for id in &in_flight_at_shutdown {
                        assert!(!log.in_flight.contains(id), "drain returned before {id} was done");
                    }
                }
                for task in tasks {
                    task.await.unwrap();
                }
                let log = log.lock();
                assert!(log.in_flight.is_empty());
                assert!(log.owed.is_empty(), "never delivered: {:?}", log.owed);
            });
        }
    }

    /// What the drain test's workers did.
    #[derive(Default)]
    struct Log {
        next: usize,
        in_flight: HashSet<usize>,
        owed: HashSet<u8>,
    }

    impl Log {
        fn owe(&mut self, key: u8) {
            self.owed.insert(key);
        }
        fn start(&mut self, key: u8) -> usize {
            self.owed.remove(&key);
            self.next += 1;
            self.in_flight.insert(self.next);
            self.next
        }
        fn finish(&mut self, id: usize) {
            self.in_flight.remove(&id);
        }
    }
}
