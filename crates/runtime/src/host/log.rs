//! `kubewasm:controller/log`: plugin log lines into the host's `tracing` output, for every
//! contract version.

use tracing::Level;

use crate::state::{MAX_LOG_LINE, PluginCtx};

impl PluginCtx {
    /// `log.log`: one line at `level`, cut to [`MAX_LOG_LINE`].
    pub(crate) fn log_line(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.local("log.log", |ctx| {
            let message = &message[..message.floor_char_boundary(MAX_LOG_LINE)];
            let plugin = &*ctx.shared.name;
            match level {
                Level::TRACE => tracing::trace!(target: "kubewasm::plugin", plugin, "{message}"),
                Level::DEBUG => tracing::debug!(target: "kubewasm::plugin", plugin, "{message}"),
                Level::INFO => tracing::info!(target: "kubewasm::plugin", plugin, "{message}"),
                Level::WARN => tracing::warn!(target: "kubewasm::plugin", plugin, "{message}"),
                Level::ERROR => tracing::error!(target: "kubewasm::plugin", plugin, "{message}"),
            }
        })
    }
}
