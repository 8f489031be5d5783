//! `kubewasm:controller/log`: plugin log lines into the host's `tracing` output.

use crate::bindings::log;
use crate::bindings::v0_2::log as l2;
use crate::state::{MAX_LOG_LINE, PluginCtx};

impl log::Host for PluginCtx {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            log::Level::Trace => l2::Level::Trace,
            log::Level::Debug => l2::Level::Debug,
            log::Level::Info => l2::Level::Info,
            log::Level::Warn => l2::Level::Warn,
            log::Level::Error => l2::Level::Error,
        };
        l2::Host::log(self, level, message).await
    }
}

/// Contract 0.2's log, which 0.1's is converted to.
impl l2::Host for PluginCtx {
    async fn log(&mut self, level: l2::Level, message: String) -> wasmtime::Result<()> {
        self.local("log.log", |ctx| {
            let message = &message[..message.floor_char_boundary(MAX_LOG_LINE)];
            let plugin = &*ctx.shared.name;
            match level {
                l2::Level::Trace => tracing::trace!(target: "kubewasm::plugin", plugin, "{message}"),
                l2::Level::Debug => tracing::debug!(target: "kubewasm::plugin", plugin, "{message}"),
                l2::Level::Info => tracing::info!(target: "kubewasm::plugin", plugin, "{message}"),
                l2::Level::Warn => tracing::warn!(target: "kubewasm::plugin", plugin, "{message}"),
                l2::Level::Error => tracing::error!(target: "kubewasm::plugin", plugin, "{message}"),
            }
        })
    }
}
