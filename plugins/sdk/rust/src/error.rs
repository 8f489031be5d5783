//! The SDK's error: a host-call failure, a JSON problem, or the plugin's own message, and what
//! the host does with a reconcile that returns it.

use std::time::Duration;

use crate::bindings::ReconcileError;
use crate::bindings::kubewasm::controller::types::Error as HostError;

/// What can go wrong in a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The object does not exist.
    NotFound,
    /// Outside the plugin's grants, or refused by the API server.
    Forbidden(String),
    /// Conflict (HTTP 409).
    Conflict(String),
    /// Rejected as invalid.
    Invalid(String),
    /// Transient; retry.
    Unavailable(String),
    /// Anything else from the host.
    Other(String),
    /// JSON that did not (de)serialize.
    Json(String),
    /// The plugin's own message.
    Message(String),
    /// Do not retry: only a change to the object can fix this (controller-runtime's
    /// `reconcile.TerminalError`). Counted in `controller_runtime_terminal_reconcile_errors_total`.
    Terminal(String),
    /// Retry after exactly `after`, not after the key's backoff.
    RequeueAfter {
        /// When to retry.
        after: Duration,
        /// Why (logged by the host).
        reason: String,
    },
}

/// Result with the SDK's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// The plugin's own error message.
    pub fn msg(message: impl Into<String>) -> Self {
        Error::Message(message.into())
    }

    /// A terminal error: the key is not retried until its object changes.
    pub fn terminal(message: impl Into<String>) -> Self {
        Error::Terminal(message.into())
    }

    /// A failure to retry after `after` rather than after the key's backoff.
    pub fn requeue_after(after: Duration, reason: impl Into<String>) -> Self {
        Error::RequeueAfter { after, reason: reason.into() }
    }

    /// Whether the host said the object changed under a write (HTTP 409, or a failed
    /// precondition): re-read and try again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// What the host does with a reconcile that failed with this error.
    pub(crate) fn into_reconcile_error(self) -> ReconcileError {
        match self {
            Error::Terminal(m) => ReconcileError::Terminal(m),
            Error::RequeueAfter { after, reason } => ReconcileError::RequeueAfter(crate::bindings::Requeue {
                after_ms: crate::__private::millis(after),
                reason,
            }),
            other => ReconcileError::Retryable(other.to_string()),
        }
    }

    /// The host error a failed `map` returns.
    pub(crate) fn into_host_error(self) -> HostError {
        match self {
            Error::NotFound => HostError::NotFound,
            Error::Forbidden(m) => HostError::Forbidden(m),
            Error::Conflict(m) => HostError::Conflict(m),
            Error::Invalid(m) => HostError::Invalid(m),
            Error::Unavailable(m) => HostError::Unavailable(m),
            other => HostError::Other(other.to_string()),
        }
    }
}

impl From<HostError> for Error {
    fn from(e: HostError) -> Self {
        match e {
            HostError::NotFound => Error::NotFound,
            HostError::Forbidden(m) => Error::Forbidden(m),
            HostError::Conflict(m) => Error::Conflict(m),
            HostError::Invalid(m) => Error::Invalid(m),
            HostError::Unavailable(m) => Error::Unavailable(m),
            HostError::Other(m) => Error::Other(m),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e.to_string())
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::NotFound => f.write_str("not found"),
            Error::Forbidden(m) => write!(f, "forbidden: {m}"),
            Error::Conflict(m) => write!(f, "conflict: {m}"),
            Error::Invalid(m) => write!(f, "invalid: {m}"),
            Error::Unavailable(m) => write!(f, "unavailable: {m}"),
            Error::Other(m) | Error::Message(m) => f.write_str(m),
            Error::Json(m) => write!(f, "json: {m}"),
            Error::Terminal(m) => write!(f, "terminal: {m}"),
            Error::RequeueAfter { after, reason } => write!(f, "retry after {after:?}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}
