//! The worker's requeue policy: how a finished reconcile's key is settled on the queue
//! (controller-runtime's `reconcileHandler`), apart from the worker so it is tested alone.

use crate::plugin::{Action, CallFailed};
use crate::queue::Next;

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
    /// Failed during an API-server outage: re-added without charging its backoff.
    Deferred,
    /// Failed with a terminal error (contract 0.2): not retried, its backoff forgotten.
    Terminal,
    /// Failed asking to be retried after a delay (contract 0.2): re-added after it, its
    /// backoff neither advanced nor forgotten.
    RetryAfter,
    /// Not reconciled: another replica's shard holds the key, which its owner has queued.
    NotOwned,
}

/// What a reconcile's `result` means for its key, which has now failed `failures` times in a
/// row if this one failed; `outage` when it failed while the breaker saw the API server away.
pub(crate) fn decide(
    result: &Result<Action, CallFailed>,
    outage: bool,
    failures: u32,
    max_retries: Option<u32>,
) -> (Outcome, Next) {
    match result {
        Ok(Action::Done) => (Outcome::Done, Next::Forget),
        Ok(Action::RequeueAfter(delay)) => (Outcome::RequeuedAfter, Next::after(*delay)),
        // Before the plugin's own retry policy: the outage is likely its cause, and the key
        // waits for the breaker, not for backoff.
        Err(_) if outage => (Outcome::Deferred, Next::Again),
        // controller-runtime's TerminalError: not requeued; the next change starts afresh.
        Err(CallFailed::Terminal(_)) => (Outcome::Terminal, Next::Forget),
        Err(CallFailed::RequeueAfter { after, .. }) => {
            (Outcome::RetryAfter, Next::After { after: *after, forget: false })
        }
        Err(_) if max_retries.is_some_and(|max| failures > max) => (Outcome::Dropped, Next::Forget),
        Err(_) => (Outcome::Retried, Next::Backoff),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn trap() -> Result<Action, CallFailed> {
        Err(CallFailed::Trap("boom".into()))
    }

    #[test]
    fn success_forgets_the_key_and_a_requeue_comes_back_after_the_plugins_delay_with_a_fresh_backoff() {
        assert_eq!(decide(&Ok(Action::Done), false, 1, None), (Outcome::Done, Next::Forget));
        let requeue = decide(&Ok(Action::RequeueAfter(5 * SECOND)), false, 1, None);
        assert_eq!(requeue, (Outcome::RequeuedAfter, Next::After { after: 5 * SECOND, forget: true }));
    }

    #[test]
    fn a_failure_backs_off_until_max_retries_then_the_key_is_dropped() {
        assert_eq!(decide(&trap(), false, 1, None), (Outcome::Retried, Next::Backoff));
        assert_eq!(decide(&trap(), false, 1000, None), (Outcome::Retried, Next::Backoff), "no cap: retried forever");
        assert_eq!(decide(&trap(), false, 5, Some(5)), (Outcome::Retried, Next::Backoff));
        assert_eq!(decide(&trap(), false, 6, Some(5)), (Outcome::Dropped, Next::Forget));
    }

    #[test]
    fn a_failure_during_an_outage_is_queued_again_at_once_without_charging_its_backoff() {
        assert_eq!(decide(&trap(), true, 6, Some(5)), (Outcome::Deferred, Next::Again), "not dropped either");
        let terminal = Err(CallFailed::Terminal("bad spec".into()));
        assert_eq!(decide(&terminal, true, 1, None).0, Outcome::Deferred, "the outage comes first");
    }

    #[test]
    fn a_terminal_error_is_not_retried_and_a_timed_retry_keeps_its_failures() {
        let terminal = Err(CallFailed::Terminal("bad spec".into()));
        assert_eq!(decide(&terminal, false, 1, None), (Outcome::Terminal, Next::Forget));
        let timed = Err(CallFailed::RequeueAfter { after: 30 * SECOND, reason: "waiting".into() });
        let (outcome, next) = decide(&timed, false, 7, Some(5));
        assert_eq!((outcome, next), (Outcome::RetryAfter, Next::After { after: 30 * SECOND, forget: false }));
    }
}
