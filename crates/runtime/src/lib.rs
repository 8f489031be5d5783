//! Sandboxed WebAssembly reconcile plugins: loading, limits, grants and host functions.
//!
//! One [`Runtime`] (engine + linker) serves every plugin. Loading compiles a component once
//! (the compile cache on disk makes restarts cheap), pre-links it, and calls `describe()`; each
//! call afterwards ([`Plugin::reconcile`], [`Plugin::map`]) runs in a fresh instance from the
//! pooling allocator, so nothing leaks between keys and swapping a version is swapping a
//! [`Plugin`]. An operator may let instances serve several calls (`limits.reuseInstances`) for
//! plugins whose instantiation is expensive.
//!
//! A crate of its own, above `kubewasm-informer` (the cache plugins read, [`api::CacheReader`])
//! and `kubewasm-queue` (rate-limiter configs), below the host, which re-exports it as
//! `kubewasm_host::plugin`: it knows nothing of controllers, hot load or the CLI. Start reading at
//! [`Runtime`] and [`Plugin`], then `dispatch.rs` (one call in one instance), the
//! [`authorizer`] that decides every request, and `host`, one file per WIT interface, whose
//! writes are [`api::ApiCall`]s sent through an [`api::ApiWriter`].

pub mod api;
pub mod authorizer;
pub mod bindings;
mod compile_cache;
pub mod compile_process;
pub mod config;
pub mod control;
mod dispatch;
pub mod engine;
pub mod engines;
pub mod grants;
pub mod guest_error;
mod host;
#[cfg(test)]
mod layering;
pub mod limits;
mod loader;
pub mod metrics;
mod outcome;
pub mod pool;
pub mod protected;
pub mod refusals;
pub mod registration;
pub mod snapshot;
pub mod source;
mod state;
pub mod throttle;

pub use config::{CanaryConfig, PluginConfig};
pub use engine::{CacheStats, Compiler, Runtime, RuntimeConfig};
/// The key of an object the plugin reconciles: the cache's and the queues' key type.
pub use kubewasm_informer::{InvalidKey, ObjectKey};
pub use loader::{LoadError, WORLD};
pub use outcome::{Action, CallFailed, Desired};
pub use registration::Registration;
pub use state::PluginCtx;

use std::sync::Arc;

use bindings::PluginPre;
use grants::Grants;
use state::PluginShared;

/// sha256 of a component's bytes, lowercase hex: how versions are told apart.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// One loaded, serving version of a plugin.
pub struct Plugin {
    runtime: Runtime,
    pre: Arc<PluginPre>,
    shared: Arc<PluginShared>,
    registration: Registration,
    sha256: String,
    max_concurrent: u32,
    revision: u64,
    /// Retry backoff of its keys, from the operator's config.
    rate_limiter: kubewasm_queue::rate_limiter::LimiterConfig,
    /// Instances kept for reuse (`limits.reuseInstances`); at most one per concurrent call.
    idle: parking_lot::Mutex<Vec<dispatch::IdleInstance>>,
    /// This version's share of the instance pool; every instance holds one of its permits.
    share: pool::Share,
}

impl Plugin {
    /// The plugin's name (from its file or WasmPlugin object).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The value of the `kubewasm.dev/plugin` label on what this plugin makes: its name, or for
    /// a canary candidate (`<name>/canary`) the name of the plugin it stands for.
    pub fn mark(&self) -> &str {
        self.shared.authorizer.plugin()
    }

    /// What the plugin registered.
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The effective grants.
    pub fn grants(&self) -> &Grants {
        self.shared.authorizer.grants()
    }

    /// sha256 of the component's bytes, hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// How many keys may be reconciled at once (operator setting, else the plugin's, else 1).
    pub fn max_concurrent(&self) -> u32 {
        self.max_concurrent
    }

    /// The retry backoff the operator configured for its keys (client-go's defaults).
    pub fn rate_limiter(&self) -> &kubewasm_queue::rate_limiter::LimiterConfig {
        &self.rate_limiter
    }

    /// Which version of this plugin the host has loaded: 1, 2, … in load order (like a
    /// Deployment's revision); shown in reconcile logs. 0 until set.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether an object lies inside the plugin's namespace scope (`grants.namespaces`):
    /// namespaced objects by their namespace, Namespaces by name, other cluster-scoped objects
    /// always. Keys and `map` inputs outside it never reach the plugin (nor does their name).
    pub fn sees(&self, kind: &kube::core::GroupVersionKind, namespace: Option<&str>, name: &str) -> bool {
        self.shared.authorizer.sees(kind, namespace, name)
    }

    /// Serves the plugin nothing of `kinds` from now on, cache reads included (what a review
    /// found its identity may not read); replaces the kinds withheld before.
    pub fn withhold(&self, kinds: std::collections::BTreeSet<grants::KindRef>) {
        self.shared.authorizer.withhold(kinds);
    }

    /// Sets the revision (before the plugin starts serving).
    pub fn with_revision(mut self, revision: u64) -> Self {
        self.revision = revision;
        self
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name())
            .field("sha256", &self.sha256)
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}
