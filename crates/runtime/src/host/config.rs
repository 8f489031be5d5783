//! `kubewasm:controller/config`: the operator's settings for the plugin, for every contract
//! version.

use crate::state::PluginCtx;

impl PluginCtx {
    /// `config.settings`: the operator's settings as JSON.
    pub(crate) fn config_settings(&mut self) -> wasmtime::Result<Vec<u8>> {
        self.local("config.settings", |ctx| ctx.shared.settings.clone())
    }
}
