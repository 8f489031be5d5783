//! The SDK's error: a host-call failure, a JSON problem, or the plugin's own message.

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
}

/// Result with the SDK's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// The plugin's own error message.
    pub fn msg(message: impl Into<String>) -> Self {
        Error::Message(message.into())
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
        }
    }
}

impl std::error::Error for Error {}
