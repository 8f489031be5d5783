//! One way to finish a key: [`Next`], applied by [`WorkQueue::settle`], and [`run`], the loop of
//! every queue-driven task (client-go's `processNextWorkItem`, controller-runtime's
//! `reconcileHandler`), so no loop maps its result onto the queue by hand.
//!
//! A runner that must not take keys at times (a worker paused while the API server is away, or
//! made surplus by a downsize) runs [`run_gated`] with a [`Gate`]; [`run`] is the same loop with
//! a gate that is always [`Open`].

use std::future::Future;
use std::time::Duration;

use crate::{Key, WorkQueue};

/// What happens to a key its handler has finished with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Finished: its failures are forgotten, and only a new add queues it again.
    Forget,
    /// Failed: queued again after the rate limiter's backoff, which grows with each failure.
    Backoff,
    /// Queued again after `after`. `forget` clears its failures first (a requeue the handler
    /// asked for); without it the next backoff still counts them (a retry the handler timed).
    After {
        /// The delay.
        after: Duration,
        /// Whether its failures are forgotten.
        forget: bool,
    },
    /// Queued again at once, failures kept: it waits for something other than time (an
    /// API-server outage ending).
    Again,
}

impl Next {
    /// Queued again after `after`, failures forgotten.
    pub fn after(after: Duration) -> Self {
        Next::After { after, forget: true }
    }
}

impl<K: Key> WorkQueue<K> {
    /// Applies `next` to `key` (taken by [`get`](Self::get)) and marks it done, in the order
    /// client-go's controllers do: forget or re-add first, then `done`, so a re-add while it was
    /// processing is not lost.
    pub fn settle(&self, key: &K, next: Next) {
        match next {
            Next::Forget => self.forget(key),
            Next::Backoff => self.add_rate_limited(key.clone()),
            Next::After { after, forget } => {
                if forget {
                    self.forget(key);
                }
                self.add_after(key.clone(), after);
            }
            Next::Again => self.add(key.clone()),
        }
        self.done(key);
    }
}

/// What a handler returns: the [`Next`] its key is settled with, and what to do once it is.
pub trait Handled {
    /// How the key is settled.
    fn next(&self) -> Next;

    /// Runs once the key is settled (marked done): what must not hold the key up, such as
    /// handing the result on or releasing something the handler held. Nothing by default.
    fn settled(self)
    where
        Self: Sized,
    {
    }
}

impl Handled for Next {
    fn next(&self) -> Next {
        *self
    }
}

/// What a runner waits on besides its queue: it takes a key only while its gate is open.
pub trait Gate {
    /// Waits until the runner may take a key (`true`) or must stop (`false`). Asked before
    /// each [`get`](WorkQueue::get).
    fn open(&mut self) -> impl Future<Output = bool> + Send;

    /// Resolves once the gate lets no key through any more. Raced against the runner's wait
    /// for a key, which it cancels without taking one; the runner then asks
    /// [`open`](Self::open) again. It must not resolve while `open` would let a key through at
    /// once: the runner would go round without waiting.
    fn shut(&mut self) -> impl Future<Output = ()> + Send;
}

/// The gate of [`run`]: always open.
#[derive(Clone, Copy, Debug, Default)]
pub struct Open;

impl Gate for Open {
    async fn open(&mut self) -> bool {
        true
    }

    async fn shut(&mut self) {
        std::future::pending().await
    }
}

/// Takes keys from `queue` one at a time, runs `handle` on each and settles it with the
/// [`Next`] it returns (or its [`Handled`] names), until the queue is shut down and empty. Run
/// it on several tasks for several workers.
pub async fn run<K, F, Fut>(queue: &WorkQueue<K>, handle: F)
where
    K: Key,
    F: FnMut(K) -> Fut,
    Fut: Future,
    Fut::Output: Handled,
{
    run_gated(queue, Open, handle).await;
}

