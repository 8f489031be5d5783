//! Log lines into the host's log, tagged with the plugin's name. Use the macros.

pub use crate::bindings::kubewasm::controller::log::{Level, log};

/// Logs at info level with `format!` syntax.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Info, &::std::format!($($arg)*)) };
}

/// Logs at warn level with `format!` syntax.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Warn, &::std::format!($($arg)*)) };
}

/// Logs at error level with `format!` syntax.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Error, &::std::format!($($arg)*)) };
}

/// Logs at debug level with `format!` syntax.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Debug, &::std::format!($($arg)*)) };
}
