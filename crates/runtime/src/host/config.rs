//! `kubewasm:controller/config`: the operator's settings for the plugin.

use crate::bindings::config;
use crate::bindings::v0_2::config as c2;
use crate::state::PluginCtx;

impl config::Host for PluginCtx {
    async fn settings(&mut self) -> wasmtime::Result<Vec<u8>> {
        c2::Host::settings(self).await
    }
}

/// Contract 0.2's config, the same function.
impl c2::Host for PluginCtx {
    async fn settings(&mut self) -> wasmtime::Result<Vec<u8>> {
        self.local("config.settings", |ctx| ctx.shared.settings.clone())
    }
}
