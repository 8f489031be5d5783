//! One way to finish a key: [`Next`], applied by [`WorkQueue::settle`], and [`run`], the loop of
//! every queue-driven task (client-go's `processNextWorkItem`, controller-runtime's
//! `reconcileHandler`), so no loop maps its result onto the queue by hand.

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

/// Takes keys from `queue` one at a time, runs `handle` on each and settles it with the
/// [`Next`] it returns, until the queue is shut down and empty. Run it on several tasks for
/// several workers.
pub async fn run<K, F, Fut>(queue: &WorkQueue<K>, mut handle: F)
where
    K: Key,
    F: FnMut(K) -> Fut,
    Fut: Future<Output = Next>,
{
    while let Some(key) = queue.get().await {
        let next = handle(key.clone()).await;
        queue.settle(&key, next);
    }
}

#[cfg(test)]
mod tests {
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
}
