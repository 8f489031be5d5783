//! Hot-loading: plugins come, change and go while the host runs, from the plugin directory and
//! from `WasmPlugin` objects, without losing caches, queues or backoff state.
//!
//! No Kubernetes controller framework swaps reconcile logic in a running process, so this is
//! our own: a [`Manager`] applies desired versions (load → wire beside the old → swap), and two
//! sources feed it.

pub mod crd_source;
pub mod directory;
pub mod fetch;
pub mod manager;
pub mod metrics;
pub mod oci;
pub mod wasmplugin;

pub use crd_source::WasmPluginSource;
pub use directory::{DirectorySource, PluginFile, plugin_files, read_config};
pub use manager::{Applied, ApplyError, Candidate, Desired, Manager, Options, Origin, Serving};
pub use metrics::HotloadMetrics;
pub use wasmplugin::{WasmPlugin, WasmPluginSpec, WasmPluginStatus, crd, crd_yaml};
