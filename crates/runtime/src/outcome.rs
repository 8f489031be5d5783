//! What a call into a plugin ends in: the [`Action`] of a reconcile that succeeded, or why the
//! call failed ([`CallFailed`]), whatever the contract version.

use std::time::Duration;

use super::limits::LimitHit;

/// What to do with a key after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until something changes.
    Done,
    /// Reconcile again after this long.
    RequeueAfter(Duration),
}

/// Why a call into a plugin failed. Every variant costs only that call.
#[derive(Debug, thiserror::Error)]
pub enum CallFailed {
    /// The plugin returned an error to retry with the key's backoff (0.1's only kind, 0.2's
    /// `retryable`), or `map` failed.
    #[error("plugin returned an error: {0}")]
    Plugin(String),
    /// The plugin returned a terminal error (0.2): not retried.
    #[error("plugin returned a terminal error: {0}")]
    Terminal(String),
    /// The plugin failed and asked to be retried after `after` (0.2), not after its backoff.
    #[error("plugin asked to retry after {after:?}: {reason}")]
    RequeueAfter {
        /// When to retry.
        after: Duration,
        /// Why, from the plugin.
        reason: String,
    },
    /// The plugin's desired state (0.3) could not be made so: a child's apply, a prune or the
    /// status failed. Every child's outcome is in the message; retried with the key's backoff.
    #[error("the desired state was not made so: {0}")]
    Desired(String),
    /// A sandbox limit stopped the plugin.
    #[error("{0}")]
    Limit(LimitHit),
    /// The plugin trapped (a panic, an unreachable, a host bug).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// No instance could be made (e.g. the instance pool is exhausted).
    #[error("cannot instantiate the plugin: {0}")]
    Instantiate(String),
}

impl CallFailed {
    /// Bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CallFailed::Plugin(_) => "error",
            CallFailed::Terminal(_) => "terminal",
            CallFailed::RequeueAfter { .. } => "requeue_after",
            CallFailed::Desired(_) => "desired",
            CallFailed::Limit(LimitHit::Deadline(_)) => "timeout",
            CallFailed::Limit(LimitHit::Memory { .. }) => "memory",
            CallFailed::Limit(LimitHit::HostCalls(_)) => "host_calls",
            CallFailed::Limit(LimitHit::Resource(_)) => "resource",
            CallFailed::Trap(_) => "trap",
            CallFailed::Instantiate(_) => "instantiate",
        }
    }

    /// Whether this counts as a panic (controller-runtime's `reconcile_panics_total`).
    pub fn is_panic(&self) -> bool {
        matches!(self, CallFailed::Trap(_))
    }
}

/// What a plugin says should exist for one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// Full objects (JSON), applied with force by the plugin's field manager.
    pub children: Vec<Vec<u8>>,
    /// The key object's `status` (JSON), applied last; `None` leaves it alone.
    pub status: Option<Vec<u8>>,
}
