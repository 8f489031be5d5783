//! kubewasm: a Kubernetes controller host that runs each controller's reconcile logic as a
//! sandboxed WebAssembly component.
//!
//! The host owns everything that talks to the API server — informers, caches, indexes and
//! workqueues — and hands each dequeued key to a plugin through the `kubewasm:controller` WIT
//! world (see `wit/`).

pub mod admin;
pub mod app;
pub mod breaker;
pub mod canary;
pub mod cli;
pub mod controller;
pub mod dev;
pub mod event_sink;
pub mod hotload;
pub mod identity;
#[cfg(test)]
mod layering;
pub mod leader;
pub mod offline;
pub mod rbac;
pub mod scaffold;
pub mod shard;
pub mod shutdown;
pub mod telemetry;
pub mod writer;

/// Shared informers and their caches, a crate of its own (`crates/informer`).
pub use kubewasm_informer as informer;
/// The work queue, a crate of its own (`crates/queue`): it knows nothing of the host.
pub use kubewasm_queue as queue;
/// The plugin runtime, a crate of its own (`crates/runtime`): it knows the informer cache and
/// the queue's rate limiters, and nothing of controllers, hot load or the CLI.
pub use kubewasm_runtime as plugin;