/// [`run`], taking a key only while `gate` is open: before each key it waits for
/// [`Gate::open`], and it stops waiting for a key when [`Gate::shut`] resolves, so a runner
/// held at its gate holds no key. It stops when the gate says so, when the queue is shut down
/// and empty, or when the queue is shut down while the gate holds it (what is left queued is not
/// handed out then). After settling a key it calls [`Handled::settled`].
pub async fn run_gated<K, G, F, Fut>(queue: &WorkQueue<K>, mut gate: G, mut handle: F)
where
    K: Key,
    G: Gate,
    F: FnMut(K) -> Fut,
    Fut: Future,
    Fut::Output: Handled,
{
    loop {
        // An open gate wins a tie with the shutdown, so a queue shut down with keys left is
        // drained by runners whose gate is open.
        let open = tokio::select! {
            biased;
            open = gate.open() => open,
            () = queue.closed() => false,
        };
        if !open {
            return;
        }
        let key = tokio::select! {
            biased;
            () = gate.shut() => continue,
            key = queue.get() => key,
        };
        let Some(key) = key else { return };
        let handled = handle(key.clone()).await;
        queue.settle(&key, handled.next());
        handled.settled();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use futures::FutureExt;

    use super::*;
    use crate::Config;

    const SECOND: Duration = Duration::from_secs(1);

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::new(Config::default())
    }

    /// Takes `key` as a worker would.
    async fn take(queue: &WorkQueue<&'static str>, key: &'static str) {
        queue.add(key);
        assert_eq!(queue.get().await, Some(key));
    }

    #[tokio::test(start_paused = true)]
    async fn forget_clears_the_failures_and_queues_nothing() {
        let queue = queue();
        take(&queue, "a").await;
        queue.settle(&"a", Next::Backoff);
        assert_eq!(queue.num_requeues(&"a"), 1);
        assert_eq!(queue.get().await, Some("a"), "the backoff passed");
        queue.settle(&"a", Next::Forget);
        assert_eq!(queue.num_requeues(&"a"), 0);
        tokio::time::sleep(3600 * SECOND).await;
        assert!(queue.is_empty(), "nothing came back");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_grows_with_each_failure() {
        let queue = queue();
        take(&queue, "a").await;
        let mut waited = Vec::new();
        for _ in 0..3 {
            queue.settle(&"a", Next::Backoff);
            let start = tokio::time::Instant::now();
            assert_eq!(queue.get().await, Some("a"));
            waited.push(start.elapsed());
        }
        assert!(waited[0] < waited[1] && waited[1] < waited[2], "{waited:?}");
        assert_eq!(queue.num_requeues(&"a"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn after_comes_back_at_its_delay_and_forgets_the_failures_only_if_asked() {
        let queue = queue();
        take(&queue, "a").await;
        queue.settle(&"a", Next::Backoff);
        queue.get().await;
        queue.settle(&"a", Next::After { after: 5 * SECOND, forget: false });
        assert_eq!(queue.num_requeues(&"a"), 1, "a timed retry keeps the count");
        tokio::time::sleep(5 * SECOND - Duration::from_millis(1)).await;
        assert!(queue.get().now_or_never().is_none(), "not before its delay");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(queue.get().await, Some("a"));
        queue.settle(&"a", Next::after(5 * SECOND));
        assert_eq!(queue.num_requeues(&"a"), 0, "a requeue forgets it");
    }

    #[tokio::test(start_paused = true)]
    async fn again_queues_the_key_at_once_and_keeps_its_failures() {
        let queue = queue();
        take(&queue, "a").await;
        queue.settle(&"a", Next::Backoff);
        queue.get().await;
        queue.settle(&"a", Next::Again);
        assert_eq!(queue.get().now_or_never(), Some(Some("a")));
        assert_eq!(queue.num_requeues(&"a"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_add_while_the_key_was_processing_survives_its_settling() {
        let queue = queue();
        take(&queue, "a").await;
        queue.add("a");
        queue.settle(&"a", Next::Forget);
        assert_eq!(queue.get().now_or_never(), Some(Some("a")), "the change seen meanwhile is reconciled");
    }

    #[tokio::test(start_paused = true)]
    async fn run_settles_each_key_with_what_its_handler_returned_until_shut_down() {
        let queue = queue();
        queue.add("done");
        queue.add("flaky");
        let mut calls = Vec::new();
        let runner = run(&queue, |key| {
            calls.push(key);
            let failures = calls.iter().filter(|k| **k == key).count();
            async move { if key == "flaky" && failures < 3 { Next::Backoff } else { Next::Forget } }
        });
        let stop = async {
            tokio::time::sleep(60 * SECOND).await;
            queue.shut_down();
        };
        tokio::join!(runner, stop);
        assert_eq!(calls, ["done", "flaky", "flaky", "flaky"]);
        assert_eq!(queue.num_requeues(&"flaky"), 0, "forgotten once it succeeded");
    }

    /// A gate worked by hand: green lets keys through, red holds the runner, stop ends it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Light {
        Green,
        Red,
        Stop,
    }

    struct Lights(tokio::sync::watch::Receiver<Light>);

    impl Gate for Lights {
        async fn open(&mut self) -> bool {
            let light = *self.0.wait_for(|l| *l != Light::Red).await.unwrap();
            light == Light::Green
        }

        async fn shut(&mut self) {
            let _ = self.0.wait_for(|l| *l != Light::Green).await;
        }
    }

    /// A runner behind `Lights` on its own task, counting the keys it took.
    fn gated(
        queue: &WorkQueue<&'static str>,
        light: Light,
    ) -> (tokio::sync::watch::Sender<Light>, Arc<AtomicU32>, tokio::task::JoinHandle<()>) {
        let (lights, rx) = tokio::sync::watch::channel(light);
        let taken = Arc::new(AtomicU32::new(0));
        let (queue, count) = (queue.clone(), taken.clone());
        let runner = tokio::spawn(async move {
            run_gated(&queue, Lights(rx), |_| {
                count.fetch_add(1, Ordering::SeqCst);
                async { Next::Forget }
            })
            .await;
        });
        (lights, taken, runner)
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_held_at_its_gate_takes_no_key_until_the_gate_opens() {
        let queue = queue();
        let (lights, taken, _runner) = gated(&queue, Light::Red);
        queue.add("a");
        tokio::time::sleep(SECOND).await;
        assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (0, 1), "held: the key stays queued");
        lights.send_replace(Light::Green);
        tokio::task::yield_now().await;
        assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_that_shuts_while_the_runner_waits_for_a_key_cancels_the_wait_without_taking_one() {
        let queue = queue();
        let (lights, taken, _runner) = gated(&queue, Light::Green);
        tokio::task::yield_now().await;
        lights.send_replace(Light::Red);
        tokio::task::yield_now().await;
        queue.add("a");
        tokio::time::sleep(SECOND).await;
        assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (0, 1), "the waiting runner took nothing");
        lights.send_replace(Light::Green);
        tokio::task::yield_now().await;
        assert_eq!(taken.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_that_says_stop_ends_the_runner_whether_it_waits_at_the_gate_or_for_a_key() {
        for light in [Light::Red, Light::Green] {
            let queue = queue();
            let (lights, taken, runner) = gated(&queue, light);
            tokio::task::yield_now().await;
            lights.send_replace(Light::Stop);
            runner.await.unwrap();
            queue.add("a");
            assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (0, 1), "{light:?}: stopped without a key");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_held_at_its_gate_stops_with_the_queue_and_an_open_one_drains_it_first() {
        let queue = queue();
        let (_lights, taken, runner) = gated(&queue, Light::Red);
        queue.add("a");
        queue.shut_down();
        runner.await.unwrap();
        assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (0, 1), "held: nothing handed out");

        let queue = self::queue();
        queue.add("a");
        queue.add("b");
        queue.shut_down();
        let (_lights, taken, runner) = gated(&queue, Light::Green);
        runner.await.unwrap();
        assert_eq!((taken.load(Ordering::SeqCst), queue.len()), (2, 0), "open: what was queued is handed out");
    }

    /// A handler's answer that queues its key again once settled, and says whether that found
    /// it done (queued at once) or still processing (held back as dirty).
    struct AddBack(&'static str, WorkQueue<&'static str>, Arc<AtomicU32>);

    impl Handled for AddBack {
        fn next(&self) -> Next {
            Next::Forget
        }

        fn settled(self) {
            self.1.add(self.0);
            if self.1.len() == 1 {
                self.2.fetch_add(1, Ordering::SeqCst);
            }
            // Once: the key queued again is handed out, and its add is then ignored.
            self.1.shut_down();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn settled_runs_once_the_key_is_done() {
        let queue = queue();
        queue.add("a");
        let after_done = Arc::new(AtomicU32::new(0));
        run(&queue, |key| std::future::ready(AddBack(key, queue.clone(), after_done.clone()))).await;
        assert_eq!(after_done.load(Ordering::SeqCst), 1, "the add in `settled` found the key done");
    }
}
