//! `kubewasm:controller/log`: plugin log lines into the host's `tracing` output.

use crate::plugin::bindings::log;
use crate::plugin::state::{MAX_LOG_LINE, PluginCtx};

impl log::Host for PluginCtx {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        self.charge()?;
        let message = message.get(..MAX_LOG_LINE).unwrap_or(&message);
        let plugin = &*self.shared.name;
        match level {
            log::Level::Trace => tracing::trace!(target: "kubewasm::plugin", plugin, "{message}"),
            log::Level::Debug => tracing::debug!(target: "kubewasm::plugin", plugin, "{message}"),
            log::Level::Info => tracing::info!(target: "kubewasm::plugin", plugin, "{message}"),
            log::Level::Warn => tracing::warn!(target: "kubewasm::plugin", plugin, "{message}"),
            log::Level::Error => tracing::error!(target: "kubewasm::plugin", plugin, "{message}"),
        }
        self.count("log.log", "ok");
        Ok(())
    }
}
