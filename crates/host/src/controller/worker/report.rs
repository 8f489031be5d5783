//! Counting and logging finished reconciles: the controller's metrics and rate-limited failure lines.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::ObjectKey;
use super::super::policy::{Outcome, decide};
use super::{Reconcile, Workers};
use crate::plugin::{Action, CallFailed};
use crate::queue::Next;

/// Most per-key failure lines a controller logs a second; past it lines are counted and the
/// next logged one says how many were suppressed. Protects the log pipeline when every key
/// fails at once (an outage logged 1,100–2,500 lines a second before this; issue 16).
pub const FAILURE_LINES_PER_SECOND: u32 = 10;

/// Rate limit of the per-key failure lines: governor's bucket, and the lines it suppressed.
pub(super) struct FailureLog {
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

impl<R: Reconcile> Workers<R> {
    /// Counts and logs a finished reconcile, and says how its key is settled ([`decide`]).
    pub(super) fn handle_result(
        &self,
        key: &ObjectKey,
        result: &Result<Action, CallFailed>,
        outage: bool,
    ) -> (Outcome, Next) {
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
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
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
