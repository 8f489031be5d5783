//! Hot-loading: plugins come, change and go while the host runs, from the plugin directory and
//! from `WasmPlugin` objects, without losing caches, queues or backoff state.
//!
//! No Kubernetes controller framework swaps reconcile logic in a running process, so this is
//! our own: a [`LoadedPlugins`] applies desired versions (load → wire beside the old → swap), and two
//! sources feed it.

pub mod crd_source;
pub mod directory;
pub mod fetch;
pub mod loaded;
pub mod metrics;
pub mod module;
pub mod oci;
pub mod wasmplugin;

pub use crd_source::WasmPluginSource;
pub use directory::{DirectorySource, DirectoryWatch, PluginFile, load_file, plugin_files, read_config};
pub use loaded::{Applied, ApplyError, Candidate, Desired, LoadedPlugins, Options, Origin, Serving};
pub use metrics::HotloadMetrics;
pub use module::Module;
pub use wasmplugin::{WasmPlugin, WasmPluginSpec, WasmPluginStatus, crd, crd_yaml};
